import type { AccountKind, AccountRole } from './accounts.js';
import type { BatchDialect, BatchStatus, OpenAIBatchStatus } from './batches/types.js';
import type { KeyUsageTotals, RequestView, UsageTotals } from './money/usage.js';
import type { ServiceTier } from './scheduling/vocabulary.js';
import type { BudgetPeriod } from './money/budgets.js';

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
  /** 'person': someone who signs in; 'team': an account several people share, with no email. */
  kind: AccountKind;
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
  /**
   * The longest its answers stay in the response cache, seconds (an admin's cap); 0: never cached; null: no cap of its
   * own.
   */
  cache_max_ttl_s: number | null;
  /** The MCP tools its keys may use, `server/tool` patterns (an admin's); null: every tool. */
  mcp_tools: readonly string[] | null;
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

/**
 * A budget per period (a key's beside its lifetime limit, a team's, a member's cap): the amount, the period ('day',
 * 'week', 'month', UTC), what was spent in the current period and when it ends (ISO); all null when there is none.
 */
export interface BudgetValues {
  budget_usd: number | null;
  budget_period: BudgetPeriod | null;
  budget_spent_usd: number | null;
  budget_resets_at: string | null;
}

export interface KeyView extends KeyLimitValues, BudgetValues {
  id: string;
  object: 'api_key';
  name: string;
  hint: string;
  created: number;
  account_id: string;
  /** Its default response-cache TTL, seconds: requests without Cache-Control are cached this long (null or 0: none). */
  cache_ttl_s: number | null;
  /**
   * The MCP tools it may use within its account's, `server/tool` patterns (an admin's); null: every tool its account
   * allows.
   */
  mcp_tools: readonly string[] | null;
  spent_usd: number;
  last_used_at: number | null;
  /** The limits an admin set (null where none): a member may lower them, never raise or remove them. */
  admin_limits?: KeyLimitValues;
  /**
   * Who made it (the console's keys only): a person's account id, email and name; null for a key of a team made
   * by no one in the console (the admin API, the CLI). A key made before teams in a person's own account is theirs.
   */
  created_by?: KeyCreatorView | null;
}

export interface KeyCreatorView {
  id: string;
  email: string;
  name: string;
}

/** A key on the admin's list: with its account's email, and its name (the default account has only a name). */
export interface OwnedKeyView extends KeyView {
  account_email: string | null;
  account_name: string | null;
  /**
   * A person's account or a team's (null: an account no longer found). The Default account is a person's, with no
   * email.
   */
  account_kind: AccountKind | null;
  /**
   * Its account's cache cap (`AccountView.cache_max_ttl_s`): 0, its answers are never cached; null, no cap of its own.
   */
  account_cache_max_ttl_s: number | null;
}

