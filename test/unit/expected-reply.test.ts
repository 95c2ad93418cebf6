import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { encodeReply, type ReplyMessage } from '../../shared/reply.js';
import { ReplyHub, type ReplyTarget } from '../../api/relay/reply-hub.js';

const channel = 'sy:reply:api-test';
const quiet = { warn: () => undefined, debug: () => undefined } as unknown as Logger;

/** A hub on a subscriber that only emits what a test publishes (no Redis: the sweep is off, nothing is started). */
function hubOnFakeChannel(): {
  hub: ReplyHub;
  publish(kind: ReplyMessage['kind'], jobId: string, seq: number, payload?: string): void;
} {
  const subscriber = new EventEmitter();
  const hub = new ReplyHub(subscriber as unknown as Redis, {} as Redis, channel, quiet, 0);
  return {
    hub,
    publish: (kind, jobId, seq, payload = '') =>
      subscriber.emit('message', channel, encodeReply(kind, jobId, seq, payload)),
  };
}

/**
 * A reply that answers the client, as far as the hub can tell: what it was delivered, and the error it was aborted
 * with.
 */
function recordingTarget(): ReplyTarget & { delivered: string[]; abortedWith: GatewayError[] } {
  const delivered: string[] = [];
  const abortedWith: GatewayError[] = [];
  return {
    jobKey: 'bull:{chat}:job_1',
    delivered,
    abortedWith,
    deliver: (message) => void delivered.push(`${message.kind}:${message.seq}:${message.payload}`),
    reconcile: () => undefined,
    abort: async (error) => void abortedWith.push(error),
  };
}

describe('a reply expected before its job is queued', () => {
  it('keeps what arrives before the hold begins, in order, then hands on what follows', () => {
    const { hub, publish } = hubOnFakeChannel();
    const expected = hub.expect('job_1', true);
    assert.equal(hub.size, 1);
    publish('chunk', 'job_1', 1, 'data: a\n\n');
    publish('chunk', 'job_1', 2, 'data: b\n\n');
    publish('chunk', 'job_2', 1, 'data: not this one\n\n');
    assert.equal(expected.jobKey, undefined, 'no job key before the job is queued: the liveness sweep leaves it alone');
    const target = recordingTarget();
    expected.attach(target);
    assert.deepEqual(target.delivered, ['chunk:1:data: a\n\n', 'chunk:2:data: b\n\n']);
    assert.equal(expected.jobKey, target.jobKey);
    publish('chunk', 'job_1', 2, 'data: b again\n\n');
    // A stream's `done` carries the number of its last chunk.
    publish('done', 'job_1', 2, 'data: [DONE]\n\n');
    assert.deepEqual(target.delivered.slice(2), ['done:2:data: [DONE]\n\n'], 'a chunk seen already is skipped');
    expected.release();
    assert.equal(hub.size, 0);
  });

  it('is released when its job was never queued: nothing is routed to it, nothing is left in the hub', () => {
    const { hub, publish } = hubOnFakeChannel();
    const expected = hub.expect('job_1', false);
    expected.release();
    assert.equal(hub.size, 0);
    publish('done', 'job_1', 0, '{}');
    const target = recordingTarget();
    expected.attach(target);
    assert.deepEqual(target.delivered, [], 'what arrived after the release was not kept');
  });

  it("a stale release leaves a newer request's reply for the same job id in place", () => {
    const { hub } = hubOnFakeChannel();
    const first = hub.expect('job_1', false);
    const second = hub.expect('job_1', false);
    first.release();
    assert.equal(hub.size, 1);
    second.release();
    assert.equal(hub.size, 0);
  });

  it('a forced shutdown while the job is being queued ends the reply as it takes over, or with the release', async () => {
    const { hub } = hubOnFakeChannel();
    const shutdown = new GatewayError(503, 'shutting down', { code: 'server_shutting_down' });
    const queued = hub.expect('job_1', true);
    let settled = false;
    const aborting = hub.abortAll(shutdown).then(() => {
      settled = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(settled, false, 'the abort waits for the reply that answers the client');
    const target = recordingTarget();
    queued.attach(target);
    await aborting;
    assert.deepEqual(target.abortedWith, [shutdown]);
    queued.release();

    const refused = hub.expect('job_2', false);
    const abortingRefused = hub.abortAll(shutdown);
    refused.release();
    await abortingRefused;
    assert.equal(hub.size, 0);
  });
});
