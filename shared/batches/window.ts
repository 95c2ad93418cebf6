import type { Redis } from 'ioredis';
import { batchKey, batchPendingKey, batchQueuedKey } from '../redis-keys.js';
import { batchField } from './hash.js';
import { releaseScript } from './scripts.js';

/**
 * A batch's window: how many of its requests may be queued at once. A request is let in (released) from its stored
 * entry and noted queued until its result is recorded; the batch's `next` says how far the window has reached.
 * queueing.ts turns what is released into jobs; the sweep reads what is queued to find requests lost on the way.
 */

/** A request of a batch released to its queue: its index, and its pending entry ('' when none was stored). */
export interface ReleasedRequest {
  index: number;
  entry: string;
}

/** Fills a batch's window: the requests now to be queued (none once it is canceled, expired or all out). */
export async function releaseBatchRequests(redis: Redis, batchId: string): Promise<ReleasedRequest[]> {
  const flat = await releaseScript(redis, {
    batch: batchKey(batchId),
    pending: batchPendingKey(batchId),
    queued: batchQueuedKey(batchId),
    nowMs: Date.now(),
  });
  const out: ReleasedRequest[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ index: Number(flat[i]), entry: String(flat[i + 1]) });
  return out;
}

/** The requests of a batch queued (released) and not yet recorded, queued before `before` (epoch ms). */
export async function queuedIndices(
  redis: Redis,
  batchId: string,
  before = Number.POSITIVE_INFINITY,
): Promise<number[]> {
  return (await redis.zrangebyscore(batchQueuedKey(batchId), '-inf', Number.isFinite(before) ? `(${before}` : '+inf'))
    .map(Number)
    .sort((a, b) => a - b);
}

/** How far the batch's window has reached: its requests from this index on were never queued. */
export async function releasedCount(redis: Redis, batchId: string): Promise<number> {
  return Number((await redis.hget(batchKey(batchId), batchField.next)) ?? 0) || 0;
}

/** The pending entries of some of a batch's requests ('' for one recorded already, or never stored). */
export async function pendingEntries(redis: Redis, batchId: string, indices: readonly number[]): Promise<string[]> {
  if (indices.length === 0) return [];
  return (await redis.hmget(batchPendingKey(batchId), ...indices.map(String))).map((entry) => entry ?? '');
}
