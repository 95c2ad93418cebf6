import type { Redis } from 'ioredis';
import type { ServiceTier } from './service-tier.js';
import { withScripts } from './redis.js';
import {
  billingBuckets,
  billKey,
  deadlineMember,
  keyBillField,
  reservationDeadlinesKey,
  billingBucket,
  settledKey,
  usageStreamKey,
} from './accounts.js';

/**
 * Admission and settlement, each one Redis script on the account's bucket
 * (shared/accounts.ts): check the key's rate limits and quota and reserve the
 * worst case in one step (so two requests can never both take the last
 * dollar), then replace the reservation by the actual cost exactly once per
 * request id. Money is integer micro-dollars. The account's money, its keys'
 * spend and rate-limit state and its reservations are fields of one hash:
 * admission reads it once and writes it once.
 */

const WINDOW_MS = 60_000;

/** Lua's own number formatting turns large integers into `1e+14`: money is written with `%d`. */
const intLua = `local function int(x) return string.format('%d', x) end`;

/*
 * KEYS: the account's bill, its bucket's reservation deadlines, the job's queue key
 * ARGV: request id, micros, tokens, now ms, deadline ms, key id, the key's limit (micros, '' = none),
 *       rpm, tpm ('' = none), '1' when the job is being added right behind this call (a refusal then blocks
 *       its id with a placeholder), the reservation's deadline member
 * Returns {code, rpm limit, rpm remaining, rpm reset ms, tpm limit, tpm remaining, tpm reset ms, retry after ms}
 *   code 0 reserved, 1 over rpm, 2 over tpm, 3 over the key's limit, 4 over the account's balance, 5 no such key or account
 * Rate limits are GCRA: a minute's worth may come at once, then at the limit's pace.
 * The key's limits come from the caller (the api's cached access, dropped when they change); its spend and the
 * balance are read here, with the reservations that hold against them.
 */
const reserveScript = `${intLua}
local function decide()
  local k = ARGV[6]
  local bill = redis.call('HMGET', KEYS[1], 'balance', 'reserved', 'unlimited', k .. '.spent', k .. '.reserved', k .. '.rpm', k .. '.tpm')
  -- A key revoked or an account deleted left the bill (or Redis lost it, until it is loaded again).
  if not bill[4] or (not bill[1] and bill[3] ~= '1') then return {5,0,0,0,0,0,0,0} end
  local micros = tonumber(ARGV[2])
  local tokens = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])
  local window = ${WINDOW_MS}

  local function gcra(tatText, limit, cost)
    if not limit then return true, 0, 0, 0, 0, 0 end
    local interval = window / limit
    if cost > limit then cost = limit end
    local tat = tonumber(tatText or '0')
    if tat < now then tat = now end
    local newTat = tat + interval * cost
    if newTat - now > window then
      return false, limit, math.max(0, math.floor((window - (tat - now)) / interval)), math.ceil(tat - now), math.ceil(newTat - window - now), tat
    end
    return true, limit, math.floor((window - (newTat - now)) / interval), math.ceil(newTat - now), 0, newTat
  end

  local rpmLimit = tonumber(ARGV[8])
  local tpmLimit = tonumber(ARGV[9])
  local rpmOk, rl, rr, rs, rretry, rpmTat = gcra(bill[6], rpmLimit, 1)
  local tpmOk, tl, tr, ts, tretry, tpmTat = gcra(bill[7], tpmLimit, tokens)
  if not rpmOk then return {1, rl, rr, rs, tl, tr, ts, rretry} end
  if not tpmOk then return {2, rl, rr, rs, tl, tr, ts, tretry} end

  local keyReserved = tonumber(bill[5] or '0')
  if ARGV[7] ~= '' then
    if tonumber(bill[4]) + keyReserved + micros > tonumber(ARGV[7]) then return {3, rl, rr, rs, tl, tr, ts, 0} end
  end
  local reserved = tonumber(bill[2] or '0')
  if bill[3] ~= '1' then
    if tonumber(bill[1]) - reserved - micros < 0 then return {4, rl, rr, rs, tl, tr, ts, 0} end
  end

  local fields = {'reserved', int(reserved + micros), k .. '.reserved', int(keyReserved + micros), k .. '.used', int(math.floor(now / 1000)),
    'r:' .. ARGV[1], k .. ' ' .. int(micros) .. ' ' .. int(tokens) .. ' ' .. ARGV[9]}
  if rpmLimit then fields[#fields + 1] = k .. '.rpm'; fields[#fields + 1] = tostring(rpmTat) end
  if tpmLimit then fields[#fields + 1] = k .. '.tpm'; fields[#fields + 1] = tostring(tpmTat) end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[11])
  return {0, rl, rr, rs, tl, tr, ts, 0}
end
local verdict = decide()
-- Refused with a job key given: a placeholder under that key keeps the job (sent right behind this call) out of the queue.
if verdict[1] ~= 0 and ARGV[10] == '1' then
  redis.call('HSET', KEYS[3], 'refused', verdict[1])
  redis.call('PEXPIRE', KEYS[3], 60000)
end
return verdict
`;

