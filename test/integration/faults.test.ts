import { wireFixture } from '../support/fixtures.js';
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

const toolCallFixture = wireFixture('openai-chat-stream-tool-call.sse');

// api and workers as separate processes, the way they scale in production.
describe('split api and worker processes', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  let redisUrl: string;
  let apiKey: string;
  let api: GatewayProcess;
  const workers: GatewayProcess[] = [];
  const adminToken = 'admin-test-token';

  const env = () => ({
    REDIS_URL: redisUrl,
    OPENAI_API_KEY: 'sk-vendor',
    OPENAI_BASE_URL: fake.url,
    MOCK_VENDOR: 'on',
    WORKER_LOCK_MS: '2000',
    ADMIN_TOKEN: adminToken,
  });
  const startWorker = async () => {
    const worker = await startGateway({ role: 'worker', env: env() });
    workers.push(worker);
    return worker;
  };

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(4);
    redis = fresh.redis;
    redisUrl = fresh.url;
    apiKey = (await createKey(redis)).key;
    api = await startGateway({ role: 'api', env: env() });
  });

  beforeEach(() => fake.reset());

  after(async () => {
    await Promise.all([api?.stop(), ...workers.map((w) => w.stop('SIGKILL'))]);
    await fake?.close();
    redis?.disconnect();
  });

  const post = (body: unknown) =>
    fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('serves requests through a worker in another process', async () => {
    const worker = await startWorker();
    const completion = await api
      .client(apiKey)
      .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);
    const embedded = await api.client(apiKey).embeddings.create({ model: 'mock-embedding', input: 'x' });
    assert.equal(embedded.data.length, 1);
    await worker.stop();
  });

  it('completes a plain request on another worker after its worker is SIGKILLed mid-call', async () => {
    fake.enqueue({ hang: true });
    const doomed = await startWorker();
    const pending = post({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'survive' }] });
    await waitFor(() => fake.inFlight === 1, 5000, 'the vendor call');
    await doomed.stop('SIGKILL');
    await startWorker();
    const res = await pending;
    assert.equal(res.status, 200);
    const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
    assert.equal(body.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 2, 'the second worker called the vendor again');
  });

  it('ends a started stream with an error event when its worker is SIGKILLed', async () => {
    const recorded = readFileSync(toolCallFixture, 'utf8');
    fake.enqueue({ sse: recorded.split('\n\n').slice(0, 3).join('\n\n') + '\n\n', hang: true });
    for (const w of workers) await w.stop('SIGKILL');
    const doomed = await startWorker();
    const res = await post({ model: 'gpt-4o', messages: [{ role: 'user', content: 'stream' }], stream: true });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('arguments')) text += new TextDecoder().decode((await reader.read()).value);
    await doomed.stop('SIGKILL');
    await startWorker();
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    const frames = text.split('\n\n').filter(Boolean);
    const last = JSON.parse(frames.at(-1)!.slice('data: '.length)) as { error: { code: string } };
    assert.equal(last.error.code, 'worker_lost');
    assert.equal(fake.requests.length, 1, 'a started stream is not replayed to the vendor');
  });

  it('removes a waiting job when its client leaves', async () => {
    for (const w of workers) await w.stop('SIGKILL');
    const controller = new AbortController();
    const pending = fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'never mind' }] }),
    }).catch(() => undefined);
    await waitFor(async () => (await redis.zcard('bull:{chat}:prioritized')) === 1, 5000, 'a waiting job');
    controller.abort();
    await pending;
    await waitFor(async () => (await redis.zcard('bull:{chat}:prioritized')) === 0, 1000, 'the job removed');
    await startWorker();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(fake.requests.length, 0, 'the vendor never saw it');
  });

  it('manages keys through the admin API; a revoked key is refused by every api within a second', async () => {
    const second = await startGateway({ role: 'api', env: env() });
    try {
      const admin = (method: string, path: string, body?: unknown, token = adminToken) =>
        fetch(`${api.url}${path}`, {
          method,
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: body === undefined ? undefined : JSON.stringify(body),
        });
      assert.equal((await admin('GET', '/admin/keys', undefined, 'wrong')).status, 401);
      assert.equal((await admin('POST', '/admin/keys', {})).status, 400);

      const created = await admin('POST', '/admin/keys', { name: 'ci' });
      assert.equal(created.status, 201);
      const key = (await created.json()) as { id: string; key: string; name: string; created: number };
      assert.equal(key.name, 'ci');
      assert.match(key.key, /^sy-/);
      assert.equal(typeof key.created, 'number');

      const listed = (await (await admin('GET', '/admin/keys')).json()) as { data: Array<Record<string, unknown>> };
      const entry = listed.data.find((k) => k.id === key.id);
      assert.ok(entry);
      assert.ok(!JSON.stringify(listed).includes(key.key), 'no secrets in the listing');

      for (const gateway of [api, second]) await gateway.client(key.key).models.list();
      assert.equal((await admin('DELETE', `/admin/keys/${key.id}`)).status, 200);
      const revokedAt = Date.now();
      for (const gateway of [api, second]) {
        const res = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } });
        assert.equal(res.status, 401);
      }
      assert.ok(Date.now() - revokedAt < 1000);
      assert.equal((await admin('DELETE', `/admin/keys/${key.id}`)).status, 404);
    } finally {
      await second.stop();
    }
  });
});

