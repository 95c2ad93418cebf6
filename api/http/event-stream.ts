import type { ServerResponse } from 'node:http';
import { sseJson, sseKeepAlive } from '../../shared/sse.js';

/**
 * How a stream's bytes are labelled and kept alive: server-sent events (every dialect's `text/event-stream`, a
 * comment as the keep-alive), or another streamed form that shares the relay (Google's streamed JSON array).
 */
export interface StreamFraming {
  /** The response's content type. */
  contentType: string;
  /** What is written while nothing else is, so the connection (and each proxy on the way) sees bytes. */
  keepAlive: string;
}

/** Server-sent events as every client reads them. */
export const sseFraming: StreamFraming = { contentType: 'text/event-stream; charset=utf-8', keepAlive: sseKeepAlive };

/** One event carrying `value` as JSON, under its `event:` name when it has one (shared/sse.ts frames it). */
export function dataFrame(value: unknown, event?: string): string {
  return sseJson(value, event);
}

/**
 * The one way the api answers with a stream: a 200 with the stream's headers, after which Koa leaves the
 * response alone (`ctx.respond = false`) and frames go out as they come, already in their wire form (a worker's
 * chunks, a log's replay) or made by `dataFrame`. The x-request-id the envelope set stays: it is this
 * request's, whatever stream it carries.
 */
export class EventStream {
  private opened = false;
  private readonly res: ServerResponse;

  constructor(
    private readonly ctx: { res: ServerResponse; respond?: boolean },
    private readonly framing: StreamFraming = sseFraming,
  ) {
    this.res = ctx.res;
  }

  /** The status and headers have gone out: an error can no longer be an HTTP status, only an event. */
  get started(): boolean {
    return this.opened;
  }

  /** Sends the status and headers, once. */
  open(): void {
    if (this.opened) return;
    this.opened = true;
    this.ctx.respond = false;
    this.res.writeHead(200, {
      'content-type': this.framing.contentType,
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    });
  }

  write(frames: string): void {
    this.res.write(frames);
  }

  keepAlive(): void {
    this.res.write(this.framing.keepAlive);
  }

  /** Ends the stream, with its last frames when it has some. */
  end(last = ''): void {
    this.res.end(last);
  }
}
