import { discardBody, drainInBackground, mapTransportError, type VendorResponse } from './http.js';
import { SseParser, type SseEvent } from './sse-parser.js';
import type { CallContext } from './types.js';

/**
 * The body of a vendor's streamed answer, read as SSE. Every protocol reads
 * its stream the same way: events grouped by network read (so the worker
 * publishes once per read), transport failures mapped like any vendor call,
 * and, at the stream's logical end, the body's tail drained in the background
 * so the keep-alive connection goes back to the pool; on any other exit the
 * body is dropped.
 */
export class SseBody {
  private readonly reader: AsyncIterator<Uint8Array>;
  private readonly parser = new SseParser();
  private ended = false;
  private settled = false;

  constructor(
    private readonly response: VendorResponse,
    private readonly ctx: CallContext,
  ) {
    this.reader = (response.body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  }

  /** The events each read completed; reads that complete none are skipped. Ends with the body. */
  async *batches(): AsyncGenerator<SseEvent[]> {
    while (!this.ended) {
      let read: IteratorResult<Uint8Array>;
      try {
        read = await this.reader.next();
      } catch (error) {
        throw mapTransportError(error, this.ctx);
      }
      this.ended = read.done === true;
      // A body that closes without a final blank line still delivers its last event.
      const events = this.ended ? this.parser.end() : this.parser.push(read.value);
      if (events.length > 0) yield events;
    }
  }

  /** The stream ended logically (`[DONE]`, `message_stop`): let the rest of the body drain. */
  finish(): void {
    if (this.settled) return;
    this.settled = true;
    if (!this.ended) drainInBackground(this.reader, this.response);
  }

  /** Any other way out (error, consumer gone, body ended): drop the body. A no-op after `finish`. */
  close(): void {
    if (this.settled) return;
    this.settled = true;
    discardBody(this.response);
  }
}
