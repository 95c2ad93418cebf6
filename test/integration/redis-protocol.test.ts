import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { createRedis, redisProtocol } from '../../shared/redis.js';
import { KeyStore, hashSecret } from '../../api/accounts/key-store.js';
import { AccountStore } from '../../api/accounts/account-store.js';
import { reserve } from '../../shared/money/billing.js';
import { freshRedis, waitFor } from '../support/gateway.js';
import { testRecord } from '../support/record.js';
import { luaFixture } from '../support/fixtures.js';

/*
 * The protocol every connection speaks (RESP3, ioredis 6's default, kept
 * because it measured the same as RESP2: bench/resp-protocol.ts) and the
 * replies whose shape could differ between the two: a script's `false` and
 * nil, numbers beside them, and messages on a subscribed connection.
 */
describe('the Redis protocol', () => {
  let url: string;
  let redis: Redis;
  const closing: Array<() => Promise<unknown> | void> = [];

  before(async () => {
    const fresh = await freshRedis(12);
    url = fresh.url;
    fresh.redis.disconnect();
    redis = createRedis(url, { connectionName: 'protocol' });
    await redis.ping();
  });

  after(async () => {
    for (const close of closing.reverse()) await close();
    redis.disconnect();
  });

  it('is the one the gateway names, on its connections and those BullMQ makes from them', async () => {
    assert.equal(redisProtocol, 3);
    const queue = new Queue('{protocol}', { connection: redis });
    const worker = new Worker('{protocol}', async () => 'ok', { connection: redis });
    closing.push(
      () => worker.close(),
      () => queue.close(),
    );
    await worker.waitUntilReady();
    await queue.add('job', {});
    await waitFor(async () => (await queue.getCompletedCount()) === 1, 5000, 'the job done');
    // Every client of this database: ours, and the blocking connection BullMQ duplicated from it.
    const clients = String(await redis.client('LIST'))
      .trim()
      .split('\n')
      .filter((line) => / db=12 /.test(line));
    assert.ok(clients.length >= 2, clients.join('\n'));
    for (const line of clients) assert.match(line, /\bresp=3\b/, line);
  });

  it("reads a script's false and nil as null, never as 0 or false, so an unknown key is not a disabled one", async () => {
    const keys = new KeyStore(redis, await testRecord(redis));
    const accounts = new AccountStore(redis, await testRecord(redis));
    // The key access script answers false for an unknown key and 0 for a key of a disabled account.
    assert.equal(await keys.access(hashSecret('sk-no-such-key')), undefined);
    const account = await accounts.create({ email: 'resp@protocol.test', role: 'member' });
    const made = await keys.create('resp', { accountId: account.id });
    const found = await keys.access(hashSecret(made.key));
    assert.ok(found && found !== 'disabled', String(found));
    assert.equal(found.keyId, made.id);
    await accounts.update(account.id, { disabled: true });
    assert.equal(await keys.access(hashSecret(made.key)), 'disabled');
    // Raw shapes: false and nil alone and inside an array, beside numbers.
    assert.equal(await redis.eval(luaFixture('return-false'), 0), null);
    assert.equal(await redis.eval(luaFixture('get-key'), 1, 'protocol:none'), null);
    assert.deepEqual(await redis.eval(luaFixture('false-in-array'), 0), [1, null, 2]);
    // Admission's reply: a member at $0 is refused for its balance, the code read from the reply's numbers.
    const refused = await reserve(
      redis,
      {
        requestId: 'req_protocol',
        keyId: made.id,
        accountId: account.id,
        micros: 1,
        tokens: 1,
        deadline: Date.now() + 60_000,
      },
      {},
    );
    assert.deepEqual(refused, { ok: false, reason: 'account_balance', retryAfterMs: 0 });
  });

  it('delivers messages and pattern messages on a subscribed connection', async () => {
    const subscriber = createRedis(url, { connectionName: 'protocol-sub' });
    closing.push(() => subscriber.disconnect());
    const got: string[] = [];
    subscriber.on('message', (channel: string, message: string) => got.push(`${channel}:${message}`));
    subscriber.on('pmessage', (_pattern: string, channel: string, message: string) =>
      got.push(`p ${channel}:${message}`),
    );
    await subscriber.subscribe('protocol:one');
    await subscriber.psubscribe('protocol:p:*');
    // A subscribed RESP3 connection still answers commands; the gateway does not rely on it, but it must not break
    // replies.
    await redis.publish('protocol:one', 'a');
    await redis.publish('protocol:p:x', 'b');
    await waitFor(() => got.length === 2, 5000, 'both messages');
    assert.deepEqual(got.sort(), ['p protocol:p:x:b', 'protocol:one:a']);
  });
});
