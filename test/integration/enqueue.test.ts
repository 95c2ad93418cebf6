import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import pino from 'pino';
import { enqueue, queueFor, type JobPlan } from '../../api/requests/enqueue.js';
import { Backpressure } from '../../shared/scheduling/backpressure.js';
import type { KeyAccess } from '../../shared/accounts.js';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { asyncJobKey, billKey, payloadKey } from '../../shared/redis-keys.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { QueueShards } from '../../shared/queue-shards.js';
import { queueNames } from '../../shared/queues.js';
import { freshRedis } from '../support/gateway.js';

/**
 * The api's enqueue (`api/requests/enqueue.ts`): the reservation and the add, on a real Redis and real BullMQ queues.
 */

let redis: Redis;
let queues: QueueShards;
const config = loadConfig({});
const log = pino({ level: 'silent' });
const access: KeyAccess = { keyId: 'k1', accountId: 'a1' };
const fair = { accountId: 'a1', weight: 1, tokens: 10, tier: 'default' as const, contended: false };
const payer = { accountId: 'a1', weight: 1 };

before(async () => {
  ({ redis } = await freshRedis(2));
  queues = new QueueShards(redis, config.queueShards, queueNames);
});
after(async () => {
  await queues.close();
  redis.disconnect();
});
beforeEach(async () => {
  await redis.flushdb();
  await redis.hset(billKey('a1'), { id: 'a1', reserved: 0, balance: 1_000, 'k1.spent': 0, 'k1.reserved': 0 });
});

function plan(id: string, extra: Partial<JobPlan> = {}): JobPlan {
  const deadline = Date.now() + 60_000;
  const payload = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] };
  return {
    id,
    queue: 'chat',
    mode: 'held',
    data: {
      requestId: id,
      replyTo: 'sy:reply:test',
      keyId: 'k1',
      accountId: 'a1',
      endpoint: 'chat.completions',
      model: 'gpt-4o-mini',
      stream: false,
      deadline,
      payload,
    } as JobPlan['data'],
    payload,
    options: { jobId: id, attempts: 1 },
    deadline,
    ...extra,
  };
}

const deps = () => ({ config, redis, queues, backpressure: new Backpressure(redis, queues, config.maxWaiting, log) });
const reserved = async () => (await readBill(redis, 'a1'))?.reservedMicros;

describe('enqueue', () => {
  it('reserves a held job and adds it in one go: queued, its worst case held against the key and the account', async () => {
    const job = plan('req_held');
    const queue = queueFor(deps(), job, payer);
    const enqueued = await enqueue(
      deps(),
      queue,
      job,
      { spend: { access, estimate: { micros: 400, tokens: 10 } }, fair },
      log,
    );
    assert.equal(typeof enqueued.headers, 'object');
    const queued = await queue.getJob('req_held');
    assert.ok(queued, 'the job is in its queue');
    assert.equal(queued.data.requestId, 'req_held');
    assert.equal(await queued.getState(), 'prioritized');
    assert.equal(await reserved(), 400);
    assert.equal((await readKeySpend(redis, 'a1', 'k1'))?.reservedMicros, 400);
  });

  it('queues nothing for a refused request, leaves no placeholder under its id, and holds nothing', async () => {
    const job = plan('req_broke');
    const queue = queueFor(deps(), job, payer);
    const error = await enqueue(
      deps(),
      queue,
      job,
      { spend: { access, estimate: { micros: 1_001, tokens: 10 } }, fair },
      log,
    ).then(
      () => assert.fail('queued'),
      (e: unknown) => e,
    );
    assert.ok(error instanceof GatewayError);
    assert.equal(error.status, 429);
    assert.equal(error.code, 'insufficient_quota');
    assert.equal(await queue.getJob('req_broke'), undefined);
    assert.equal(await redis.exists(queue.toKey('req_broke')), 0, 'the placeholder that kept the add out is gone');
    assert.equal(await reserved(), 0);
  });

  it('writes an async job its record and a large payload apart before the add', async () => {
    const job = plan('req_async', {
      mode: 'async',
      storedPayload: JSON.stringify({ large: true }),
      asyncRecord: { queue: 'chat', keyId: 'k1', endpoint: 'chat.completions', model: 'gpt-4o-mini', created: 1 },
    });
    const queue = queueFor(deps(), job, payer);
    await enqueue(deps(), queue, job, { spend: { access, estimate: { micros: 10, tokens: 10 } }, fair }, log);
    assert.deepEqual(JSON.parse((await redis.get(asyncJobKey('req_async')))!), job.asyncRecord);
    assert.equal(await redis.get(payloadKey('req_async')), '{"large":true}');
    assert.ok((await redis.pttl(payloadKey('req_async'))) > 60_000, 'kept past the deadline');
    assert.ok(await queue.getJob('req_async'));
    assert.equal(await reserved(), 10);
  });

  it('gives the reservation back when a queued job is abandoned (removed while it waited)', async () => {
    const job = plan('req_gone');
    const queue = queueFor(deps(), job, payer);
    const enqueued = await enqueue(
      deps(),
      queue,
      job,
      { spend: { access, estimate: { micros: 300, tokens: 10 } }, fair },
      log,
    );
    assert.equal(await reserved(), 300);
    enqueued.abandon();
    for (let i = 0; i < 50 && (await reserved()) !== 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await reserved(), 0);
  });

  it(
    "refuses with 503 a capability this api does not serve, and with 429 an account that fills its lane's waiting " +
      'room, not another account',
    async () => {
      const chatOnly = new QueueShards(redis, config.queueShards, ['chat']);
      const narrow = new Backpressure(redis, chatOnly, { ...config.maxWaiting, chat: 1 }, log, 200, 1);
      const on = { queues: chatOnly, backpressure: narrow };
      assert.throws(
        () => queueFor(on, { id: 'x', queue: 'image' }, payer),
        (e: unknown) => e instanceof GatewayError && e.status === 503,
      );
      queueFor(on, { id: 'a', queue: 'chat' }, payer);
      assert.throws(
        () => queueFor(on, { id: 'b', queue: 'chat' }, payer),
        (e: unknown) =>
          e instanceof GatewayError &&
          e.status === 429 &&
          e.code === 'rate_limit_exceeded' &&
          /waiting/.test(e.message),
      );
      queueFor(on, { id: 'c', queue: 'chat' }, { accountId: 'a2', weight: 1 });
      await chatOnly.close();
    },
  );
});
