import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, type Redis } from 'ioredis';
import OpenAI from 'openai';
import { accountKey, billKey } from '../../shared/redis-keys.js';
import { KeyStore } from '../../api/accounts/key-store.js';
import { ConsoleClient } from '../support/console-client.js';
import { shardQueueName } from '../../shared/queues.js';
import { paidKeyIn, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import {
  assertEveryRequestEnded,
  assertMoneyAddsUp,
  loadThrough,
  outcome,
  paidModel,
  tally,
} from '../support/failover-load.js';
import { clusterSupport, reasonToSkip, startRedisCluster, type RedisClusterHarness } from '../support/redis-cluster.js';
import { freshDatabase } from '../support/record.js';
import { openRecord } from '../../storage/record/database.js';

const skip = reasonToSkip(clusterSupport());
const adminToken = 'cluster-admin-token-0123456789';

// The whole gateway on a Redis Cluster of 3 primaries and 3 replicas, started for this file on loopback.
describe('the gateway on a Redis Cluster', { skip, timeout: 240_000 }, () => {
  let cluster: RedisClusterHarness;
  let redis: Redis;
  let keys: KeyStore;
  let api: GatewayProcess;
  let worker: GatewayProcess;
  let apiKey: string;

  before(async () => {
    cluster = await startRedisCluster({ primaries: 3, replicasPerPrimary: 1 });
    redis = new Cluster(cluster.startupNodes, {
      redisOptions: { maxRetriesPerRequest: 3 },
      retryDelayOnFailover: 200,
    }) as unknown as Redis;
    redis.on('error', () => undefined);
    const databaseUrl = await freshDatabase('cluster');
    keys = new KeyStore(redis, await openRecord(databaseUrl));
    apiKey = (await keys.create('cluster')).key;
    const env = {
      ...cluster.env,
      DATABASE_URL: databaseUrl,
      QUEUE_SHARDS_CHAT: '2',
      MOCK_STREAM_DELAY_MS: '5',
      STREAM_RESUME_GRACE_MS: '0',
      ADMIN_TOKEN: adminToken,
    };
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    redis?.disconnect();
    await cluster?.stop();
  });

  it('serves chat, streamed chat, embeddings, images and async jobs', async () => {
    const client = api.client(apiKey);
    const completion = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'on a cluster' }],
    });
    assert.match(completion.choices[0]!.message.content ?? '', /on a cluster/);

    const stream = await client.chat.completions.create({
      model: 'mock-chat',
      stream: true,
      messages: [{ role: 'user', content: 'streamed' }],
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.match(text, /streamed/);

    const embedding = await client.embeddings.create({ model: 'mock-embedding', input: ['a', 'b'] });
    assert.equal(embedding.data.length, 2);

    const image = await client.images.generate({
      model: 'mock-image',
      prompt: 'a cluster',
      response_format: 'b64_json',
    });
    assert.ok(image.data?.[0]?.b64_json);

    const accepted = await fetch(`${api.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
      body: JSON.stringify({ model: 'mock-embedding', input: 'later' }),
    });
    assert.equal(accepted.status, 202);
    const { id } = (await accepted.json()) as { id: string };
    await waitFor(
      async () => {
        const job = (await (
          await fetch(`${api.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${apiKey}` } })
        ).json()) as { status: string };
        return job.status === 'completed';
      },
      10_000,
      'the async job',
    );
  });

  it('spreads its keys over the shards: each queue shard under its own tag, accounts under theirs', async () => {
    const owners = new Set<string>();
    for (const key of [
      `bull:${shardQueueName('chat', 0, 2)}:meta`,
      `bull:${shardQueueName('chat', 1, 2)}:meta`,
      'bull:{embeddings}:meta',
      accountKey('acct_default'),
      billKey('acct_default'),
    ]) {
      assert.equal(await redis.exists(key), 1, `${key} exists`);
      owners.add((await cluster.primaryForKey(key)).address);
    }
    assert.ok(owners.size >= 2, `the gateway's keys live on ${owners.size} primary`);
  });

  it('refuses a revoked key at once, and a request past the balance with 429 insufficient_quota', async () => {
    const doomed = await keys.create('doomed');
    const client = api.client(doomed.key);
    await client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'before' }] });
    await keys.revoke(doomed.id);
    await waitFor(
      async () => (await outcome(() => client.models.list())).status === 401,
      3000,
      'the revocation to reach the api',
    );

    const poor = await paidKeyIn(keys, 1);
    const refused = await outcome(() =>
      api
        .client(poor.key)
        .chat.completions.create({ model: paidModel, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    );
    assert.deepEqual([refused.status, refused.code], [429, 'insufficient_quota']);
  });

  it('runs the admin and console flows, each script of accounts, keys and sessions within one slot', async () => {
    const admin = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${api.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const json = (await res.json()) as Record<string, unknown>;
      assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    };
    const account = await admin('POST', '/admin/accounts', {
      email: 'slot@example.com',
      name: 'Slot',
      password: 'one-slot-only',
      role: 'member',
    });
    await admin('PATCH', `/admin/accounts/${account.id}`, { name: 'One slot' });
    await admin('POST', `/admin/accounts/${account.id}/credits`, { amount_usd: 5 });
    const key = await admin('POST', '/admin/keys', { name: 'slot', account_id: account.id, limit_usd: 1, rpm: 100 });
    await admin('PATCH', `/admin/keys/${key.id}`, { rpm: 50 });
    const served = await api
      .client(key.key as string)
      .chat.completions.create({ model: paidModel, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
    assert.ok(served.usage);
    await admin('GET', '/admin/usage');

    // Sign-in failures and sessions (a MULTI over the session and the account's session set).
    const browser = new ConsoleClient(api.url);
    assert.equal((await browser.signIn('slot@example.com', 'wrong password')).status, 401);
    assert.equal((await browser.signIn('slot@example.com', 'one-slot-only')).status, 200);
    assert.equal((await browser.request('GET', '/console/api/keys')).status, 200);

    await admin('DELETE', `/admin/keys/${key.id}`);
    await admin('DELETE', `/admin/accounts/${account.id}`);
    assert.equal(
      (await browser.request('GET', '/console/api/keys')).status,
      401,
      'deleting the account ended its session',
    );
  });

  it('survives losing a primary under load: every request ends, the service resumes by itself, and the money adds up', async (t) => {
    // The chat queue's primary, and a payer whose account bills on another (its money must not ride on asynchronous
    // replication here).
    const victim = await cluster.primaryForKey(`bull:${shardQueueName('chat', 0, 2)}:wait`);
    let payer = await paidKeyIn(keys, 50_000_000);
    while ((await cluster.primaryForKey(billKey(payer.account))).address === victim.address)
      payer = await paidKeyIn(keys, 50_000_000);
    const client = new OpenAI({ apiKey: payer.key, baseURL: `${api.url}/v1`, maxRetries: 0, timeout: 30_000 });
    let elapsedMs = 0;
    const outcomes = await loadThrough(client, async () => {
      const killed = await cluster.killPrimary(victim.port);
      elapsedMs = (await cluster.waitForFailover({ killed })).elapsedMs;
    });
    t.diagnostic(`failover in ${elapsedMs} ms; ${tally(outcomes)}`);
    assert.ok(elapsedMs < 20_000, `failover took ${elapsedMs} ms`);
    assertEveryRequestEnded(outcomes, 16);

    // Resumed by itself: new requests are served without restarting anything.
    const again = () =>
      outcome(() =>
        client.chat.completions.create({
          model: paidModel,
          messages: [{ role: 'user', content: 'after' }],
          max_tokens: 8,
        }),
      );
    await waitFor(async () => (await again()).status === 200, 20_000, 'service after the failover');
    for (let i = 0; i < 5; i++) assert.equal((await again()).status, 200);

    await assertMoneyAddsUp(redis, keys.record, payer, 50_000_000);
  });
});
