import { as, luaFiles, redisScript } from '../redis-script.js';

/**
 * The money's Redis scripts, kept as `.lua` files beside this module and declared here once each: their keys and
 * arguments by name, in the order the Lua reads them. Each is sent with `money.lua` before it: the reservation's
 * encoding, the GCRA arithmetic and the integer formatting are written there once and shared.
 */
const files = (...names: string[]) => luaFiles(import.meta.url, 'money', ...names);

/**
 * A verdict of the admission rules (money.lua's `admit`): code, rpm limit/remaining/reset, tpm limit/remaining/reset,
 * retry after, the refusing budget's place; a charge follows it with the alert thresholds it crossed (strings).
 */
export type AdmissionVerdict = Array<number | string>;

/** Checks rate limits, the key's limit and the balance, and reserves the worst case: `reserve()`. */
export const reserveScript = redisScript({
  name: 'money_reserve',
  files: files('reserve-rules', 'reserve'),
  keys: ['bill', 'deadlines', 'gate', 'settled'],
  args: [
    'requestId',
    'micros',
    'tokens',
    'nowMs',
    'deadlineMs',
    'keyId',
    'keyLimitMicros',
    'rpm',
    'tpm',
    'gated',
    'deadlineMember',
    'budgets',
  ],
  reply: as<AdmissionVerdict>(),
});

/** Replaces a reservation by the actual cost once per request id, and appends the usage entry: `settle()`. */
export const settleScript = redisScript({
  name: 'money_settle',
  files: files('settle'),
  keys: ['settled', 'bill', 'deadlines', 'usageStream', 'alertStream'],
  args: [
    'requestId',
    'micros',
    'tokens',
    'nowMs',
    'keyId',
    'streamMaxLength',
    'keepSettledS',
    'usage',
    'deadlineMember',
    'alertThresholds',
    'accountId',
  ],
  reply: as<[applied: number, reservedMicros: number, ...crossings: string[]]>(),
});

/** Admits and settles at once a request whose price is known before it is served (a cache hit): `charge()`. */
export const chargeScript = redisScript({
  name: 'money_charge',
  files: files('charge'),
  keys: ['bill', 'settled', 'usageStream', 'alertStream'],
  args: [
    'requestId',
    'micros',
    'nowMs',
    'keyId',
    'keyLimitMicros',
    'rpm',
    'streamMaxLength',
    'keepSettledS',
    'usage',
    'budgets',
    'alertThresholds',
    'accountId',
  ],
  reply: as<AdmissionVerdict>(),
});

/** Gives back a reservation nothing will settle: `releaseReservation()`. */
export const releaseScript = redisScript({
  name: 'money_release',
  files: files('release'),
  keys: ['bill', 'deadlines', 'settled'],
  args: ['requestId', 'deadlineMember'],
  reply: as<number>(),
});

/** Applies one ledger entry to the account's bill, idempotently: the account store's credit. */
export const creditScript = redisScript({
  name: 'money_credit',
  files: files('credit'),
  keys: ['bill'],
  args: ['credits', 'ledgerId', 'amount'],
  reply: as<[status: number, balance: number]>(),
});

/** Opens an account's bill, or sets whether it is unlimited. */
/** Raises a budget's counter in the current period to what the record holds as spent in it, when the budget is set. */
export const seedBudgetScript = redisScript({
  name: 'money_seed_budget',
  files: files('seed-budget'),
  keys: ['bill'],
  args: ['spentField', 'recordedMicros'],
  reply: as<number>(),
});

export const openBillScript = redisScript({
  name: 'money_open_bill',
  files: files('open-bill'),
  keys: ['bill'],
  args: ['accountId', 'unlimited'],
  reply: as<number>(),
});

/** Settles one Realtime response and renews the session's reservation for the next: `settleRealtimeResponse()`. */
export const realtimeSettleScript = redisScript({
  name: 'money_realtime_settle',
  files: files('realtime-settle'),
  keys: ['settled', 'bill', 'deadlines', 'usageStream', 'alertStream'],
  args: [
    'sessionRequestId',
    'micros',
    'keyId',
    'streamMaxLength',
    'keepSettledS',
    'usage',
    'deadlineMember',
    'nextMicros',
    'nextDeadlineMs',
    'keyLimitMicros',
    'budgets',
    'alertThresholds',
    'accountId',
  ],
  reply: as<[applied: number, renewed: number, refusingBudget: number, ...crossings: string[]]>(),
});

/**
 * Gives back a Realtime session's held reservation and reserves it again under the limits in force now, or changes
 * nothing when they cannot cover it: `readmitRealtimeReservation()`.
 */
export const realtimeReadmitScript = redisScript({
  name: 'money_realtime_readmit',
  files: files('realtime-readmit'),
  keys: ['bill', 'deadlines'],
  args: ['sessionRequestId', 'keyId', 'micros', 'deadlineMs', 'deadlineMember', 'keyLimitMicros', 'budgets'],
  reply: as<[verdict: number, reason: number, refusingBudget: number]>(),
});
