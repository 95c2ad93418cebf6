import { accountsPrefix, keyPrefix } from './queues.js';

/**
 * Accounts, keys, reservations and usage as they live in Redis: the layout
 * both halves (and the admin API, the CLI and the billing scripts) read.
 * Money is integer micro-dollars (1 USD = 1,000,000) everywhere in Redis.
 * Every key below but the sessions' carries the hash tag `{acct}` (written
 * `sy:{acct}:account:<id>` in full; shortened to `sy:` here), so each
 * billing script runs on one Redis Cluster slot; sessions share it too.
 *
 *   sy:account:<id>          hash  id, email, name, role, created, password (scrypt, optional),
 *                                  balance (micros), unlimited ('1' for the default account),
 *                                  reserved (micros held by requests in flight), deleted ('1')
 *   sy:accounts              zset  account id → created
 *   sy:account-emails        hash  lower-cased email → account id
 *   sy:ledger:<id>           stream (before the record) one entry per balance change; read only to import it into the record
 *   sy:key:<id>              hash  id, name, created, hash, hint, account, limit (micros, '' = none),
 *                                  rpm, tpm ('' = none), models (JSON array, '' = all), expires ('' = never),
 *                                  spent (micros), reserved (micros), last_used (unix s)
 *   sy:keyhash               hash  sha256(secret) → key id
 *   sy:keyids                set   key ids
 *   sy:account-keys:<id>     set   key ids of one account
 *   sy:rl:<keyId>:rpm|tpm    string GCRA theoretical arrival time (ms)
 *   sy:resv:<requestId>      hash  key, account, micros, tokens, deadline (ms): what admission holds
 *   sy:resv-deadlines        zset  request id → deadline (ms), to release reservations of lost jobs
 *   sy:settled:<requestId>   string set once a request is settled (kept 1 min once its job completes, else until 15 min past its deadline): settlement runs once
 *   sy:usage                 stream one record per settled request, until the record's writer has committed it
 *   sy:session:<sha256(token)> hash account, csrf, created (ms): a console session, TTL = its idle expiry
 *   sy:account-sessions:<id> set   session hashes of one account, to end them all at once
 *   sy:signin-fail:<email|ip> string sign-in attempts in the current window, counted before the password check (TTL = the window)
 *   sy:usage-day:<YYYY-MM-DD> hash `<account>|<key>|<model>|<metric>` → integer total, kept 400 days
 *   sy:usage-day:<YYYY-MM-DD>:<account> hash the same fields, of that account only (read only to import them into the record)
 *   sy:record-loaded         string set once the hot state above was loaded from the record (PostgreSQL): missing
 *                                  after a flush, which makes the next start or first use load it again
 *   sy:record-loading        string held while one process loads it (TTL)
 *
 * The record (PostgreSQL, storage/record/) is what these are rebuilt from: accounts, keys, the ledger and the usage rows.
 * The usage stream is a buffer: the record's writer deletes each record once it is committed there.
 */
export const defaultAccountId = 'acct_default';

export const accountKey = (id: string) => `${accountsPrefix}account:${id}`;
export const accountsIndexKey = `${accountsPrefix}accounts`;
export const accountEmailsKey = `${accountsPrefix}account-emails`;
export const ledgerKey = (accountId: string) => `${accountsPrefix}ledger:${accountId}`;
export const apiKeyRecordKey = (keyId: string) => `${accountsPrefix}key:${keyId}`;
export const apiKeyHashesKey = `${accountsPrefix}keyhash`;
export const apiKeyIdsKey = `${accountsPrefix}keyids`;
export const accountKeysKey = (accountId: string) => `${accountsPrefix}account-keys:${accountId}`;
export const rateLimitKey = (keyId: string, kind: 'rpm' | 'tpm') => `${accountsPrefix}rl:${keyId}:${kind}`;
export const reservationKey = (requestId: string) => `${accountsPrefix}resv:${requestId}`;
export const reservationDeadlinesKey = `${accountsPrefix}resv-deadlines`;
export const settledKey = (requestId: string) => `${accountsPrefix}settled:${requestId}`;
export const usageStreamKey = `${accountsPrefix}usage`;
/** The day's totals of every account, or (with an account) of that account alone: the console reads one account's without scanning all. */
export const usageDayKey = (day: string, accountId?: string) => (accountId === undefined ? `${accountsPrefix}usage-day:${day}` : `${accountsPrefix}usage-day:${day}:${accountId}`);
export const recordLoadedKey = `${accountsPrefix}record-loaded`;
export const recordLoadingKey = `${accountsPrefix}record-loading`;
/** Published with a key id when a key changes or is revoked, and with `account:<id>` when an account does: every api drops what it cached. */
export const accessChangedChannel = `${keyPrefix}access-changed`;

export type AccountRole = 'admin' | 'member';

export interface Account {
  id: string;
  email: string;
  name: string;
  role: AccountRole;
  created: number;
  /** Micro-dollars; undefined for the unlimited default account. */
  balanceMicros?: number;
  reservedMicros: number;
  /** A disabled account cannot sign in to the console and its keys are refused. */
  disabled: boolean;
}

/** What admission needs to know about a key, cached per api instance (dropped on `accessChangedChannel`). */
export interface KeyAccess {
  keyId: string;
  accountId: string;
  /** The most the key may ever spend, micros; undefined = no limit. */
  limitMicros?: number;
  rpm?: number;
  tpm?: number;
  /** Allowed model ids; undefined = every model. */
  models?: readonly string[];
  /** Unix seconds; undefined = never. */
  expiresAt?: number;
}

/** The metrics of one usage record that the per-day aggregates sum. */
export const usageMetrics = ['requests', 'input_tokens', 'cached_tokens', 'output_tokens', 'images', 'audio_seconds', 'video_seconds', 'cost_micros'] as const;
export type UsageMetric = (typeof usageMetrics)[number];

/** UTC day of a time, as the aggregates and `/admin/usage` name it. */
export function utcDay(ms: number): string {
  const day = Math.floor(ms / 86_400_000);
  if (day !== lastDay.number) lastDay = { number: day, text: new Date(ms).toISOString().slice(0, 10) };
  return lastDay.text;
}
/** Every settlement names its day: formatted once a day, not once a request. */
let lastDay = { number: Number.NaN, text: '' };
