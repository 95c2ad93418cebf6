import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { batchRequestJobId, readBatch, readBatchQueues, recordBatchResult, recordedIndices, type BatchRecord } from '../../shared/batches.js';
import type { Config } from '../../shared/config.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import { batchSweepLockKey, openBatchesKey } from '../../shared/redis-keys.js';
import { removeWaitingJob } from '../../shared/scheduling/index.js';
import { yieldToLoop } from '../http/request-body.js';

/**
 * Ends what a batch will not run: after a cancel, each request still waiting is removed from its queue and recorded
 * `canceled`; past the batch's deadline, `expired`. A request a worker holds is left to it (it records its own
 * outcome: a cancel does not stop a call under way, as Anthropic's does not). A request whose job is gone without a
 * result (an api that died while queuing it) is recorded too. The api that takes a cancel sweeps the batch at once;
 * every api sweeps the open batches periodically (one at a time, under a lock), which ends an expired batch at its
 * deadline and finishes a cancel whose api died midway. Idempotent: each result is recorded once whoever sweeps.
 */

export interface SweepDeps {
  redis: Redis;
  queues: QueueShards;
  config: Pick<Config, 'batches'>;
  log: Logger;
}

const removedPerRound = 200;

/** Sweeps one batch (see above): canceled after a cancel, expired past its deadline; returns the requests recorded. */
export async function sweepBatch(deps: SweepDeps, batch: BatchRecord): Promise<number> {
  const outcome = batch.status === 'canceling' ? 'canceled' : batch.expires <= Date.now() ? 'expired' : undefined;
  if (!outcome || batch.status === 'ended') return 0;
  const byName = new Map<string, Queue>(deps.queues.all().map((queue) => [queue.name, queue]));
  const [names, done] = await Promise.all([readBatchQueues(deps.redis, batch.id, batch.total), recordedIndices(deps.redis, batch.id)]);
  const open: number[] = [];
  for (let index = 0; index < batch.total; index++) if (!done.has(index)) open.push(index);
  let recorded = 0;
  const record = async (index: number) => {
    // The custom_id is in the job: a request recorded without its job says its index instead.
    const queue = byName.get(names[index] ?? '');
    const jobId = batchRequestJobId(batch.id, index);
    const job = queue ? await queue.getJob(jobId) : undefined;
    const customId = (job?.data as { batch?: { customId?: string } } | undefined)?.batch?.customId ?? `#${index}`;
    if (queue && job) {
      // A job a worker holds records its own outcome.
      if (!(await removeWaitingJob(deps.redis, queue, jobId))) return;
    }
    if ((await recordBatchResult(deps.redis, batch.id, index, customId, outcome === 'canceled' ? { type: 'canceled' } : { type: 'expired' }, deps.config.batches.resultsKeepMs)) === 'recorded') recorded++;
  };
  for (let from = 0; from < open.length; from += removedPerRound) {
    if (from > 0) await yieldToLoop();
    await Promise.all(open.slice(from, from + removedPerRound).map(record));
  }
  if (recorded > 0) deps.log.info({ batch: batch.id, outcome, recorded }, 'batch requests ended without running');
  return recorded;
}

/** Every open batch once: the ended or gone ones leave the open set, the canceling and expired ones are swept. */
export async function sweepOpenBatches(deps: SweepDeps, lockMs: number): Promise<void> {
  if ((await deps.redis.set(batchSweepLockKey, '1', 'PX', String(lockMs), 'NX')) !== 'OK') return;
  const ids = await deps.redis.zrange(openBatchesKey, '0', '-1');
  for (const id of ids) {
    const batch = await readBatch(deps.redis, id);
    if (!batch || batch.status === 'ended') {
      await deps.redis.zrem(openBatchesKey, id);
      continue;
    }
    await sweepBatch(deps, batch);
  }
}

/** The periodic sweep of an api; stopped with the api. */
export function startBatchSweeps(deps: SweepDeps, intervalMs = 10_000): { stop(): void } {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    sweepOpenBatches(deps, intervalMs)
      .catch((error: unknown) => deps.log.warn({ err: error }, 'could not sweep the open batches'))
      .finally(() => (running = false));
  }, intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
