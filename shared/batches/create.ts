import type { Redis } from 'ioredis';
import { inOneWrite } from '../redis.js';
import { accountBatchesKey, batchIntakeKey, batchKey, batchPendingKey, openBatchesKey } from '../redis-keys.js';
import { batchField, runningFields } from './hash.js';
import { startValidatedScript } from './scripts.js';
import type { BatchRecord } from './types.js';

/**
 * A batch made: its record stored (every request processing), listed under its account and among the open batches
 * (which the sweep goes through), and its requests' entries stored as its intake checks them, each what its job
 * will be. The window (window.ts) lets in only requests stored, so a batch runs while the rest of it is stored.
 */

/**
 * Stores a new batch (every request processing), lists it under its account and among the open batches; kept until
 * `keepMs` past its expiry. With a `window`, its requests are run by the queue, that many at once, refilled once an
 * eighth of it is free: the caller stores each one's entry (`storeBatchEntries`) and fills the window as they are
 * stored (`releaseBatchRequests`); without, nothing is ever released (a record alone, as tests make one). With an
 * `intakeMs`, the caller holds the intake's lease that long, renewed by each `storeBatchEntries`: a batch whose lease
 * runs out before all its requests are stored is canceled by the sweep (`cancelAbandonedIntake`).
 */
export async function createBatch(
  redis: Redis,
  batch: Omit<BatchRecord, 'status' | 'counts' | 'costMicros' | 'tokens' | 'dialect' | 'row'>,
  keepMs: number,
  options: { window?: number; intakeMs?: number; fromValidating?: boolean } = {},
): Promise<boolean> {
  const ttl = Math.max(1, batch.expires - Date.now() + keepMs);
  const window = options.window ?? 0;
  const refill = Math.max(1, Math.floor(window / 8));
  const fields = runningFields(batch, window, refill, options.intakeMs !== undefined);
  if (options.fromValidating) {
    // Started only if still validating (a cancel meanwhile ended it): its dialect's fields stay beside these.
    const pairs = Object.entries(fields).flatMap(([name, value]) => [name, value]);
    const started = await startValidatedScript(redis, {
      batch: batchKey(batch.id),
      intake: batchIntakeKey(batch.id),
      ttlMs: ttl,
      intakeMs: options.intakeMs ?? 0,
      fields: pairs,
    });
    if (started !== 1) return false;
  } else {
    const transaction = redis.multi().hset(batchKey(batch.id), fields).pexpire(batchKey(batch.id), ttl);
    if (options.intakeMs !== undefined) transaction.set(batchIntakeKey(batch.id), '1', 'PX', options.intakeMs);
    await transaction.exec();
  }
  await inOneWrite(redis)
    .zadd(accountBatchesKey(batch.accountId), batch.created, batch.id)
    .zadd(openBatchesKey, batch.expires, batch.id)
    .exec();
  return true;
}

/**
 * Stores the entries of a batch's requests `from`, `from + 1`, … (what each one's job will be, entries.ts), kept
 * `ttlMs`, in order: the window lets in only requests stored. `intakeMs`: the intake's lease renewed for that long
 * (see `createBatch`).
 */
export async function storeBatchEntries(
  redis: Redis,
  batchId: string,
  from: number,
  entries: readonly string[],
  ttlMs: number,
  intakeMs?: number,
): Promise<void> {
  const fields: Record<string, string> = {};
  entries.forEach((entry, offset) => (fields[from + offset] = entry));
  const transaction = redis
    .multi()
    .hset(batchPendingKey(batchId), fields)
    .pexpire(batchPendingKey(batchId), Math.max(1, ttlMs))
    .hset(batchKey(batchId), batchField.stored, from + entries.length);
  if (intakeMs !== undefined) transaction.set(batchIntakeKey(batchId), '1', 'PX', intakeMs);
  await transaction.exec();
}