/*
 * KEYS: settled marker, the account's bill, its bucket's reservation deadlines, its bucket's usage stream
 * ARGV: request id, actual micros, actual tokens, now ms, key id, stream max length, seconds to keep the settled mark,
 *       usage fields (JSON), the reservation's deadline member
 * Returns {1, micros held} when this call settled the request ({1, -1}: it
 * held nothing any more), {0, -1} when it was settled before.
 * The usage record goes to the stream the record's writer reads (day totals are the record's to sum).
 * A key or account Redis has lost (flushed, not loaded again yet) is not
 * made up from the pieces a settlement touches: loaded from the record, it
 * counts this request's cost from the stream.
 */
const settleScript = `${intLua}
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[7]) == false then return {0, -1} end
local k = ARGV[5]
local field = 'r:' .. ARGV[1]
local bill = redis.call('HMGET', KEYS[2], 'id', 'unlimited', 'balance', 'reserved', k .. '.spent', k .. '.reserved', k .. '.tpm', field)
local actual = tonumber(ARGV[2])
local accountReserved = tonumber(bill[4] or '0')
local keyReserved = tonumber(bill[6] or '0')
local fields = {}
local reserved = -1
if bill[8] then
  local held, tokens, tpm = string.match(bill[8], '^%S+ (%d+) (%d+) (%S*)$')
  reserved = tonumber(held)
  accountReserved = accountReserved - reserved
  keyReserved = keyReserved - reserved
  redis.call('HDEL', KEYS[2], field)
  redis.call('ZREM', KEYS[3], ARGV[9])
  -- Tokens per minute counted the estimate: give back what was not used (never past now).
  if tpm and tpm ~= '' and bill[7] and bill[5] then
    local unused = tonumber(tokens) - tonumber(ARGV[3])
    local tat = tonumber(bill[7])
    if unused ~= 0 and tat > 0 then
      local now = tonumber(ARGV[4])
      local newTat = tat - unused * (${WINDOW_MS} / tonumber(tpm))
      if newTat < now then newTat = now end
      fields[#fields + 1] = k .. '.tpm'; fields[#fields + 1] = tostring(newTat)
    end
  end
end
if bill[1] then
  fields[#fields + 1] = 'reserved'; fields[#fields + 1] = int(accountReserved)
  if actual > 0 and bill[2] ~= '1' then fields[#fields + 1] = 'balance'; fields[#fields + 1] = int(tonumber(bill[3] or '0') - actual) end
end
if bill[5] then
  fields[#fields + 1] = k .. '.spent'; fields[#fields + 1] = int(tonumber(bill[5]) + actual)
  fields[#fields + 1] = k .. '.reserved'; fields[#fields + 1] = int(keyReserved)
end
if #fields > 0 then redis.call('HSET', KEYS[2], unpack(fields)) end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'usage', ARGV[8])
return {1, reserved}
`;

/*
 * KEYS: the account's bill, its bucket's reservation deadlines, settled marker
 * ARGV: request id, the reservation's deadline member
 * Releases a reservation whose job will never settle it (refused before it ran, or lost past its deadline).
 */
const releaseScript = `
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local field = 'r:' .. ARGV[1]
local resv = redis.call('HGET', KEYS[1], field)
if not resv then return 0 end
local k, held = string.match(resv, '^(%S+) (%d+) ')
redis.call('HDEL', KEYS[1], field)
if tonumber(held) ~= 0 then
  local bill = redis.call('HMGET', KEYS[1], 'id', k .. '.spent')
  if bill[1] then redis.call('HINCRBY', KEYS[1], 'reserved', '-' .. held) end
  if bill[2] then redis.call('HINCRBY', KEYS[1], k .. '.reserved', '-' .. held) end
end
return 1
`;

interface BillingRedis extends Redis {
  billingReserve(...args: Array<string | number>): Promise<number[]>;
  billingSettle(...args: Array<string | number>): Promise<[number, number]>;
  billingRelease(...args: Array<string | number>): Promise<number>;
}

const billing = (redis: Redis) =>
  withScripts<BillingRedis>(redis, {
    billingReserve: { keys: 3, lua: reserveScript },
    billingSettle: { keys: 4, lua: settleScript },
    billingRelease: { keys: 3, lua: releaseScript },
  });

