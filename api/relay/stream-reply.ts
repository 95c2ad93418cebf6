import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { EventStream } from '../http/event-stream.js';
import { streamChunksRelayed } from '../http/metrics.js';
import type { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { ChunkedReply, type StreamNotes } from './chunked-reply.js';
import type { HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';
import { arrayEnd, framingOf, lateErrorFrame, trailerOf, type StreamDialect } from './stream-dialects.js';

export type { StreamDialect } from './stream-dialects.js';
export type { StreamNotes } from './chunked-reply.js';

/**
 * A request whose job's chunks are relayed to the client as they arrive, in its dialect's stream form (its own
 * keep-alives and late error: `stream-dialects.ts`).
 */
export class StreamReply extends ChunkedReply {
  private readonly events: EventStream;
  private keepAlive: NodeJS.Timeout | undefined;
  /** A chunk of the job's went out (a Google array's element, whose `[` opened the array). */
  private wroteChunk = false;
  /** The late error's frame where its holder writes it (`HoldOptions.lateError`). */
  lateError: ((error: GatewayError) => string) | undefined;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    notes: StreamNotes,
    private readonly dialect: StreamDialect = 'openai',
  ) {
    super(ctx, deps, expected, queue, log, notes);
    this.events = new EventStream(ctx, framingOf(dialect));
  }

  protected override get trailer(): string {
    return trailerOf(this.dialect);
  }

  override async run(deadline: number): Promise<void> {
    // Headers wait for the first chunk so that an error before any output is a
    // plain HTTP error; a long wait in the queue sends them early with keep-alives.
    this.keepAlive = setInterval(() => {
      if (this.res.destroyed) return;
      this.events.open();
      this.events.keepAlive();
    }, this.deps.config.sseKeepAliveMs);
    try {
      await super.run(deadline);
    } finally {
      clearInterval(this.keepAlive);
    }
  }

  protected get started(): boolean {
    return this.events.started;
  }

  protected writeChunk(payload: string): void {
    this.events.open();
    this.notes.firstChunk();
    this.events.write(payload);
    this.wroteChunk = true;
    streamChunksRelayed(this.ctx, payload, this.dialect === 'google-array' ? 'array' : 'sse');
  }

  protected writeEnd(payload: string): void {
    this.events.open();
    this.events.end(this.dialect === 'google-array' ? arrayEnd(payload, this.wroteChunk) : payload);
  }

  /** Output already started: the stream ends with an error in its own form, as each vendor's streams do. */
  protected endLate(error: GatewayError): void {
    this.events.end(
      this.lateError
        ? this.lateError(error)
        : lateErrorFrame(this.dialect, error, this.ctx.state.requestId, this.wroteChunk),
    );
  }
}
