import type { Redis } from 'ioredis';
import { withScripts } from './redis.js';
import {
  accountKey,
  apiKeyRecordKey,
  rateLimitKey,
  reservationDeadlinesKey,
  reservationKey,
  settledKey,
  usageStreamKey,
} from './accounts.js';

/**
 * Admission and settlement, each one Redis script: check the key's rate
 * limits and quota and reserve the worst case in one step (so two requests
 * can never both take the last dollar), then replace the reservation by the
 * actual cost exactly once per request id. Money is integer micro-dollars.
 */

const WINDOW_MS = 60_000;

/*
 * KEYS: key record, account record, rpm TAT, tpm TAT, reservation, reservation deadlines, the job's queue key
 * ARGV: request id, micros, tokens, now ms, deadline ms, account id, default rpm, default tpm ('' = none), key id,
 *       '1' when the job is being added right behind this call (a refusal then blocks its id with a placeholder)
 * Returns {code, rpm limit, rpm remaining, rpm reset ms, tpm limit, tpm remaining, tpm reset ms, retry after ms}
 *   code 0 reserved, 1 over rpm, 2 over tpm, 3 over the key's limit, 4 over the account's balance, 5 no such key or account
 * Rate limits are GCRA: a minute's worth may come at once, then at the limit's pace.
 */
const reserveScript = `
local function decide()
  if redis.call('EXISTS', KEYS[1]) == 0 then return {5,0,0,0,0,0,0,0} end
  local key = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved', 'rpm', 'tpm')
  local account = redis.call('HMGET', KEYS[2], 'balance', 'reserved', 'unlimited', 'deleted')
  if account[4] == '1' or (not account[1] and account[3] ~= '1') then return {5,0,0,0,0,0,0,0} end
  local micros = tonumber(ARGV[2])
  local tokens = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])
  local window = ${WINDOW_MS}

  local function gcra(tatKey, limit, cost)
    if not limit then return true, 0, 0, 0, 0, 0 end
    local interval = window / limit
    if cost > limit then cost = limit end
    local tat = tonumber(redis.call('GET', tatKey) or '0')
    if tat < now then tat = now end
    local newTat = tat + interval * cost
    if newTat - now > window then
      return false, limit, math.max(0, math.floor((window - (tat - now)) / interval)), math.ceil(tat - now), math.ceil(newTat - window - now), tat
    end
    return true, limit, math.floor((window - (newTat - now)) / interval), math.ceil(newTat - now), 0, newTat
  end

  local rpmLimit = tonumber(key[4] ~= '' and key[4] or ARGV[7])
  local tpmLimit = tonumber(key[5] ~= '' and key[5] or ARGV[8])
  local rpmOk, rl, rr, rs, rretry, rpmTat = gcra(KEYS[3], rpmLimit, 1)
  local tpmOk, tl, tr, ts, tretry, tpmTat = gcra(KEYS[4], tpmLimit, tokens)
  if not rpmOk then return {1, rl, rr, rs, tl, tr, ts, rretry} end
  if not tpmOk then return {2, rl, rr, rs, tl, tr, ts, tretry} end

  if key[1] and key[1] ~= '' then
    if tonumber(key[2] or '0') + tonumber(key[3] or '0') + micros > tonumber(key[1]) then return {3, rl, rr, rs, tl, tr, ts, 0} end
  end
  if account[3] ~= '1' then
    if tonumber(account[1]) - tonumber(account[2] or '0') - micros < 0 then return {4, rl, rr, rs, tl, tr, ts, 0} end
  end

  if rpmLimit then redis.call('SET', KEYS[3], tostring(rpmTat), 'PX', window + 1000) end
  if tpmLimit then redis.call('SET', KEYS[4], tostring(tpmTat), 'PX', window + 1000) end
  redis.call('HINCRBY', KEYS[1], 'reserved', micros)
  redis.call('HSET', KEYS[1], 'last_used', math.floor(now / 1000))
  redis.call('HINCRBY', KEYS[2], 'reserved', micros)
  redis.call('HSET', KEYS[5], 'key', ARGV[9], 'account', ARGV[6], 'micros', micros, 'tokens', tokens, 'deadline', ARGV[5])
  redis.call('PEXPIREAT', KEYS[5], tonumber(ARGV[5]) + 86400000)
  redis.call('ZADD', KEYS[6], ARGV[5], ARGV[1])
  return {0, rl, rr, rs, tl, tr, ts, 0}
end
local verdict = decide()
-- Refused with a job key given: a placeholder under that key keeps the job (sent right behind this call) out of the queue.
if verdict[1] ~= 0 and ARGV[10] == '1' then
  redis.call('HSET', KEYS[7], 'refused', verdict[1])
  redis.call('PEXPIRE', KEYS[7], 60000)
end
return verdict
`;

