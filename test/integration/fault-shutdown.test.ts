import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { createKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';
import {
  assertAnsweredWithin,
  assertHttpError,
  assertNoneHung,
  assertStreamError,
  chat,
  waitForQueue,
} from '../support/fault-clients.js';

const graceMs = 1000;
// Grace plus the time to write every error and cancel every job, on a loaded 2-core machine.
const answerBoundMs = graceMs + 10_000;
const clientGiveUpMs = 60_000;

const chunk = (delta: Record<string, unknown>) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-shutdown', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, delta, logprobs: null, finish_reason: null }] })}\n\n`;
/** The first tokens of an answer whose vendor then stalls: the stream is open and has output when the api stops. */
const partialStream = chunk({ role: 'assistant', content: '' }) + chunk({ content: 'Partial answer' });

describe('forced shutdown (SHUTDOWN_GRACE_MS runs out)', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>>;
  let redis: Redis;
  let fake: FakeOpenAI;
  const processes: GatewayProcess[] = [];

  before(async () => {
    [redisServer, fake] = await Promise.all([startPrivateRedis(), startFakeOpenAI()]);
    redis = new Redis(redisServer.url);
  });

  after(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGKILL')));
    redis?.disconnect();
    await fake?.close();
    await redisServer?.remove();
  });

  it('ends open streams with an error event and open requests with a 503, and cancels every one of their jobs', async () => {
    const apiKey = (await createKey(redis)).key;
    const env = {
      REDIS_URL: redisServer.url,
      OPENAI_API_KEY: 'sk-vendor',
      OPENAI_BASE_URL: fake.url,
      MOCK_VENDOR: 'off',
      WORKER_CONCURRENCY_CHAT: '3',
      SSE_KEEPALIVE_MS: '300',
      SHUTDOWN_GRACE_MS: String(graceMs),
    };
    const [api, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    processes.push(api, worker);
    fake.setDefault((request) =>
      (request.body as { stream?: boolean }).stream ? { sse: partialStream, hang: true } : { hang: true },
    );

    const send = (label: string, stream: boolean) =>
      chat(
        api.url,
        apiKey,
        label,
        { model: 'gpt-4o-mini', stream, messages: [{ role: 'user', content: label }] },
        clientGiveUpMs,
      );
    // Three calls stall at the vendor (filling the worker); two more wait in the queue behind them.
    const streaming = [send('streaming 0', true), send('streaming 1', true)];
    const atVendor = send('plain at the vendor', false);
    await waitFor(
      () => fake.inFlight === 3 && streaming.every((s) => s.received().includes('Partial answer')),
      10_000,
      'three stalled vendor calls',
    );
    const waitingStream = send('waiting stream', true);
    const waitingPlain = send('waiting plain', false);
    await waitForQueue(redis, (c) => c.wait === 2, 10_000, 'two waiting jobs');
    await waitingStream.started; // its keep-alives have sent the headers

    const exited = api.stop('SIGTERM');
    const stoppedAt = Date.now();
    const outcomes = await Promise.all([...streaming, waitingStream, atVendor, waitingPlain].map((r) => r.outcome));
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, stoppedAt, answerBoundMs, 'SIGTERM');
    for (const o of outcomes.slice(0, 2)) {
      assertStreamError(o, 'server_shutting_down');
      assert.match(o.events!.join(''), /Partial answer/, `${o.label}: kept the output it had`);
    }
    assertStreamError(outcomes[2]!, 'server_shutting_down');
    for (const o of outcomes.slice(3)) assertHttpError(o, 503, 'server_shutting_down');
    assert.equal(await exited, 0, 'the api exits cleanly');

    // Nobody waits for these jobs any more: the running ones are aborted at the vendor, the waiting ones never run.
    await waitFor(
      () => fake.abortedRequests === 3 && fake.inFlight === 0,
      10_000,
      'the three vendor calls to be aborted',
    );
    await waitForQueue(redis, (c) => c.wait + c.active + c.delayed === 0, 10_000, 'no job left');
    assert.equal(fake.requests.length, 3, 'the waiting jobs never reached the vendor');
  });
});

describe('Ctrl-C on split processes (--role=api, --role=worker)', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>>;
  let redis: Redis;
  let fake: FakeOpenAI;
  let apiKey: string;
  const processes: GatewayProcess[] = [];

  before(async () => {
    [redisServer, fake] = await Promise.all([startPrivateRedis(), startFakeOpenAI()]);
    redis = new Redis(redisServer.url);
    apiKey = (await createKey(redis)).key;
  });

  after(async () => {
    await Promise.all(processes.map((p) => p.stop('SIGKILL')));
    redis?.disconnect();
    await fake?.close();
    await redisServer?.remove();
  });

  /** An api and a worker of their own, with a vendor call under way that the fake answers after `vendorDelayMs`. */
  async function callInFlight(vendorDelayMs: number) {
    // An earlier test's worker would take the job from this one's.
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    const env = {
      REDIS_URL: redisServer.url,
      OPENAI_API_KEY: 'sk-vendor',
      OPENAI_BASE_URL: fake.url,
      MOCK_VENDOR: 'off',
      SHUTDOWN_GRACE_MS: '10000',
    };
    const [api, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    processes.push(api, worker);
    const before = fake.inFlight;
    fake.enqueue({ delayMs: vendorDelayMs });
    const answer = api
      .client(apiKey)
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'slow' }] });
    await waitFor(() => fake.inFlight === before + 1, 5000, 'the vendor call');
    return { api, worker, answer };
  }

  /** The exit code of a process told to stop by someone else (a signal sent with `proc.kill`). */
  const exited = (gateway: GatewayProcess) => once(gateway.proc, 'exit').then(([code]) => code as number | null);

  it(
    'the api drains on Ctrl-C: the log says how many and how long, new requests get a 503 on a still-open port, ' +
      'then it exits 0',
    async () => {
      const { api, answer } = await callInFlight(2000);
      const exit = exited(api);
      api.proc.kill('SIGINT');
      await waitFor(
        () =>
          api.logs.some((l) =>
            l.includes('draining 1 request, up to 10 s; new requests get a 503 (Ctrl-C again to exit now)'),
          ),
        5000,
        'the drain log line',
      );

      const refused = await fetch(`${api.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'too late' }] }),
      });
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('connection'), 'close');
      assert.equal(refused.headers.get('retry-after'), '1');
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'overloaded');
      const ready = await fetch(`${api.url}/readyz`);
      assert.equal(ready.status, 503);
      assert.equal(((await ready.json()) as { draining: boolean }).draining, true);
      // Alive though not ready: an orchestrator must not kill it for draining.
      assert.equal((await fetch(`${api.url}/healthz`)).status, 200);

      assert.equal((await answer).choices[0]!.message.content, FAKE_REPLY_TEXT);
      assert.equal(await exit, 0);
    },
  );

  it('a worker lets its running job finish on the first Ctrl-C, and exits at once (130) on the second', async () => {
    const { worker, answer } = await callInFlight(20_000);
    answer.catch(() => undefined);
    worker.proc.kill('SIGINT');
    await waitFor(
      () => worker.logs.some((l) => l.includes('the jobs running here finish first')),
      5000,
      'the first interrupt',
    );
    assert.equal(worker.proc.exitCode, null, 'still waiting for its job');
    const started = Date.now();
    assert.equal(await worker.stop('SIGINT'), 130);
    assert.ok(Date.now() - started < 5000, 'it did not wait for the 20 s vendor call');
    assert.ok(worker.logs.some((l) => l.includes('second interrupt')));
  });
});
