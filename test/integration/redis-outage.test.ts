import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { createKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startPrivateRedis } from '../support/redis-server.js';

// Runs against its own redis-server: this test stops and restarts it.
describe('Redis outage', () => {
  let redisServer: Awaited<ReturnType<typeof startPrivateRedis>>;
  let gateway: GatewayProcess;
  let apiKey: string;

  before(async () => {
    redisServer = await startPrivateRedis();
    const redis = new Redis(redisServer.url);
    apiKey = (await createKey(redis)).key;
    redis.disconnect();
    gateway = await startGateway({ env: { REDIS_URL: redisServer.url } });
  });

  after(async () => {
    await gateway?.stop('SIGKILL');
    await redisServer?.stop();
  });

  const ready = async () => (await fetch(`${gateway.url}/readyz`)).status;

  it('reports not ready and refuses requests with 503 while Redis is down, then recovers', async () => {
    const client = gateway.client(apiKey);
    assert.equal(await ready(), 200);
    assert.equal((await fetch(`${gateway.url}/healthz`)).status, 200);
    await client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'before' }] });

    await redisServer.stop();
    await waitFor(async () => (await ready()) === 503, 5000, 'readyz to report the outage');
    assert.equal((await fetch(`${gateway.url}/healthz`)).status, 200, 'the process itself is up');
    const started = Date.now();
    // A key the api has cached still authenticates; enqueueing is what fails, quickly and clearly.
    await assert.rejects(
      () => client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'during' }] }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 503,
    );
    assert.ok(Date.now() - started < 5000, 'refused without hanging');

    await redisServer.restart();
    await waitFor(async () => (await ready()) === 200, 10_000, 'readyz to recover');
    const after = await client.chat.completions.create({
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'after' }],
    });
    assert.equal(after.object, 'chat.completion');
  });
});
