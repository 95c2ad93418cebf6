import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { dataFrame, EventStream } from '../http/event-stream.js';
import { streamChunksRelayed } from '../http/metrics.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply, type HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';
import { anthropicErrorBody } from '../../shared/messages.js';

/** What a stream's relay tells the request's log: its first chunk written, and the error it ended with once its output had begun. */
export interface StreamNotes {
  firstChunk(): void;
  failed(code: string): void;
}

/**
 * The wire dialect of a stream's own frames (its keep-alives and its error once output began): OpenAI's (a comment,
 * a `data:` error), or Anthropic's on the Messages API (`event: ping`, `event: error` with its error body).
 */
export type StreamDialect = 'openai' | 'anthropic';

const anthropicPing = dataFrame({ type: 'ping' }, 'ping');

/** A request whose job's chunks are relayed to the client as server-sent events as they arrive. */
export class StreamReply extends HeldReply {
  readonly stream = true;
  private readonly events: EventStream;
  private keepAlive: NodeJS.Timeout | undefined;

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
    this.events = new EventStream(ctx);
  }

  override async run(deadline: number): Promise<void> {
    // Headers wait for the first chunk so that an error before any output is a
    // plain HTTP error; a long wait in the queue sends them early with keep-alives.
    this.keepAlive = setInterval(() => {
      if (this.res.destroyed) return;
      this.events.open();
      // Anthropic's clients skip `ping` events wherever they come, as its own streams send them while a model thinks.
      if (this.dialect === 'anthropic') this.events.write(anthropicPing);
      else this.events.keepAlive();
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
        streamChunksRelayed(this.ctx, message.payload);
        break;
      case 'done':
        this.events.open();
        this.events.end(message.payload);
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
    // Output already started: the stream ends with an error event, as OpenAI's (and Anthropic's) do.
    this.notes.failed(error.code ?? error.type);
    this.events.end(this.dialect === 'anthropic' ? dataFrame(anthropicErrorBody(error.status, error.message, this.ctx.state.requestId), 'error') : dataFrame(error.toBody()));
    this.end();
  }
}
