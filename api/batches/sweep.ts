import type { Redis } from 'ioredis';
import {
  batchRequestJobId,
  cancelAbandonedIntake,
  decodeBatchEntry,
  entryCustomId,
  fillBatchWindow,
  pendingEntries,
  queueBatchRequests,
  queuedIndices,
  readBatch,
  recordBatchResult,
  releasedCount,
  type BatchRecord,
  type BatchResult,
} from '../../shared/batches/index.js';
import type { Config } from '../../shared/config.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import { batchSweepLockKey, openBatchesKey } from '../../shared/redis-keys.js';
import { removeWaitingJob } from '../../shared/scheduling/index.js';
import { yieldToLoop } from '../http/request-body.js';
import { startFinalize } from './openai-finalize.js';
import { startValidation, type OpenAIBatchDeps } from './openai-intake.js';
import { awaitsFinal, takeValidation } from './openai-record.js';

/**
 * Ends what a batch will not run, and queues again what was lost on the way. After a cancel, each request queued and
 * still waiting is removed from its queue and recorded `canceled`, and those never queued (past its window) too;
 * past the batch's deadline, `expired`. A request a worker holds is left to it (it records its own outcome: a cancel
 * does not stop a call under way, as Anthropic's does not). In a batch running, a request released to the queue
 * whose job is not there a while later (its api died between letting it in and queuing it) is queued again from its
 * entry, and a window whose refill was asked but never done is filled. A batch whose api died while storing its
 * requests (its intake's lease ran out with some not stored; its client had no answer and will send it again) is
 * canceled: what was stored and not yet run, and what never was, is recorded `canceled`. The api that takes a cancel
 * sweeps the batch at once; every api sweeps the open batches periodically (one at a time, under a lock). Idempotent:
 * each result is recorded once whoever sweeps, and a job queued twice is one job (its id).
 */

export interface SweepDeps {
  redis: Redis;
  queues: QueueShards;
  config: Pick<Config, 'batches'>;
  log: Logger;
  /**
   * What OpenAI's batches need of the api beyond this: to read a file again whose api died validating it, and to write
   * an ended one's files.
   */
  openai?: OpenAIBatchDeps;
}

const perRound = 200;
/** A request released this long ago without a job was lost on the way (queuing it takes milliseconds). */
export const lostAfterMs = 5_000;

/** Sweeps one batch (see above); returns the requests it recorded or queued again. */
export async function sweepBatch(deps: SweepDeps, batch: BatchRecord): Promise<number> {
  // A batch still validating has nothing released yet (its file is read again, below, if its api died).
  if (batch.status === 'ended' || batch.status === 'validating') return 0;
  if (batch.status === 'in_progress' && (await cancelAbandonedIntake(deps.redis, batch.id))) {
    deps.log.warn({ batch: batch.id }, "a batch's api stopped while storing its requests; the batch is canceled");
    batch = { ...batch, status: 'canceling' };
  }
  const outcome = batch.status === 'canceling' ? 'canceled' : batch.expires <= Date.now() ? 'expired' : undefined;
  const result: BatchResult = outcome === 'canceled' ? { type: 'canceled' } : { type: 'expired' };
  let swept = 0;
  const record = async (index: number, entry: string, what: BatchResult = result) => {
    if (
      (await recordBatchResult(
        deps.redis,
        batch.id,
        index,
        entryCustomId(entry, index),
        what,
        deps.config.batches.resultsKeepMs,
      )) === 'recorded'
    )
      swept++;
  };
  // The queued ones: running (left to their worker), waiting (removed and recorded), or gone without a result.
  const queued = await queuedIndices(deps.redis, batch.id, outcome ? undefined : Date.now() - lostAfterMs);
  for (let from = 0; from < queued.length; from += perRound) {
    if (from > 0) await yieldToLoop();
    const indices = queued.slice(from, from + perRound);
    const entries = await pendingEntries(deps.redis, batch.id, indices);
    const lost: Array<{ index: number; entry: string }> = [];
    await Promise.all(
      indices.map(async (index, i) => {
        const entry = entries[i]!;
        const decoded = decodeBatchEntry(entry);
        const queue = decoded && deps.queues.queueNamed(decoded.queue);
        const jobId = batchRequestJobId(batch.id, index);
        const waiting = queue !== undefined && (await deps.redis.exists(queue.toKey(jobId))) === 1 ? queue : undefined;
        if (!outcome) {
          if (!waiting) lost.push({ index, entry });
          return;
        }
        // A job a worker holds records its own outcome.
        if (waiting && !(await removeWaitingJob(deps.redis, waiting, jobId))) return;
        await record(index, entry);
      }),
    );
    if (lost.length === 0) continue;
    deps.log.warn(
      { batch: batch.id, requests: lost.map(({ index }) => index) },
      "a batch's requests were released without a job; queued again",
    );
    const missed = await queueBatchRequests(deps.redis, deps.queues, batch.id, lost, deps.config.batches.resultsKeepMs);
    swept += lost.length - missed.length;
    const lostResult: BatchResult = {
      type: 'errored',
      error: {
        type: 'error',
        error: { type: 'api_error', message: 'This request of the batch was lost before it could run.' },
        request_id: null,
      },
    };
    await Promise.all(missed.map((index) => record(index, '', lostResult)));
  }
  if (!outcome) {
    // A window whose refill was asked and not done (the ask lost, its api gone) is filled here.
    const missed = await fillBatchWindow(deps.redis, deps.queues, batch.id, deps.config.batches.resultsKeepMs);
    if (missed.length > 0)
      deps.log.warn(
        { batch: batch.id, missed },
        "a batch's requests could not be queued (the next sweep records them)",
      );
    return swept;
  }
  // The ones never queued: past the window when the batch stopped.
  const next = await releasedCount(deps.redis, batch.id);
  for (let from = next; from < batch.total; from += perRound) {
    await yieldToLoop();
    const indices = Array.from({ length: Math.min(perRound, batch.total - from) }, (_, i) => from + i);
    const entries = await pendingEntries(deps.redis, batch.id, indices);
    await Promise.all(indices.map((index, i) => record(index, entries[i]!)));
  }
  if (swept > 0) deps.log.info({ batch: batch.id, outcome, swept }, 'batch requests ended without running');
  return swept;
}

/**
 * Every open batch once: the ended or gone ones leave the open set, the others are swept. An OpenAI batch stays
 * until its files are written: one ended whose files are not is finalized here (its api died writing them, or
 * never heard it end), and one validating whose api died (its validation's lease out) has its file read again.
 */
export async function sweepOpenBatches(deps: SweepDeps, lockMs: number): Promise<void> {
  if ((await deps.redis.set(batchSweepLockKey, '1', 'PX', String(lockMs), 'NX')) !== 'OK') return;
  const ids = await deps.redis.zrange(openBatchesKey, '0', '-1');
  for (const id of ids) {
    const batch = await readBatch(deps.redis, id);
    if (batch && awaitsFinal(batch)) {
      // Leaves the open set once written (openai-record.ts `noteFinal`).
      if (deps.openai) startFinalize(deps.openai, id);
      continue;
    }
    if (!batch || batch.status === 'ended') {
      await deps.redis.zrem(openBatchesKey, id);
      continue;
    }
    if (batch.status === 'validating') {
      if (deps.openai && (await takeValidation(deps.redis, id))) {
        deps.log.warn({ batch: id }, "an OpenAI batch's validation stopped with its api; its file is read again");
        startValidation(deps.openai, id);
      }
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
