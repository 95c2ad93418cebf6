import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { createKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';
import {
  assertAnsweredWithin,
  assertNoneHung,
  assertStreamError,
  chat,
  streamedText,
  summarize,
  waitForQueue,
  answerBoundMs,
  clientGiveUpMs,
  slowPrompt,
} from '../support/fault-clients.js';

describe('a gateway process SIGKILLed under load', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>> | undefined;
  const processes: GatewayProcess[] = [];
  let redis: Redis | undefined;

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    redis?.disconnect();
    await redisServer?.remove();
  });

  async function setUp() {
    redisServer = await startPrivateRedis();
    redis = new Redis(redisServer.url);
    return { redis, apiKey: (await createKey(redis)).key };
  }

  const start = async (role: 'api' | 'worker', env: Record<string, string>) => {
    const proc = await startGateway({ role, env });
    processes.push(proc);
    return proc;
  };

  it(
    'api killed: its clients see the connection drop at once; its jobs end by their deadline and leave nothing ' +
      'unbounded behind',
    async () => {
      const { redis, apiKey } = await setUp();
      const deadlineMs = 6000;
      const env = {
        REDIS_URL: redisServer!.url,
        MOCK_VENDOR: 'on',
        WORKER_CONCURRENCY_CHAT: '2',
        REQUEST_DEADLINE_MS_CHAT: String(deadlineMs),
      };
      const [api] = await Promise.all([start('api', env), start('worker', env)]);

      // Two streams hold both worker slots (longer than the deadline); the plain requests wait behind them.
      const streams = Array.from({ length: 2 }, (_, i) =>
        chat(
          api.url,
          apiKey,
          `stream ${i}`,
          { stream: true, messages: [{ role: 'user', content: slowPrompt(`s${i}`, 1000) }] },
          clientGiveUpMs,
        ),
      );
      await waitFor(
        () => streams.every((s) => s.received().includes('"content"')),
        10_000,
        'both streams to send output',
      );
      const plain = Array.from({ length: 4 }, (_, i) =>
        chat(api.url, apiKey, `plain ${i}`, { messages: [{ role: 'user', content: `plain ${i}` }] }, clientGiveUpMs),
      );
      await waitForQueue(redis, (c) => c.wait === plain.length, 10_000, 'the plain requests to wait');

      await api.stop('SIGKILL');
      const killedAt = Date.now();
      const outcomes = await Promise.all([...streams, ...plain].map((r) => r.outcome));
      assertNoneHung(outcomes, clientGiveUpMs);
      assertAnsweredWithin(outcomes, killedAt, 5000, 'the kill');
      for (const o of outcomes) assert.ok(o.connectionError, `${o.label}: the connection dropped (${summarize(o)})`);

      // Nobody hears these jobs any more: each must still end (by its deadline at the latest), not run on.
      await waitForQueue(
        redis,
        (c) => c.wait + c.active + c.delayed === 0,
        deadlineMs + answerBoundMs,
        'the orphaned jobs to end',
      );
      const transient = [
        ...(await redis.keys('sy:replay:*')),
        ...(await redis.keys('sy:payload:*')),
        ...(await redis.keys('sy:result:*')),
      ];
      for (const key of transient) assert.ok((await redis.ttl(key)) > 0, `${key} expires`);

      // A replacement api (a new instance) serves at once; the worker is free again.
      const replacement = await start('api', env);
      const after = await chat(
        replacement.url,
        apiKey,
        'after',
        { messages: [{ role: 'user', content: 'after' }] },
        answerBoundMs,
      ).outcome;
      assert.equal(after.status, 200, summarize(after));
    },
  );

  it('worker killed: plain requests complete on another worker, started streams end with an error event, none hangs', async () => {
    const { redis, apiKey } = await setUp();
    // A dead worker's jobs are handed on once its lock expires.
    const env = {
      REDIS_URL: redisServer!.url,
      MOCK_VENDOR: 'on',
      WORKER_CONCURRENCY_CHAT: '4',
      WORKER_LOCK_MS: '2000',
    };
    const api = await start('api', env);
    const doomed = await start('worker', env);

    const streams = Array.from({ length: 2 }, (_, i) =>
      chat(
        api.url,
        apiKey,
        `started stream ${i}`,
        { stream: true, messages: [{ role: 'user', content: slowPrompt(`s${i}`, 500) }] },
        clientGiveUpMs,
      ),
    );
    await waitFor(
      () => streams.every((s) => s.received().includes('"content"')),
      10_000,
      'both streams to send output',
    );
    // Two plain requests mid-call on the doomed worker, two more waiting behind its full slots.
    const plain = Array.from({ length: 4 }, (_, i) =>
      chat(
        api.url,
        apiKey,
        `plain ${i}`,
        { messages: [{ role: 'user', content: slowPrompt(`p${i}`, 1500) }] },
        clientGiveUpMs,
      ),
    );
    // A stream that had not started when its worker died is simply run again.
    const waitingStream = chat(
      api.url,
      apiKey,
      'waiting stream',
      { stream: true, messages: [{ role: 'user', content: 'waiting stream' }] },
      clientGiveUpMs,
    );
    await waitForQueue(redis, (c) => c.active === 4 && c.wait === 3, 10_000, 'four active jobs and three waiting');

    await doomed.stop('SIGKILL');
    const killedAt = Date.now();
    await start('worker', env);

    const outcomes = await Promise.all([...streams, ...plain, waitingStream].map((r) => r.outcome));
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, killedAt, answerBoundMs, 'the kill');
    for (const o of outcomes.slice(0, 2)) assertStreamError(o, 'worker_lost');
    assert.match(streamedText(outcomes[6]!), /waiting stream/);
    for (const o of outcomes.slice(2, 6)) {
      assert.equal(o.status, 200, summarize(o));
      assert.match(
        (o.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content,
        /p\d: the quick brown fox/,
      );
    }
    // A job ends once its settlement is written too, just after its answer.
    await waitForQueue(redis, (c) => c.wait + c.active + c.delayed === 0, answerBoundMs, 'every job to end');
  });
});
