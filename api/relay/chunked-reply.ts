import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply, type HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';

/**
 * What a stream's relay tells the request's log: its first chunk written, and the error it ended with once its output
 * had begun.
 */
export interface StreamNotes {
  firstChunk(): void;
  /** The error the stream ended with: its code, and the message its error event told the client. */
  failed(code: string, message: string): void;
}

/**
 * A request whose job's chunks are written to the client as they arrive (an SSE or array stream, `stream-reply.ts`;
 * a speech request's audio bytes, `audio-reply.ts`). What every such reply does the same way is here: a client gone
 * leaves only the job's end to wait for; an error before any output is a plain HTTP error in the dialect's shape,
 * one after it ends the output in the form's own way. A subclass says how a chunk, the end and a late error are
 * written.
 */
export abstract class ChunkedReply extends HeldReply {
  readonly stream = true;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    protected readonly notes: StreamNotes,
  ) {
    super(ctx, deps, expected, queue, log);
  }

  /** Whether the response's headers went out (an error is then no longer an HTTP status). */
  protected abstract get started(): boolean;
  /** Writes one of the job's chunks (opening the response first if need be, and noting the first). */
  protected abstract writeChunk(payload: string): void;
  /** Writes the job's end and ends the response. */
  protected abstract writeEnd(payload: string): void;
  /** Ends a response whose output has begun with the error, as its form allows. */
  protected abstract endLate(error: GatewayError): void;

  deliver(message: ReplyMessage): void {
    if (this.ended) return;
    if (this.res.destroyed) {
      // The client left and the job runs on for a resume or a follower: only its end matters here.
      if (message.kind === 'done' || message.kind === 'error') this.end();
      return;
    }
    switch (message.kind) {
      case 'chunk':
        this.writeChunk(message.payload);
        break;
      case 'done':
        this.writeEnd(message.payload);
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
    if (!this.started) {
      this.end(error);
      return;
    }
    this.notes.failed(error.code ?? error.type, error.message);
    this.endLate(error);
    this.end();
  }
}
