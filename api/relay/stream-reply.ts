import { GatewayError, type WireError } from '../../shared/errors.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { HeldReply } from './held-reply.js';
import { sseHeaders } from './event-log.js';
import { streamChunksRelayed } from '../http/metrics.js';
import { noteError, noteFirstChunk } from '../requests/request-log.js';

/** A request whose job's chunks are relayed to the client as server-sent events as they arrive. */
export class StreamReply extends HeldReply {
  readonly stream = true;
  private headersSent = false;
  private keepAlive: NodeJS.Timeout | undefined;

  override async run(deadline: number): Promise<void> {
    // Headers wait for the first chunk so that an error before any output is a
    // plain HTTP error; a long wait in the queue sends them early with keep-alives.
    this.keepAlive = setInterval(() => {
      if (this.res.destroyed) return;
      this.sendHeaders();
      this.res.write(': keep-alive\n\n');
    }, this.deps.config.sseKeepAliveMs);
    try {
      await super.run(deadline);
    } finally {
      clearInterval(this.keepAlive);
    }
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.ctx.respond = false;
    // The x-request-id the envelope set stays: the request's, which its log row is found by (the job's id may differ).
    this.res.writeHead(200, sseHeaders);
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
        this.sendHeaders();
        noteFirstChunk(this.ctx);
        this.res.write(message.payload);
        streamChunksRelayed(this.ctx, message.payload);
        break;
      case 'done':
        this.sendHeaders();
        this.res.end(message.payload);
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
    if (!this.headersSent) {
      this.end(error);
      return;
    }
    // Output already started: the stream ends with an error event, as OpenAI's do.
    noteError(this.ctx, error.code ?? error.type);
    this.res.end(`data: ${JSON.stringify(error.toBody())}\n\n`);
    this.end();
  }
}
