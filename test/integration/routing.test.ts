import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { fallbackCatalogFile, writeJsonFile } from '../support/fallback-catalog.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { createKey, freshRedis, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';

const ask = (client: OpenAI, model = 'gpt-4o-mini') =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });

describe('channels, cooldowns and fallbacks', () => {
  let heavy: FakeOpenAI;
  let light: FakeOpenAI;
  let backup: FakeOpenAI;
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;
  let key: string;

  before(async () => {
    [heavy, light, backup] = await Promise.all([startFakeOpenAI(), startFakeOpenAI(), startFakeOpenAI()]);
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    const channels = writeJsonFile('channels.json', {
      channels: [
        { vendor: 'openai', baseUrl: heavy.url, apiKey: 'sk-heavy-key-000000', weight: 3 },
        { vendor: 'openai', baseUrl: light.url, apiKey: 'sk-light-key-000000', weight: 1 },
        { vendor: 'spare', protocol: 'openai', baseUrl: backup.url, apiKey: 'sk-spare-key-000000' },
      ],
    });
    // A model of its own whose fallback is served by another vendor.
    const catalog = fallbackCatalogFile();
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        CHANNELS_FILE: channels,
        CATALOG_FILE: catalog,
        RETRY_BASE_MS: '10',
        CHANNEL_COOLDOWN_MS: '60000',
      },
    });
    key = (await createKey(redis)).key;
    client = gateway.client(key);
  });

  beforeEach(async () => {
    for (const fake of [heavy, light, backup]) fake.reset();
    await redis.del('sy:cooldowns');
    await new Promise((r) => setTimeout(r, 1100)); // every worker re-reads cooldowns once a second
  });

  after(async () => {
    await gateway?.stop();
    await Promise.all([heavy, light, backup].map((f) => f?.close()));
    redis?.disconnect();
  });

  it('spreads traffic over channels by weight', async () => {
    for (let i = 0; i < 80; i++) await ask(client);
    assert.ok(light.requests.length > 0, 'the light channel gets some');
    assert.ok(
      heavy.requests.length > light.requests.length * 1.5,
      `3:1 weights gave ${heavy.requests.length}:${light.requests.length}`,
    );
    assert.equal(backup.requests.length, 0);
    assert.equal(heavy.requests[0]!.headers.authorization, 'Bearer sk-heavy-key-000000');
  });

  it('moves traffic off a channel whose credentials fail, and the failing request still succeeds', async () => {
    heavy.setDefault(() => ({
      status: 401,
      json: {
        error: { message: 'Incorrect API key', type: 'invalid_request_error', param: null, code: 'invalid_api_key' },
      },
    }));
    for (let i = 0; i < 10; i++) assert.equal((await ask(client)).choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.ok(heavy.requests.length <= 1, `the bad channel was tried ${heavy.requests.length} times`);
    assert.ok(light.requests.length >= 10);
    assert.ok(
      Object.keys(await redis.hgetall('sy:cooldowns')).some((id) => id.startsWith('openai:')),
      'the cooldown is shared through Redis',
    );
  });

  it('cools a channel down after repeated 5xx and serves from the other', async () => {
    light.setDefault(() => ({
      status: 500,
      json: { error: { message: 'boom', type: 'server_error', param: null, code: null } },
    }));
    for (let i = 0; i < 30; i++) assert.equal((await ask(client)).choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.ok(light.requests.length <= 3, `the failing channel saw ${light.requests.length} calls before resting`);
  });

  it('falls back to the catalog fallback when every channel of a model is down', async () => {
    for (const fake of [heavy, light]) {
      fake.setDefault(() => ({
        status: 401,
        json: { error: { message: 'revoked', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } },
      }));
    }
    for (let i = 0; i < 5; i++)
      assert.equal((await ask(client, 'house-model')).choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.ok(backup.requests.length >= 4);
    assert.equal((backup.requests.at(-1)!.body as { model: string }).model, 'spare-upstream');

    // The request log says which model and channel served it: the one asked for stays the record's model.
    const { data: completion, response } = await client.chat.completions
      .create({ model: 'house-model', messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    const requestId = response.headers.get('x-request-id')!;
    const record = await requestRecord(gateway.url, key, requestId);
    assert.equal(record.model, 'house-model');
    assert.equal(record.fallback, 'spare-model');
    assert.match(record.channel ?? '', /^spare:/);
    assert.equal(record.answer_id, completion.id);
    assert.equal(record.finish_reason, 'stop');
    assert.equal(record.status, 'completed');
    assert.equal(record.error_code, null);
  });
});

describe('global vendor limits', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  const gateways: GatewayProcess[] = [];

  before(async () => {
    fake = await startFakeOpenAI({ latencyMs: 150 });
    const fresh = await freshRedis(12);
    redis = fresh.redis;
    const env = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-limited',
      OPENAI_BASE_URL: fake.url,
      OPENAI_MAX_CONCURRENCY: '4',
    };
    // Two worker processes share the cap: it holds across processes, not per process.
    gateways.push(await startGateway({ env }), await startGateway({ role: 'worker', env }));
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    await fake?.close();
    redis?.disconnect();
  });

  it('never lets the vendor see more than the cap; a burst of 10x waits and completes', async () => {
    const client = gateways[0]!.client((await createKey(redis)).key);
    const results = await Promise.allSettled(Array.from({ length: 40 }, () => ask(client)));
    const failed = results.filter((r) => r.status === 'rejected');
    assert.equal(failed.length, 0, String((failed[0] as PromiseRejectedResult | undefined)?.reason));
    assert.equal(fake.requests.length, 40);
    assert.ok(fake.maxInFlight <= 4, `vendor saw ${fake.maxInFlight} at once`);
    assert.equal(fake.maxInFlight, 4, 'the cap is used, not undershot');
    assert.equal(await redis.zcard('sy:limit:{openai}:inflight'), 0, 'every slot was released');
  });
});

describe('vendor timeouts', () => {
  let fake: FakeOpenAI;
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(13);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-timeouts',
        OPENAI_BASE_URL: fake.url,
        VENDOR_FIRST_BYTE_TIMEOUT_MS: '300',
        VENDOR_IDLE_TIMEOUT_MS: '300',
        RETRY_BASE_MS: '10',
        CHANNEL_FAILURE_THRESHOLD: '100',
      },
    });
    client = gateway.client((await createKey(redis)).key);
  });

  beforeEach(() => fake.reset());

  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  // undici times the first-byte and idle timeouts in steps of about a second: the 300 ms asked for fire after
  // 0.5-1.5 s (attempts measured about 1.05 s apart). The fake answers 5 s late, so the timeout always comes first
  // (with 1 s, one of five CI runs saw the late answer win).
  const lateMs = 5000;

  it('retries a vendor that is slow to its first byte, then answers', async () => {
    fake.enqueue({ delayMs: lateMs });
    assert.equal((await ask(client)).choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 2);
  });

  it('maps a vendor that never answers in time to 504 vendor_timeout', async () => {
    fake.setDefault(() => ({ delayMs: lateMs }));
    await assert.rejects(
      ask(client),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 504 && error.code === 'vendor_timeout',
    );
    assert.equal(fake.requests.length, 4, 'every attempt was tried');
  });

  it('ends a stream that goes idle with an error event', async () => {
    const events = [
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, finish_reason: null }] })}\n\n`,
    ];
    fake.enqueue({ sse: events.join(''), hang: true });
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${client.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    const frames = (await res.text()).trim().split('\n\n');
    assert.match(frames[0]!, /"Hel"/);
    assert.equal((JSON.parse(frames.at(-1)!.slice(6)) as { error: { code: string } }).error.code, 'vendor_timeout');
  });
});
