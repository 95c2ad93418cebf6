import type { Redis } from 'ioredis';
import type { UsageEntry } from './usage.js';
import { budgetRefusal, budgetsArgument, type BudgetInForce } from './budgets.js';
import { journalWrite } from '../redis-journal.js';
import { chargeScript, releaseScript, reserveScript, settleScript } from './scripts.js';
import {
  billingBuckets,
  billKey,
  deadlineMember,
  keyBillField,
  reservationDeadlinesKey,
  billingBucket,
  settledKey,
  usageStreamKey,
  alertStreamKey,
} from '../redis-keys.js';

/**
 * Admission and settlement, each one Redis script on the account's bucket
 * (shared/redis-keys.ts): check the key's rate limits and quota and reserve the
 * worst case in one step (so two requests can never both take the last
 * dollar), then replace the reservation by the actual cost exactly once per
 * request id. Money is integer micro-dollars. The account's money, its keys'
 * spend and rate-limit state and its reservations are fields of one hash:
 * admission reads it once and writes it once.
 */

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
  | { ok: true; requests?: RateLimitState; tokens?: RateLimitState; alerts?: AlertCrossing[] }
  | {
      ok: false;
      reason: RefusalReason;
      retryAfterMs: number;
      requests?: RateLimitState;
      tokens?: RateLimitState;
      /** The budget that refused it (reason `budget`). */
      budget?: BudgetInForce;
    };

/**
 * Why a reservation was refused: a rate of the key, its spending limit, the account's balance, a budget, or its access.
 */
export type RefusalReason = 'rpm' | 'tpm' | 'key_limit' | 'account_balance' | 'budget' | 'no_access';

const reasons = { 1: 'rpm', 2: 'tpm', 3: 'key_limit', 4: 'account_balance', 5: 'no_access', 6: 'budget' } as const;

/**
 * What admission holds a key to: its own limits, or the gateway's defaults where it sets none, and the budgets that
 * apply to it.
 */
export interface KeyLimitsInForce {
  limitMicros?: number;
  rpm?: number;
  tpm?: number;
  /** The team's, the key's and its maker's budgets per period (shared/money/budgets.ts), those set. */
  budgets?: readonly BudgetInForce[];
}

/**
 * A key's limits as admission applies them: its own (`limitMicros`, `rpm`, `tpm` as its access reads), else the
 * gateway's default rates.
 */
export function limitsInForce(
  access: KeyLimitsInForce,
  defaults: { defaultKeyRpm?: number | undefined; defaultKeyTpm?: number | undefined },
): KeyLimitsInForce {
  const rpm = access.rpm ?? defaults.defaultKeyRpm;
  const tpm = access.tpm ?? defaults.defaultKeyTpm;
  return {
    ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}),
    ...(rpm ? { rpm } : {}),
    ...(tpm ? { tpm } : {}),
    ...(access.budgets ? { budgets: access.budgets } : {}),
  };
}

/**
 * A settlement's spend that reached an alert threshold for the first time in its period (for a key's lifetime
 * limit: ever), as the money scripts decided it: `counter` is a budget's counter (`b:…`, shared/money/budgets.ts)
 * or, for a key's lifetime limit, the key's id.
 */
export interface AlertCrossing {
  counter: string;
  percent: number;
  limitMicros: number;
  spentMicros: number;
}

/** The crossings a money script appended to its reply ('<counter>|<percent>|<limit>|<spent>'). */
export function readCrossings(values: ReadonlyArray<number | string>): AlertCrossing[] {
  const crossings: AlertCrossing[] = [];
  for (const value of values) {
    const [counter = '', percent, limit, spent] = String(value).split('|');
    if (counter && percent !== undefined)
      crossings.push({ counter, percent: Number(percent), limitMicros: Number(limit), spentMicros: Number(spent) });
  }
  return crossings;
}

