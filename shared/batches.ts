import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { withScripts } from './redis.js';
import { accountBatchesKey, batchDoneKey, batchKey, batchResultsKey } from './redis-keys.js';

/**
 * Message Batches (Anthropic's API, on every chat model): a batch's record in Redis, and each of its requests'
 * results recorded exactly once, however often a worker runs or retries that request. A batch is a hash under its
 * own hash tag (`batchKey`), with its results (`batchResultsKey`, a stream in the order they came) and which of its
 * requests are done (`batchDoneKey`) beside it, so one script records a result, moves the counts and ends the batch
 * when nothing is left processing.
 */

export type BatchStatus = 'in_progress' | 'canceling' | 'ended';
export type BatchOutcome = 'succeeded' | 'errored' | 'canceled' | 'expired';
export const batchOutcomes: readonly BatchOutcome[] = ['succeeded', 'errored', 'canceled', 'expired'];

/** A request's result, as a line of `…/results` says it (`{custom_id, result}`). */
export type BatchResult =
  | { type: 'succeeded'; message: unknown }
  | { type: 'errored'; error: { type: 'error'; error: { type: string; message: string }; request_id: string | null } }
  | { type: 'canceled' }
  | { type: 'expired' };

export interface BatchRecord {
  id: string;
  accountId: string;
  keyId: string;
  /** Epoch ms. */
  created: number;
  /** Epoch ms: requests not run by then are expired. */
  expires: number;
  total: number;
  status: BatchStatus;
  counts: Record<BatchOutcome | 'processing', number>;
  /** Epoch ms, once ended / once a cancel was asked. */
  endedAt?: number;
  cancelAt?: number;
}

/** A batch's id, in Anthropic's form (`msgbatch_` and 24 letters and digits). */
export function newBatchId(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = randomBytes(24);
  let id = 'msgbatch_';
  // Unique, not secret: the slight lean of a byte modulo 62 toward the first letters costs it nothing.
  for (const byte of bytes) id += alphabet[byte % 62];
  return id;
}

/** The job id of a batch's request: found again from the batch and its index (a cancel removes the waiting ones). */
export function batchRequestJobId(batchId: string, index: number): string {
  return `${batchId}.${index}`;
}

/**
 * Records one request's result once: a request already recorded is left as it is (a retried or re-run request never
 * counts twice). Moves the request from `processing` to its outcome, and ends the batch when none is left processing.
 * KEYS: batch, done, results. ARGV: index, outcome, custom_id, result JSON, now (ms), results' TTL (ms).
 * Returns 1 when recorded, 0 when the request was recorded before, -1 for a batch that is gone.
 */
const recordScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XADD', KEYS[3], '*', 'custom_id', ARGV[3], 'result', ARGV[4])
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
local left = redis.call('HINCRBY', KEYS[1], 'processing', -1)
if left <= 0 and redis.call('HGET', KEYS[1], 'status') ~= 'ended' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'ended_at', ARGV[5])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
end
return 1`;

/** Marks a cancel asked: `in_progress` becomes `canceling` (any other status stays). Returns the status after. */
const cancelScript = `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'canceling', 'cancel_at', ARGV[1])
  return 'canceling'
