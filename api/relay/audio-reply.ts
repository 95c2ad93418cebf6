import type { Queue } from 'bullmq';
import type { GatewayContext } from '../http/context.js';
import { markFirstByte } from '../http/metrics.js';
import type { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { ChunkedReply, type StreamNotes } from './chunked-reply.js';
import type { HeldReplyDeps } from './held-reply.js';
import type { ExpectedReply } from './reply-hub.js';

/**
 * A speech request answered with the audio's own bytes (the `audio` stream form, `stream-dialects.ts`): each chunk
 * its job published (base64, whole 3-byte groups, so pieces joined in any batching still decode) written decoded
 * as it arrives, chunked, under the format's content type. Headers wait for the first chunk, so a failure before
 * any audio is a plain HTTP error in OpenAI's shape; a failure after it cuts the response short (the chunked body
 * never ends), since no byte can say "error" inside audio.
 */
export class AudioReply extends ChunkedReply {
  private opened = false;

  constructor(
    ctx: GatewayContext,
    deps: HeldReplyDeps,
    expected: ExpectedReply,
    queue: Queue,
    log: Logger,
    notes: StreamNotes,
    private readonly contentType: string,
  ) {
    super(ctx, deps, expected, queue, log, notes);
  }

  /** A reconnect's end of a job that finished unheard: its audio was replayed from the log, and nothing closes it. */
  protected override get trailer(): string {
    return '';
  }

  protected get started(): boolean {
    return this.opened;
  }

  private open(): void {
    if (this.opened) return;
    this.opened = true;
    this.ctx.respond = false;
    this.res.writeHead(200, {
      'content-type': this.contentType,
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    });
  }

  protected writeChunk(payload: string): void {
    this.open();
    this.notes.firstChunk();
    markFirstByte(this.ctx);
    this.res.write(Buffer.from(payload, 'base64'));
  }

  protected writeEnd(payload: string): void {
    this.open();
    // A speech job's end carries no bytes; a reconnect's replay may end with what the log held.
    this.res.end(payload === '' ? undefined : Buffer.from(payload, 'base64'));
  }

  protected endLate(error: GatewayError): void {
    this.log.warn(
      { code: error.code, status: error.status },
      'speech failed after its audio began; response cut short',
    );
    this.res.destroy();
  }
}