export interface Reservation {
  requestId: string;
  keyId: string;
  accountId: string;
  micros: number;
  tokens: number;
  /** Epoch ms after which the reservation is released if nothing settled it. */
  deadline: number;
  /**
   * The job's queue key when the job is added right behind the reservation, on
   * the same connection (one round trip for both): a refusal leaves a
   * placeholder there, so that add finds the id taken and queues nothing
   * (a queue does not add a job whose id exists). The caller deletes it.
   */
  gate?: string;
}

export interface RateLimitState {
  limit: number;
  remaining: number;
  /** ms until the window is whole again. */
  resetMs: number;
}

export type ReserveOutcome =
  | { ok: true; requests?: RateLimitState; tokens?: RateLimitState }
  | { ok: false; reason: 'rpm' | 'tpm' | 'key_limit' | 'account_balance' | 'no_access'; retryAfterMs: number; requests?: RateLimitState; tokens?: RateLimitState };

const reasons = { 1: 'rpm', 2: 'tpm', 3: 'key_limit', 4: 'account_balance', 5: 'no_access' } as const;

/** What admission holds a key to: its own limits, or the gateway's defaults where it sets none. */
export interface KeyLimitsInForce {
  limitMicros?: number;
  rpm?: number;
  tpm?: number;
}

/** Checks rate limits and quota and reserves the worst case, in one round trip. */
export async function reserve(redis: Redis, resv: Reservation, limits: KeyLimitsInForce, now = Date.now()): Promise<ReserveOutcome> {
  const result = await billing(redis).billingReserve(
    billKey(resv.accountId),
    reservationDeadlinesKey(billingBucket(resv.accountId)),
    resv.gate ?? billKey(resv.accountId),
    resv.requestId,
    resv.micros,
    resv.tokens,
    now,
    resv.deadline,
    resv.keyId,
    limits.limitMicros ?? '',
    limits.rpm ?? '',
    limits.tpm ?? '',
    resv.gate ? '1' : '',
    deadlineMember(resv.accountId, resv.requestId),
  );
  const [code, rl, rr, rs, tl, tr, ts, retry] = result.map(Number) as [number, number, number, number, number, number, number, number];
  const requests = rl > 0 ? { limit: rl, remaining: Math.max(0, rr), resetMs: Math.max(0, rs) } : undefined;
  const tokens = tl > 0 ? { limit: tl, remaining: Math.max(0, tr), resetMs: Math.max(0, ts) } : undefined;
  const states = { ...(requests ? { requests } : {}), ...(tokens ? { tokens } : {}) };
  if (code === 0) return { ok: true, ...states };
  return { ok: false, reason: reasons[code as keyof typeof reasons] ?? 'no_access', retryAfterMs: Math.max(0, retry), ...states };
}

/** What one finished request used and cost: one record of the usage ledger. */
export interface UsageRecord {
  requestId: string;
  keyId: string;
  accountId: string;
  model: string;
  vendor: string;
  inputTokens: number;
  cachedTokens: number;
  outputTokens: number;
  images: number;
  audioSeconds: number;
  videoSeconds: number;
  costMicros: number;
  status: 'completed' | 'failed' | 'cancelled';
  /** Unix seconds. */
  created: number;
  durationMs: number;
  /** For the request log: what ran the request, as the worker saw it (absent on a job that never reached a vendor). */
  detail?: UsageDetail;
  /** The tier that served it, whose prices `costMicros` is at (absent: default). */
  serviceTier?: ServiceTier;
}

/**
 * The worker's part of the request log, carried in the settlement's usage
 * record under the record's own column names (an absent or undefined field
 * is left out of the record).
 */
export interface UsageDetail {
  endpoint?: string;
  /** The answer's own id (`chatcmpl-…`, `resp_…`). */
  answer_id?: string | undefined;
  channel?: string | undefined;
  /** The attempt that ended the job (1 for the first). */
  attempts?: number;
  /** The model that served, when a fallback did. */
  fallback?: string | undefined;
  finish_reason?: string | undefined;
  /** From the enqueue to the start of the attempt that ended the job. */
  queue_ms?: number;
  /** The error the job ended with, when it failed. */
  error_code?: string | undefined;
}

export interface SettlePolicy {
  /** At most this many usage records wait in each bucket's stream for the record's writer (past it the oldest are dropped): an account's usage goes to one stream, so each holds the whole bound. */
  bufferRecords: number;
}

