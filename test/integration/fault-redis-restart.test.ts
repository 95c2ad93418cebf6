import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { createKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { recordUrlFor } from '../support/record.js';
import { luaFixture } from '../support/fixtures.js';
import {
  assertAnsweredWithin,
  assertHttpError,
  assertNoneHung,
  assertStreamError,
  chat,
  streamedText,
  summarize,
  answerBoundMs,
  clientGiveUpMs,
  slowPrompt,
} from '../support/fault-clients.js';

describe('Redis restarted under load', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>> | undefined;
  const processes: GatewayProcess[] = [];
  const connections: Redis[] = [];
  const cleanups: Array<() => Promise<void>> = [];

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    for (const c of connections.splice(0)) c.disconnect();
    for (const cleanup of cleanups.splice(0)) await cleanup();
    await redisServer?.remove();
  });

  /** With `proxyApi`, the api reaches Redis through a proxy the test can cut, the worker directly. */
  async function setUp(aof: boolean, workerConcurrency: number, proxyApi = false) {
    redisServer = await startPrivateRedis({ aof });
    const proxy = proxyApi ? await startTcpProxy(redisServer.port) : undefined;
    if (proxy) cleanups.push(() => proxy.close());
    const redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
    redis.on('error', () => undefined);
    connections.push(redis);
    const apiKey = (await createKey(redis)).key;
    const env = {
      REDIS_URL: redisServer.url,
      // One record for both: the api reaches Redis through the proxy, whose URL would otherwise give it a record
      // of its own, and a Redis stamped by one record is reloaded from the other (the api's key would be gone).
      DATABASE_URL: await recordUrlFor(redisServer.url),
      MOCK_VENDOR: 'on',
      // Waiting streams send their headers early, so a failure must reach them as an SSE error event.
      SSE_KEEPALIVE_MS: '300',
      REQUEST_DEADLINE_MS_CHAT: '120000',
      WORKER_CONCURRENCY_CHAT: String(workerConcurrency),
    };
    const [api, worker] = await Promise.all([
      startGateway({ role: 'api', env: { ...env, REDIS_URL: proxy?.url ?? redisServer.url } }),
      startGateway({ role: 'worker', env }),
    ]);
    processes.push(api, worker);
    return { redis, apiKey, api, worker, proxy };
  }

  it('without AOF: every request whose job was lost gets a 503 job_lost at once, and the worker drops the lost job', async () => {
    const { redis, apiKey, api } = await setUp(false, 1);

    // Occupies the only worker slot for far longer than the bound, unless the lost job is cancelled.
    const running = chat(
      api.url,
      apiKey,
      'running stream',
      { stream: true, messages: [{ role: 'user', content: slowPrompt('running', 2000) }] },
      clientGiveUpMs,
    );
    await waitFor(() => running.received().includes('"content"'), 10_000, 'the running stream to send output');

    const waiting = [
      ...Array.from({ length: 5 }, (_, i) =>
        chat(
          api.url,
          apiKey,
          `waiting plain ${i}`,
          { messages: [{ role: 'user', content: `plain ${i}` }] },
          clientGiveUpMs,
        ),
      ),
      ...Array.from({ length: 3 }, (_, i) =>
        chat(
          api.url,
          apiKey,
          `waiting stream ${i}`,
          { stream: true, messages: [{ role: 'user', content: `stream ${i}` }] },
          clientGiveUpMs,
        ),
      ),
    ];
    await waitFor(
      async () => (await redis.zcard('bull:{chat}:prioritized')) === waiting.length,
      10_000,
      'the requests to wait in the queue',
    );
    await Promise.all(waiting.slice(5).map((w) => w.started));

    await redisServer!.stop();
    await sleep(300);
    await redisServer!.restart();
    const restartedAt = Date.now();

    const outcomes = await Promise.all([running.outcome, ...waiting.map((w) => w.outcome)]);
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, restartedAt, answerBoundMs, 'the restart');
    assertStreamError(outcomes[0]!, 'job_lost');
    for (const o of outcomes.slice(1, 6)) assertHttpError(o, 503, 'job_lost');
    for (const o of outcomes.slice(6)) assertStreamError(o, 'job_lost');

    // The restarted Redis lost the keys too. The one worker slot is free again only if the lost stream was cancelled.
    const freshKey = (await createKey(redis)).key;
    const after = await chat(
      api.url,
      freshKey,
      'after the restart',
      { messages: [{ role: 'user', content: 'after' }] },
      answerBoundMs,
    ).outcome;
    assert.equal(after.status, 200, summarize(after));
  });

  it('with AOF: every accepted job completes, waiting or mid-stream, with its full output', async () => {
    const { redis, apiKey, api } = await setUp(true, 2);
    // Enough data that the restarted Redis spends a while loading (answering LOADING): no job may be declared lost
    // meanwhile.
    await redis.eval(luaFixture('filler'), 0);

    const expected = await chat(
      api.url,
      apiKey,
      'reference',
      { messages: [{ role: 'user', content: slowPrompt('mid', 250) }] },
      answerBoundMs,
    ).outcome;
    assert.equal(expected.status, 200, summarize(expected));
    const expectedText = (expected.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message
      .content;

    // Mid-stream when Redis goes: their chunks published meanwhile are replayed from the log after the restart.
    const midStreams = Array.from({ length: 2 }, (_, i) =>
      chat(
        api.url,
        apiKey,
        `mid-stream ${i}`,
        { stream: true, messages: [{ role: 'user', content: slowPrompt('mid', 250) }] },
        clientGiveUpMs,
      ),
    );
    await waitFor(
      () => midStreams.every((s) => s.received().includes('"content"')),
      10_000,
      'both streams to send output',
    );
    const waiting = [
      ...Array.from({ length: 4 }, (_, i) =>
        chat(
          api.url,
          apiKey,
          `waiting plain ${i}`,
          { messages: [{ role: 'user', content: `plain ${i}` }] },
          clientGiveUpMs,
        ),
      ),
      ...Array.from({ length: 2 }, (_, i) =>
        chat(
          api.url,
          apiKey,
          `waiting stream ${i}`,
          { stream: true, messages: [{ role: 'user', content: `stream ${i}` }] },
          clientGiveUpMs,
        ),
      ),
    ];
    await waitFor(
      async () => (await redis.zcard('bull:{chat}:prioritized')) === waiting.length,
      10_000,
      'the requests to wait in the queue',
    );
    // The queued jobs are in the AOF file (everysec may hold them back up to 2 s behind a slow fsync, and a crash lose
    // them).
    await redisServer!.persisted();

    await redisServer!.stop();
    await sleep(1500);
    await redisServer!.restart();
    const restartedAt = Date.now();

    const outcomes = await Promise.all([...midStreams, ...waiting].map((r) => r.outcome));
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, restartedAt, answerBoundMs, 'the restart');
    for (const o of outcomes.slice(0, 2))
      assert.equal(streamedText(o), expectedText, `${o.label}: the whole answer, nothing lost or repeated`);
    for (const o of outcomes.slice(2, 6)) {
      assert.equal(o.status, 200, summarize(o));
      assert.match(
        (o.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content,
        /plain \d/,
      );
    }
    for (const o of outcomes.slice(6)) assert.match(streamedText(o), /stream \d/);
    assert.equal((await redis.dbsize()) > 300_000, true, 'the data came back from the AOF');
  });

  it('with AOF, the api back after the worker: jobs that finished while it was away are answered in full', async () => {
    const { redis, apiKey, api, proxy } = await setUp(true, 2, true);
    const expected = await chat(
      api.url,
      apiKey,
      'reference',
      { messages: [{ role: 'user', content: slowPrompt('mid', 100) }] },
      answerBoundMs,
    ).outcome;
    assert.equal(expected.status, 200, summarize(expected));
    const expectedText = (expected.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message
      .content;

    const midStreams = Array.from({ length: 2 }, (_, i) =>
      chat(
        api.url,
        apiKey,
        `mid-stream ${i}`,
        { stream: true, messages: [{ role: 'user', content: slowPrompt('mid', 100) }] },
        clientGiveUpMs,
      ),
    );
    await waitFor(
      () => midStreams.every((s) => s.received().includes('"content"')),
      10_000,
      'both streams to send output',
    );
    // These wait behind the two streams, so they too run only after the restart.
    const others = [
      chat(api.url, apiKey, 'waiting plain', { messages: [{ role: 'user', content: 'plain 0' }] }, clientGiveUpMs),
      chat(
        api.url,
        apiKey,
        'waiting stream',
        { stream: true, messages: [{ role: 'user', content: 'stream 0' }] },
        clientGiveUpMs,
      ),
    ];
    await waitFor(
      async () => (await redis.zcard('bull:{chat}:prioritized')) === others.length,
      10_000,
      'the requests to wait in the queue',
    );

    // Redis restarts; the worker is back at once and finishes every job, but the api stays cut off until then:
    // every `done` is published to nobody, so its answer must come from the jobs and the replay logs.
    proxy!.block();
    await redisServer!.persisted();
    await redisServer!.stop();
    await redisServer!.restart();
    await waitFor(
      async () => (await redis.zcard('bull:{chat}:completed')) >= 5,
      20_000,
      'the worker to finish every job',
    );
    proxy!.unblock();
    const reconnectedAt = Date.now();

    const outcomes = await Promise.all([...midStreams, ...others].map((r) => r.outcome));
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, reconnectedAt, answerBoundMs, 'the api reconnected');
    for (const o of outcomes.slice(0, 2))
      assert.equal(streamedText(o), expectedText, `${o.label}: the whole answer, nothing lost or repeated`);
    assert.equal(outcomes[2]!.status, 200, summarize(outcomes[2]!));
    assert.match(
      (outcomes[2]!.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content,
      /plain 0/,
    );
    assert.match(streamedText(outcomes[3]!), /stream 0/);
  });

  it('a stream whose api loses Redis for a moment mid-output resumes with every chunk, in order', async () => {
    const { apiKey, api, proxy } = await setUp(true, 2, true);
    const expected = await chat(
      api.url,
      apiKey,
      'reference',
      { messages: [{ role: 'user', content: slowPrompt('gap', 100) }] },
      answerBoundMs,
    ).outcome;
    const expectedText = (expected.body as { choices: Array<{ message: { content: string } }> }).choices[0]!.message
      .content;
    const streams = Array.from({ length: 2 }, (_, i) =>
      chat(
        api.url,
        apiKey,
        `stream ${i}`,
        { stream: true, messages: [{ role: 'user', content: slowPrompt('gap', 100) }] },
        clientGiveUpMs,
      ),
    );
    await waitFor(
      () => streams.every((s) => s.received().includes('"content"')),
      10_000,
      'both streams to send output',
    );
    // Chunks published meanwhile miss the api. Its subscriber comes back first and hears the next chunks live,
    // while its command connection (which reads the replay log) stays cut a while longer.
    proxy!.block();
    await sleep(700);
    proxy!.block((hello) => !hello.includes('-sub'));
    await sleep(1200);
    proxy!.unblock();
    const outcomes = await Promise.all(streams.map((s) => s.outcome));
    assertNoneHung(outcomes, answerBoundMs);
    for (const o of outcomes)
      assert.equal(streamedText(o), expectedText, `${o.label}: the whole answer, nothing lost or repeated`);
  });

  it('jobs that vanish with no reconnect at all (FLUSHALL, eviction) are found by the liveness sweep', async () => {
    redisServer = await startPrivateRedis({ aof: false });
    const redis = new Redis(redisServer.url);
    connections.push(redis);
    const apiKey = (await createKey(redis)).key;
    // No worker: the jobs only wait.
    const api = await startGateway({
      role: 'api',
      env: { REDIS_URL: redisServer.url, SSE_KEEPALIVE_MS: '300', REQUEST_DEADLINE_MS_CHAT: '120000' },
    });
    processes.push(api);
    const waiting = [
      chat(api.url, apiKey, 'plain', { messages: [{ role: 'user', content: 'plain' }] }, clientGiveUpMs),
      chat(
        api.url,
        apiKey,
        'stream',
        { stream: true, messages: [{ role: 'user', content: 'stream' }] },
        clientGiveUpMs,
      ),
    ];
    await waitFor(
      async () => (await redis.zcard('bull:{chat}:prioritized')) === waiting.length,
      10_000,
      'the requests to wait in the queue',
    );
    await waiting[1]!.started;

    await redis.flushall();
    const flushedAt = Date.now();
    const outcomes = await Promise.all(waiting.map((w) => w.outcome));
    assertNoneHung(outcomes, clientGiveUpMs);
    assertAnsweredWithin(outcomes, flushedAt, answerBoundMs, 'FLUSHALL');
    assertHttpError(outcomes[0]!, 503, 'job_lost');
    assertStreamError(outcomes[1]!, 'job_lost');
  });
});