/** The alert thresholds as the scripts take them (percent, comma list; '' sends none). */
const thresholdsArgument = (policy: { alertThresholds?: readonly number[] }) =>
  (policy.alertThresholds ?? []).join(',');

/**
 * Why a reservation was refused for money (or access), as the client is told: the api's 429 (or 401), a batch's
 * `errored` result. A budget's refusal says which budget (`budgetRefusal`).
 */
export function moneyRefusal(reason: 'key_limit' | 'account_balance' | 'no_access'): string {
  switch (reason) {
    case 'key_limit':
      return (
        "You exceeded this API key's spending limit: the request could cost more than the key has left. Raise the " +
        "key's limit_usd."
      );
    case 'account_balance':
      return (
        "You exceeded your current quota: the request could cost more than the account's balance. Add credits to " +
        'the account.'
      );
    default:
      return 'This API key no longer has access (its account was deleted or the key revoked).';
  }
}

/**
 * What a refusal for money tells the client, whoever refused (admission, a batch's next line, a tool call, a tool
 * loop's next turn): the budget that refused it, by its name, else the key's limit, the account's balance, or the
 * key's lost access.
 */
export function refusedForMoney(
  outcome: { reason: RefusalReason; budget?: BudgetInForce | undefined },
  teamName?: string,
): string {
  switch (outcome.reason) {
    case 'budget':
      return outcome.budget ? budgetRefusal(outcome.budget, Date.now(), teamName) : moneyRefusal('account_balance');
    case 'rpm':
    case 'tpm':
      // Not for money: a caller that holds work to the key's rates says when to try again itself.
      return `Rate limit reached for this API key's ${outcome.reason === 'rpm' ? 'requests' : 'tokens'} per minute.`;
    default:
      return moneyRefusal(outcome.reason);
  }
}

/**
 * The reservation script's keys and arguments, named: what `reserve()` sends, and the request's whole admission
 * (shared/scheduling/admit-job.ts) too.
 */
export function reserveInput(
  resv: Reservation,
  limits: KeyLimitsInForce,
  now = Date.now(),
): Parameters<typeof reserveScript>[1] {
  return {
    bill: billKey(resv.accountId),
    deadlines: reservationDeadlinesKey(billingBucket(resv.accountId)),
    gate: resv.gate ?? billKey(resv.accountId),
    settled: settledKey(resv.accountId, resv.requestId),
    requestId: resv.requestId,
    micros: resv.micros,
    tokens: resv.tokens,
    nowMs: now,
    deadlineMs: resv.deadline,
    keyId: resv.keyId,
    keyLimitMicros: limits.limitMicros ?? '',
    rpm: limits.rpm ?? '',
    tpm: limits.tpm ?? '',
    gated: resv.gate ? '1' : '',
    deadlineMember: deadlineMember(resv.accountId, resv.requestId),
    budgets: budgetsArgument(limits.budgets ?? [], now),
  };
}

/** Checks rate limits and quota and reserves the worst case, in one round trip. */
export async function reserve(
  redis: Redis,
  resv: Reservation,
  limits: KeyLimitsInForce,
  now = Date.now(),
): Promise<ReserveOutcome> {
  return readOutcome(await reserveScript(redis, reserveInput(resv, limits, now)), limits.budgets ?? []);
}

/** A verdict of the admission rules (money.lua's `admit`) as the api reads it; `budgets` as they were sent. */
export function readOutcome(result: ReadonlyArray<number | string>, budgets: readonly BudgetInForce[]): ReserveOutcome {
  const [code, rl, rr, rs, tl, tr, ts, retry, over] = result.slice(0, 9).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const requests = rl > 0 ? { limit: rl, remaining: Math.max(0, rr), resetMs: Math.max(0, rs) } : undefined;
  const tokens = tl > 0 ? { limit: tl, remaining: Math.max(0, tr), resetMs: Math.max(0, ts) } : undefined;
  const states = { ...(requests ? { requests } : {}), ...(tokens ? { tokens } : {}) };
  if (code === 0) {
    const alerts = readCrossings(result.slice(9));
    return { ok: true, ...states, ...(alerts.length > 0 ? { alerts } : {}) };
  }
  const budget = code === 6 ? budgets[over - 1] : undefined;
  return {
    ok: false,
    reason: reasons[code as keyof typeof reasons] ?? 'no_access',
    retryAfterMs: Math.max(0, retry),
    ...states,
    ...(budget ? { budget } : {}),
  };
}

