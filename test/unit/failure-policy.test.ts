import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { decideFailure, toGatewayError, type FailedAttempt } from '../../workers/failure-policy.js';
import { createLogger } from '../../shared/logger.js';

const config = loadConfig({ RETRY_BASE_MS: '100' });
const now = 1_000_000;
const attempt = (error: GatewayError, overrides: Partial<FailedAttempt> = {}): FailedAttempt => ({
  error,
  outputStarted: false,
  canSwitchChannel: () => false,
  attemptsMade: 0,
  attempts: 4,
  deadline: now + 60_000,
  canWait: true,
  now,
  ...overrides,
});
const retryable = new GatewayError(503, 'vendor down', { retryable: true });

describe('failure policy', () => {
  it('retries a retryable error while attempts and time remain, with backoff', () => {
    const decision = decideFailure(config, attempt(retryable));
    assert.equal(decision.action, 'retry');
    assert.ok(decision.action === 'retry' && decision.delay >= 50 && decision.delay <= 100);
    assert.deepEqual(decideFailure(config, attempt(retryable, { attemptsMade: 3 })), { action: 'fail' });
  });

  it('names Redis lost mid-job (a restart, a failover) as 503 queue_unavailable and retries it; anything else unexpected is a final 500', () => {
    const log = createLogger('silent', 'test');
    for (const message of ['Connection is closed.', 'Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down', 'READONLY You can\'t write against a read only replica.']) {
      const error = toGatewayError(new Error(message), log);
      assert.deepEqual([error.status, error.code, error.retryable], [503, 'queue_unavailable', true], message);
      assert.equal(decideFailure(config, attempt(error)).action, 'retry');
    }
    const bug = toGatewayError(new TypeError('undefined is not a function'), log);
    assert.deepEqual([bug.status, bug.code, bug.retryable], [500, 'server_error', false]);
  });

  it('fails at once when output already reached the client, or the error is final', () => {
    assert.deepEqual(decideFailure(config, attempt(retryable, { outputStarted: true })), { action: 'fail' });
    assert.deepEqual(decideFailure(config, attempt(new GatewayError(400, 'bad request'))), { action: 'fail' });
  });

  it('fails when the backoff would pass the deadline', () => {
    const late = new GatewayError(503, 'x', { retryable: true, retryAfterMs: 5000 });
    assert.deepEqual(decideFailure(config, attempt(late, { deadline: now + 4000 })), { action: 'fail' });
  });

  it('waits out a rate limit without spending an attempt, for as long as the vendor asked', () => {
    const limited = new GatewayError(429, 'slow down', { retryable: true, retryAfterMs: 1234 });
    assert.deepEqual(decideFailure(config, attempt(limited, { attemptsMade: 3 })), { action: 'wait', delay: 1234 });
    // Without the job's lock token it cannot be put back: an ordinary retry, or the end.
    assert.deepEqual(decideFailure(config, attempt(limited, { canWait: false })), { action: 'retry', delay: 1234 });
    assert.deepEqual(decideFailure(config, attempt(limited, { canWait: false, attemptsMade: 3 })), { action: 'fail' });
  });

  it('waits on rate limits for RATE_LIMIT_WAIT_MS in all, then answers 429 saying when to come back', () => {
    const bounded = loadConfig({ RETRY_BASE_MS: '100', RATE_LIMIT_WAIT_MS: '5000' });
    const limited = new GatewayError(429, 'slow down', { retryable: true, retryAfterMs: 2000, code: 'rate_limit_exceeded' });
    assert.deepEqual(decideFailure(bounded, attempt(limited, { rateLimitedSince: now - 2000 })), { action: 'wait', delay: 2000 });
    const over = decideFailure(bounded, attempt(limited, { rateLimitedSince: now - 4000 }));
    assert.equal(over.action, 'fail');
    const answer = over.action === 'fail' ? over.answer! : assert.fail('no answer');
    assert.deepEqual([answer.status, answer.code, answer.headers['retry-after'], answer.headers['retry-after-ms']], [429, 'rate_limit_exceeded', '2', '2000']);
    assert.match(answer.message, /kept rate limiting this request for 4 s/);
    // Every channel resting after a 429 is the same wait, and ends the same way.
    const resting = new GatewayError(503, 'every channel rests', { retryable: true, retryAfterMs: 600, code: 'channels_cooling_down' });
    const restingOver = decideFailure(bounded, attempt(resting, { rateLimitedSince: now - 4900 }));
    assert.ok(restingOver.action === 'fail' && restingOver.answer?.status === 429 && restingOver.answer.headers['retry-after'] === '1');
  });

  it('a rate limit that would outlast the deadline is the deadline 504, with retry-after', () => {
    const limited = new GatewayError(429, 'slow down', { retryable: true, retryAfterMs: 5000 });
    const late = decideFailure(config, attempt(limited, { deadline: now + 4000 }));
    assert.ok(late.action === 'fail' && late.answer !== undefined);
    assert.deepEqual([late.answer.status, late.answer.code, late.answer.headers['retry-after']], [504, 'timeout', '5']);
  });

  it('moves a bad credential to another channel only when one can serve', () => {
    const auth = new GatewayError(502, 'vendor rejected our key', { code: 'vendor_auth_failed' });
    assert.deepEqual(decideFailure(config, attempt(auth)), { action: 'fail' });
    assert.equal(decideFailure(config, attempt(auth, { canSwitchChannel: () => true })).action, 'retry');
  });
});
