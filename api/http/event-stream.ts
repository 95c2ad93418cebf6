import type { ServerResponse } from 'node:http';

/** The headers of every server-sent event stream the api answers with. */
const eventStreamHeaders = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};

/** A comment line: every SSE client skips it, and the connection (and each proxy on the way) sees bytes. */
const keepAliveFrame = ': keep-alive\n\n';

/** One event carrying `value` as JSON, under its `event:` name when it has one. */
export function dataFrame(value: unknown, event?: string): string {
  return `${event === undefined ? '' : `event: ${event}\n`}data: ${JSON.stringify(value)}\n\n`;
}

/**
 * The one way the api answers with server-sent events: a 200 with the SSE
 * headers, after which Koa leaves the response alone (`ctx.respond = false`)
 * and frames go out as they come, already in their wire form (a worker's
 * chunks, a log's replay) or made by `dataFrame`. The x-request-id the
 * envelope set stays: it is this request's, whatever stream it carries.
 */
export class EventStream {
  private opened = false;
  private readonly res: ServerResponse;

  constructor(private readonly ctx: { res: ServerResponse; respond?: boolean }) {
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
    this.res.writeHead(200, eventStreamHeaders);
  }

  write(frames: string): void {
    this.res.write(frames);
  }

  keepAlive(): void {
    this.res.write(keepAliveFrame);
  }

  /** Ends the stream, with its last frames when it has some. */
  end(last = ''): void {
    this.res.end(last);
  }
}
