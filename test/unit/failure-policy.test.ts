import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig } from '../../shared/config.js';
import { GatewayError, recordUnreachable } from '../../shared/errors.js';
import { DelayedError, UnrecoverableError } from 'bullmq';
import { AsyncJobFailure } from '../../shared/async-job-failure.js';
import {
  channelFaultCodes,
  decideFailure,
  isChannelFault,
  isFinalFailure,
  queueSignal,
  toGatewayError,
  type FailedAttempt,
} from '../../workers/failure-policy.js';
import { createLogger } from '../../shared/logger.js';
import { AnsweredFailure } from '../../workers/answered-failure.js';
import { ClientGoneError } from '../../workers/client-gone-error.js';

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

  it(
    'names Redis lost mid-job (a restart, a failover) as 503 queue_unavailable and retries it; anything else ' +
      'unexpected is a final 500',
    () => {
      const log = createLogger('silent', 'test');
      for (const message of [
        'Connection is closed.',
        'Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down',
        "READONLY You can't write against a read only replica.",
      ]) {
        const error = toGatewayError(new Error(message), log);
        assert.deepEqual([error.status, error.code, error.retryable], [503, 'queue_unavailable', true], message);
        assert.equal(decideFailure(config, attempt(error)).action, 'retry');
      }
      const bug = toGatewayError(new TypeError('undefined is not a function'), log);
      assert.deepEqual([bug.status, bug.code, bug.retryable], [500, 'server_error', false]);
    },
  );

  it(
    'names PostgreSQL away (a refused connection taken from the record pool, a server shutting down or starting) ' +
      'as 503 record_unavailable and retries it',
    () => {
      const log = createLogger('silent', 'test');
      const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      Object.defineProperty(refused, recordUnreachable, { value: true });
      const starting = Object.assign(new Error('the database system is starting up'), { code: '57P03' });
      const shutdown = Object.assign(new Error('terminating connection due to administrator command'), {
        code: '57P01',
      });
      for (const caught of [refused, starting, shutdown]) {
        const error = toGatewayError(caught, log);
        assert.deepEqual(
          [error.status, error.code, error.retryable, error.headers['retry-after']],
          [503, 'record_unavailable', true, '2'],
          caught.message,
        );
        assert.equal(decideFailure(config, attempt(error)).action, 'retry');
      }
      // The same refused connection not from the record's pool is Redis's: named as the queue.
      const redisRefused = toGatewayError(
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' }),
        log,
      );
      assert.equal(redisRefused.code, 'queue_unavailable');
      // A statement the record refuses for its data is no outage.
      assert.equal(
        toGatewayError(Object.assign(new Error('duplicate key value'), { code: '23505' }), log).code,
        'server_error',
      );
    },
  );

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
    const limited = new GatewayError(429, 'slow down', {
      retryable: true,
      retryAfterMs: 2000,
      code: 'rate_limit_exceeded',
    });
    assert.deepEqual(decideFailure(bounded, attempt(limited, { rateLimitedSince: now - 2000 })), {
      action: 'wait',
      delay: 2000,
    });
    const over = decideFailure(bounded, attempt(limited, { rateLimitedSince: now - 4000 }));
    assert.equal(over.action, 'fail');
    const answer = over.action === 'fail' ? over.answer! : assert.fail('no answer');
    assert.deepEqual(
      [answer.status, answer.code, answer.headers['retry-after'], answer.headers['retry-after-ms']],
      [429, 'rate_limit_exceeded', '2', '2000'],
    );
    assert.match(answer.message, /kept rate limiting this request for 4 s/);
    // Every channel resting after a 429 is the same wait, and ends the same way.
    const resting = new GatewayError(503, 'every channel rests', {
      retryable: true,
      retryAfterMs: 600,
      code: 'channels_cooling_down',
    });
    const restingOver = decideFailure(bounded, attempt(resting, { rateLimitedSince: now - 4900 }));
    assert.ok(
      restingOver.action === 'fail' &&
        restingOver.answer?.status === 429 &&
        restingOver.answer.headers['retry-after'] === '1',
    );
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

describe('whether a failure is final', () => {
  const wire = new GatewayError(400, 'bad request').toWire();
  const stalledOut = () => new UnrecoverableError('job stalled more than allowable limit');

  it("reads BullMQ's own signals by class, and a job failed for stalling too often by BullMQ's reason", () => {
    assert.equal(queueSignal(new DelayedError()), 'put-back');
    for (const error of [
      new UnrecoverableError(),
      new AnsweredFailure(wire),
      new AsyncJobFailure(wire),
      new ClientGoneError(),
    ]) {
      assert.equal(queueSignal(error), 'unrecoverable', error.name);
    }
    assert.equal(queueSignal(stalledOut()), 'stalled-out');
    // Older BullMQ failed it with a plain Error of the same reason.
    assert.equal(queueSignal(new Error('job stalled more than allowable limit')), 'stalled-out');
    // A name is not a class, and a message that only mentions stalling is not BullMQ's reason.
    const named = Object.assign(new Error('delayed'), { name: 'DelayedError' });
    for (const error of [
      named,
      new GatewayError(502, 'The vendor stream stalled.', { retryable: true }),
      new Error('boom'),
      'stalled',
      undefined,
      null,
    ]) {
      assert.equal(queueSignal(error), undefined, String(error));
    }
  });

  it("is final when the error says so or the last attempt is spent, as BullMQ's failed event sees the job", () => {
    const job = (attemptsMade: number, attempts?: number) => ({
      attemptsMade,
      opts: attempts === undefined ? {} : { attempts },
    });
    const retryable = new GatewayError(503, 'vendor down', { retryable: true });
    assert.equal(isFinalFailure(job(1, 3), retryable), false);
    assert.equal(isFinalFailure(job(2, 3), retryable), false);
    assert.equal(isFinalFailure(job(3, 3), retryable), true);
    // A job added without attempts has one.
    assert.equal(isFinalFailure(job(1), retryable), true);
    // An UnrecoverableError (ours or BullMQ's) and a stall too many end the job with attempts left.
    for (const error of [new AnsweredFailure(wire), new ClientGoneError(), new AsyncJobFailure(wire), stalledOut()]) {
      assert.equal(isFinalFailure(job(1, 3), error), true, error.name);
    }
    // A job put back to wait has not failed, even on its last attempt.
    assert.equal(isFinalFailure(job(3, 3), new DelayedError()), false);
  });

  it('counts the failed attempt the run has not yet seen counted, when told', () => {
    // In the run, the job's attemptsMade excludes the attempt under way: the second of three is not the last.
    const running = { attemptsMade: 1, opts: { attempts: 3 } };
    const retryable = new GatewayError(503, 'vendor down', { retryable: true });
    assert.equal(isFinalFailure(running, retryable, running.attemptsMade + 1), false);
    assert.equal(isFinalFailure({ ...running, attemptsMade: 2 }, retryable, 3), true);
  });

  it('names the channel faults in one list: a bad or exhausted key, not a failed request', () => {
    assert.deepEqual([...channelFaultCodes].sort(), ['vendor_auth_failed', 'vendor_quota_exhausted']);
    for (const code of channelFaultCodes)
      assert.equal(isChannelFault(new GatewayError(502, 'key refused', { code })), true, code);
    for (const code of ['vendor_error', 'rate_limit_exceeded', 'vendor_timeout', null]) {
      assert.equal(isChannelFault(new GatewayError(502, 'failed', { code })), false, String(code));
    }
  });
});
