import type { Redis } from 'ioredis';
import { batchRequestState, recordInBatch, type BatchJob, type BatchOutcome, type BatchResult } from '../shared/batches.js';
import type { Config } from '../shared/config.js';
import type { GatewayError } from '../shared/errors.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { Logger } from '../shared/logger.js';
import { anthropicErrorType } from '../shared/messages.js';
import { moneyRefusal, releaseReservation, reserve } from '../shared/money/billing.js';
import { batchRefillChannel } from '../shared/redis-keys.js';

/**
 * A Message Batch's request in a worker (shared/batches.ts): it has no client, so its answer, or its failure, is
 * recorded in its batch, once, however often it runs. Before the vendor is called the batch is asked whether the
 * request still should run (its batch canceled, or past its deadline: recorded `canceled` / `expired`, nothing
 * billed; recorded already by an earlier run that died before its job ended: nothing more), and its worst case is
 * reserved: a request the account's balance (or its key's limit) can no longer cover is `errored` with a
 * `billing_error`, and the batch goes on. Batches are billed at the flex price (settlement).
 */

export interface BatchRunDeps {
  redis: Redis;
  config: Pick<Config, 'batches'>;
  log: Logger;
}

export type BatchData = GatewayJobData & { batch: BatchJob };

export function isBatchJob(data: GatewayJobData): data is BatchData {
  return data.batch !== undefined;
}

/**
 * Records a request's outcome in its batch (a batch gone, deleted or its results' time over, has nothing to record).
 * When that leaves an eighth of the batch's window free, the apis are asked to refill it (shared/batch-queue.ts): one
 * PUBLISH, not sent waited on; a lost one is made up by the sweep.
 */
async function record(deps: BatchRunDeps, batch: BatchJob, result: BatchResult | { type: BatchOutcome; json: string }, costMicros = 0): Promise<void> {
  const { refill } = await recordInBatch(deps.redis, batch.id, batch.index, batch.customId, result, deps.config.batches.resultsKeepMs, costMicros);
  if (refill) void deps.redis.publish(batchRefillChannel, batch.id).catch((error: unknown) => deps.log.warn({ err: error, batch: batch.id }, "could not ask for a batch's window to be refilled (the sweep will)"));
}

/** An error as a batch's result says it: Anthropic's error body. */
export function erroredResult(error: GatewayError, requestId: string): BatchResult {
  return { type: 'errored', error: { type: 'error', error: { type: anthropicErrorType(error.status), message: error.message }, request_id: requestId } };
}

/**
 * Whether the request is done before any vendor call: true when it was recorded now or before (canceled, expired,
 * refused by the balance), false when it goes on to its vendor with its worst case reserved until `runDeadline`.
 */
export async function batchGate(deps: BatchRunDeps, data: BatchData, runDeadline: number): Promise<boolean> {
  const { batch } = data;
  // Its batch's word and its reservation side by side (one round trip before the call, not two): a reservation made
  // for a request that turns out not to run is given back at once.
  const [{ status, recorded }, outcome] = await Promise.all([
    batchRequestState(deps.redis, batch.id, batch.index),
    data.accountId
      ? reserve(
          deps.redis,
          { requestId: data.requestId, keyId: data.keyId, accountId: data.accountId, micros: batch.reserve.micros, tokens: batch.reserve.tokens, deadline: runDeadline },
          // A batch's requests count against the key's spending limit and the balance, not against its rate limits.
          batch.reserve.keyLimitMicros !== undefined ? { limitMicros: batch.reserve.keyLimitMicros } : {},
        )
      : undefined,
  ]);
  const giveBack = () => (outcome?.ok && data.accountId ? releaseReservation(deps.redis, data.accountId, data.requestId) : undefined);
  // Recorded by an earlier run (its worker died before its job ended: its settlement came first), or its batch is gone.
  if (recorded || status === undefined || status === 'ended') {
    await giveBack();
    return true;
  }
  if (status === 'canceling' || Date.now() >= data.deadline) {
    await Promise.all([giveBack(), record(deps, batch, status === 'canceling' ? { type: 'canceled' } : { type: 'expired' })]);
    return true;
  }
  if (!outcome || outcome.ok) return false;
  // A batch's requests are not held to rate limits: only the money (or the key's access) refuses one here.
  const reason = outcome.reason === 'key_limit' || outcome.reason === 'account_balance' ? outcome.reason : 'no_access';
  const message = moneyRefusal(reason);
  const type = reason === 'no_access' ? 'authentication_error' : 'billing_error';
  deps.log.info({ batch: batch.id, index: batch.index, reason: outcome.reason }, "a batch's request was refused by its account's money");
  await record(deps, batch, { type: 'errored', error: { type: 'error', error: { type, message }, request_id: data.requestId } });
  return true;
}

/** The request's message, as the worker has its JSON, recorded with what it was billed. */
export function recordSucceeded(deps: BatchRunDeps, data: BatchData, messageJson: string, costMicros: number): Promise<unknown> {
  return record(deps, data.batch, { type: 'succeeded', json: `{"type":"succeeded","message":${messageJson}}` }, costMicros);
}

/** The request failed for good (its retries spent): recorded `errored` with what it was billed (what the vendor produced). */
export function recordErrored(deps: BatchRunDeps, data: BatchData, error: GatewayError, costMicros: number): Promise<unknown> {
  return record(deps, data.batch, erroredResult(error, data.requestId), costMicros);
}
