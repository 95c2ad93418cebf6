import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { asyncMode, prefersAsync } from '../../api/requests/endpoint-route.js';
import { GatewayError } from '../../shared/errors.js';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';

/**
 * The route every queued endpoint runs (`api/requests/endpoint-route.ts`): read, validate, resolve the model, the
 * key's say, the worst case, then how the client is answered (held, async, background), over HTTP.
 */
describe('endpoint route', () => {
  let gateway: GatewayProcess;
  let redis: Redis;

  before(async () => {
    const fresh = await freshRedis(4);
    redis = fresh.redis;
    // Offline, as a fresh checkout runs: the mock stands in for every vendor, and its answers are free.
    gateway = await startGateway({ env: { REDIS_URL: fresh.url, MOCK_BILLING: 'off' } });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const chat = (key: string, body: object, headers: Record<string, string> = {}) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], ...body }),
    });

  it('reads Prefer: respond-async among other preferences, and refuses it with a stream', () => {
    assert.equal(prefersAsync('return=minimal, respond-async'), true);
    assert.equal(prefersAsync('Respond-Async; wait=5'), true);
    assert.equal(prefersAsync('return=minimal'), false);
    assert.equal(prefersAsync(undefined), false);
    assert.equal(asyncMode({ get: () => 'respond-async' }, false), true);
    assert.throws(
      () => asyncMode({ get: () => 'respond-async' }, true),
      (e: unknown) => e instanceof GatewayError && e.status === 400 && e.param === 'stream',
    );
  });

  it('refuses a model the key may not use, before anything is queued or reserved', async () => {
    const { key } = await paidAccountKey(redis, 1_000_000, { models: ['mock-chat'] });
    const response = await chat(key, {});
    assert.equal(response.status, 403);
    const body = (await response.json()) as { error: { code: string; param: string } };
    assert.equal(body.error.code, 'model_not_allowed');
    assert.equal(body.error.param, 'model');
  });

  it('serves a mock answer free: an account without a balance is answered, at no cost', async () => {
    const { key } = await paidAccountKey(redis, 0);
    const response = await chat(key, { max_tokens: 50 });
    assert.equal(response.status, 200, await response.clone().text());
    const body = (await response.json()) as { object: string };
    assert.equal(body.object, 'chat.completion');
    const row = await requestRecord(gateway.url, key, response.headers.get('x-request-id')!);
    assert.equal(row.cost_micros, 0);
    assert.ok(row.output_tokens > 0, 'what it used is still counted');
  });

  it('answers Prefer: respond-async at once with a job to poll, and refuses it for a stream', async () => {
    const { key } = await paidAccountKey(redis, 'unlimited');
    const accepted = await chat(key, {}, { prefer: 'respond-async' });
    assert.equal(accepted.status, 202);
    const job = (await accepted.json()) as { id: string; object: string; status: string };
    assert.equal(job.object, 'job');
    assert.equal(job.status, 'queued');
    assert.equal(accepted.headers.get('location'), `/v1/jobs/${job.id}`);
    const refused = await chat(key, { stream: true }, { prefer: 'respond-async' });
    assert.equal(refused.status, 400);
    assert.equal(((await refused.json()) as { error: { param: string } }).error.param, 'stream');
  });
});
