import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

// A vendor that answers 429 for ever: the request waits RATE_LIMIT_WAIT_MS in all (not its whole deadline),
// then hears when to come back; a deadline shorter than that is the deadline's 504, with the same hint.
describe('a vendor that keeps answering 429', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  let url: string;
  let apiKey: string;
  const gateways: GatewayProcess[] = [];
  const limited = {
    status: 429,
    headers: { 'retry-after': '1' },
    json: {
      error: { message: 'Rate limit reached for requests', type: 'requests', param: null, code: 'rate_limit_exceeded' },
    },
  };

  before(async () => {
    fake = await startFakeOpenAI();
    fake.setDefault(() => limited);
    ({ redis, url } = await freshRedis(5));
    apiKey = (await createKey(redis)).key;
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    await fake?.close();
    redis?.disconnect();
  });

  async function start(env: Record<string, string>): Promise<GatewayProcess> {
    const gateway = await startGateway({
      env: {
        REDIS_URL: url,
        OPENAI_API_KEY: 'sk-vendor-rate',
        OPENAI_BASE_URL: fake.url,
        MOCK_VENDOR: 'off',
        RETRY_BASE_MS: '20',
        ...env,
      },
    });
    gateways.push(gateway);
    return gateway;
  }

  const chat = (gateway: GatewayProcess, stream = false) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream }),
    });

  it('waits RATE_LIMIT_WAIT_MS in all, then answers 429 with retry-after and retry-after-ms, plain and streamed', async () => {
    const gateway = await start({ RATE_LIMIT_WAIT_MS: '2500', REQUEST_DEADLINE_MS_CHAT: '600000' });
    for (const stream of [false, true]) {
      const calls = fake.requests.length;
      const started = Date.now();
      const answer = await chat(gateway, stream);
      const ms = Date.now() - started;
      assert.equal(answer.status, 429, `stream: ${stream}`);
      const body = await answer.json();
      assertMatchesSchema('ErrorResponse', body, 'the 429');
      assert.equal((body as { error: { code: string } }).error.code, 'rate_limit_exceeded');
      assert.match((body as { error: { message: string } }).error.message, /kept rate limiting/);
      assert.ok(Number(answer.headers.get('retry-after')) >= 1, 'retry-after in whole seconds');
      assert.ok(Number(answer.headers.get('retry-after-ms')) > 0, 'retry-after-ms');
      // It did wait (the vendor was asked more than once), and not for its deadline.
      assert.ok(fake.requests.length - calls >= 2, `the vendor was asked again: ${fake.requests.length - calls}`);
      assert.ok(ms >= 1500 && ms < 15_000, `answered after ${ms} ms`);
    }
  });

  it('a deadline shorter than the wait ends in the deadline 504 (as documented), with retry-after', async () => {
    const gateway = await start({ RATE_LIMIT_WAIT_MS: '60000', REQUEST_DEADLINE_MS_CHAT: '2500' });
    const answer = await chat(gateway);
    assert.equal(answer.status, 504);
    const body = (await answer.json()) as { error: { code: string; type: string } };
    assertMatchesSchema('ErrorResponse', body, 'the 504');
    assert.equal(body.error.code, 'timeout');
    assert.ok(Number(answer.headers.get('retry-after')) >= 1);
  });
});
