import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';
import { openRealtime, userText, type ServerEvent } from '../support/realtime-client.js';
import { loadCatalog } from '../../shared/catalog.js';
import { readBill } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import { readRealtimeUsage, realtimeResponseCostMicros } from '../../shared/money/realtime.js';
import { shardQueueName } from '../../shared/queues.js';
import { settledKey } from '../../shared/redis-keys.js';

/**
 * Realtime sessions when a process dies under them (the api and the worker run apart, as they do in production):
 * a worker SIGKILLed mid-session → its client gets an `error` event and close 1011 (its api heard no beat); an api
 * SIGKILLed mid-session → its worker closes the vendor's session (it heard no beat) and ends the job. Either way what
 * ran was billed once, as each response ended.
 */

const pricing = {
  input_per_1m: 4,
  cached_input_per_1m: 0.4,
  output_per_1m: 16,
  audio_input_per_1m: 32,
  audio_output_per_1m: 64,
};
const prices = new PriceList(loadCatalog(undefined).all(), { overrides: { 'mock-realtime': pricing } });
const pricingFile = join(mkdtempSync(join(tmpdir(), 'sy-rt-faults-')), 'prices.json');
writeFileSync(pricingFile, JSON.stringify({ models: { 'mock-realtime': pricing } }));
const costOf = (done: ServerEvent) =>
  realtimeResponseCostMicros(prices, 'mock-realtime', readRealtimeUsage((done.response as { usage: unknown }).usage));

describe('Realtime sessions when a process dies', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>> | undefined;
  const processes: GatewayProcess[] = [];
  let redis: Redis | undefined;

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    redis?.disconnect();
    await redisServer?.remove();
  });

  async function setUp(extra: Record<string, string> = {}) {
    redisServer = await startPrivateRedis();
    redis = new Redis(redisServer.url);
    const env = {
      REDIS_URL: redisServer.url,
      MOCK_VENDOR: 'on',
      PRICING_FILE: pricingFile,
      MOCK_STREAM_DELAY_MS: '5',
      ...extra,
    };
    const [api, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    processes.push(api, worker);
    return { redis, api, worker };
  }

  it(
    'a worker killed mid-session: the client gets an error event and close 1011; the response that ran is billed ' +
      'once',
    async () => {
      const { redis, api, worker } = await setUp();
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      const client = openRealtime(api.url, key);
      await client.opened;
      const sessionId = ((await client.next('session.created')).session as { id: string }).id;
      client.rt.send(userText('Before the fall'));
      client.rt.send({ type: 'response.create' });
      const done = await client.next('response.done');
      await waitFor(
        async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - costOf(done),
        5000,
        'the response settled',
      );

      await worker.stop('SIGKILL');
      const error = await client.next('error', 30_000);
      assert.equal((error.error as { type: string }).type, 'server_error');
      const closed = await client.closed;
      assert.equal(closed.code, 1011);

      // Billed once: the response that ran, nothing more, its settlement marked; the session's row was the dead worker's
      // to write.
      const bill = await readBill(redis, account);
      assert.equal(bill!.balanceMicros, 10_000_000 - costOf(done));
      assert.equal(await redis.exists(settledKey(account, `${sessionId}:${(done.response as { id: string }).id}`)), 1);
    },
  );

  it('an api killed mid-session: the worker closes the vendor session and ends the job; what ran is billed once', async () => {
    const { redis, api } = await setUp();
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = openRealtime(api.url, key);
    await client.opened;
    const sessionId = ((await client.next('session.created')).session as { id: string }).id;
    client.rt.send(userText('Before the api goes'));
    client.rt.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const queue = new Queue(shardQueueName('realtime', 0), { connection: redis });
    try {
      assert.equal(await queue.getActiveCount(), 1, 'the session is a running job');
      await api.stop('SIGKILL');
      // The worker hears no beat, closes the vendor's socket and ends the job (its slot, a running job, is free).
      await waitFor(async () => (await queue.getActiveCount()) === 0, 30_000, 'the session job to end');
      const job = await queue.getJob(sessionId);
      assert.deepEqual(job?.returnvalue, { reason: 'api_gone', responses: 1, costMicros: costOf(done) });
      const bill = await readBill(redis, account);
      assert.deepEqual(
        { balance: bill!.balanceMicros, reserved: bill!.reservedMicros },
        { balance: 10_000_000 - costOf(done), reserved: 0 },
      );
    } finally {
      await queue.close();
    }
  });

  it(
    'a worker stopped (SIGTERM) mid-session: the client gets an error event and close 1012 (reconnect), and the ' +
      'worker exits',
    async () => {
      const { redis, api, worker } = await setUp();
      const { key } = await paidAccountKey(redis, 10_000_000);
      const client = openRealtime(api.url, key);
      await client.opened;
      await client.next('session.created');
      const exited = worker.stop('SIGTERM');
      const error = await client.next('error', 30_000);
      assert.equal((error.error as { code: string }).code, 'worker_shutdown');
      assert.equal((await client.closed).code, 1012);
      assert.equal(await exited, 0);
    },
  );

  it('a session past REALTIME_MAX_SESSION_MS: a session_expired error event and a close', async () => {
    const { redis, api } = await setUp({ REALTIME_MAX_SESSION_MS: '1500' });
    const { key } = await paidAccountKey(redis, 10_000_000);
    const client = openRealtime(api.url, key);
    await client.opened;
    await client.next('session.created');
    const error = await client.next('error', 30_000);
    assert.equal((error.error as { code: string }).code, 'session_expired');
    assert.equal((await client.closed).code, 1000);
  });

  it(
    'a vendor that cannot open the session: the upgrade is refused with an HTTP status, no socket opened, nothing ' +
      'billed',
    async () => {
      // OpenAI's channel points at a port nothing listens on.
      const { redis, api } = await setUp({
        OPENAI_API_KEY: 'sk-test',
        OPENAI_BASE_URL: 'http://127.0.0.1:9/v1',
        VENDOR_CONNECT_TIMEOUT_MS: '2000',
      });
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      const client = openRealtime(api.url, key, 'gpt-realtime');
      await assert.rejects(client.opened, /refused with 5\d\d/);
      await waitFor(
        async () => (await readBill(redis, account))?.reservedMicros === 0,
        10_000,
        'the reservation to be given back',
      );
      assert.equal((await readBill(redis, account))!.balanceMicros, 10_000_000);
    },
  );
});
