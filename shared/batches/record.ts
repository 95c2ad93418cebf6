import type { Redis } from 'ioredis';
import { activeMetrics } from '../metrics.js';
import { inOneWrite } from '../redis.js';
import { batchDoneKey, batchKey, batchPendingKey, batchQueuedKey, batchResultsKey } from '../redis-keys.js';
import { batchField } from './hash.js';
import { dialectOf } from './ids.js';
import { recordScript } from './scripts.js';
import type { BatchBilled, BatchOutcome, BatchResult, BatchStatus } from './types.js';

/**
 * Each of a batch's requests' results recorded exactly once, however often a worker runs or retries that request,
 * by one script on the batch's keys (lua/record.lua): the result appended to its results, the counts and totals
 * moved, the request out of the window, and the batch ended when nothing is left processing. The worker records
 * what it ran; the sweep what a cancel or the deadline kept from running; the window's queueing what was refused at
 * intake.
 */

/**
 * Where a worker stands with a batch's request: its batch's status (undefined: gone), and whether it is recorded
 * already. One round trip.
 */
export async function batchRequestState(
  redis: Redis,
  batchId: string,
  index: number,
): Promise<{ status: BatchStatus | undefined; recorded: boolean }> {
  const [[, status], [, recorded]] = (await inOneWrite(redis)
    .hget(batchKey(batchId), batchField.status)
    .hexists(batchDoneKey(batchId), String(index))
    .exec()) as [[unknown, string | null], [unknown, number]];
  return { status: (status ?? undefined) as BatchStatus | undefined, recorded: recorded === 1 };
}

/**
 * Records a request's result once (lua/record.lua); resolves to whether this call recorded it. `result` may be its
 * JSON already (a message as the worker has it, not parsed to be written again). `billed`: what it was billed.
 */
export async function recordBatchResult(
  redis: Redis,
  batchId: string,
  index: number,
  customId: string,
  result: BatchResult | { type: BatchOutcome; json: string },
  keepMs: number,
  billed: number | BatchBilled = 0,
): Promise<'recorded' | 'already' | 'gone'> {
  return (await recordInBatch(redis, batchId, index, customId, result, keepMs, billed)).state;
}

/**
 * As `recordBatchResult`, and whether the batch's window now wants refilling (the caller asks the apis to) and
 * whether this result ended the batch. `billed`: its cost (µ$), or its cost and the tokens it was billed for.
 */
export async function recordInBatch(
  redis: Redis,
  batchId: string,
  index: number,
  customId: string,
  result: BatchResult | { type: BatchOutcome; json: string },
  keepMs: number,
  billed: number | BatchBilled = 0,
): Promise<{ state: 'recorded' | 'already' | 'gone'; refill: boolean; ended: boolean }> {
  const line = 'json' in result ? result.json : JSON.stringify(result);
  const bill: BatchBilled = typeof billed === 'number' ? { costMicros: billed } : billed;
  const whole = (value: number | undefined) => Math.max(0, Math.round(value ?? 0));
  const reply = await recordScript(redis, {
    batch: batchKey(batchId),
    done: batchDoneKey(batchId),
    results: batchResultsKey(batchId),
    pending: batchPendingKey(batchId),
    queued: batchQueuedKey(batchId),
    index,
    outcome: result.type,
    customId,
    result: line,
    nowMs: Date.now(),
    keepMs,
    costMicros: whole(bill.costMicros),
    inputTokens: whole(bill.input),
    cachedTokens: whole(bill.cached),
    outputTokens: whole(bill.output),
  });
  const done = Number(reply[0]);
  if (done > 0) {
    const dialect = dialectOf(batchId);
    activeMetrics()?.batchRequests.get(result.type, dialect).inc();
    if (done === 2) activeMetrics()?.batches.get('ended', dialect).inc();
  }
  return { state: done > 0 ? 'recorded' : done === 0 ? 'already' : 'gone', refill: reply[1] === 1, ended: done === 2 };
}