/**
 * How long a charged request id stays marked: long enough for a connection that lost the reply to send the call
 * again after it reconnects (ioredis resends what was unanswered) and be told it was charged; a hit has no retry of
 * its own, so no longer (one mark per hit adds up).
 */
const chargeMarkMs = 60_000;

/**
 * Admits a request whose price is known before it is served (a cache hit) and settles it, in one step: the key's
 * rate of requests (no tokens were used: its tokens per minute are not counted), its limit and the account's
 * balance are checked against the price as a reservation's would be; admitted, the price is taken and the usage
 * entry appended, at most once per request id. Refused, nothing is written.
 */
export async function charge(
  redis: Redis,
  usage: UsageEntry,
  limits: Omit<KeyLimitsInForce, 'tpm'>,
  policy: SettlePolicy,
  now = Date.now(),
  keepSettledMs = chargeMarkMs,
): Promise<ReserveOutcome> {
  const result = await chargeScript(redis, {
    bill: billKey(usage.account_id),
    settled: settledKey(usage.account_id, usage.request_id),
    usageStream: usageStreamKey(billingBucket(usage.account_id)),
    alertStream: alertStreamKey(billingBucket(usage.account_id)),
    accountId: usage.account_id,
    requestId: usage.request_id,
    micros: usage.cost_micros,
    nowMs: now,
    keyId: usage.key_id,
    keyLimitMicros: limits.limitMicros ?? '',
    rpm: limits.rpm ?? '',
    streamMaxLength: policy.bufferRecords,
    keepSettledS: Math.max(60, Math.ceil(keepSettledMs / 1000)),
    usage: JSON.stringify(usage),
    budgets: budgetsArgument(limits.budgets ?? [], now),
    alertThresholds: thresholdsArgument(policy),
  });
  const outcome = readOutcome(result, limits.budgets ?? []);
  // Charged (or charged before: a call the connection sent twice is `ok` both times; journaled twice, it changes
  // nothing).
  if (outcome.ok) journalSettlement(redis, usage, policy, keepSettledMs);
  return outcome;
}

export interface SettlePolicy {
  /**
   * At most this many usage entries wait in each bucket's stream for the record's writer (past it the oldest are
   * dropped): an account's usage goes to one stream, so each holds the whole bound.
   */
  bufferRecords: number;
  /**
   * Percent of a budget or limit whose first crossing by settled spend raises an alert (`ALERT_THRESHOLDS`); none: no
   * alerts.
   */
  alertThresholds?: readonly number[];
}

/**
 * What a settlement did: whether it applied (a second one of a request id does not), and what the request had reserved.
 */
export interface Settlement {
  applied: boolean;
  /** Micro-dollars the reservation had reserved; null when there was none left (released, or never made). */
  reservedMicros: number | null;
  /** The alert thresholds this settlement crossed (each decided once, here). */
  alerts: AlertCrossing[];
}

/**
 * Replaces the reservation by the actual cost and appends the usage entry
 * for the record's writer, atomically and at most once per request id.
 * `keepSettledMs`: how long the request id stays marked settled. Past its
 * deadline no attempt of the job can run any more, so the mark needs to
 * outlive the deadline only (kept short: one mark per request adds up).
 */
export async function settle(
  redis: Redis,
  usage: UsageEntry,
  policy: SettlePolicy,
  now = Date.now(),
  keepSettledMs = 86_400_000,
): Promise<Settlement> {
  const settlement = await settleOnce(redis, usage, policy, now, keepSettledMs);
  if (settlement.applied) journalSettlement(redis, usage, policy, keepSettledMs);
  return settlement;
}

