import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';

const graceMs = 2000;
// The grace, the margin to close past it, and a loaded 2-core machine. Without a deadline the stop never ended.
const exitBoundMs = graceMs + 12_000;

describe('a stop with Redis gone ends by SHUTDOWN_GRACE_MS (plus the margin to close), saying what it gave up', () => {
  let redisServer: PrivateRedis;
  let fake: FakeOpenAI;
  let apiKey: string;
  const processes: GatewayProcess[] = [];

  before(async () => {
    fake = await startFakeOpenAI();
    // Every vendor call hangs: the job runs until somebody gives it up.
    fake.setDefault(() => ({ hang: true }));
  });

  after(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGKILL')));
    await fake?.close();
    await redisServer?.remove();
  });

  /** A Redis of this test's own (it is killed), with a key on it. */
  async function ownRedis(): Promise<Record<string, string>> {
    await redisServer?.remove();
    redisServer = await startPrivateRedis();
    const redis = new Redis(redisServer.url);
    apiKey = (await createKey(redis)).key;
    redis.disconnect();
    return {
      REDIS_URL: redisServer.url,
      OPENAI_API_KEY: 'sk-vendor',
      OPENAI_BASE_URL: fake.url,
      MOCK_VENDOR: 'off',
      SHUTDOWN_GRACE_MS: String(graceMs),
    };
  }

  /** A chat whose job is at the vendor (it hangs there), answered or failed later by whatever happens. */
  async function callAtVendor(api: GatewayProcess): Promise<void> {
    const before = fake.inFlight;
    api
      .client(apiKey)
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hang' }] })
      .catch(() => undefined);
    await waitFor(() => fake.inFlight === before + 1, 20_000, 'the vendor call');
  }

  /** SIGTERM, and how long until the process exited (it is killed past `exitBoundMs`, failing the test). */
  async function stopTimed(gateway: GatewayProcess): Promise<{ ms: number; code: number | null }> {
    const closed = once(gateway.proc, 'close');
    const started = Date.now();
    gateway.proc.kill('SIGTERM');
    const timer = setTimeout(() => gateway.proc.kill('SIGKILL'), exitBoundMs);
    const [code] = (await closed) as [number | null];
    clearTimeout(timer);
    return { ms: Date.now() - started, code };
  }

  it(
    'npm start (workers in their own process): the api ends its request, the worker process gives up its job, both ' +
      'exit',
    async () => {
      const env = await ownRedis();
      const gateway = await startGateway({ env: { ...env, WORKER_PROCESS: 'on' } });
      processes.push(gateway);
      await callAtVendor(gateway);
      await redisServer.stop();

      const { ms, code } = await stopTimed(gateway);
      const logs = gateway.logs.join('\n');
      assert.ok(ms < exitBoundMs, `exited after ${ms} ms`);
      assert.equal(code, 0, logs);
      assert.match(logs, /grace period over; ending the requests in flight/, 'the api says what it ended');
      assert.match(
        logs,
        /"name":"switchyard-worker".*grace period over: giving up 1 running job/,
        'the worker process says what it gave up',
      );
      assert.match(logs, /"msg":"stopped"/);
    },
  );

  it('--role=worker: gives up its running job at the deadline and exits', async () => {
    const env = await ownRedis();
    const [api, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    processes.push(api, worker);
    await callAtVendor(api);
    await redisServer.stop();

    const { ms, code } = await stopTimed(worker);
    const logs = worker.logs.join('\n');
    assert.ok(ms < exitBoundMs, `exited after ${ms} ms`);
    assert.equal(code, 0, logs);
    assert.match(
      logs,
      /grace period over: giving up 1 running job \(another worker runs it again once its lock expires\)/,
    );
    assert.match(logs, /"msg":"stopped"/);

    const apiStop = await stopTimed(api);
    assert.ok(apiStop.ms < exitBoundMs, `the api exited after ${apiStop.ms} ms`);
    assert.equal(apiStop.code, 0, api.logs.join('\n'));
  });
});