/** What a settlement did: whether it applied (a second one of a request id does not), and what the request had reserved. */
export interface Settlement {
  applied: boolean;
  /** Micro-dollars the reservation held; null when there was none left (released, or never made). */
  reservedMicros: number | null;
}

/**
 * Replaces the reservation by the actual cost and appends the usage record
 * for the record's writer, atomically and at most once per request id.
 * `keepSettledMs`: how long the request id stays marked settled. Past its
 * deadline no attempt of the job can run any more, so the mark needs to
 * outlive the deadline only (kept short: one mark per request adds up).
 */
export async function settle(redis: Redis, usage: UsageRecord, policy: SettlePolicy, now = Date.now(), keepSettledMs = 86_400_000): Promise<Settlement> {
  const record = {
    request_id: usage.requestId,
    key_id: usage.keyId,
    account_id: usage.accountId,
    model: usage.model,
    vendor: usage.vendor,
    input_tokens: usage.inputTokens,
    cached_tokens: usage.cachedTokens,
    output_tokens: usage.outputTokens,
    images: usage.images,
    audio_seconds: usage.audioSeconds,
    video_seconds: usage.videoSeconds,
    cost_micros: usage.costMicros,
    status: usage.status,
    created: usage.created,
    duration_ms: usage.durationMs,
    service_tier: usage.serviceTier ?? 'default',
    ...usage.detail,
  };
  const [applied, reserved] = await billing(redis).billingSettle(
    settledKey(usage.accountId, usage.requestId),
    billKey(usage.accountId),
    reservationDeadlinesKey(billingBucket(usage.accountId)),
    usageStreamKey(billingBucket(usage.accountId)),
    usage.requestId,
    usage.costMicros,
    usage.inputTokens + usage.outputTokens,
    now,
    usage.keyId,
    policy.bufferRecords,
    Math.max(60, Math.ceil(keepSettledMs / 1000)),
    JSON.stringify(record),
    deadlineMember(usage.accountId, usage.requestId),
  );
  return { applied: Number(applied) === 1, reservedMicros: Number(reserved) >= 0 ? Number(reserved) : null };
}

/** Gives back a reservation that nothing will settle (the request was refused after admission, or its job never ran). */
export async function releaseReservation(redis: Redis, accountId: string, requestId: string): Promise<boolean> {
  const released = await billing(redis).billingRelease(
    billKey(accountId),
    reservationDeadlinesKey(billingBucket(accountId)),
    settledKey(accountId, requestId),
    requestId,
    deadlineMember(accountId, requestId),
  );
  return released === 1;
}

/** Releases every reservation past its deadline by more than `graceMs` (its job was lost with its api and worker), bucket by bucket. */
export async function releaseExpiredReservations(redis: Redis, graceMs: number, now = Date.now()): Promise<number> {
  let released = 0;
  for (let bucket = 0; bucket < billingBuckets; bucket++) {
    const expired = await redis.zrangebyscore(reservationDeadlinesKey(bucket), '-inf', now - graceMs, 'LIMIT', 0, 500);
    for (const member of expired) {
      const [accountId = '', requestId = ''] = member.split(' ');
      // The release takes the member out of the deadlines whatever it finds.
      if (await releaseReservation(redis, accountId, requestId)) released += 1;
    }
  }
  return released;
}

/** An account's money as Redis holds it now (undefined: Redis holds no bill for it). */
export interface BillState {
  /** Undefined for an unlimited account. */
  balanceMicros?: number;
  reservedMicros: number;
  unlimited: boolean;
}

export async function readBill(redis: Redis, accountId: string): Promise<BillState | undefined> {
  const [id, unlimited, balance, reserved] = await redis.hmget(billKey(accountId), 'id', 'unlimited', 'balance', 'reserved');
  if (!id) return undefined;
  return { ...(unlimited === '1' ? {} : { balanceMicros: Number(balance ?? 0) }), reservedMicros: Number(reserved ?? 0), unlimited: unlimited === '1' };
}

/** A key's spend as Redis holds it now (undefined: the key has no bill, revoked or not loaded). */
export interface KeySpend {
  spentMicros: number;
  reservedMicros: number;
  /** Unix seconds of the last admitted request. */
  lastUsedAt?: number;
}

export async function readKeySpend(redis: Redis, accountId: string, keyId: string): Promise<KeySpend | undefined> {
  const [spent, reserved, used] = await redis.hmget(billKey(accountId), keyBillField(keyId, 'spent'), keyBillField(keyId, 'reserved'), keyBillField(keyId, 'used'));
  if (spent === null) return undefined;
  return { spentMicros: Number(spent), reservedMicros: Number(reserved ?? 0), ...(used ? { lastUsedAt: Number(used) } : {}) };
}
