import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { EventStream } from '../http/event-stream.js';
import { streamChunksRelayed } from '../http/metrics.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply, type HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';
import { arrayEnd, framingOf, lateErrorFrame, trailerOf, type StreamDialect } from './stream-dialects.js';

export type { StreamDialect } from './stream-dialects.js';

/** What a stream's relay tells the request's log: its first chunk written, and the error it ended with once its output had begun. */
export interface StreamNotes {
  firstChunk(): void;
  failed(code: string): void;
}

/**
 * A request whose job's chunks are relayed to the client as they arrive, in its dialect's stream form (its own
 * keep-alives and late error: `stream-dialects.ts`).
 */
export class StreamReply extends HeldReply {
  readonly stream = true;
  private readonly events: EventStream;
  private keepAlive: NodeJS.Timeout | undefined;
  /** A chunk of the job's went out (a Google array's element, whose `[` opened the array). */
  private wroteChunk = false;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    private readonly notes: StreamNotes,
    private readonly dialect: StreamDialect = 'openai',
  ) {
    super(ctx, deps, expected, queue, log);
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

  deliver(message: ReplyMessage): void {
    if (this.ended) return;
    if (this.res.destroyed) {
      // The client left and the stream runs on for a resume: only its end matters here.
      if (message.kind === 'done' || message.kind === 'error') this.end();
      return;
    }
    switch (message.kind) {
      case 'chunk':
        this.events.open();
        this.notes.firstChunk();
        this.events.write(message.payload);
        this.wroteChunk = true;
        streamChunksRelayed(this.ctx, message.payload, this.dialect === 'google-array' ? 'array' : 'sse');
        break;
      case 'done':
        this.events.open();
        this.events.end(this.dialect === 'google-array' ? arrayEnd(message.payload, this.wroteChunk) : message.payload);
        this.end();
        break;
      case 'error':
        this.failWith(GatewayError.fromWire(JSON.parse(message.payload) as WireError));
        break;
      default:
        break;
    }
  }

  protected failWith(error: GatewayError): void {
    if (this.ended) return;
    if (this.res.destroyed) {
      this.end();
      return;
    }
    if (!this.events.started) {
      this.end(error);
      return;
    }
    // Output already started: the stream ends with an error in its own form, as each vendor's streams do.
    this.notes.failed(error.code ?? error.type);
    this.events.end(lateErrorFrame(this.dialect, error, this.ctx.state.requestId, this.wroteChunk));
    this.end();
  }
}
