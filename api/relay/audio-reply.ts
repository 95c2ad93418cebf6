import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { markFirstByte } from '../http/metrics.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply, type HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';
import type { StreamNotes } from './stream-reply.js';

/**
 * A speech request answered with the audio's own bytes (the `audio` stream form, `stream-dialects.ts`): each chunk
 * its job published (base64, whole 3-byte groups, so pieces joined in any batching still decode) written decoded
 * as it arrives, chunked, under the format's content type. Headers wait for the first chunk, so a failure before
 * any audio is a plain HTTP error in OpenAI's shape; a failure after it cuts the response short (the chunked body
 * never ends), since no byte can say "error" inside audio.
 */
export class AudioReply extends HeldReply {
  readonly stream = true;
  private opened = false;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    private readonly notes: StreamNotes,
    private readonly contentType: string,
  ) {
    super(ctx, deps, expected, queue, log);
  }

  /** A reconnect's end of a job that finished unheard: its audio was replayed from the log, and nothing closes it. */
  protected override get trailer(): string {
    return '';
  }

  private open(): void {
    if (this.opened) return;
    this.opened = true;
    this.ctx.respond = false;
    this.res.writeHead(200, { 'content-type': this.contentType, 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  }

  deliver(message: ReplyMessage): void {
    if (this.ended) return;
    if (this.res.destroyed) {
      // The client left and the job runs on for a resume or a follower: only its end matters here.
      if (message.kind === 'done' || message.kind === 'error') this.end();
      return;
    }
    switch (message.kind) {
      case 'chunk': {
        this.open();
        this.notes.firstChunk();
        markFirstByte(this.ctx);
        this.res.write(Buffer.from(message.payload, 'base64'));
        break;
      }
      case 'done':
        this.open();
        // A speech job's end carries no bytes; a reconnect's replay may end with what the log held.
        this.res.end(message.payload === '' ? undefined : Buffer.from(message.payload, 'base64'));
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
    if (this.res.destroyed || !this.opened) {
      this.end(this.res.destroyed ? undefined : error);
      return;
    }
    this.notes.failed(error.code ?? error.type);
    this.log.warn({ code: error.code, status: error.status }, 'speech failed after its audio began; response cut short');
    this.res.destroy();
    this.end();
  }
}