/*
 * KEYS: settled marker, reservation, reservation deadlines, key record, account record, tpm TAT, usage stream
 * ARGV: request id, actual micros, actual tokens, now ms, default tpm, stream max length, seconds to keep the settled mark, usage fields (JSON)
 * Returns {1, micros held} when this call settled the request ({1, -1}: it
 * held nothing any more), {0, -1} when it was settled before.
 * The usage record goes to the stream the record's writer reads (day totals are the record's to sum).
 * A key or account Redis has lost (flushed, not loaded again yet) is not
 * made up from the pieces a settlement touches: loaded from the record, it
 * counts this request's cost from the stream.
 */
const settleScript = `
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[7]) == false then return {0, -1} end
local actual = tonumber(ARGV[2])
local resv = redis.call('HMGET', KEYS[2], 'micros', 'tokens')
local key = redis.call('HMGET', KEYS[4], 'id', 'tpm')
local account = redis.call('HMGET', KEYS[5], 'id', 'unlimited')
local reserved = -1
if resv[1] then
  reserved = tonumber(resv[1])
  -- A free model reserves 0: negated, that is -0, which HINCRBY refuses as not an integer.
  local held = tonumber(resv[1])
  if held ~= 0 then
    if key[1] then redis.call('HINCRBY', KEYS[4], 'reserved', -held) end
    if account[1] then redis.call('HINCRBY', KEYS[5], 'reserved', -held) end
  end
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
  -- Tokens per minute counted the estimate: give back what was not used (never past now).
  local tpm = key[2]
  if not tpm or tpm == '' then tpm = ARGV[5] end
  if tpm ~= '' and tonumber(tpm) then
    local unused = tonumber(resv[2]) - tonumber(ARGV[3])
    if unused ~= 0 then
      local tat = tonumber(redis.call('GET', KEYS[6]) or '0')
      if tat > 0 then
        local now = tonumber(ARGV[4])
        local newTat = tat - unused * (${WINDOW_MS} / tonumber(tpm))
        if newTat < now then newTat = now end
        redis.call('SET', KEYS[6], tostring(newTat), 'PX', ${WINDOW_MS} + 1000)
      end
    end
  end
end
if actual > 0 then
  if key[1] then redis.call('HINCRBY', KEYS[4], 'spent', actual) end
  if account[1] and account[2] ~= '1' then redis.call('HINCRBY', KEYS[5], 'balance', -actual) end
end
redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[6], '*', 'usage', ARGV[8])
return {1, reserved}
`;

/*
 * KEYS: reservation, reservation deadlines, settled marker
 * ARGV: request id
 * Releases a reservation whose job will never settle it (refused before it ran, or lost past its deadline).
 */
const releaseScript = `
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local resv = redis.call('HMGET', KEYS[1], 'micros', 'key', 'account')
if not resv[1] then return 0 end
local held = tonumber(resv[1])
if held ~= 0 then
  redis.call('HINCRBY', '${apiKeyRecordKey('')}' .. resv[2], 'reserved', -held)
  redis.call('HINCRBY', '${accountKey('')}' .. resv[3], 'reserved', -held)
end
redis.call('DEL', KEYS[1])
return 1
`;

interface BillingRedis extends Redis {
  billingReserve(...args: Array<string | number>): Promise<number[]>;
  billingSettle(...args: Array<string | number>): Promise<[number, number]>;
  billingRelease(...args: Array<string | number>): Promise<number>;
}

