import { GatewayError } from '../../shared/errors.js';
import {
  discardBody,
  drainInBackground,
  malformedResponse,
  mapTransportError,
  postVendor,
  readCappedText,
  type VendorErrorMapper,
  type VendorRequest,
  type VendorResponse,
} from './http.js';
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

  /**
   * The body translated, one array per read: `translate` appends what one SSE
   * event means to `out` and returns true at the protocol's logical end
   * (`[DONE]`, `message_stop`). What a read translated before a failure is
   * delivered first, then the failure thrown. Returns whether the logical end
   * came; either way the body is drained or dropped by then.
   */
  async *translate<T>(translate: (event: SseEvent, out: T[]) => boolean): AsyncGenerator<T[], boolean> {
    try {
      for await (const events of this.batches()) {
        const batch: T[] = [];
        let done = false;
        let failure: { error: unknown } | undefined;
        try {
          for (const event of events) {
            done = translate(event, batch);
            if (done) break;
          }
        } catch (error) {
          if (batch.length === 0) throw error;
          failure = { error };
        }
        if (batch.length > 0) yield batch;
        if (failure !== undefined) throw failure.error;
        if (done) {
          this.finish();
          return true;
        }
      }
      return false;
    } finally {
      this.close();
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

/** A stream that stopped before its protocol's end marker: retried when nothing was sent yet. */
export const streamEndedEarly = () =>
  new GatewayError(502, 'Upstream vendor error: upstream stream ended early.', {
    type: 'server_error',
    code: 'vendor_stream_incomplete',
    retryable: true,
  });

/** Reads a vendor's error envelope out of a JSON payload; null when it is not one. */
export type InlineErrorReader = (payload: unknown, secrets: readonly string[]) => GatewayError | null;

/**
 * Opens a streamed call: POSTs, throws a refusal as the vendor's `mapError`
 * reads it, and returns the SSE body. Called from inside the stream's
 * generator, so the request goes out (and a refusal throws) on the first
 * `next()`, before anything is yielded.
 */
export async function postSse(
  ctx: CallContext,
  request: VendorRequest,
  mapError: VendorErrorMapper,
  readInlineError: InlineErrorReader,
): Promise<SseBody> {
  const response = await postVendor(ctx, request, mapError, 'text/event-stream');
  await rejectJsonStreamAnswer(response, ctx, readInlineError);
  return new SseBody(response, ctx);
}

/**
 * Some vendors answer a stream request with a 2xx JSON body: an error report,
 * or garbage. Throws it as the vendor's error (`toError` reads the protocol's
 * envelope) or as malformed; returns for an SSE answer (or any other that is not
 * JSON, such as the audio a speech request streams).
 */
export async function rejectJsonStreamAnswer(
  response: VendorResponse,
  ctx: CallContext,
  toError: InlineErrorReader,
): Promise<void> {
  const contentType = response.headers['content-type'];
  if (typeof contentType !== 'string' || !contentType.includes('application/json')) return;
  const text = await readCappedText(response, ctx);
  let payload: unknown = null;
  try {
    payload = JSON.parse(text);
  } catch {
    // Not even JSON: reported as malformed.
  }
  throw toError(payload, [ctx.channel.apiKey]) ?? malformedResponse();
}
