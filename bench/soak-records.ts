import { createHash } from 'node:crypto';

/**
 * What a soak client keeps of each request it sent, or of each part of a longer exchange (bench/soak-traffic.ts,
 * bench/soak-sessions.ts): the record the check after the run (bench/soak-check.ts) holds the gateway to.
 */

/** What became of a request, as its client saw it. */
export type Outcome =
  /** A 2xx answer, whole (a stream that ended as its dialect ends one). */
  | 'answered'
  /** A 4xx refusal (quota, limit, budget, validation). */
  | 'refused'
  /** A 5xx, an error event in a stream, a stream cut short, a dropped connection, no answer in time. */
  | 'failed'
  /** The client left a stream on purpose after its first content. */
  | 'left';

/** One request, or one part of an exchange, as its client saw it. */
export interface Part {
  latencyMs: number;
  outcome: Outcome;
  status: number | null;
  requestId: string | null;
  errorCode: string | null;
  /** First 16 hex of the body's sha256 (or of what arrived). */
  bodyHash: string;
  /** Why it failed, in a few words (connection errors, timeouts, stream ends). */
  detail?: string;
  /** `Cache-Status` as the gateway answered it. */
  cacheStatus?: string;
  /** A batch line: `<batch id>/<custom id>`. */
  batch?: string;
  /** The answer's own id (a Message Batch line's message id), for a record with no request id to match. */
  answerId?: string;
}

/** First 16 hex of a body's sha256: what a record keeps of it. */
export const bodyHash = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);

/** The code of an error body in any dialect (`error.code`, `.type` or `.status`), or null when it is none. */
export function errorCodeOf(body: string): string | null {
  try {
    const parsed = JSON.parse(body) as { error?: { code?: unknown; type?: unknown; status?: unknown } };
    const error = parsed.error;
    if (error) return String(error.code ?? error.type ?? error.status ?? 'error');
    return null;
  } catch {
    return null;
  }
}
