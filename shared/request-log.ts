import type { Redis } from 'ioredis';
import { billingBucket, usageStreamKey } from './redis-keys.js';
import { journalWrite } from './redis-journal.js';
import type { RequestStatus } from './money/usage.js';
import type { ServiceTier } from './scheduling/vocabulary.js';

/**
 * The request log: one record per keyed request, made of two halves that
 * meet in the record's usage row by request id, in either order: the
 * request's (`x-request-id`) on both sides, for every endpoint (a job's own id,
 * a response's or a video's, is the row's answer id). The api
 * sends how the request was answered (this event, once its last byte is
 * written or the client left); the worker's settlement sends what it used
 * and cost (the `usage` entry of the same stream). Both go to the account's
 * bucket's usage stream, so the record's writer batches them together.
 */

/** The api's half: how the client was answered. Field names are the record's columns. */
export interface RequestLogEvent {
  request_id: string;
  account_id: string;
  key_id: string;
  endpoint: string;
  /** The model asked for (as resolved by the catalog when it was known). */
  model: string;
  stream: boolean;
  status: RequestStatus;
  /** Null when the client left before any header was written. */
  http_status: number | null;
  error_code: string | null;
  /** The error's message as the client read it (at most 500 characters); absent when it was answered without one. */
  error_message?: string;
  /** From the request's arrival to its last byte (or to the moment the client left). */
  latency_ms: number;
  /** A stream's first chunk written, from the arrival; null for a plain answer or a stream with no output. */
  ttft_ms: number | null;
  /** Unix seconds of the arrival. */
  created: number;
  /** The tier it was to be served in, once the request was accepted (a refusal before that names none). */
  service_tier?: ServiceTier;
}

/** The longest error message the log keeps: what the client read, cut here. */
export const loggedMessageChars = 500;

/** Text as the log keeps it: at most `chars` characters, a NUL (which the record cannot store) written as U+FFFD. */
export function loggedText(text: string, chars: number): string {
  return text.slice(0, chars).replaceAll('\u0000', '\uFFFD');
}

/** The stream entry's field that carries a log event (a settlement carries `usage`). */
export const logField = 'log';

/**
 * Appends the api's half to the account's bucket's usage stream, bounded like
 * settlement's records: one command, off the request's path (after its last
 * byte). Returns the command's promise for the caller to log a failure.
 */
export async function appendRequestLog(redis: Redis, event: RequestLogEvent, bufferRecords: number): Promise<unknown> {
  const json = JSON.stringify(event);
  const append = (on: Redis) =>
    on.xadd(usageStreamKey(billingBucket(event.account_id)), 'MAXLEN', '~', bufferRecords, '*', logField, json);
  const appended = await append(redis);
  // Sent again after a reconnection (a failover may have lost it): the record keeps one row per request id.
  journalWrite(redis, async (on) => (await append(on), false));
  return appended;
}
