import type { Redis } from 'ioredis';
import {
  batchRequestState,
  openAIBatchErrorBody,
  openAIBatchResult,
  recordInBatch,
  type BatchBilled,
  type BatchJob,
  type BatchOutcome,
  type BatchResult,
} from '../shared/batches/index.js';
import type { Config } from '../shared/config.js';
import { GatewayError } from '../shared/errors.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { Logger } from '../shared/logger.js';
import { anthropicErrorType } from '../shared/messages.js';
import { refusedForMoney, releaseReservation, reserve } from '../shared/money/billing.js';
import { batchRefillChannel } from '../shared/redis-keys.js';
import {
  accessRefusalMessage,
  mayUseModel,
  modelNotAllowed,
  type AccessNow,
  type CurrentAccess,
} from '../shared/access/index.js';

/**
 * A batch's request in a worker (shared/batches/record.ts): it has no client, so its answer, or its failure, is
 * recorded in its batch, once, however often it runs. Before the vendor is called the batch is asked whether the
 * request still should run (its batch canceled, or past its deadline: recorded `canceled` / `expired`, nothing
 * billed; recorded already by an earlier run that died before its job ended: nothing more), and its worst case is
 * reserved: a request the account's balance (or its key's limit) can no longer cover is `errored` with a
 * `billing_error` (OpenAI's batches: a 429 `insufficient_quota`), and the batch goes on. Batches are billed at the
 * flex price (settlement).
 *
 * The result is written in its batch's dialect: a Message Batch's as Anthropic's results say it (`{type,
 * message}`), an OpenAI batch's as the `response` of its output line (`{status_code, request_id, body}`, the
 * endpoint's own answer or error body: `openAIBatchResult`), which api/batches/openai-finalize.ts copies into the
 * output and error files as it is, never parsed again.
 */

export interface BatchRunDeps {
  redis: Redis;
  config: Pick<Config, 'batches'>;
  log: Logger;
  /** What the batch's key may do now: each request is admitted by it as it is reserved. */
  access: CurrentAccess;
}

export type BatchData = GatewayJobData & { batch: BatchJob };

export function isBatchJob(data: GatewayJobData): data is BatchData {
  return data.batch !== undefined;
}

/**
 * Records a request's outcome in its batch (a batch gone, deleted or its results' time over, has nothing to record).
 * When that leaves an eighth of the batch's window free, the apis are asked to refill it (shared/batches/queueing.ts):
 * one PUBLISH, not sent waited on; a lost one is made up by the sweep.
 */
async function record(
  deps: BatchRunDeps,
  batch: BatchJob,
  result: BatchResult | { type: BatchOutcome; json: string },
  billed: BatchBilled = { costMicros: 0 },
): Promise<void> {
  const { refill, ended } = await recordInBatch(
    deps.redis,
    batch.id,
    batch.index,
    batch.customId,
    result,
    deps.config.batches.resultsKeepMs,
    billed,
  );
  // An OpenAI batch that ended has files to write: the apis are told at once (the sweep would find it later).
  if (refill || (ended && batch.dialect === 'openai'))
    void deps.redis
      .publish(batchRefillChannel, batch.id)
      .catch((error: unknown) =>
        deps.log.warn(
          { err: error, batch: batch.id },
          "could not ask for a batch's window to be refilled (the sweep will)",
        ),
      );
}

/**
 * An error as a batch's result says it: Anthropic's error body, or an OpenAI batch's response with its endpoint's error
 * status and body.
 */
export function erroredResult(error: GatewayError, data: BatchData): BatchResult | { type: 'errored'; json: string } {
  if (data.batch.dialect === 'openai')
    return {
      type: 'errored',
      json: openAIBatchResult('errored', error.status, data.requestId, openAIBatchErrorBody(error, data.endpoint)),
    };
  return {
    type: 'errored',
    error: {
      type: 'error',
      error: { type: anthropicErrorType(error.status), message: error.message },
      request_id: data.requestId,
    },
  };
}

/**
 * Whether the request is done before any vendor call: true when it was recorded now or before (canceled, expired,
 * refused by what its key may do now or by the money), false when it goes on to its vendor with its worst case
 * reserved until `runDeadline`.
 *
 * Each request is admitted by what its key may do at this moment (shared/access), not by what it could when the batch
 * was made: a key revoked or expired, its account disabled, its model taken off the key's list, refuse the request
 * (recorded `errored` with the refusal, as the endpoint would answer it now), and the reservation is held to the key's
 * spending limit and the budgets in force now. So a change lands on a running batch at its next request, within a
 * second: what is already at its vendor (at most the batch's window) finishes and is billed.
 */
