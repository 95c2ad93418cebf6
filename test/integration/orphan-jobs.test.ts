import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { shardQueueName } from '../../shared/queues.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

// An api that dies (SIGKILL, a lost machine) cannot cancel its jobs: the workers notice that nobody reads the answers.
describe('jobs of an api that is gone', () => {
  let redis: Redis;
  let redisUrl: string;
  let apiKey: string;
  let fake: FakeOpenAI;
  let queue: Queue;
  let queueConnection: Redis;
  const processes: GatewayProcess[] = [];

  const env = () => ({
    REDIS_URL: redisUrl,
    MOCK_VENDOR: 'on',
    OPENAI_API_KEY: 'sk-vendor',
    OPENAI_BASE_URL: fake.url,
    ORPHAN_AFTER_MS: '2000',
    REQUEST_DEADLINE_MS_CHAT: '120000',
  });
  const start = async (role: 'api' | 'worker') => {
    const proc = await startGateway({ role, env: env() });
    processes.push(proc);
    return proc;
  };

  before(async () => {
    const fresh = await freshRedis(3);
    redis = fresh.redis;
    redisUrl = fresh.url;
    apiKey = (await createKey(redis)).key;
    fake = await startFakeOpenAI();
    queueConnection = redis.duplicate();
    queue = new Queue(shardQueueName('chat', 0), { connection: queueConnection });
  });

  afterEach(async () => {
    await Promise.all(processes.splice(0).map((p) => p.stop('SIGKILL')));
    fake.reset();
  });

  after(async () => {
    await queue?.close();
    queueConnection?.disconnect();
    await fake?.close();
    redis?.disconnect();
  });

  const post = (api: GatewayProcess, body: unknown, signal: AbortSignal) =>
    fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });

  it('stops a running stream soon after its api dies, instead of streaming to nobody until it ends', async () => {
    const [api] = await Promise.all([start('api'), start('worker')]);
    const client = new AbortController();
    // About 20 chunks 700 ms apart: some 14 s of streaming if nobody stopped it.
    const response = await post(
      api!,
      {
        model: 'mock-chat',
        stream: true,
        messages: [{ role: 'user', content: '[mock:slow:700] tell me a long story' }],
      },
      client.signal,
    );
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    await reader.read();
    const requestId = response.headers.get('x-request-id')!;
    const killedAt = Date.now();
    await api!.stop('SIGKILL');
    client.abort();

    await waitFor(
      async () => (await queue.getJobState(requestId)) === 'failed',
      10_000,
      'the worker to drop the orphaned stream',
    );
    const job = await queue.getJob(requestId);
    assert.match(job?.failedReason ?? '', /client closed the connection/);
    assert.ok(
      Date.now() - killedAt < 10_000,
      'stopped within ORPHAN_AFTER_MS and a heartbeat, not at the end of the stream',
    );
  });

  it('does not call the vendor for a waiting job whose api died', async () => {
    const api = await start('api');
    const client = new AbortController();
    const pending = post(
      api,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'anyone there?' }] },
      client.signal,
    ).catch(() => undefined);
    await waitFor(
      async () => (await queue.getJobCountByTypes('waiting', 'prioritized')) === 1,
      5000,
      'the job to wait in the queue',
    );
    const [waiting] = await queue.getJobs(['waiting', 'prioritized']);
    await api.stop('SIGKILL');
    client.abort();
    await pending;
    // Past ORPHAN_AFTER_MS, the api's heartbeat has expired too.
    await new Promise((resolve) => setTimeout(resolve, 3000));

    await start('worker');
    await waitFor(
      async () => (await queue.getJobState(waiting!.id!)) === 'failed',
      10_000,
      'the worker to drop the job',
    );
    assert.equal(fake.requests.length, 0, 'the vendor was never called');
  });

  it('keeps serving while the api is alive, however long the job waited', async () => {
    const api = await start('api');
    const answer = post(
      api,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'still here' }] },
      AbortSignal.timeout(30_000),
    );
    await waitFor(
      async () => (await queue.getJobCountByTypes('waiting', 'prioritized')) === 1,
      5000,
      'the job to wait in the queue',
    );
    await new Promise((resolve) => setTimeout(resolve, 3000));
    await start('worker');
    const response = await answer;
    assert.equal(response.status, 200, await response.clone().text());
    assert.equal(fake.requests.length, 1);
  });
});