/**
 * Keeps a settlement this process made (a charge's and a Realtime response's too) to be sent again after its
 * connection comes back, where Redis may have lost it (shared/redis-journal.ts). Sent again as settle.lua's: without
 * a reservation to replace, it debits its cost and appends its usage entry, which is what was lost.
 */
export function journalSettlement(redis: Redis, usage: UsageEntry, policy: SettlePolicy, keepSettledMs: number): void {
  journalWrite(redis, async (on) => (await settleOnce(on, usage, policy, Date.now(), keepSettledMs)).applied);
}

async function settleOnce(
  redis: Redis,
  usage: UsageEntry,
  policy: SettlePolicy,
  now: number,
  keepSettledMs: number,
): Promise<Settlement> {
  const [applied, reserved, ...crossings] = await settleScript(redis, {
    settled: settledKey(usage.account_id, usage.request_id),
    bill: billKey(usage.account_id),
    deadlines: reservationDeadlinesKey(billingBucket(usage.account_id)),
    usageStream: usageStreamKey(billingBucket(usage.account_id)),
    alertStream: alertStreamKey(billingBucket(usage.account_id)),
    accountId: usage.account_id,
    requestId: usage.request_id,
    micros: usage.cost_micros,
    tokens: usage.input_tokens + usage.output_tokens,
    nowMs: now,
    keyId: usage.key_id,
    streamMaxLength: policy.bufferRecords,
    keepSettledS: Math.max(60, Math.ceil(keepSettledMs / 1000)),
    usage: JSON.stringify(usage),
    deadlineMember: deadlineMember(usage.account_id, usage.request_id),
    alertThresholds: thresholdsArgument(policy),
  });
  return {
    applied: Number(applied) === 1,
    reservedMicros: Number(reserved) >= 0 ? Number(reserved) : null,
    alerts: readCrossings(crossings),
  };
}

/**
 * Gives back a reservation that nothing will settle (the request was refused after admission, or its job never ran).
 */
export async function releaseReservation(redis: Redis, accountId: string, requestId: string): Promise<boolean> {
  const released = await releaseScript(redis, {
    bill: billKey(accountId),
    deadlines: reservationDeadlinesKey(billingBucket(accountId)),
    settled: settledKey(accountId, requestId),
    requestId,
    deadlineMember: deadlineMember(accountId, requestId),
  });
  return released === 1;
}

/**
 * Releases every reservation past its deadline by more than `graceMs` (its job was lost with its api and worker),
 * bucket by bucket.
 */
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
  const [id, unlimited, balance, reserved] = await redis.hmget(
    billKey(accountId),
    'id',
    'unlimited',
    'balance',
    'reserved',
  );
  if (!id) return undefined;
  return {
    ...(unlimited === '1' ? {} : { balanceMicros: Number(balance ?? 0) }),
    reservedMicros: Number(reserved ?? 0),
    unlimited: unlimited === '1',
  };
}

/** A key's spend as Redis holds it now (undefined: the key has no bill, revoked or not loaded). */
export interface KeySpend {
  spentMicros: number;
  reservedMicros: number;
  /** Unix seconds of the last admitted request. */
  lastUsedAt?: number;
}

export async function readKeySpend(redis: Redis, accountId: string, keyId: string): Promise<KeySpend | undefined> {
  const [spent, reserved, used] = await redis.hmget(
    billKey(accountId),
    keyBillField(keyId, 'spent'),
    keyBillField(keyId, 'reserved'),
    keyBillField(keyId, 'used'),
  );
  if (spent === null) return undefined;
  return {
    spentMicros: Number(spent),
    reservedMicros: Number(reserved ?? 0),
    ...(used ? { lastUsedAt: Number(used) } : {}),
  };
}
