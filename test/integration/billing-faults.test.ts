import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { readBill, readKeySpend, reserve } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import { KeyStore } from '../../api/accounts/key-store.js';
import { Meter, settleJob } from '../../workers/settlement.js';
import { OverrunReport } from '../../workers/overrun-report.js';
import { startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';
import { testRecord, usageRows } from '../support/record.js';

const model = 'gpt-4o-mini';
const prices = new PriceList(loadCatalog().all());

describe('billing when processes and Redis fail', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>> | undefined;
  const processes: GatewayProcess[] = [];
  const clients: Redis[] = [];

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    for (const client of clients.splice(0)) client.disconnect();
    await redisServer?.remove();
  });

  async function setUp(aof = false) {
    redisServer = await startPrivateRedis({ aof });
    const redis = new Redis(redisServer.url, { maxRetriesPerRequest: 3 });
    // Some tests stop Redis on purpose: the reconnect attempts are expected.
    redis.on('error', () => undefined);
    clients.push(redis);
    const store = new KeyStore(redis, await testRecord(redis));
    const account = await store.accounts.create({ email: 'payer@example.com', name: 'payer' });
    await store.accounts.credit(account.id, 5_000_000, 'test credit');
    const key = await store.create('payer', { accountId: account.id });
    return { redis, store, account: account.id, key };
  }

  // The usage rows the record holds (the writer moves each settled record there from Redis); only the settled ones,
  // since a request's log half may reach the record before its settlement.
  const records = async (redis: Redis) => (await usageRows(redis)).filter((row) => row.settled) as unknown as Array<Record<string, string | number>>;
  const spent = async (redis: Redis, account: string, keyId: string) => (await readKeySpend(redis, account, keyId))?.spentMicros;
  const balance = async (redis: Redis, account: string) => (await readBill(redis, account))?.balanceMicros;
  const reserved = async (redis: Redis, account: string) => (await readBill(redis, account))?.reservedMicros;

  it('bills a job once when the worker running it is SIGKILLed and another finishes it', async () => {
    const { redis, account, key } = await setUp();
    const env = { REDIS_URL: redisServer!.url, WORKER_LOCK_MS: '2000' };
    const api = await startGateway({ role: 'api', env });
    processes.push(api);
    const doomed = await startGateway({ role: 'worker', env });
    processes.push(doomed);

    const answer = fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, max_tokens: 20, messages: [{ role: 'user', content: 'Take your time [mock:slow:1500]' }] }),
    });
    await waitFor(async () => (await redis.llen('bull:{chat}:active')) === 1, 10_000, 'the job to start');
    processes.push(await startGateway({ role: 'worker', env }));
    await doomed.stop('SIGKILL');

    const response = await answer;
    assert.equal(response.status, 200);
    const body = (await response.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    const requestId = response.headers.get('x-request-id')!;
    await waitFor(async () => (await records(redis)).some((r) => r.request_id === requestId), 10_000, 'settlement');
    const mine = (await records(redis)).filter((r) => r.request_id === requestId);
    assert.equal(mine.length, 1, 'one usage record');
    const cost = prices.costMicros(model, { inputTokens: body.usage.prompt_tokens, cachedTokens: 0, outputTokens: body.usage.completion_tokens, images: 0, audioSeconds: 0, videoSeconds: 0 });
    assert.equal(mine[0]!.cost_micros, cost);
    assert.equal(await spent(redis, account, key.id), cost);
    assert.equal(await balance(redis, account), 5_000_000 - cost);
    assert.equal(await reserved(redis, account), 0);
    // In the record too: one row, the key's spend and the account's settled total to the micro-dollar.
    const record = await testRecord(redis);
    await waitFor(async () => (await record.selectFrom('api_keys').select('spent_micros').where('id', '=', key.id).executeTakeFirstOrThrow()).spent_micros === cost, 10_000, 'the spend in the record');
    assert.equal((await record.selectFrom('accounts').select('settled_micros').where('id', '=', account).executeTakeFirstOrThrow()).settled_micros, cost);
    assert.equal((await record.selectFrom('usage').select('request_id').where('request_id', '=', requestId).execute()).length, 1);
  });

  it('keeps balances, spend and usage across a Redis restart with AOF', async () => {
    const { redis, account, key } = await setUp(true);
    const gateway = await startGateway({ env: { REDIS_URL: redisServer!.url } });
    processes.push(gateway);
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Remember this' }] }),
    });
    assert.equal(response.status, 200);
    const requestId = response.headers.get('x-request-id')!;
    await waitFor(async () => (await records(redis)).some((r) => r.request_id === requestId), 5000, 'settlement');
    const before = {
      balance: await balance(redis, account),
      spent: await spent(redis, account, key.id),
      usage: (await records(redis)).length,
    };
    assert.ok(before.spent! > 0 && before.balance === 5_000_000 - before.spent!);
    // Everything acknowledged is in the AOF file before the crash (everysec may hold writes back up to 2 s).
    await redisServer!.persisted();
    await redisServer!.stop();
    assert.notEqual(await redis.ping().catch(() => 'down'), 'PONG', 'Redis is down');
    await redisServer!.restart();
    await waitFor(async () => (await redis.ping().catch(() => '')) === 'PONG', 10_000, 'Redis back');
    assert.deepEqual(
      {
        balance: await balance(redis, account),
        spent: await spent(redis, account, key.id),
        usage: (await records(redis)).length,
      },
      before,
    );
  });

  it('applies a credit made while Redis is away once Redis is back, exactly once, and the record agrees', async () => {
    const { redis, store, account } = await setUp(true);
    const record = await testRecord(redis);
    await redisServer!.stop();
    const crediting = store.accounts.credit(account, 1_000_000, 'while Redis is away');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await redisServer!.restart();
    assert.equal(await crediting, 6_000_000);
    await waitFor(async () => (await redis.ping().catch(() => '')) === 'PONG', 10_000, 'Redis back');
    assert.equal(await balance(redis, account), 6_000_000);
    // A second credit counts from the record's total: the first is not applied twice, nor lost.
    assert.equal(await store.accounts.credit(account, 250_000, 'after'), 6_250_000);
    assert.equal(await balance(redis, account), 6_250_000);
    const row = await record.selectFrom('accounts').select(['credits_micros', 'settled_micros']).where('id', '=', account).executeTakeFirstOrThrow();
    assert.equal(row.credits_micros - row.settled_micros, 6_250_000);
    const ledger = await store.accounts.ledger(account, 10);
    assert.deepEqual(ledger.map((e) => [e.amountMicros, e.balanceMicros]), [[250_000, 6_250_000], [1_000_000, 6_000_000], [5_000_000, 5_000_000]]);
  });

  it('retries a settlement while Redis is away, and settles once it is back', async () => {
    const { redis, account, key } = await setUp(true);
    const requestId = 'req_settle_retry';
    const outcome = await reserve(redis, { requestId, keyId: key.id, accountId: account, micros: 1000, tokens: 10, deadline: Date.now() + 60_000 }, {});
    assert.equal(outcome.ok, true);
    await redisServer!.persisted();

    const worker = new Redis(redisServer!.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
    clients.push(worker);
    worker.on('error', () => undefined);
    await redisServer!.stop();
    const produced = new Meter();
    produced.usage = { prompt_tokens: 100, completion_tokens: 50, total_tokens: 150 };
    const log = pino({ level: 'silent' });
    const settling = settleJob(
      { config: { mock: { billed: false } }, redis: worker, prices, policy: { bufferRecords: 1000 }, log, overruns: new OverrunReport(log) },
      { requestId, replyTo: 'nobody', keyId: key.id, accountId: account, endpoint: 'chat.completions', model, stream: false, deadline: Date.now() + 60_000 },
      { endpoint: 'chat.completions', payload: { model, messages: [{ role: 'user', content: 'x' }] } },
      'mock',
      produced,
      'completed',
    );
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await redisServer!.restart();
    await settling;
    const cost = prices.costMicros(model, { inputTokens: 100, cachedTokens: 0, outputTokens: 50, images: 0, audioSeconds: 0, videoSeconds: 0 });
    await waitFor(async () => (await redis.ping().catch(() => '')) === 'PONG', 10_000, 'Redis back');
    assert.equal(await spent(redis, account, key.id), cost);
    assert.equal(await reserved(redis, account), 0);
  });
});