export async function batchGate(deps: BatchRunDeps, data: BatchData, runDeadline: number): Promise<boolean> {
  const { batch } = data;
  const now = data.accountId ? await deps.access.of(data.keyId) : undefined;
  const refusal = now ? accessRefusal(now, data.model) : undefined;
  // Its batch's word and its reservation side by side (one round trip before the call, not two): a reservation made
  // for a request that turns out not to run is given back at once.
  const [{ status, recorded }, outcome] = await Promise.all([
    batchRequestState(deps.redis, batch.id, batch.index),
    data.accountId && now && 'access' in now && !refusal
      ? reserve(
          deps.redis,
          {
            requestId: data.requestId,
            keyId: data.keyId,
            accountId: data.accountId,
            micros: batch.reserve.micros,
            tokens: batch.reserve.tokens,
            deadline: runDeadline,
          },
          // A batch's requests count against the key's spending limit, its budgets and the balance, not against its
          // rate limits.
          {
            ...(now.access.limitMicros !== undefined ? { limitMicros: now.access.limitMicros } : {}),
            ...(now.access.budgets ? { budgets: now.access.budgets } : {}),
          },
        )
      : undefined,
  ]);
  const giveBack = () =>
    outcome?.ok && data.accountId ? releaseReservation(deps.redis, data.accountId, data.requestId) : undefined;
  // Recorded by an earlier run (its worker died before its job ended: its settlement came first), or its batch is gone.
  if (recorded || status === undefined || status === 'ended') {
    await giveBack();
    return true;
  }
  if (status === 'canceling' || Date.now() >= data.deadline) {
    await Promise.all([
      giveBack(),
      record(deps, batch, status === 'canceling' ? { type: 'canceled' } : { type: 'expired' }),
    ]);
    return true;
  }
  if (refusal) {
    deps.log.info(
      { batch: batch.id, index: batch.index, code: refusal.code },
      "a batch's request was refused: its key may no longer make it",
    );
    await record(deps, batch, erroredResult(refusal, data));
    return true;
  }
  if (!outcome || outcome.ok) return false;
  // A batch's requests are not held to rate limits: only the money (or the key's access) refuses one here.
  const reason =
    outcome.reason === 'key_limit' || outcome.reason === 'account_balance' || outcome.reason === 'budget'
      ? outcome.reason
      : 'no_access';
  const access = now && 'access' in now ? now.access : undefined;
  const message = refusedForMoney({ reason, budget: outcome.budget }, access?.accountName);
  deps.log.info(
    { batch: batch.id, index: batch.index, reason: outcome.reason },
    "a batch's request was refused by its account's money",
  );
  if (batch.dialect === 'openai') {
    // As OpenAI's API refuses a request its quota cannot cover (or a key that may no longer use it).
    const refused =
      reason === 'no_access'
        ? new GatewayError(401, message, { code: 'invalid_api_key' })
        : new GatewayError(429, message, { type: 'insufficient_quota', code: 'insufficient_quota' });
    await record(deps, batch, erroredResult(refused, data));
    return true;
  }
  const type = reason === 'no_access' ? 'authentication_error' : 'billing_error';
  await record(deps, batch, {
    type: 'errored',
    error: { type: 'error', error: { type, message }, request_id: data.requestId },
  });
  return true;
}

/**
 * The error a batch's request gets when its key may no longer make it (as the endpoint answers such a key now), or
 * undefined.
 */
function accessRefusal(now: AccessNow, model: string): GatewayError | undefined {
  if ('refused' in now) return new GatewayError(401, accessRefusalMessage(now.refused), { code: 'invalid_api_key' });
  if (!mayUseModel(now.access, model)) return modelNotAllowed(model);
  return undefined;
}

/** What settlement billed a request, as its batch adds it up (nothing: it was not billed). */
type Billed = { costMicros: number; input?: number; cached?: number; output?: number } | undefined;

/**
 * The request's answer (a message, or an OpenAI batch's endpoint's body), as the worker has its JSON, recorded with
 * what it was billed.
 */
export function recordSucceeded(
  deps: BatchRunDeps,
  data: BatchData,
  bodyJson: string,
  billed: Billed,
): Promise<unknown> {
  const json =
    data.batch.dialect === 'openai'
      ? openAIBatchResult('succeeded', 200, data.requestId, bodyJson)
      : `{"type":"succeeded","message":${bodyJson}}`;
  return record(deps, data.batch, { type: 'succeeded', json }, billed ?? { costMicros: 0 });
}

/**
 * The request failed for good (its retries spent): recorded `errored` with what it was billed (what the vendor
 * produced).
 */
export function recordErrored(
  deps: BatchRunDeps,
  data: BatchData,
  error: GatewayError,
  billed: Billed,
): Promise<unknown> {
  return record(deps, data.batch, erroredResult(error, data), billed ?? { costMicros: 0 });
}
