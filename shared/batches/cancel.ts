import type { Redis } from 'ioredis';
import { batchIntakeKey, batchKey } from '../redis-keys.js';
import { abandonedScript, cancelScript } from './scripts.js';
import type { BatchStatus } from './types.js';

/**
 * A batch stopped before its requests all ran: a cancel its client asked, or an intake that died before storing
 * every request (its client had no answer). Either marks it `canceling`; the sweep (api/batches/sweep.ts) then
 * records `canceled` each request not yet run, as it records `expired` those of a batch past its deadline, and the
 * last of them ends the batch (record.ts).
 */

/**
 * Asks a batch to stop: its status after (`canceling`; `ended` already, or at once for one still validating), or
 * undefined for a batch that is gone.
 */
export async function cancelBatch(redis: Redis, batchId: string): Promise<BatchStatus | undefined> {
  return ((await cancelScript(redis, { batch: batchKey(batchId), nowMs: Date.now() })) ?? undefined) as
    BatchStatus | undefined;
}

/** Cancels the batch when its intake died before storing every request (lua/abandoned.lua); true when it did. */
export async function cancelAbandonedIntake(redis: Redis, batchId: string): Promise<boolean> {
  return (
    (await abandonedScript(redis, { batch: batchKey(batchId), intake: batchIntakeKey(batchId), nowMs: Date.now() })) ===
    1
  );
}
