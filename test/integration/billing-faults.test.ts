import assert from 'node:assert/strict';
import { createServer, connect, type Socket } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadCatalog } from '../../shared/catalog.js';
import { charge, readBill, readKeySpend, reserve, settle } from '../../shared/money/billing.js';
import type { UsageEntry } from '../../shared/money/usage.js';
import { apiKeyRecordKey, billingBucket, usageStreamKey } from '../../shared/redis-keys.js';
import { appendRequestLog, logField } from '../../shared/request-log.js';
import { journalWindowMs } from '../../shared/redis-journal.js';
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
  const records = async (redis: Redis) =>
    (await usageRows(redis)).filter((row) => row.settled) as unknown as Array<Record<string, string | number>>;
  const spent = async (redis: Redis, account: string, keyId: string) =>
    (await readKeySpend(redis, account, keyId))?.spentMicros;
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
      body: JSON.stringify({
        model,
        max_tokens: 20,
        messages: [{ role: 'user', content: 'Take your time [mock:slow:1500]' }],
      }),
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
    const cost = prices.costMicros(model, {
      inputTokens: body.usage.prompt_tokens,
      cachedTokens: 0,
      outputTokens: body.usage.completion_tokens,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    assert.equal(mine[0]!.cost_micros, cost);
    assert.equal(await spent(redis, account, key.id), cost);
    assert.equal(await balance(redis, account), 5_000_000 - cost);
    assert.equal(await reserved(redis, account), 0);
    // In the record too: one row, the key's spend and the account's settled total to the micro-dollar.
    const record = await testRecord(redis);
    await waitFor(
      async () =>
        (await record.selectFrom('api_keys').select('spent_micros').where('id', '=', key.id).executeTakeFirstOrThrow())
          .spent_micros === cost,
      10_000,
      'the spend in the record',
    );
    assert.equal(
      (await record.selectFrom('accounts').select('settled_micros').where('id', '=', account).executeTakeFirstOrThrow())
        .settled_micros,
      cost,
    );
    assert.equal(
      (await record.selectFrom('usage').select('request_id').where('request_id', '=', requestId).execute()).length,
      1,
    );
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
    const row = await record
      .selectFrom('accounts')
      .select(['credits_micros', 'settled_micros'])
      .where('id', '=', account)
      .executeTakeFirstOrThrow();
    assert.equal(row.credits_micros - row.settled_micros, 6_250_000);
    const ledger = await store.accounts.ledger(account, 10);
    assert.deepEqual(
      ledger.map((e) => [e.amountMicros, e.balanceMicros]),
      [
        [250_000, 6_250_000],
        [1_000_000, 6_000_000],
        [5_000_000, 5_000_000],
      ],
    );
  });

  it('retries a settlement while Redis is away, and settles once it is back', async () => {
    const { redis, account, key } = await setUp(true);
    const requestId = 'req_settle_retry';
    const outcome = await reserve(
      redis,
      { requestId, keyId: key.id, accountId: account, micros: 1000, tokens: 10, deadline: Date.now() + 60_000 },
      {},
    );
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
      {
        config: { mock: { billed: false } },
        redis: worker,
        prices,
        policy: { bufferRecords: 1000 },
        log,
        overruns: new OverrunReport(log),
      },
      {
        requestId,
        replyTo: 'nobody',
        keyId: key.id,
        accountId: account,
        endpoint: 'chat.completions',
        model,
        stream: false,
        deadline: Date.now() + 60_000,
      },
      { endpoint: 'chat.completions', payload: { model, messages: [{ role: 'user', content: 'x' }] } },
      'mock',
      produced,
      'completed',
    );
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await redisServer!.restart();
    await settling;
    const cost = prices.costMicros(model, {
      inputTokens: 100,
      cachedTokens: 0,
      outputTokens: 50,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });
    await waitFor(async () => (await redis.ping().catch(() => '')) === 'PONG', 10_000, 'Redis back');
    assert.equal(await spent(redis, account, key.id), cost);
    assert.equal(await reserved(redis, account), 0);
  });
  it(
    'writes again what a failover lost: a settlement, a charge, a credit, a key’s revocation and a refusal’s log ' +
      'event the old primary took after the replica was promoted reach the new one, each once, and a settlement it ' +
      'had already is not doubled',
    async () => {
      // Two Redis servers, the second a replica of the first; the settling client reaches them through a proxy that
      // the test points at the new primary, as a failover moves a client (ioredis reconnects, and is ready again).
      const primary = await startPrivateRedis({ aof: false });
      const replica = await startPrivateRedis({ aof: false });
      const direct = (url: string) => {
        const client = new Redis(url, { maxRetriesPerRequest: 3 });
        client.on('error', () => undefined);
        clients.push(client);
        return client;
      };
      const onPrimary = direct(primary.url);
      const onReplica = direct(replica.url);
      const sockets = new Set<Socket>();
      let target: number | undefined = Number(new URL(primary.url).port);
      const proxy = createServer((inbound) => {
        if (target === undefined) return void inbound.destroy();
        const outbound = connect(target, '127.0.0.1');
        for (const socket of [inbound, outbound]) {
          sockets.add(socket);
          socket.on('error', () => undefined);
          socket.on('close', () => sockets.delete(socket));
        }
        inbound.pipe(outbound).pipe(inbound);
        inbound.on('close', () => outbound.destroy());
        outbound.on('close', () => inbound.destroy());
      });
      await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
      try {
        await onReplica.replicaof('127.0.0.1', new URL(primary.url).port);
        await waitFor(
          async () => /master_link_status:up/.test(await onReplica.info('replication')),
          10_000,
          'the replica in sync',
        );
        const store = new KeyStore(onPrimary, await testRecord(onPrimary));
        const account = (await store.accounts.create({ email: 'failover@example.com', name: 'failover' })).id;
        await store.accounts.credit(account, 5_000_000, 'test credit');
        const key = await store.create('failover', { accountId: account });
        const doomed = await store.create('doomed', { accountId: account });
        const settler = new Redis(`redis://127.0.0.1:${(proxy.address() as { port: number }).port}`, {
          maxRetriesPerRequest: 3,
        });
        settler.on('error', () => undefined);
        clients.push(settler);
        const entry = (requestId: string, cost: number): UsageEntry => ({
          request_id: requestId,
          account_id: account,
          key_id: key.id,
          model,
          vendor: 'openai',
          input_tokens: 10,
          cached_tokens: 0,
          cache_write_tokens: 0,
          output_tokens: 5,
          images: 0,
          audio_seconds: 0,
          video_seconds: 0,
          cost_micros: cost,
          created: Math.floor(Date.now() / 1000),
          duration_ms: 1,
          status: 'completed',
          service_tier: 'default',
        });
        const policy = { bufferRecords: 1000 };

        // Settled and replicated before the failover.
        assert.equal((await settle(settler, entry('req_before', 1_000), policy)).applied, true);
        assert.equal(await onPrimary.wait(1, 5000), 1);
        // The replica promoted; the old primary still answers, and takes a settlement and a charge the new one never
        // sees.
        await onReplica.replicaof('NO', 'ONE');
        assert.equal((await settle(settler, entry('req_lost', 20_000), policy)).applied, true);
        assert.equal((await charge(settler, entry('req_hit', 300), {}, policy)).ok, true);
        // An admin's credit and revocation, through an api whose connection is the settler's.
        const admin = new KeyStore(settler, await testRecord(onPrimary));
        await admin.accounts.credit(account, 7_000, 'in the failover');
        assert.equal(await admin.revoke(doomed.id), true);
        assert.equal(await onReplica.exists(apiKeyRecordKey(doomed.id)), 1, 'the new primary lost the revocation');
        await appendRequestLog(
          settler,
          {
            request_id: 'req_refused',
            account_id: account,
            key_id: key.id,
            endpoint: 'chat.completions',
            model,
            stream: false,
            status: 'refused',
            http_status: 429,
            error_code: 'rate_limit_exceeded',
            latency_ms: 1,
            ttft_ms: null,
            created: Math.floor(Date.now() / 1000),
          },
          1000,
        );
        assert.equal((await readBill(onPrimary, account))!.balanceMicros, 5_000_000 - 21_300 + 7_000);
        assert.equal(
          (await readBill(onReplica, account))!.balanceMicros,
          5_000_000 - 1_000,
          'the new primary lost them',
        );

        // The client loses its primary, and reaches the new one only after longer than the journal's window (a
        // primary that died: the Sentinels take seconds to promote): what it wrote just before is still sent again.
        target = undefined;
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => setTimeout(resolve, journalWindowMs + 500));
        target = Number(new URL(replica.url).port);
        const entries = async (field: string) =>
          (await onReplica.xrange(usageStreamKey(billingBucket(account)), '-', '+'))
            .filter(([, fields]) => fields[0] === field)
            .map(([, fields]) => (JSON.parse(fields[1]!) as { request_id: string }).request_id)
            .sort();
        const streamed = () => entries('usage');
        await waitFor(
          async () => (await streamed()).includes('req_lost') && (await streamed()).includes('req_hit'),
          10_000,
          'the lost settlements applied on the new primary',
        );
        assert.deepEqual(await streamed(), ['req_before', 'req_hit', 'req_lost'], 'each usage entry once');
        await waitFor(
          async () => (await onReplica.exists(apiKeyRecordKey(doomed.id))) === 0,
          5_000,
          'the key revoked on the new primary',
        );
        await waitFor(
          async () => (await entries(logField)).includes('req_refused'),
          5_000,
          'the lost log event on the new primary',
        );
        await waitFor(
          async () => (await readBill(onReplica, account))!.balanceMicros === 5_000_000 - 21_300 + 7_000,
          5_000,
          'the credit on the new primary',
        );
        assert.equal(await spent(onReplica, account, key.id), 21_300);

        // Another reconnection sends them again: nothing changes.
        const readies = new Promise((resolve) => settler.once('ready', resolve));
        for (const socket of sockets) socket.destroy();
        await readies;
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.deepEqual(await streamed(), ['req_before', 'req_hit', 'req_lost']);
        assert.equal((await readBill(onReplica, account))!.balanceMicros, 5_000_000 - 21_300 + 7_000);
      } finally {
        proxy.close();
        for (const socket of sockets) socket.destroy();
        await Promise.all([primary.remove(), replica.remove()]);
      }
    },
  );
});
