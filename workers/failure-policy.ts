import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { Config } from '../shared/config.js';
import { GatewayError, queueUnavailable, recordUnavailable, serverError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';

/**
 * What a failed vendor attempt leads to, in one place:
 * - `fail`: the client gets the error now (it is final, output already went out, or time is up);
 * - `wait`: the job goes back to the queue for `delay` ms without spending an attempt (a rate limit, or every channel
 *   resting);
 * - `retry`: BullMQ runs the job again after its backoff (`retryDelay`), spending an attempt.
 */
export type FailureDecision =
  /**
   * `answer`: what the client gets instead of the error met (a rate limit that lasted too long says when to come back).
   */
  { action: 'fail'; answer?: GatewayError } | { action: 'wait'; delay: number } | { action: 'retry'; delay: number };

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
    if (now + delay - since > config.rateLimitWaitMs)
      return { action: 'fail', answer: rateLimitedTooLong(error, delay, now - since) };
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
  return {
    'retry-after': String(Math.max(1, Math.ceil(ms / 1000))),
    'retry-after-ms': String(Math.max(0, Math.round(ms))),
  };
}

/** The vendor kept rate limiting past RATE_LIMIT_WAIT_MS: a 429 that says when the vendor may take it again. */
function rateLimitedTooLong(error: GatewayError, delayMs: number, waitedMs: number): GatewayError {
  const waited = waitedMs > 0 ? ` for ${Math.round(waitedMs / 1000)} s` : '';
  return new GatewayError(
    429,
    `The upstream vendor kept rate limiting this request${waited}; retry after ` +
      `${Math.max(1, Math.ceil(delayMs / 1000))} s.`,
    {
      type: 'rate_limit_exceeded',
      code: error.status === 429 ? (error.code ?? 'rate_limit_exceeded') : 'rate_limit_exceeded',
      headers: retryAfter(delayMs),
      cause: error,
    },
  );
}

/** The vendor was still rate limiting at the request's deadline: the deadline's 504, with when to come back. */
function rateLimitedPastDeadline(delayMs: number): GatewayError {
  return new GatewayError(504, 'The request reached its deadline while the upstream vendor was rate limiting it.', {
    type: 'server_error',
    code: 'timeout',
    headers: retryAfter(delayMs),
  });
}

/**
 * The codes of errors that say the channel itself is unusable (its key), not the request: the whole channel rests, and
 * the request may move to another.
 */
export const channelFaultCodes: ReadonlySet<string> = new Set(['vendor_auth_failed', 'vendor_quota_exhausted']);

/** Whether the error says the channel itself is unusable (its key), not the request. */
export function isChannelFault(error: GatewayError): boolean {
  return error.code !== null && channelFaultCodes.has(error.code);
}

/**
 * BullMQ's `failedReason` for a job that stalled more than `maxStalledCount` times (its worker died, or
 * stopped renewing the lock, once too often). Its stalled check (`moveStalledJobsToWait` Lua script) records
 * it as the job's deferred failure, and the next worker to take the job fails it with an UnrecoverableError
 * of that text, without running it. No class or code marks it: the text is all there is, pinned against the
 * BullMQ installed by test/integration/bullmq-reliances.test.ts.
 */
const stalledOutReason = 'job stalled more than allowable limit';

/**
 * What an error says to BullMQ by itself, whatever attempts remain:
 * - `put-back`: a DelayedError, thrown after the run moved its job back to wait (no attempt spent, not a failure);
 * - `stalled-out`: BullMQ failed the job for stalling too often;
 * - `unrecoverable`: an UnrecoverableError (ours: answered, client gone, async failure; or BullMQ's), failed for good.
 */
export type QueueSignal = 'put-back' | 'stalled-out' | 'unrecoverable';

export function queueSignal(error: unknown): QueueSignal | undefined {
  if (error instanceof DelayedError) return 'put-back';
  if (error instanceof Error && error.message === stalledOutReason) return 'stalled-out';
  if (error instanceof UnrecoverableError) return 'unrecoverable';
  return undefined;
}

/**
 * Whether BullMQ fails the job for good on this error rather than running it again: the error says so by
 * itself (`queueSignal`), or the job spent its last attempt. Mirrors BullMQ's own rule (`Job.shouldRetryJob`)
 * for the options the gateway sets (no `maxStartedAttempts`; a backoff that never declines). `attemptsMade`
 * counts the attempt that failed: BullMQ's `failed` event sees it in `job.attemptsMade`, the run itself one less.
 */
export function isFinalFailure(
  job: Pick<Job, 'attemptsMade' | 'opts'>,
  error: unknown,
  attemptsMade = job.attemptsMade,
): boolean {
  switch (queueSignal(error)) {
    case 'put-back':
      return false;
    case 'stalled-out':
    case 'unrecoverable':
      return true;
    default:
      return attemptsMade >= (job.opts.attempts ?? 1);
  }
}

/**
 * Whether a job BullMQ has just recorded a failed attempt of will run no more (what it holds can go): a final
 * failure, or else as Redis has it now: failed, completed, or gone (removed on failure, or by the api while it
 * waited to run again).
 */
export async function runsNoMore(job: Job, error: unknown): Promise<boolean> {
  if (isFinalFailure(job, error)) return true;
  const state = await job.getState();
  return state === 'failed' || state === 'completed' || state === 'unknown';
}

/** Anything thrown that is not already a GatewayError is a bug of ours: logged, and a 500 to the client. */
export function toGatewayError(caught: unknown, log: Logger): GatewayError {
  if (caught instanceof GatewayError) return caught;
  // PostgreSQL away mid-job (a job that reads the record: a batch line's file, say): the same, named for the record.
  const recordAway = recordUnavailable(caught);
  if (recordAway) {
    log.warn({ err: caught }, 'the record unavailable during the job');
    return recordAway;
  }
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