/** A key's name as Usage and Activity show it, for every role that reads them (`GET /console/api/key-names`). */
export interface KeyName {
  id: string;
  object: 'key_name';
  name: string;
  account_id: string;
  revoked: boolean;
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

/**
 * What a console page's HTML carries for its script (in `<meta name="switchyard-boot">`, JSON), so the first page
 * of a visit draws at once and its own data are its only round of API calls: the answers `GET /console/api/config`,
 * `GET /console/api/session` and, signed in, `GET /console/api/teams` would give.
 */
export interface ConsoleBoot {
  config: ConsoleConfig;
  session: SessionAnswer;
  /** null when nobody is signed in. */
  teams: TeamList | null;
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
  /**
   * The built-in mock vendor: whether it answers here at all (`on`), whether its answers are billed
   * (`MOCK_BILLING=on`) or free, and for which models: `'all'` when it stands in for every vendor (no vendor
   * key set), else the number of its own models (`mock-chat`, …) it serves beside the real vendors.
   */
  mock: { on: boolean; billed: boolean; models: 'all' | number };
  /** Sign-in through an OpenID Connect provider (OIDC_ISSUER): on or off, and its button's label (OIDC_NAME). */
  sso: { on: boolean; label: string };
  /** False under OIDC_ONLY: the password form is only for the break-glass administrators (OIDC_BREAK_GLASS). */
  password_signin: boolean;
}

/** `DELETE /console/api/session`'s answer. */
export interface SignOutAnswer {
  signed_out: true;
  csrf_token: string;
  /** The provider's sign-out page to go to next (a session signed in through a provider that has one), else null. */
  end_session_url: string | null;
}

// ---- usage and activity ----

/**
 * How the requests of a report's row ended, beside `requests` (every request the log holds, refusals included: see
 * `requestCount` in api/console/reports.ts), and what the response cache did for them.
 */
export interface RequestTally {
  /** Turned away before any vendor was asked (an unknown model, a bad parameter, a limit): nothing billed. */
  refused: number;
  /** Accepted, then failed (a vendor's error, a timeout). */
  failed: number;
  cancelled: number;
  /** Answered from the response cache. */
  cache_hits: number;
}

/**
 * A usage report's row: what its requests used and cost (the record's day totals) and how they ended (the request log).
 */
export type UsageRow = UsageTotals & RequestTally;
export type KeyUsageRow = KeyUsageTotals & RequestTally;

/**
 * Latency, time to first token and error rate of one model over the report's days (from the request log). Requests
 * naming no model the gateway serves (refused with `model_not_found`) are one row with model `''`.
 */
export interface ModelLatency {
  model: string;
  /** Every logged request, as the usage report's `by_model` counts them. */
  requests: number;
  /** Not completed: refused, failed or cancelled. */
  errors: number;
  refused: number;
  /** 0–1; refusals count as errors. */
  error_rate: number;
  /** Over the completed requests only (a refusal's few milliseconds say nothing of a model). */
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
  totals: UsageRow | undefined;
  daily: UsageRow[];
  by_model: UsageRow[];
  by_key: KeyUsageRow[];
  latency: ModelLatency[];
  /**
   * An admin's report of every account: how many accounts exist, and how many made a request in the range; null
   * otherwise.
   */
  accounts: { total: number; active: number } | null;
}

/**
 * A Realtime session's row (endpoint `realtime`) as the activity list gives it: how long it lasted, how many responses
 * it billed.
 */
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

/**
 * How many requests a filter of the log holds, by how each ended: every logged request, refusals included, counted
 * once (a Realtime session's own row is not one: each of its responses is). Usage and Activity count alike.
 */
export interface RequestCounts {
  requests: number;
  completed: number;
  failed: number;
  cancelled: number;
  refused: number;
}

/** A page of the Activity list; the first page (no cursor) also counts the whole filter's requests. */
export interface ActivityPage extends RequestPage<ActivityRow> {
  counts?: RequestCounts;
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
  /** The account it is billed to (its keys made it). */
  account_id: string;
  /** `anthropic`: made with `POST /v1/messages/batches`; `openai`: with `POST /v1/batches` over a file. */
  dialect: BatchDialect;
  /** The endpoint its requests call. */
  endpoint: string;
  status: BatchStatus;
  /** An OpenAI batch's own status (null for a message batch). */
  openai_status: OpenAIBatchStatus | null;
  /** An OpenAI batch's input file and, once written, its output and error files (null for a message batch). */
  files: { input: BatchFile; output: BatchFile | null; error: BatchFile | null } | null;
  /**
   * The catalog ids of the models its requests name, each once, sorted (null for a batch made before they were kept).
   */
  models: string[] | null;
  created_at: number;
  expires_at: number;
  ended_at: number | null;
  cancel_initiated_at: number | null;
  total: number;
  counts: { processing: number; succeeded: number; errored: number; canceled: number; expired: number };
  /** Billed so far. */
  cost_usd: number;
  cost_micros: number;
  /**
   * `/v1/messages/batches/{id}/results` once ended, an OpenAI batch's `/v1/files/{output}/content` once written (read
   * with an API key), else null.
   */
  results_path: string | null;
}

export interface BatchPage extends List<ConsoleBatch> {
  /** The account listed; null for an admin's list of every account's batches. */
  account_id: string | null;
  has_more: boolean;
  /** Ask for the next page with `cursor=<this>`; null when there is none. */
  next_cursor: string | null;
  /** Batch requests are billed at the flex price: the listed token prices times this (0.5: half). */
  flex_price_multiple: number;
}

/** A batch deleted from the console. */
export interface ConsoleBatchDeleted {
  id: string;
  object: 'batch';
  deleted: true;
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
  /**
   * How long BullMQ keeps a finished job of a waiting client (BullMQ's removeOnComplete and removeOnFail): the
   * completed and failed counts are of the jobs still kept, not totals. An async job is kept `async_seconds`.
   */
  keeps: {
    completed_seconds: number;
    completed_count: number;
    failed_seconds: number;
    failed_count: number;
    async_seconds: number;
  };
}

/** A team as the console's team switcher and Team page show it, with the signed-in person's role in it. */
export interface TeamView {
  id: string;
  object: 'team';
  /** 'person': someone's own account (a team of one they own); 'team': one made for several people. */
  kind: AccountKind;
  name: string;
  /** A person's own account's email; '' for a team. */
  email: string;
  role: TeamRole;
  /** What the team has left to spend, in USD; null: unlimited. The console's sidebar shows the current team's. */
  balance_usd: number | null;
}

/** Someone in a team. */
export interface TeamMemberView {
  id: string;
  object: 'team.member';
  email: string;
  name: string;
  role: TeamRole;
  /** Who put them there (the console, an admin, the identity provider); null for a person in their own account. */
  source: 'console' | 'admin' | 'oidc' | null;
  created: number;
}

/**
 * `GET /console/api/teams`: the person's teams (their own first); for an admin, every team with its member count too.
 */
export interface TeamList {
  object: 'list';
  data: TeamView[];
  /** null but for an admin. */
  all_teams: Array<{ id: string; name: string; members: number; created: number; balance_usd: number | null }> | null;
}

/** `GET /console/api/teams/:id`: a team and who is in it. */
export interface TeamDetail extends TeamView {
  members: TeamMemberView[];
}

export type TeamRole = 'owner' | 'member' | 'viewer';

/** A member's cap in a team as the Budgets page shows it: what the keys they made there may spend per period. */
export interface MemberCapView {
  id: string;
  object: 'team.member_cap';
  email: string;
  name: string;
  role: TeamRole;
  cap_usd: number | null;
  cap_period: BudgetPeriod | null;
  /** What their keys spent in the cap's current period; null without a cap (no period to count in). */
  cap_spent_usd: number | null;
  cap_resets_at: string | null;
}

/**
 * `GET /console/api/teams/:id/budget`: the team's budget per period and its members' caps, with this period's spend.
 */
export interface TeamBudgetView extends BudgetValues {
  object: 'team.budget';
  team_id: string;
  /** The signed-in person's role there: an owner (or an admin) may change the budget and the caps. */
  role: TeamRole;
  members: MemberCapView[];
}

/** A member's cap just set (`PUT /console/api/teams/:id/members/:member/cap`). */
export type MemberCapAnswer = MemberCapView;

/**
 * A budget alert as the admin API (`GET /admin/alerts`) and the console show it: amounts as exact decimal strings of
 * USD (as the webhook sends them), times in unix seconds, null for "none" (shared/alerts.ts, storage/record/alerts.ts).
 */
export interface AlertView {
  id: string;
  object: 'budget_alert';
  team_id: string;
  team_name: string;
  kind: 'team' | 'key' | 'member' | 'key_lifetime';
  scope_id: string;
  /** What the budget belongs to by name: the key's name, the member's email; '' for the team's own budget. */
  scope_name: string;
  period: 'day' | 'week' | 'month' | null;
  period_start: number | null;
  period_end: number | null;
  threshold_percent: number;
  spent_usd: string;
  limit_usd: string;
  created: number;
  state: 'pending' | 'delivered' | 'failed' | 'no_webhook';
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  delivered_at: number | null;
}

/** `GET /console/api/teams/:id/alerts`: newest first; `next_before` pages on (null at the end). */
export interface AlertList extends List<AlertView> {
  next_before: string | null;
}

/** A tool of an upstream MCP server as the console's Tools page lists it. */
export interface McpToolView {
  name: string;
  title: string | null;
  description: string | null;
}

/** An upstream MCP server as the console's Tools page shows it (to everyone: what its tools cost and how it is). */
export interface McpServerConsoleView {
  name: string;
  /** `ok`, `failing` (see `error`), or `unchecked` (no worker has checked it yet). */
  status: 'ok' | 'failing' | 'unchecked';
  error: string | null;
  /** Unix seconds of the last check. */
  checked_at: number | null;
  price_per_call_usd: string;
  max_concurrency: number;
  timeout_ms: number;
  /** Its tools: every one for an admin; for anyone else, those the team may use. */
  tools: McpToolView[];
  resources: number | null;
  prompts: number | null;
  /** An admin's only: where it is reached and how (null for anyone else, and for a server the workers run). */
  url: string | null;
  transport: string | null;
  header_names: string[] | null;
  /**
   * An admin's only: `file` (MCP_SERVERS_FILE, changed by deploying) or `admin` (added here: an admin may change or
   * remove it).
   */
  source: 'file' | 'admin' | null;
  /** An admin's only: whether its calls' arguments are kept in the request log. */
  keep_arguments: boolean | null;
}

/** `GET /console/api/mcp`: the servers, what the team allows, and which tools each of the person's keys may use. */
export interface McpToolsPage {
  /** The endpoint an agent is given: every server's tools, each named `<server>__<tool>`. */
  endpoint: string;
  /** The team's `mcp_tools` (null: every tool). */
  team_tools: readonly string[] | null;
  servers: McpServerConsoleView[];
  /** The keys the person sees on the Keys page, each with the tools (`server/tool`) it may use now. */
  keys: Array<{ id: string; name: string; hint: string; mcp_tools: readonly string[] | null; tools: string[] }>;
}
