import { sleep } from '../sleep.js';
import type { CallContext } from '../types.js';

/** The `[mock:slow:<ms>]` marker's pace, else MOCK_STREAM_DELAY_MS. */
export function resolveChunkDelayMs(slowMs: number | undefined, ctx: CallContext): number {
  return slowMs ?? ctx.http.mock.streamDelayMs;
}

/**
 * Yields batches with a pause before each one but the first, as a model's
 * tokens arrive over time. `tail` follows the last batch without a pause: a
 * vendor sends its usage chunk together with the finish chunk, and a cancel
 * after the finish should still leave the usage for billing.
 */
export async function* pace<T>(events: Iterable<T>, tail: T, delayMs: number, signal: AbortSignal): AsyncGenerator<T> {
  let first = true;
  for (const event of events) {
    if (!first) await sleep(delayMs, signal);
    first = false;
    yield event;
  }
  yield tail;
}

/** With n > 1 a vendor interleaves choices; round-robin keeps each choice's own order. */
export function* interleave<T>(lists: readonly T[][]): Generator<T> {
  const longest = lists.reduce((max, list) => Math.max(max, list.length), 0);
  for (let position = 0; position < longest; position++) {
    for (const list of lists) {
      const item = list[position];
      if (item !== undefined) yield item;
    }
  }
}
