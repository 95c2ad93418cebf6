import type { ServiceTier } from '../scheduling/vocabulary.js';

/**
 * What requests used and cost, in the record's column names: one spelling
 * for the settlement's usage entry, the record's `usage` table, the request
 * log's view of a row, the usage reports and the console (which imports
 * these types). Nothing here runs: the console's build reads it too.
 */

/**
 * What one request used, besides its cost: the amounts a price list charges for. `cached_tokens` and
 * `cache_write_tokens` are the parts of `input_tokens` the vendor read from its prompt cache and wrote to it, each
 * billed at its own price (`cached_input_per_1m`, `cache_write_per_1m`), so they are summed as the other amounts are.
 */
export const usageAmounts = [
  'input_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'output_tokens',
  'images',
  'audio_seconds',
  'video_seconds',
] as const;
export type UsageAmounts = Record<(typeof usageAmounts)[number], number>;
/** None of them: what a request that is not metered by amounts (a cache hit, a tool call) used. */
export const noAmounts: Readonly<UsageAmounts> = Object.freeze({
  input_tokens: 0,
  cached_tokens: 0,
  cache_write_tokens: 0,
  output_tokens: 0,
  images: 0,
  audio_seconds: 0,
  video_seconds: 0,
});

/** How a request ended. `refused` is the api's alone: admission turned it away and nothing was settled. */
export const requestStatuses = ['completed', 'failed', 'cancelled', 'refused'] as const;
export type RequestStatus = (typeof requestStatuses)[number];
/** How a job that ran ended, as its settlement says. */
export type SettledStatus = Exclude<RequestStatus, 'refused'>;

/**
 * How the response cache took part in a request: answered from it (`hit`), shared another identical
 * request's vendor call (`coalesced`), or went to the vendor and had its answer stored (`miss`). A
 * request that did not use the cache has none (absent in the usage entry, null in the record).
 */
export const cacheMarks = ['hit', 'miss', 'coalesced'] as const;
export type CacheMark = (typeof cacheMarks)[number];

/**
 * The worker's part of the request log, carried in the settlement's usage
 * entry (a field left out, or undefined, is not written).
 */
export interface RunDetail {
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
  /**
   * That error's message (its first 500 characters): a batch request's, whose result says it, or a job's the api did
   * not answer.
   */
  error_message?: string | undefined;
  /** An MCP call's: the bytes of what was sent to the server (its arguments, as JSON) and of the answer relayed. */
  bytes_in?: number | undefined;
  bytes_out?: number | undefined;
  /** An MCP call's arguments as JSON (their first 16 KiB), where its server is set to keep them (`keep_arguments`). */
  arguments?: string | undefined;
}

/** Whose request it was, what it used and cost, and how long it took: what every settled usage row has. */
export interface UsageColumns extends UsageAmounts {
  request_id: string;
  account_id: string;
  key_id: string;
  model: string;
  vendor: string;
  /** Integer micro-dollars, at the prices of the tier that served it. */
  cost_micros: number;
  /** Unix seconds. */
  created: number;
  duration_ms: number;
}

/**
 * A settlement's usage entry: what one finished request used and cost. The
 * settle script appends it, as JSON, to the stream the record's writer reads.
 */
export interface UsageEntry extends UsageColumns, RunDetail {
  status: SettledStatus;
  /** The tier that served it, whose prices it cost. */
  service_tier: ServiceTier;
  /** How the response cache took part, when it did. */
  cache?: CacheMark;
  /**
   * Integer micro-dollars the cache saved it: the stored answer's price less what this request was billed (0 or absent
   * when none).
   */
  saved_micros?: number;
  /**
   * Integer micro-dollars the vendor's prompt cache saved it (not the gateway's response cache: `saved_micros`): what
   * its prompt would have cost had every cached and cache-write token been billed at the plain input price, less what
   * it was billed. Signed: a request that only wrote the cache, at a price above the input's, saved less than nothing.
   * 0 or absent when it read and wrote no cache, or was not billed.
   */
  prompt_cache_saved_micros?: number;
}

/**
 * What the request log knows of how a request ran, each null until one of its halves says (the api's log event, the
 * worker's settlement).
 */
export interface RequestLogColumns {
  answer_id: string | null;
  endpoint: string | null;
  channel: string | null;
  stream: boolean | null;
  http_status: number | null;
  error_code: string | null;
  /** The error's message as the client read it (its first 500 characters), for a request answered with an error. */
  error_message: string | null;
  finish_reason: string | null;
  latency_ms: number | null;
  ttft_ms: number | null;
  queue_ms: number | null;
  attempts: number | null;
  fallback: string | null;
  /** An MCP call's bytes sent to its server and answered (null for every other request). */
  bytes_in: number | null;
  bytes_out: number | null;
  /** An MCP call's arguments, where its server keeps them; else null. */
  arguments: string | null;
}

/** One request of the request log, as `GET /v1/generation`, the request lists and the console's activity show it. */
export interface RequestView extends UsageAmounts, RequestLogColumns {
  id: string;
  /** Unix seconds of its arrival. */
  created: number;
  account_id: string;
  key_id: string;
  model: string;
  vendor: string | null;
  status: RequestStatus | string;
  /** The tier that served it (priority, default or flex), whose prices it cost. */
  service_tier: ServiceTier | string;
  cost_usd: number;
  cost_micros: number;
  /** The Message Batch it was part of, if any (`msgbatch_…`). */
  batch_id: string | null;
  /** How the response cache took part (`hit`, `miss`, `coalesced`); null when it did not. */
  cache: CacheMark | null;
  /** Integer micro-dollars the cache saved it (0 when none). */
  saved_micros: number;
  /**
   * Integer micro-dollars the vendor's prompt cache saved it, signed (`UsageEntry.prompt_cache_saved_micros`; 0 when
   * none).
   */
  prompt_cache_saved_micros: number;
  /** How long its worker ran it, ms (a batch request's only timing); 0 until settled. */
  duration_ms: number;
  /** Whether what it used and cost is in yet (a request still running, or refused, has none). */
  settled: boolean;
}

/** A usage report's row: the sums of some requests, by day, model, key or account as the report groups them. */
export interface UsageTotals extends UsageAmounts {
  day?: string;
  account_id?: string;
  model?: string;
  key_id?: string;
  requests: number;
  cost_usd: number;
  /** Integer micro-dollars the response cache saved these requests. */
  saved_micros: number;
  /**
   * Integer micro-dollars the vendor's prompt cache saved them, net (signed: cache writes dearer than input count
   * against it).
   */
  prompt_cache_saved_micros: number;
}

/** A report's row by key, with the key's name (kept when it was revoked, and marked) and its account. */
export interface KeyUsageTotals extends UsageTotals {
  key_name: string | null;
  key_revoked: boolean;
  key_account_id: string | null;
}