const billing = (redis: Redis) =>
  withScripts<BillingRedis>(redis, {
    billingReserve: { keys: 7, lua: reserveScript },
    billingSettle: { keys: 7, lua: settleScript },
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

/** Checks rate limits and quota and reserves the worst case, in one round trip. */
export async function reserve(redis: Redis, resv: Reservation, defaults: { rpm?: number; tpm?: number }, now = Date.now()): Promise<ReserveOutcome> {
  const result = await billing(redis).billingReserve(
    apiKeyRecordKey(resv.keyId),
    accountKey(resv.accountId),
    rateLimitKey(resv.keyId, 'rpm'),
    rateLimitKey(resv.keyId, 'tpm'),
    reservationKey(resv.requestId),
    reservationDeadlinesKey,
    resv.gate ?? reservationKey(resv.requestId),
    resv.requestId,
    resv.micros,
    resv.tokens,
    now,
    resv.deadline,
    resv.accountId,
    defaults.rpm ?? '',
    defaults.tpm ?? '',
    resv.keyId,
    resv.gate ? '1' : '',
  );
  const [code, rl, rr, rs, tl, tr, ts, retry] = result.map(Number) as [number, number, number, number, number, number, number, number];
  const requests = rl > 0 ? { limit: rl, remaining: Math.max(0, rr), resetMs: Math.max(0, rs) } : undefined;
  const tokens = tl > 0 ? { limit: tl, remaining: Math.max(0, tr), resetMs: Math.max(0, ts) } : undefined;
  const limits = { ...(requests ? { requests } : {}), ...(tokens ? { tokens } : {}) };
  if (code === 0) return { ok: true, ...limits };
  return { ok: false, reason: reasons[code as keyof typeof reasons] ?? 'no_access', retryAfterMs: Math.max(0, retry), ...limits };
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
}

export interface SettlePolicy {
  /** At most this many usage records wait in Redis for the record's writer (past it the oldest are dropped). */
  bufferRecords: number;
  /** The tokens-per-minute limit of keys that set none (to give back an estimate's unused tokens). */
  defaultTpm?: number;
}

/**
 * Replaces the reservation by the actual cost and appends the usage record
 * for the record's writer, atomically and at most once per request id. Returns
 * whether this call settled it (false: it was settled before).
 */
/**
 * `keepSettledMs`: how long the request id stays marked settled. Past its
 * deadline no attempt of the job can run any more, so the mark needs to
 * outlive the deadline only (kept short: one mark per request adds up).
 */
/** What a settlement did: whether it applied (a second one of a request id does not), and what the request had reserved. */
export interface Settlement {
  applied: boolean;
  /** Micro-dollars the reservation held; null when there was none left (released, or never made). */
  reservedMicros: number | null;
}

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
  };
  const [applied, reserved] = await billing(redis).billingSettle(
    settledKey(usage.requestId),
    reservationKey(usage.requestId),
    reservationDeadlinesKey,
    apiKeyRecordKey(usage.keyId),
    accountKey(usage.accountId),
    rateLimitKey(usage.keyId, 'tpm'),
    usageStreamKey,
    usage.requestId,
    usage.costMicros,
    usage.inputTokens + usage.outputTokens,
    now,
    policy.defaultTpm ?? '',
    policy.bufferRecords,
    Math.max(60, Math.ceil(keepSettledMs / 1000)),
    JSON.stringify(record),
  );
  return { applied: Number(applied) === 1, reservedMicros: Number(reserved) >= 0 ? Number(reserved) : null };
}

/** Gives back a reservation that nothing will settle (the request was refused after admission, or its job never ran). */
export async function releaseReservation(redis: Redis, requestId: string): Promise<boolean> {
  const released = await billing(redis).billingRelease(reservationKey(requestId), reservationDeadlinesKey, settledKey(requestId), requestId);
  return released === 1;
}

/** Releases every reservation past its deadline by more than `graceMs` (its job was lost with its api and worker). */
export async function releaseExpiredReservations(redis: Redis, graceMs: number, now = Date.now()): Promise<number> {
  const expired = await redis.zrangebyscore(reservationDeadlinesKey, '-inf', now - graceMs, 'LIMIT', 0, 500);
  let released = 0;
  for (const requestId of expired) if (await releaseReservation(redis, requestId)) released += 1;
  return released;
}
