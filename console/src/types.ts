import type { KeyUsageTotals, RequestView, UsageTotals } from '../../shared/money/usage.js';
export { requestStatuses, type KeyUsageTotals, type RequestStatus, type RequestView, type UsageTotals } from '../../shared/money/usage.js';
// The console API's shapes (see the contract in the server's api/console).

export type Role = 'admin' | 'member';

export interface Account {
  id: string;
  email: string;
  name: string;
  role: Role;
  /** null: unlimited. */
  balance_usd: number | null;
  disabled: boolean;
  /** Its share of contended capacity against other accounts' (1–100). */
  weight: number;
  /** The service tiers an admin granted it; null: the gateway's default (SERVICE_TIERS_GRANTED). */
  service_tiers: ServiceTier[] | null;
  /** The longest its answers stay in the response cache, seconds (an admin's cap); 0: never cached; null: no cap of its own. */
  cache_max_ttl_s: number | null;
  created: number;
}

export interface ConsoleConfig {
  signup: boolean;
  public_pricing: boolean;
  base_url: string;
  queue_dashboard: string | null;
  /** The most a member's own key may set where an admin set nothing (null: unlimited). */
  key_defaults?: { rpm: number | null; tpm: number | null };
  /** Whether an administrator can sign in yet (false: the sign-in page says how the first one is made). */
  has_admin?: boolean;
}

export interface SessionAnswer {
  account: Account | null;
  csrf_token: string;
}

export interface KeyLimitValues {
  limit_usd: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string[] | null;
  expires_at: number | null;
}

export interface Key {
  id: string;
  object: 'api_key';
  name: string;
  hint: string;
  created: number;
  account_id: string;
  limit_usd: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string[] | null;
  expires_at: number | null;
  /** Its default response-cache TTL, seconds: requests without Cache-Control are cached this long (null or 0: none). */
  cache_ttl_s: number | null;
  spent_usd: number;
  last_used_at: number | null;
  /** The limits an admin set (null where none): a member may lower them, never raise or remove them. */
  admin_limits?: KeyLimitValues;
  /** On the admin list: the owning account's email, and its name (the default account has only a name). */
  account_email?: string | null;
  account_name?: string | null;
}

export interface CreatedKey extends Key {
  key: string;
}

export interface LongContextPrices {
  above_tokens: number;
  input_per_1m?: number;
  cached_input_per_1m?: number;
  output_per_1m?: number;
}

export interface Prices {
  input_per_1m?: number;
  cached_input_per_1m?: number;
  cache_write_per_1m?: number;
  output_per_1m?: number;
  audio_input_per_1m?: number;
  audio_output_per_1m?: number;
  long_context?: LongContextPrices;
  per_image?: Record<string, number>;
  per_second?: number;
  per_second_by_size?: Record<string, number>;
  per_minute?: number;
  /** Speech input billed by the character (`tts-1`, `tts-1-hd`). */
  per_1m_characters?: number;
  cached_audio_input_per_1m?: number;
}

export type Capability = 'chat' | 'reasoning' | 'completion' | 'embedding' | 'image' | 'video' | 'transcription' | 'speech' | 'realtime' | 'moderation';

export interface PricedModel {
  id: string;
  vendor: string;
  capability: Capability | string;
  context_window: number;
  max_output_tokens: number;
  input_modalities: string[];
  image_sizes?: string[];
  image_qualities?: string[];
  /** Speech models: the `response_format`s it can be given, the voices it takes (absent: its vendor's), and what else it takes (`instructions`, `speed`, `sse`). */
  speech_formats?: string[];
  speech_voices?: string[];
  speech_options?: string[];
  prices: Prices | null;
}


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
  account_id?: string | null;
  from: string;
  to: string;
  balance_usd: number | null;
  totals: UsageTotals | undefined;
  daily: UsageTotals[];
  by_model: UsageTotals[];
  by_key: KeyUsageTotals[];
  latency: ModelLatency[];
}


/** The tiers a request is served in (`service_tier`), first served first. */
export const serviceTiers = ['priority', 'default', 'flex'] as const;
export type ServiceTier = (typeof serviceTiers)[number];

/** Each tier's token prices as a multiple of the listed ones, exact decimals (`GET /console/api/pricing`'s `service_tiers`). */
export type TierMultiples = Record<ServiceTier, string>;


/** A Realtime session's row (endpoint `realtime`) as the activity list gives it: how long it lasted, how many responses it billed. */
export interface SessionFacts {
  duration_ms: number;
  responses: number;
}

/** A row of the activity list: a request, or a whole Realtime session with its facts. */
export type ActivityRow = RequestView & { session?: SessionFacts };

export interface RequestPage {
  object: 'list';
  data: ActivityRow[];
  has_more: boolean;
  next_cursor: string | null;
}

/** Requests per bar of `bucket_seconds` over since–until (unix seconds); bars without a request are left out. */
export interface RequestHistogram {
  object: 'histogram';
  bucket_seconds: number;
  since: number;
  until: number;
  data: Array<{ start: number; requests: number; errors: number }>;
}

export interface Channel {
  id: string;
  vendor: string;
  base_url: string | null;
  models: number;
  status: 'ok' | 'cooling_down' | string;
  /** unix ms */
  cooling_until: number | null;
  reason: string | null;
}

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

export interface List<T> {
  object: 'list';
  data: T[];
}

/** The built-in account that keys made without one (and older keys) belong to: unlimited, never signed in to. */
export const defaultAccountId = 'acct_default';

export type BatchStatus = 'validating' | 'in_progress' | 'canceling' | 'ended';
/** OpenAI's statuses of a batch made with `POST /v1/batches`. */
export type OpenAIBatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';
export interface BatchFile {
  id: string;
  filename: string | null;
}

/** A batch of either API as the batches page reads it (`GET /console/api/batches`): times in unix seconds. */
export interface Batch {
  id: string;
  /** `anthropic`: made with `POST /v1/messages/batches`; `openai`: with `POST /v1/batches` over a file. */
  dialect: 'anthropic' | 'openai';
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

export interface BatchPage {
  object: 'list';
  account_id: string;
  data: Batch[];
  has_more: boolean;
}
