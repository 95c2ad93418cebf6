import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { activeMetrics } from './metrics.js';
import { together, withScripts } from './redis.js';
import { accountBatchesKey, batchDoneKey, batchKey, batchPendingKey, batchQueuedKey, batchResultsKey, openBatchesKey } from './redis-keys.js';

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
  /** What its requests cost so far, in integer micro-dollars (each added as it is settled). */
  costMicros: number;
}

/** What a batch's request carries in its job: its batch, its place and name there, and the most it may cost. */
export interface BatchJob {
  id: string;
  index: number;
  customId: string;
  /**
   * Reserved by the worker just before the vendor is called (a request the balance cannot cover is `errored`): its
   * worst case, and its key's spending limit as it was when the batch was made.
   */
  reserve: { micros: number; tokens: number; keyLimitMicros?: number };
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

// A batch's window filled: while it is in progress and before its deadline, its next requests (from `next`, up to
// those stored so far) are let in until `window` are queued, once at least `least` may be (all that is left, at the
// end), each noted queued (at `now`) and returned with its pending entry. Shared by the record and the release
// scripts (KEYS[1] the batch, then its pending and queued keys).
const releaseLua = (pending: string, queued: string, now: string, least: string) => `
local function release()
  local out = {}
  if redis.call('HGET', KEYS[1], 'status') ~= 'in_progress' then return out end
  local batch = redis.call('HMGET', KEYS[1], 'expires', 'next', 'stored', 'window')
  if tonumber(${now}) >= tonumber(batch[1] or '0') then return out end
  local from = tonumber(batch[2] or '0')
  local left = tonumber(batch[3] or '0') - from
  local room = tonumber(batch[4] or '0') - redis.call('ZCARD', ${queued})
  if left <= 0 or room <= 0 or room < math.min(tonumber(${least}), left) then return out end
  local to = from + math.min(room, left)
  redis.call('HSET', KEYS[1], 'next', to)
  for index = from, to - 1 do
    redis.call('ZADD', ${queued}, ${now}, index)
    out[#out + 1] = index
    out[#out + 1] = redis.call('HGET', ${pending}, index) or ''
  end
  if redis.call('PTTL', ${queued}) < 0 then redis.call('PEXPIRE', ${queued}, redis.call('PTTL', KEYS[1])) end
  return out
end`;

/**
 * Records one request's result once: a request already recorded is left as it is (a retried or re-run request never
 * counts twice). Moves the request from `processing` to its outcome, adds its cost, takes it out of the pending and
 * queued keys, and either ends the batch when none is left processing (its results then kept for their time) or
 * fills its window again once `refill` of it are free (so its requests are queued that many at a time, not one by
 * one): those to queue, returned with their entries.
 * KEYS: batch, done, results, pending, queued. ARGV: index, outcome, custom_id, result JSON, now (ms), results' TTL
 * (ms), cost (µ$). Returns {1, index, entry, index, entry, …} when recorded ({2}: and that ended the batch), {0}
 * when the request was recorded before, {-1} for a batch that is gone.
 */
const recordScript = `${releaseLua('KEYS[4]', 'KEYS[5]', 'ARGV[5]', "redis.call('HGET', KEYS[1], 'refill') or '1'")}
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return {0} end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'custom_id', ARGV[3], 'result', ARGV[4])
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[1], 'cost', ARGV[7]) end
local left = redis.call('HINCRBY', KEYS[1], 'processing', -1)
if left <= 0 and redis.call('HGET', KEYS[1], 'status') ~= 'ended' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'ended_at', ARGV[5])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
  redis.call('DEL', KEYS[4], KEYS[5])
  return {2}
end
local moved = release()
table.insert(moved, 1, 1)
return moved`;

/** Fills a batch's window (at intake, as its requests are stored). KEYS: batch, pending, queued. ARGV: now. Returns index, entry pairs. */
const releaseScript = `${releaseLua('KEYS[2]', 'KEYS[3]', 'ARGV[1]', '1')}
return release()`;

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
  batchRecord(batch: string, done: string, results: string, pending: string, queued: string, index: number, outcome: BatchOutcome, customId: string, result: string, now: number, ttlMs: number, costMicros: number): Promise<[number, ...Array<number | string>]>;
  batchRelease(batch: string, pending: string, queued: string, now: number): Promise<Array<number | string>>;
  batchCancel(batch: string, now: number): Promise<string | null>;
}

