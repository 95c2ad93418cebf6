import { randomBytes } from 'node:crypto';
import type { BatchDialect, BatchStatus } from './batch-status.js';
import type { Redis } from 'ioredis';
import { anthropicErrorType } from './messages.js';
import { activeMetrics } from './metrics.js';
import { inOneWrite, withScripts } from './redis.js';
import { accountBatchesKey, batchDoneKey, batchIntakeKey, batchKey, batchPendingKey, batchQueuedKey, batchResultsKey, openBatchesKey } from './redis-keys.js';

/**
 * The batch engine's record (Anthropic's Message Batches and OpenAI's Batch API, on every model): a batch's record
 * in Redis, and each of its requests' results recorded exactly once, however often a worker runs or retries that
 * request. A batch is a hash under its own hash tag (`batchKey`), with its results (`batchResultsKey`, a stream in
 * the order they came) and which of its requests are done (`batchDoneKey`) beside it, so one script records a
 * result, moves the counts and ends the batch when nothing is left processing. The two dialects share all of it;
 * an OpenAI batch (`batch_…`) keeps the fields of its own dialect beside the engine's in the same hash
 * (api/batches/openai-record.ts), and is `validating` while its input file is read, before the engine runs it.
 */

export type { BatchDialect, BatchStatus } from './batch-status.js';

/** A batch's dialect, as its id says it. */
export function dialectOf(batchId: string): BatchDialect {
  return batchId.startsWith('msgbatch_') ? 'anthropic' : 'openai';
}
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
  /** The tokens its requests were billed for so far (each added as it is settled). */
  tokens: { input: number; cached: number; output: number };
  dialect: BatchDialect;
  /** The hash as stored: what a dialect keeps of its own beside the engine's fields (api/batches/openai-record.ts). */
  row: Readonly<Record<string, string>>;
  /**
   * The catalog ids of the models its requests use, each once: a key limited to models sees only the batches whose
   * every model it may use (`seesBatch`). Undefined for a batch made before they were recorded.
   */
  models?: string[];
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
  /** The batch's API, which says how its results are written: absent for Anthropic's (jobs queued before OpenAI's existed too). */
  dialect?: 'openai';
}

/** What a request was billed, as its result adds it to its batch's totals. */
export interface BatchBilled {
  costMicros: number;
  input?: number;
  cached?: number;
  output?: number;
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

/** A batch's id in OpenAI's form (`batch_` and 32 hex digits). */
export function newOpenAIBatchId(): string {
  return `batch_${randomBytes(16).toString('hex')}`;
}

/**
 * An OpenAI batch's result as recorded: its outcome and its output line's `response` (`{status_code, request_id,
 * body}`), the body's JSON spliced in as it is (an embeddings answer of a few hundred kilobytes is not parsed to be
 * written again). api/batches/openai-finalize.ts copies the `response` into the output or error file by its prefix.
 */
export function openAIBatchResult(outcome: 'succeeded' | 'errored', status: number, requestId: string | null, bodyJson: string): string {
  return `{"type":"${outcome}","response":{"status_code":${status},"request_id":${JSON.stringify(requestId)},"body":${bodyJson}}}`;
}

/** An error as the body of an OpenAI batch's failed line: its endpoint's own error body (Anthropic's on `/v1/messages`, OpenAI's elsewhere). */
export function openAIBatchErrorBody(error: { status: number; message: string; type: string; code: string | null; param: string | null }, endpoint: string): string {
  if (endpoint === 'messages') return JSON.stringify({ type: 'error', error: { type: anthropicErrorType(error.status), message: error.message } });
  return JSON.stringify({ error: { message: error.message, type: error.type, param: error.param, code: error.code } });
}

/** The job id of a batch's request: found again from the batch and its index (a cancel removes the waiting ones). */
export function batchRequestJobId(batchId: string, index: number): string {
  return `${batchId}.${index}`;
}

/**
 * Records one request's result once: a request already recorded is left as it is (a retried or re-run request never
 * counts twice). Moves the request from `processing` to its outcome, adds its cost, takes it out of the pending and
 * queued keys, and ends the batch when none is left processing (its results then kept for their time). Otherwise it
 * says whether the batch's window wants refilling: `refill` of it free (all that is left, at the end) while the batch
 * is in progress and before its deadline, and no refill asked in the last second (one asked and not yet done).
 * KEYS: batch, done, results, pending, queued. ARGV: index, outcome, custom_id, result JSON, now (ms), results' TTL
 * (ms), cost (µ$), input, cached and output tokens billed. Returns {1, 1} when recorded and a refill is to be asked ({1, 0}: not), {2} when recorded and that
 * ended the batch, {0} when the request was recorded before, {-1} for a batch that is gone.
 */
const recordScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return {0} end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'custom_id', ARGV[3], 'result', ARGV[4])
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[1], 'cost', ARGV[7]) end
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', KEYS[1], 'input_tokens', ARGV[8]) end
if tonumber(ARGV[9]) > 0 then redis.call('HINCRBY', KEYS[1], 'cached_tokens', ARGV[9]) end
if tonumber(ARGV[10]) > 0 then redis.call('HINCRBY', KEYS[1], 'output_tokens', ARGV[10]) end
local left = redis.call('HINCRBY', KEYS[1], 'processing', -1)
local batch = redis.call('HMGET', KEYS[1], 'status', 'expires', 'next', 'stored', 'window', 'refill', 'asked')
if left <= 0 and batch[1] ~= 'ended' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'ended_at', ARGV[5])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
  redis.call('DEL', KEYS[4], KEYS[5])
  return {2}