describe('shutdown', () => {
  /**
   * A gateway whose vendor holds one chat call for `vendorDelayMs`, that call
   * under way: `run` gets them, and everything is torn down after it.
   */
  async function withCallInFlight(
    vendorDelayMs: number,
    run: (gateway: GatewayProcess, apiKey: string, inFlight: Promise<unknown>) => Promise<void>,
  ): Promise<void> {
    const fake = await startFakeOpenAI();
    const fresh = await freshRedis(6);
    const apiKey = (await createKey(fresh.redis)).key;
    const gateway = await startGateway({
      env: { REDIS_URL: fresh.url, OPENAI_API_KEY: 'sk-vendor', OPENAI_BASE_URL: fake.url, MOCK_VENDOR: 'off' },
    });
    try {
      fake.enqueue({ delayMs: vendorDelayMs });
      const inFlight = gateway
        .client(apiKey)
        .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'slow' }] })
        .catch((error: unknown) => error);
      await waitFor(() => fake.inFlight === 1, 5000, 'the vendor call');
      await run(gateway, apiKey, inFlight);
    } finally {
      await gateway.stop('SIGKILL');
      await fake.close();
      fresh.redis.disconnect();
    }
  }

  it('drains on SIGTERM: in-flight requests finish, then the process exits 0', async () => {
    await withCallInFlight(1500, async (gateway, apiKey, inFlight) => {
      const exited = gateway.stop('SIGTERM');
      await waitFor(
        () => gateway.logs.some((l) => l.includes('draining 1 request, up to 25 s')),
        5000,
        'the drain log line',
      );
      // While draining the listener stays open: a new request and a readiness probe get a 503, not a refused
      // connection.
      const refused = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } });
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('connection'), 'close');
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'overloaded');
      const ready = await fetch(`${gateway.url}/readyz`);
      assert.equal(ready.status, 503);
      assert.equal(((await ready.json()) as { draining: boolean }).draining, true);
      const completion = (await inFlight) as OpenAI.ChatCompletion;
      assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);
      assert.equal(await exited, 0);
    });
  });

  it('a second Ctrl-C exits at once without waiting for the drain', async () => {
    await withCallInFlight(20_000, async (gateway, _apiKey, inFlight) => {
      gateway.proc.kill('SIGINT');
      await waitFor(
        () => gateway.logs.some((l) => l.includes('Ctrl-C again to exit now')),
        5000,
        'the first interrupt drains',
      );
      const started = Date.now();
      const exited = gateway.stop('SIGINT');
      assert.equal(await exited, 130);
      assert.ok(Date.now() - started < 5000, 'it did not wait out the 25 s grace');
      assert.ok(gateway.logs.some((l) => l.includes('second interrupt')));
      await inFlight;
    });
  });
});