const scripted = (redis: Redis) =>
  withScripts<BatchRedis>(redis, { batchRecord: { keys: 5, lua: recordScript }, batchRelease: { keys: 3, lua: releaseScript }, batchCancel: { keys: 1, lua: cancelScript } });

/** A request of a batch released to its queue: its index, and its pending entry ('' when none was stored). */
export interface ReleasedRequest {
  index: number;
  entry: string;
}

function releasedPairs(flat: ReadonlyArray<number | string>, from = 0): ReleasedRequest[] {
  const out: ReleasedRequest[] = [];
  for (let i = from; i + 1 < flat.length; i += 2) out.push({ index: Number(flat[i]), entry: String(flat[i + 1]) });
  return out;
}

/**
 * Stores a new batch (every request processing), lists it under its account and among the open batches; kept until
 * `keepMs` past its expiry. With a `window`, its requests are run by the queue, that many at once, refilled an eighth
 * of it at a time: the caller stores each one's entry (`storeBatchEntries`) and fills the window as they are stored
 * (`releaseBatchRequests`); without, nothing is ever released (a record alone, as tests make one).
 */
export async function createBatch(redis: Redis, batch: Omit<BatchRecord, 'status' | 'counts' | 'costMicros'>, keepMs: number, options: { window?: number } = {}): Promise<void> {
  const ttl = Math.max(1, batch.expires - Date.now() + keepMs);
  const window = options.window ?? 0;
  const refill = Math.max(1, Math.floor(window / 8));
  await redis
    .multi()
    .hset(batchKey(batch.id), { id: batch.id, account: batch.accountId, key: batch.keyId, created: batch.created, expires: batch.expires, total: batch.total, next: 0, stored: 0, window, refill, status: batch.total > 0 ? 'in_progress' : 'ended', processing: batch.total, succeeded: 0, errored: 0, canceled: 0, expired: 0, cost: 0 })
    .pexpire(batchKey(batch.id), ttl)
    .exec();
  await together(redis).zadd(accountBatchesKey(batch.accountId), batch.created, batch.id).zadd(openBatchesKey, batch.expires, batch.id).exec();
}

/**
 * Stores the entries of a batch's requests `from`, `from + 1`, … (what each one's job will be), kept `ttlMs`, in order:
 * the window lets in only requests stored.
 */
export async function storeBatchEntries(redis: Redis, batchId: string, from: number, entries: readonly string[], ttlMs: number): Promise<void> {
  const fields: Record<string, string> = {};
  entries.forEach((entry, offset) => (fields[from + offset] = entry));
  await redis
    .multi()
    .hset(batchPendingKey(batchId), fields)
    .pexpire(batchPendingKey(batchId), Math.max(1, ttlMs))
    .hset(batchKey(batchId), 'stored', from + entries.length)
    .exec();
}

/** Fills a batch's window: the requests now to be queued (none once it is canceled, expired or all out). */
export async function releaseBatchRequests(redis: Redis, batchId: string): Promise<ReleasedRequest[]> {
  return releasedPairs(await scripted(redis).batchRelease(batchKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId), Date.now()));
}

/** The requests of a batch queued (released) and not yet recorded, queued before `before` (epoch ms). */
export async function queuedIndices(redis: Redis, batchId: string, before = Number.POSITIVE_INFINITY): Promise<number[]> {
  return (await redis.zrangebyscore(batchQueuedKey(batchId), '-inf', Number.isFinite(before) ? `(${before}` : '+inf')).map(Number).sort((a, b) => a - b);
}

/** How far the batch's window has reached: its requests from this index on were never queued. */
export async function releasedCount(redis: Redis, batchId: string): Promise<number> {
  return Number((await redis.hget(batchKey(batchId), 'next')) ?? 0) || 0;
}

/** The pending entries of some of a batch's requests ('' for one recorded already, or never stored). */
export async function pendingEntries(redis: Redis, batchId: string, indices: readonly number[]): Promise<string[]> {
  if (indices.length === 0) return [];
  return (await redis.hmget(batchPendingKey(batchId), ...indices.map(String))).map((entry) => entry ?? '');
}

/**
 * Records a request's result once (see recordScript); resolves to whether this call recorded it. `result` may be its
 * JSON already (a message as the worker has it, not parsed to be written again). `costMicros`: what it was billed.
 */