end
local now = tonumber(ARGV[5])
if batch[1] ~= 'in_progress' or now >= tonumber(batch[2] or '0') then return {1, 0} end
local unqueued = tonumber(batch[4] or '0') - tonumber(batch[3] or '0')
local room = tonumber(batch[5] or '0') - redis.call('ZCARD', KEYS[5])
if unqueued <= 0 or room < math.min(tonumber(batch[6] or '1'), unqueued) then return {1, 0} end
if now - tonumber(batch[7] or '0') < 1000 then return {1, 0} end
redis.call('HSET', KEYS[1], 'asked', ARGV[5])
return {1, 1}`;

/**
 * Fills a batch's window: while it is in progress and before its deadline, its next requests (from `next`, up to
 * those stored so far) are let in until `window` are queued, each noted queued (at `now`) and returned with its
 * pending entry; a refill asked is done. KEYS: batch, pending, queued. ARGV: now. Returns index, entry pairs.
 */
const releaseScript = `
local out = {}
local batch = redis.call('HMGET', KEYS[1], 'status', 'expires', 'next', 'stored', 'window')
if batch[1] ~= 'in_progress' or tonumber(ARGV[1]) >= tonumber(batch[2] or '0') then return out end
redis.call('HSET', KEYS[1], 'asked', 0)
local from = tonumber(batch[3] or '0')
local to = math.min(tonumber(batch[4] or '0'), from + tonumber(batch[5] or '0') - redis.call('ZCARD', KEYS[3]))
if to <= from then return out end
redis.call('HSET', KEYS[1], 'next', to)
for index = from, to - 1 do
  redis.call('ZADD', KEYS[3], ARGV[1], index)
  out[#out + 1] = index
  out[#out + 1] = redis.call('HGET', KEYS[2], index) or ''
end
if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1])) end
return out`;

/**
 * Marks a cancel asked: `in_progress` becomes `canceling`; a batch still `validating` (nothing of it released) ends
 * at once, canceled. Any other status stays. Returns the status after.
 */
const cancelScript = `
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'canceling', 'cancel_at', ARGV[1])
  return 'canceling'
end
if status == 'validating' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'cancel_at', ARGV[1], 'ended_at', ARGV[1], 'processing', 0)
  return 'ended'
