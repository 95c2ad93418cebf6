import type { AccountRole } from './accounts.js';
import type { BatchDialect, BatchStatus, OpenAIBatchStatus } from './batches/types.js';
import type { KeyUsageTotals, RequestView, UsageTotals } from './money/usage.js';
import type { ServiceTier } from './scheduling/service-tier.js';

/*
 * What the console's API (/console/api, and for accounts and keys the admin
 * API too) answers, declared once: the server builds its answers as these,
 * the console reads them as these. Types only, importing types only: the
 * console's bundle takes nothing of the server's code from here.
 */

export interface List<T> {
  object: 'list';
  data: T[];
}

// ---- accounts and keys ----

/** An account as the console and the admin API show it: USD numbers, unix seconds, null for "none". */
export interface AccountView {
  id: string;
  object: 'account';
  email: string;
  name: string;
  role: AccountRole;
  /** null: the account spends without a balance (the default account, and admins unless one is set for them). */
  balance_usd: number | null;
  unlimited: boolean;
  disabled: boolean;
  /** Its share of contended capacity against other accounts' (1–100). */
  weight: number;
  /** The service tiers an admin granted it; null: the gateway's default (SERVICE_TIERS_GRANTED). */
  service_tiers: ServiceTier[] | null;
  /** The longest its answers stay in the response cache, seconds (an admin's cap); 0: never cached; null: no cap of its own. */
  cache_max_ttl_s: number | null;
  created: number;
}

/**
 * The console's list of accounts: with the tiers an account without its own may use, and the gateway's cache cap
 * (CACHE_MAX_TTL_S), which holds beside each account's.
 */
export interface AccountList extends List<AccountView> {
  default_service_tiers: ServiceTier[];
  gateway_cache_max_ttl_s: number;
}

/** A key's limits (null where none), as a key has them and as an admin set them. */
export interface KeyLimitValues {
  limit_usd: number | null;
  rpm: number | null;
  tpm: number | null;
  /** The models it may call (null: every model). */
  models: readonly string[] | null;
  expires_at: number | null;
}

export interface KeyView extends KeyLimitValues {
  id: string;
  object: 'api_key';
  name: string;
  hint: string;
  created: number;
  account_id: string;
  /** Its default response-cache TTL, seconds: requests without Cache-Control are cached this long (null or 0: none). */
  cache_ttl_s: number | null;
  spent_usd: number;
  last_used_at: number | null;
  /** The limits an admin set (null where none): a member may lower them, never raise or remove them. */
  admin_limits?: KeyLimitValues;
}

/** A key on the admin's list: with its account's email, and its name (the default account has only a name). */
export interface OwnedKeyView extends KeyView {
  account_email: string | null;
  account_name: string | null;
  /** Its account's cache cap (`AccountView.cache_max_ttl_s`): 0, its answers are never cached; null, no cap of its own. */
  account_cache_max_ttl_s: number | null;
}

/** A key just made: its secret, shown this once. */
export interface CreatedKeyView extends KeyView {
  key: string;
}

// ---- the session and the console's settings ----

export interface SessionAnswer {
  account: AccountView | null;
  csrf_token: string;
}

export interface ConsoleConfig {
  /** Whether an administrator can sign in yet (false: the sign-in page says how the first one is made). */
  has_admin: boolean;
  signup: boolean;
  public_pricing: boolean;
  base_url: string;
  queue_dashboard: string | null;
  /** The most a member's own key may set where an admin set nothing (null: unlimited). */
  key_defaults: { rpm: number | null; tpm: number | null };
}

// ---- usage and activity ----

/** Latency, time to first token and error rate of one model over the report's days (from the request log). */
export interface ModelLatency {
  model: string;
  requests: number;
  errors: number;
  /** 0–1; refusals count as errors. */
  error_rate: number;
  latency_p50_ms: number | null;
  latency_p95_ms: number | null;
  ttft_p50_ms: number | null;
  ttft_p95_ms: number | null;
}