export async function recordBatchResult(redis: Redis, batchId: string, index: number, customId: string, result: BatchResult | { type: BatchOutcome; json: string }, keepMs: number, costMicros = 0): Promise<'recorded' | 'already' | 'gone'> {
  return (await recordAndMoveOn(redis, batchId, index, customId, result, keepMs, costMicros)).state;
}

/** As `recordBatchResult`, and the requests let into the batch's window by it, if any: the caller queues them. */
export async function recordAndMoveOn(redis: Redis, batchId: string, index: number, customId: string, result: BatchResult | { type: BatchOutcome; json: string }, keepMs: number, costMicros = 0): Promise<{ state: 'recorded' | 'already' | 'gone'; next: ReleasedRequest[] }> {
  const line = 'json' in result ? result.json : JSON.stringify(result);
  const reply = await scripted(redis).batchRecord(batchKey(batchId), batchDoneKey(batchId), batchResultsKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId), index, result.type, customId, line, Date.now(), keepMs, Math.max(0, Math.round(costMicros)));
  const done = Number(reply[0]);
  if (done > 0) {
    activeMetrics()?.batchRequests.get(result.type).inc();
    if (done === 2) activeMetrics()?.batches.get('ended').inc();
  }
  return { state: done > 0 ? 'recorded' : done === 0 ? 'already' : 'gone', next: releasedPairs(reply, 1) };
}

/** Where a worker stands with a batch's request: its batch's status (undefined: gone), and whether it is recorded already. One round trip. */
export async function batchRequestState(redis: Redis, batchId: string, index: number): Promise<{ status: BatchStatus | undefined; recorded: boolean }> {
  const [[, status], [, recorded]] = (await together(redis).hget(batchKey(batchId), 'status').hexists(batchDoneKey(batchId), String(index)).exec()) as [[unknown, string | null], [unknown, number]];
  return { status: (status ?? undefined) as BatchStatus | undefined, recorded: recorded === 1 };
}

/** A batch's keys gone (its DELETE): every trace but its id in its account's list, which the list drops when it reads it. */
export async function deleteBatch(redis: Redis, batchId: string, accountId: string): Promise<void> {
  await redis.del(batchKey(batchId), batchDoneKey(batchId), batchResultsKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId));
  await together(redis).zrem(accountBatchesKey(accountId), batchId).zrem(openBatchesKey, batchId).exec();
}

/** An account's batches, newest first: a page of `limit` after `afterId` / before `beforeId` (Anthropic's cursors), gone ones dropped. */
export async function listBatches(redis: Redis, accountId: string, page: { limit: number; afterId?: string; beforeId?: string }): Promise<{ batches: BatchRecord[]; hasMore: boolean }> {
  const key = accountBatchesKey(accountId);
  // Newest first, as Anthropic lists them: `after_id` pages toward older batches, `before_id` toward newer ones.
  const ids = await redis.zrevrange(key, '0', '-1');
  const at = (id: string | undefined) => (id === undefined ? undefined : ids.indexOf(id));
  const after = at(page.afterId);
  const before = at(page.beforeId);
  let start = 0;
  let end = ids.length;
  if (after !== undefined) start = after < 0 ? ids.length : after + 1;
  if (before !== undefined) {
    end = before < 0 ? 0 : before;
    start = Math.max(0, end - page.limit);
  }
  const chosen = ids.slice(start, Math.min(end, start + page.limit));
  const records = await Promise.all(chosen.map((id) => readBatch(redis, id)));
  const gone = chosen.filter((_, i) => !records[i]);
  if (gone.length > 0) await redis.zrem(key, ...gone);
  const hasMore = before !== undefined ? start > 0 : start + page.limit < end;
  return { batches: records.filter((record): record is BatchRecord => record !== undefined), hasMore };
}

/** How many of an account's batches have not ended (an open batch's limit). */
export async function openBatchCount(redis: Redis, accountId: string): Promise<number> {
  const ids = await redis.zrange(accountBatchesKey(accountId), '0', '-1');
  if (ids.length === 0) return 0;
  const read = together(redis);
  for (const id of ids) read.hget(batchKey(id), 'status');
  const statuses = ((await read.exec()) ?? []).map(([, status]) => status as string | null);
  return statuses.filter((status) => status === 'in_progress' || status === 'canceling').length;
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
    costMicros: number('cost'),
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