end
return status`;

interface BatchRedis extends Redis {
  batchRecord(batch: string, done: string, results: string, index: number, outcome: BatchOutcome, customId: string, result: string, now: number, ttlMs: number): Promise<number>;
  batchCancel(batch: string, now: number): Promise<string | null>;
}

const scripted = (redis: Redis) => withScripts<BatchRedis>(redis, { batchRecord: { keys: 3, lua: recordScript }, batchCancel: { keys: 1, lua: cancelScript } });

/** Stores a new batch (every request processing) and lists it under its account; kept until `keepMs` past its expiry. */
export async function createBatch(redis: Redis, batch: Omit<BatchRecord, 'status' | 'counts'>, keepMs: number): Promise<void> {
  const ttl = Math.max(1, batch.expires - Date.now() + keepMs);
  await redis
    .multi()
    .hset(batchKey(batch.id), { id: batch.id, account: batch.accountId, key: batch.keyId, created: batch.created, expires: batch.expires, total: batch.total, status: batch.total > 0 ? 'in_progress' : 'ended', processing: batch.total, succeeded: 0, errored: 0, canceled: 0, expired: 0 })
    .pexpire(batchKey(batch.id), ttl)
    .exec();
  await redis.zadd(accountBatchesKey(batch.accountId), batch.created, batch.id);
}

/** Records a request's result once (see recordScript); resolves to whether this call recorded it. */
export async function recordBatchResult(redis: Redis, batchId: string, index: number, customId: string, result: BatchResult, keepMs: number): Promise<'recorded' | 'already' | 'gone'> {
  const line = JSON.stringify(result);
  const done = await scripted(redis).batchRecord(batchKey(batchId), batchDoneKey(batchId), batchResultsKey(batchId), index, result.type, customId, line, Date.now(), keepMs);
  return done === 1 ? 'recorded' : done === 0 ? 'already' : 'gone';
}

/** Asks a batch to stop: its status after (`canceling`, or `ended` already), or undefined for a batch that is gone. */
export async function cancelBatch(redis: Redis, batchId: string): Promise<BatchStatus | undefined> {
  return ((await scripted(redis).batchCancel(batchKey(batchId), Date.now())) ?? undefined) as BatchStatus | undefined;
}

/** A batch's record, or undefined when there is none (never made, deleted, or its results' time is over). */
export async function readBatch(redis: Redis, batchId: string): Promise<BatchRecord | undefined> {
  const row = await redis.hgetall(batchKey(batchId));
  if (!row.id) return undefined;
  const number = (field: string) => Number(row[field] ?? 0) || 0;
  const record: BatchRecord = {
    id: row.id,
    accountId: row.account ?? '',
    keyId: row.key ?? '',
    created: number('created'),
    expires: number('expires'),
    total: number('total'),
    status: row.status === 'canceling' || row.status === 'ended' ? row.status : 'in_progress',
    counts: { processing: Math.max(0, number('processing')), succeeded: number('succeeded'), errored: number('errored'), canceled: number('canceled'), expired: number('expired') },
  };
  if (row.ended_at) record.endedAt = number('ended_at');
  if (row.cancel_at) record.cancelAt = number('cancel_at');
  return record;
}

/** Up to `count` result lines after the stream entry `after` ('0' from the start), and the last entry read. */
export async function readBatchResults(redis: Redis, batchId: string, after: string, count: number): Promise<{ lines: string[]; last: string | undefined }> {
  const entries = await redis.xrange(batchResultsKey(batchId), after === '0' ? '-' : `(${after}`, '+', 'COUNT', count);
  const lines = entries.map(([, fields]) => {
    let customId = '';
    let result = 'null';
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'custom_id') customId = fields[i + 1]!;
      else if (fields[i] === 'result') result = fields[i + 1]!;
    }
    // The result is JSON as recorded: written in, not parsed and written again.
    return `{"custom_id":${JSON.stringify(customId)},"result":${result}}`;
  });
  return { lines, last: entries.at(-1)?.[0] };
}

/** A batch as Anthropic's API answers it (`MessageBatch`); `resultsUrl` once it has ended. */
export function batchView(batch: BatchRecord, resultsUrl: string): Record<string, unknown> {
  const time = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());
  return {
    id: batch.id,
    type: 'message_batch',
    processing_status: batch.status,
    request_counts: { processing: batch.counts.processing, succeeded: batch.counts.succeeded, errored: batch.counts.errored, canceled: batch.counts.canceled, expired: batch.counts.expired },
    ended_at: time(batch.endedAt),
    created_at: time(batch.created),
    expires_at: time(batch.expires),
    archived_at: null,
    cancel_initiated_at: time(batch.cancelAt),
    results_url: batch.status === 'ended' ? resultsUrl : null,
  };
}
