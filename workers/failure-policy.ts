import type { Config } from '../shared/config.js';
import { GatewayError, queueUnavailable, serverError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';

/**
 * What a failed vendor attempt leads to, in one place:
 * - `fail`: the client gets the error now (it is final, output already went out, or time is up);
 * - `wait`: the job goes back to the queue for `delay` ms without spending an attempt (a rate limit, or every channel resting);
 * - `retry`: BullMQ runs the job again after its backoff (`retryDelay`), spending an attempt.
 */
export type FailureDecision =
  /** `answer`: what the client gets instead of the error met (a rate limit that lasted too long says when to come back). */
  | { action: 'fail'; answer?: GatewayError }
  | { action: 'wait'; delay: number }
  | { action: 'retry'; delay: number };

export interface FailedAttempt {
  error: GatewayError;
  /** Some output already reached the client: a retry would duplicate it. */
  outputStarted: boolean;
  /** Whether another channel (or a fallback model) could serve the next attempt; asked only for channel faults. */
  canSwitchChannel: () => boolean;
  /** Attempts made before this one, and allowed in all. */
  attemptsMade: number;
  attempts: number;
  /** Epoch ms after which nobody waits for the answer. */
  deadline: number;
  /** The job can be put back to wait (BullMQ gave this worker the job's lock token). */
  canWait: boolean;
  /** Epoch ms of the job's first wait on a rate limit, if it waited already. */
  rateLimitedSince?: number | undefined;
  now?: number;
}

export function decideFailure(config: Config, attempt: FailedAttempt): FailureDecision {
  const { error } = attempt;
  // A bad credential is final for its channel only: with another channel (or fallback) ready, try that.
  const switchable = isChannelFault(error) && attempt.canSwitchChannel();
  if (attempt.outputStarted || !(error.retryable || switchable)) return { action: 'fail' };
  const delay = retryDelay(config, attempt.attemptsMade, error);
  const now = attempt.now ?? Date.now();
  if (isRateLimit(error)) {
    // A rate limit (or every channel resting) is a reason to wait, not a failed attempt; but only for
    // RATE_LIMIT_WAIT_MS in all, and never past the deadline. Then the client is told when to come back.
    const since = attempt.rateLimitedSince ?? now;
    if (now + delay >= attempt.deadline) return { action: 'fail', answer: rateLimitedPastDeadline(delay) };
    if (now + delay - since > config.rateLimitWaitMs) return { action: 'fail', answer: rateLimitedTooLong(error, delay, now - since) };
    if (attempt.canWait) return { action: 'wait', delay };
  } else if (now + delay >= attempt.deadline) {
    return { action: 'fail' };
  }
  if (attempt.attemptsMade + 1 >= attempt.attempts) return { action: 'fail' };
  return { action: 'retry', delay };
}

/** A vendor's 429, or every channel of the model resting after one. */
export function isRateLimit(error: GatewayError): boolean {
  return error.status === 429 || error.code === 'channels_cooling_down';
}

/** `retry-after` (whole seconds, at least 1) and `retry-after-ms`, as the key limits answer them. */
function retryAfter(ms: number): Record<string, string> {
  return { 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))), 'retry-after-ms': String(Math.max(0, Math.round(ms))) };
}

/** The vendor kept rate limiting past RATE_LIMIT_WAIT_MS: a 429 that says when the vendor may take it again. */
function rateLimitedTooLong(error: GatewayError, delayMs: number, waitedMs: number): GatewayError {
  const waited = waitedMs > 0 ? ` for ${Math.round(waitedMs / 1000)} s` : '';
  return new GatewayError(429, `The upstream vendor kept rate limiting this request${waited}; retry after ${Math.max(1, Math.ceil(delayMs / 1000))} s.`, {
    type: 'rate_limit_exceeded',
    code: error.status === 429 ? (error.code ?? 'rate_limit_exceeded') : 'rate_limit_exceeded',
    headers: retryAfter(delayMs),
    cause: error,
  });
}

/** The vendor was still rate limiting at the request's deadline: the deadline's 504, with when to come back. */
function rateLimitedPastDeadline(delayMs: number): GatewayError {
  return new GatewayError(504, 'The request reached its deadline while the upstream vendor was rate limiting it.', {
    type: 'server_error',
    code: 'timeout',
    headers: retryAfter(delayMs),
  });
}

/** Whether the error says the channel itself is unusable (its key), not the request. */
export function isChannelFault(error: GatewayError): boolean {
  return error.code === 'vendor_auth_failed' || error.code === 'vendor_quota_exhausted';
}

/** Anything thrown that is not already a GatewayError is a bug of ours: logged, and a 500 to the client. */
export function toGatewayError(caught: unknown, log: Logger): GatewayError {
  if (caught instanceof GatewayError) return caught;
  // Redis lost mid-job (a restart, a failover): retried like a vendor's 503, and named as what it is if it lasts.
  const unavailable = queueUnavailable(caught);
  if (unavailable) {
    log.warn({ err: caught }, 'Redis unavailable during the job');
    return unavailable;
  }
  log.error({ err: caught }, 'unexpected error in worker');
  return serverError(undefined, caught);
}

/** Exponential backoff with full jitter, or the vendor's `retry-after` when it gave one. */
export function retryDelay(config: Config, attemptsMade: number, error: GatewayError): number {
  if (error.retryAfterMs !== undefined) return error.retryAfterMs;
  const ceiling = config.retryBaseMs * 2 ** attemptsMade;
  return Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
}