end
return status`;

/**
 * Starts a batch that was `validating` (its fields as ARGV pairs after the TTL): nothing happens to one no longer
 * validating (canceled meanwhile). KEYS: batch, intake. ARGV: TTL (ms), intake lease (ms, 0: none), field, value, …
 * Returns 1 when it started it.
 */
const startValidatedScript = `
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then return 0 end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) end
return 1`;

/**
 * Cancels a batch whose intake died: `in_progress`, stored by an intake (`intake` set), not every request stored, and
 * the intake's lease gone (its api stopped renewing it mid-way). Returns 1 when it canceled it. Atomic with the
 * intake's rounds, which store and renew the lease in one transaction.
 */
const abandonedScript = `
local batch = redis.call('HMGET', KEYS[1], 'status', 'intake', 'stored', 'total')
if batch[1] ~= 'in_progress' or batch[2] ~= '1' then return 0 end
if tonumber(batch[3]) >= tonumber(batch[4]) or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'canceling', 'cancel_at', ARGV[1])
return 1`;

interface BatchRedis extends Redis {
  batchRecord(batch: string, done: string, results: string, pending: string, queued: string, index: number, outcome: BatchOutcome, customId: string, result: string, now: number, ttlMs: number, costMicros: number, input: number, cached: number, output: number): Promise<[number, number?]>;
  batchStartValidated(batch: string, intake: string, ttlMs: number, intakeMs: number, ...fields: Array<string | number>): Promise<number>;
  batchRelease(batch: string, pending: string, queued: string, now: number): Promise<Array<number | string>>;
  batchCancel(batch: string, now: number): Promise<string | null>;
  batchAbandoned(batch: string, intake: string, now: number): Promise<number>;
}

const scripted = (redis: Redis) =>
  withScripts<BatchRedis>(redis, {
    batchRecord: { keys: 5, lua: recordScript },
    batchRelease: { keys: 3, lua: releaseScript },
    batchCancel: { keys: 1, lua: cancelScript },
    batchAbandoned: { keys: 2, lua: abandonedScript },
    batchStartValidated: { keys: 2, lua: startValidatedScript },
  });

/** A request of a batch released to its queue: its index, and its pending entry ('' when none was stored). */
export interface ReleasedRequest {
  index: number;
  entry: string;
}


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
  // Each model once: a batch of 10,000 requests keeps the one to three it uses, not a model per request.
  const models = batch.models === undefined ? {} : { models: JSON.stringify([...new Set(batch.models)].sort()) };
  const fields = { id: batch.id, account: batch.accountId, key: batch.keyId, created: batch.created, expires: batch.expires, total: batch.total, next: 0, stored: 0, window, refill, asked: 0, status: batch.total > 0 ? 'in_progress' : 'ended', processing: batch.total, succeeded: 0, errored: 0, canceled: 0, expired: 0, cost: 0, ...models, ...(batch.total > 0 ? {} : { ended_at: Date.now() }), ...(options.intakeMs !== undefined ? { intake: 1 } : {}) };
  if (options.fromValidating) {
    // Started only if still validating (a cancel meanwhile ended it): its dialect's fields stay beside these.
    const flat = Object.entries(fields).flatMap(([name, value]) => [name, value]);
    const started = await scripted(redis).batchStartValidated(batchKey(batch.id), batchIntakeKey(batch.id), ttl, options.intakeMs ?? 0, ...flat);
    if (started !== 1) return false;
  } else {
    const transaction = redis.multi().hset(batchKey(batch.id), fields).pexpire(batchKey(batch.id), ttl);
    if (options.intakeMs !== undefined) transaction.set(batchIntakeKey(batch.id), '1', 'PX', options.intakeMs);
    await transaction.exec();
  }
  await inOneWrite(redis).zadd(accountBatchesKey(batch.accountId), batch.created, batch.id).zadd(openBatchesKey, batch.expires, batch.id).exec();
  return true;
}

/**
 * Stores the entries of a batch's requests `from`, `from + 1`, … (what each one's job will be), kept `ttlMs`, in order:
 * the window lets in only requests stored. `intakeMs`: the intake's lease renewed for that long (see `createBatch`).
 */
export async function storeBatchEntries(redis: Redis, batchId: string, from: number, entries: readonly string[], ttlMs: number, intakeMs?: number): Promise<void> {
  const fields: Record<string, string> = {};
  entries.forEach((entry, offset) => (fields[from + offset] = entry));
  const transaction = redis
    .multi()
    .hset(batchPendingKey(batchId), fields)
    .pexpire(batchPendingKey(batchId), Math.max(1, ttlMs))
    .hset(batchKey(batchId), 'stored', from + entries.length);
  if (intakeMs !== undefined) transaction.set(batchIntakeKey(batchId), '1', 'PX', intakeMs);
  await transaction.exec();
}

/** Cancels the batch when its intake died before storing every request (see abandonedScript); true when it did. */
export async function cancelAbandonedIntake(redis: Redis, batchId: string): Promise<boolean> {
  return (await scripted(redis).batchAbandoned(batchKey(batchId), batchIntakeKey(batchId), Date.now())) === 1;
}

/** Fills a batch's window: the requests now to be queued (none once it is canceled, expired or all out). */
export async function releaseBatchRequests(redis: Redis, batchId: string): Promise<ReleasedRequest[]> {
  const flat = await scripted(redis).batchRelease(batchKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId), Date.now());
  const out: ReleasedRequest[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ index: Number(flat[i]), entry: String(flat[i + 1]) });
  return out;
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
export async function recordBatchResult(redis: Redis, batchId: string, index: number, customId: string, result: BatchResult | { type: BatchOutcome; json: string }, keepMs: number, billed: number | BatchBilled = 0): Promise<'recorded' | 'already' | 'gone'> {
  return (await recordInBatch(redis, batchId, index, customId, result, keepMs, billed)).state;
}

/**
 * As `recordBatchResult`, and whether the batch's window now wants refilling (the caller asks the apis to) and
 * whether this result ended the batch. `billed`: its cost (µ$), or its cost and the tokens it was billed for.
 */
export async function recordInBatch(redis: Redis, batchId: string, index: number, customId: string, result: BatchResult | { type: BatchOutcome; json: string }, keepMs: number, billed: number | BatchBilled = 0): Promise<{ state: 'recorded' | 'already' | 'gone'; refill: boolean; ended: boolean }> {
  const line = 'json' in result ? result.json : JSON.stringify(result);
  const bill: BatchBilled = typeof billed === 'number' ? { costMicros: billed } : billed;
  const whole = (value: number | undefined) => Math.max(0, Math.round(value ?? 0));
  const reply = await scripted(redis).batchRecord(batchKey(batchId), batchDoneKey(batchId), batchResultsKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId), index, result.type, customId, line, Date.now(), keepMs, whole(bill.costMicros), whole(bill.input), whole(bill.cached), whole(bill.output));
  const done = Number(reply[0]);
  if (done > 0) {
    const dialect = dialectOf(batchId);
    activeMetrics()?.batchRequests.get(result.type, dialect).inc();
    if (done === 2) activeMetrics()?.batches.get('ended', dialect).inc();
  }
  return { state: done > 0 ? 'recorded' : done === 0 ? 'already' : 'gone', refill: reply[1] === 1, ended: done === 2 };
}

/** Where a worker stands with a batch's request: its batch's status (undefined: gone), and whether it is recorded already. One round trip. */
export async function batchRequestState(redis: Redis, batchId: string, index: number): Promise<{ status: BatchStatus | undefined; recorded: boolean }> {
  const [[, status], [, recorded]] = (await inOneWrite(redis).hget(batchKey(batchId), 'status').hexists(batchDoneKey(batchId), String(index)).exec()) as [[unknown, string | null], [unknown, number]];
  return { status: (status ?? undefined) as BatchStatus | undefined, recorded: recorded === 1 };
}

/** A batch's keys gone (its DELETE): every trace but its id in its account's list, which the list drops when it reads it. */
export async function deleteBatch(redis: Redis, batchId: string, accountId: string): Promise<void> {
  await redis.del(batchKey(batchId), batchDoneKey(batchId), batchResultsKey(batchId), batchPendingKey(batchId), batchQueuedKey(batchId), batchIntakeKey(batchId));
  await inOneWrite(redis).zrem(accountBatchesKey(accountId), batchId).zrem(openBatchesKey, batchId).exec();
}

/**
 * Whether a key may see a batch: one with no model limit (`allowedModels` undefined) sees every batch of its
 * account; one limited to models sees a batch only when it may use every model the batch uses, so a key kept off a
 * model reads neither the prompts nor the answers of that model's batches.
 */
export function seesBatch(allowedModels: readonly string[] | undefined, batch: Pick<BatchRecord, 'models'>): boolean {
  if (allowedModels === undefined) return true;
  // A batch made before its models were recorded may have used any: only a key without a model limit sees it.
  if (batch.models === undefined) return false;
  return batch.models.every((model) => allowedModels.includes(model));
}

/**
 * The most of an account's listed batches one page reads past those its key may not see: a page that meets that many
 * in a row ends there, short, with `has_more` (no id it could page on is the key's to be told).
 */
export const listScanMost = 10_000;
/** The most batches read in one round trip while a page is filled. */
const listChunkMost = 1_000;

/**
 * An account's batches a key sees (`seesBatch`), newest first: a page of `limit` after `afterId` / before `beforeId`
 * (Anthropic's cursors), gone ones dropped. Reads from the cursor's rank on, not the account's whole list, and
 * further while batches the key may not see (or gone ones) leave the page short, so a page is full and `hasMore` true
 * exactly when the key sees another batch beyond it, as if the others were not there (bounded by `listScanMost`).
 */
export async function listBatches(redis: Redis, accountId: string, page: { limit: number; afterId?: string; beforeId?: string; dialect?: BatchDialect }, allowedModels?: readonly string[]): Promise<{ batches: BatchRecord[]; hasMore: boolean }> {
  const key = accountBatchesKey(accountId);
  // Newest first, as Anthropic lists them: `after_id` pages toward older batches, `before_id` toward newer ones.
  const [[, total], [, after], [, before]] = (await inOneWrite(redis)
    .zcard(key)
    .zrevrank(key, page.afterId ?? '')
    .zrevrank(key, page.beforeId ?? '')
    .exec()) as [[unknown, number], [unknown, number | null], [unknown, number | null]];
  const backward = page.beforeId !== undefined;
  // The ranks still to read, nearest the cursor first; a cursor that is not (or no longer) listed has nothing beyond it.
  let next = backward ? (before ?? 0) - 1 : page.afterId === undefined ? 0 : after === null ? total : after + 1;
  const left = () => (backward ? next + 1 : total - next);
  const found: BatchRecord[] = [];
  const gone: string[] = [];
  let scanned = 0;
  // One more than the page, to know whether the key sees anything beyond it.
  let chunk = page.limit + 1;
  while (found.length <= page.limit && left() > 0 && scanned < listScanMost) {
    const size = Math.min(chunk, left(), listScanMost - scanned);
    const ids = backward ? (await redis.zrevrange(key, next - size + 1, next)).reverse() : await redis.zrevrange(key, next, next + size - 1);
    next += backward ? -size : size;
    scanned += size;
    // A list that shrank under the read (a batch deleted meanwhile) has nothing more in this direction to trust.
    if (ids.length === 0) break;
    const read = inOneWrite(redis);
    for (const id of ids) read.hgetall(batchKey(id));
    const records = ((await read.exec()) ?? []).map(([error, row]) => {
      // A read that failed is not a batch gone: it must not be dropped from the list.
      if (error) throw error;
      return batchFromRow(row as Record<string, string>);
    });
    gone.push(...ids.filter((_, i) => !records[i]));
    // A dialect's list holds its own batches only (the console's, both): the others are passed as unseen ones are.
    for (const record of records) if (record && found.length <= page.limit && seesBatch(allowedModels, record) && (page.dialect === undefined || record.dialect === page.dialect)) found.push(record);
    // Many the key may not see: read further in larger steps.
    chunk = Math.min(listChunkMost, chunk * 2);
  }
  // Dropped once read through: dropped as met, they would move the ranks still to read.
  if (gone.length > 0) await redis.zrem(key, ...gone);
  const hasMore = found.length > page.limit || (left() > 0 && scanned >= listScanMost);
  const batches = found.slice(0, page.limit);
  return { batches: backward ? batches.reverse() : batches, hasMore };
}

/** How many of an account's batches made since `since` (epoch ms: one older is past its deadline) have not ended. */
export async function openBatchCount(redis: Redis, accountId: string, since = 0): Promise<number> {
  const ids = await redis.zrangebyscore(accountBatchesKey(accountId), since, '+inf');
  if (ids.length === 0) return 0;
  const read = inOneWrite(redis);
  for (const id of ids) read.hget(batchKey(id), 'status');
  const statuses = ((await read.exec()) ?? []).map(([, status]) => status as string | null);
  return statuses.filter((status) => status === 'validating' || status === 'in_progress' || status === 'canceling').length;
}

/** Asks a batch to stop: its status after (`canceling`; `ended` already, or at once for one still validating), or undefined for a batch that is gone. */
export async function cancelBatch(redis: Redis, batchId: string): Promise<BatchStatus | undefined> {
  return ((await scripted(redis).batchCancel(batchKey(batchId), Date.now())) ?? undefined) as BatchStatus | undefined;
}

/** A batch's record, or undefined when there is none (never made, deleted, or its results' time is over). */
export async function readBatch(redis: Redis, batchId: string): Promise<BatchRecord | undefined> {
  return batchFromRow(await redis.hgetall(batchKey(batchId)));
}

/** A batch's record from its hash as Redis answers it (undefined for an empty one: the batch is gone). */
function batchFromRow(row: Record<string, string>): BatchRecord | undefined {
  if (!row.id) return undefined;
  const number = (field: string) => Number(row[field] ?? 0) || 0;
  const record: BatchRecord = {
    id: row.id,
    accountId: row.account ?? '',
    keyId: row.key ?? '',
    created: number('created'),
    expires: number('expires'),
    total: number('total'),
    status: row.status === 'validating' || row.status === 'canceling' || row.status === 'ended' ? row.status : 'in_progress',
    counts: { processing: Math.max(0, number('processing')), succeeded: number('succeeded'), errored: number('errored'), canceled: number('canceled'), expired: number('expired') },
    costMicros: number('cost'),
    tokens: { input: number('input_tokens'), cached: number('cached_tokens'), output: number('output_tokens') },
    dialect: dialectOf(row.id),
    row,
  };
  if (row.ended_at) record.endedAt = number('ended_at');
  if (row.cancel_at) record.cancelAt = number('cancel_at');
  const models = modelsOf(row.models);
  if (models) record.models = models;
  return record;
}

/** The models a batch recorded; undefined when it recorded none (made before they were) or they cannot be read. */
function modelsOf(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  try {
    const models: unknown = JSON.parse(text);
    return Array.isArray(models) && models.every((model) => typeof model === 'string') ? models : undefined;
  } catch {
    return undefined;
  }
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
    // Never validating (only OpenAI's batches are, and Anthropic's paths do not serve them).
    processing_status: batch.status === 'validating' ? 'in_progress' : batch.status,
    request_counts: { processing: batch.counts.processing, succeeded: batch.counts.succeeded, errored: batch.counts.errored, canceled: batch.counts.canceled, expired: batch.counts.expired },
    ended_at: time(batch.endedAt),
    created_at: time(batch.created),
    expires_at: time(batch.expires),
    archived_at: null,
    cancel_initiated_at: time(batch.cancelAt),
    results_url: batch.status === 'ended' ? resultsUrl : null,
  };
}