export interface UsageReport {
  object: 'usage';
  /** Whose usage: one account's, or (null, an admin's report) every account's. */
  account_id: string | null;
  from: string;
  to: string;
  balance_usd: number | null;
  totals: UsageTotals | undefined;
  daily: UsageTotals[];
  by_model: UsageTotals[];
  by_key: KeyUsageTotals[];
  latency: ModelLatency[];
}

/** A Realtime session's row (endpoint `realtime`) as the activity list gives it: how long it lasted, how many responses it billed. */
export interface SessionFacts {
  duration_ms: number;
  responses: number;
}

/** A row of the activity list: a request, or a whole Realtime session with its facts. */
export type ActivityRow = RequestView & { session?: SessionFacts };

/** A page of the request log, newest first; `next_cursor` asks for the page after it. */
export interface RequestPage<Row extends RequestView = RequestView> {
  object: 'list';
  data: Row[];
  has_more: boolean;
  next_cursor: string | null;
}

/** The requests of a bar starting at `start` (unix seconds), and how many of them did not complete. */
export interface HistogramBar {
  start: number;
  requests: number;
  errors: number;
}

/** Requests per bar of `bucket_seconds` over since–until (unix seconds); bars without a request are left out. */
export interface RequestHistogram {
  object: 'histogram';
  bucket_seconds: number;
  since: number;
  until: number;
  data: HistogramBar[];
}

// ---- batches ----

export interface BatchFile {
  id: string;
  filename: string | null;
}

/** A batch of either API as the batches page reads it: times in unix seconds. */
export interface ConsoleBatch {
  id: string;
  /** `anthropic`: made with `POST /v1/messages/batches`; `openai`: with `POST /v1/batches` over a file. */
  dialect: BatchDialect;
  /** The endpoint its requests call. */
  endpoint: string;
  status: BatchStatus;
  /** An OpenAI batch's own status (null for a message batch). */
  openai_status: OpenAIBatchStatus | null;
  /** An OpenAI batch's input file and, once written, its output and error files (null for a message batch). */
  files: { input: BatchFile; output: BatchFile | null; error: BatchFile | null } | null;
  created_at: number;
  expires_at: number;
  ended_at: number | null;
  cancel_initiated_at: number | null;
  total: number;
  counts: { processing: number; succeeded: number; errored: number; canceled: number; expired: number };
  /** Billed so far. */
  cost_usd: number;
  cost_micros: number;
  /** `/v1/messages/batches/{id}/results` once ended, an OpenAI batch's `/v1/files/{output}/content` once written (read with an API key), else null. */
  results_path: string | null;
}

export interface BatchPage extends List<ConsoleBatch> {
  account_id: string;
  has_more: boolean;
}

// ---- the operator's pages ----

/** A resting channel's cool-down: of the whole channel (`model` null) or of one model on it. */
export interface ChannelCooldown {
  model: string | null;
  /** unix ms */
  until: number;
  reason: 'auth' | 'rate' | 'failures';
  status: number | null;
}

export interface ChannelView {
  id: string;
  vendor: string;
  base_url: string | null;
  weight: number;
  models: number;
  status: 'ok' | 'cooling_down';
  /** unix ms: the end of its longest cool-down. */
  cooling_until: number | null;
  reason: string | null;
  cooldowns: ChannelCooldown[];
  /** Its failed vendor calls in the last `failure_window_min` minutes, all models. */
  failures: number;
  failure_window_min: number;
  /** Each model with a failure in that window or resting now: its count, and its cool-down if it rests. */
  model_health: ChannelModelHealth[];
}

/** One model on a channel: its recent failures, and its cool-down while it rests (null: none now). */
export interface ChannelModelHealth {
  /** The model as the channel's vendor names it. */
  model: string;
  failures: number;
  /** unix ms */
  cooling_until: number | null;
  reason: string | null;
}

/** A capability's queue (its shards as one): its jobs by state. */
export interface QueueCounts {
  name: string;
  waiting: number;
  active: number;
  delayed: number;
  failed: number;
  completed: number;
  /** Paused from the queue dashboard: its jobs wait (and count as waiting) until it is resumed. */
  paused: boolean;
}

export interface QueueList extends List<QueueCounts> {
  /** Where the queue dashboard is served, or null when it is not. */
  dashboard: string | null;
}
