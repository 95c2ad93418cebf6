import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { KeyStore } from '../../api/accounts/key-store.js';
import { paidKeyIn, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { reasonToSkip } from '../support/redis-cluster.js';
import { sentinelSupport, startRedisSentinel, type RedisSentinelHarness } from '../support/redis-sentinel.js';
import { assertEveryRequestEnded, assertMoneyAddsUp, loadThrough, outcome, paidModel, tally } from '../support/failover-load.js';
import { freshDatabase } from '../support/record.js';
import { openRecord } from '../../storage/record/database.js';

const skip = reasonToSkip(sentinelSupport());

// The gateway on a primary and its replica, found through three Sentinels started for this file.
describe('the gateway on Redis Sentinel', { skip, timeout: 180_000 }, () => {
  let sentinel: RedisSentinelHarness;
  let redis: Redis;
  let keys: KeyStore;
  let api: GatewayProcess;
  let worker: GatewayProcess;

  before(async () => {
    sentinel = await startRedisSentinel({ sentinels: 3 });
    redis = new Redis({ sentinels: sentinel.sentinelNodes, name: sentinel.name, maxRetriesPerRequest: 3, reconnectOnError: (error) => (/READONLY/.test(error.message) ? 2 : false) });
    redis.on('error', () => undefined);
    const databaseUrl = await freshDatabase('sentinel');
    keys = new KeyStore(redis, await openRecord(databaseUrl));
    const env = { ...sentinel.env, DATABASE_URL: databaseUrl, MOCK_STREAM_DELAY_MS: '5', STREAM_RESUME_GRACE_MS: '0' };
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    redis?.disconnect();
    await sentinel?.stop();
  });

  it('serves plain and streamed chat through the primary the Sentinels name', async () => {
    const client = api.client((await keys.create('sentinel')).key);
    const completion = await client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'via sentinel' }] });
    assert.match(completion.choices[0]!.message.content ?? '', /via sentinel/);
    let text = '';
    for await (const chunk of await client.chat.completions.create({ model: 'mock-chat', stream: true, messages: [{ role: 'user', content: 'streamed' }] })) text += chunk.choices[0]?.delta?.content ?? '';
    assert.match(text, /streamed/);
  });

  it('fails over under load: every request ends, the service resumes on the promoted replica, and the money adds up', async (t) => {
    const payer = await paidKeyIn(keys, 50_000_000);
    const client = new OpenAI({ apiKey: payer.key, baseURL: `${api.url}/v1`, maxRetries: 0, timeout: 30_000 });
    const before = await sentinel.primary();
    let elapsedMs = 0;
    const outcomes = await loadThrough(client, async () => {
      await sentinel.killPrimary();
      elapsedMs = (await sentinel.waitForFailover()).elapsedMs;
    });
    t.diagnostic(`failover in ${elapsedMs} ms; ${tally(outcomes)}`);
    assert.notEqual((await sentinel.primary()).port, before.port);
    assertEveryRequestEnded(outcomes, 16);

    const again = () => outcome(() => client.chat.completions.create({ model: paidModel, messages: [{ role: 'user', content: 'after' }], max_tokens: 8 }));
    await waitFor(async () => (await again()).status === 200, 20_000, 'service after the failover');
    for (let i = 0; i < 5; i++) assert.equal((await again()).status, 200);

    // Here the one primary held the money too. Replication is asynchronous, so the last writes before the kill
    // may be gone; but each reservation and each settlement is one script, replicated whole or not at all,
    // so what remains still adds up.
    await assertMoneyAddsUp(redis, keys.record, payer, 50_000_000);
  });
});
