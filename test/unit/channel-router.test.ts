import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { Catalog, loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { createLogger } from '../../shared/logger.js';
import { readChannelFailures, recordChannelFailure } from '../../shared/channel-health.js';
import { ChannelRouter } from '../../workers/channel-router.js';
import { channelFaultCodes } from '../../workers/failure-policy.js';
import { freshRedis, waitFor } from '../support/gateway.js';

// Against a real Redis: cooldowns are shared there between every worker.
describe('ChannelRouter', () => {
  let redis: Redis;
  let catalog: Catalog;
  const log = createLogger('silent', 'test');
  const routers: ChannelRouter[] = [];

  before(async () => {
    redis = (await freshRedis(14)).redis;
    catalog = loadCatalog();
  });

  beforeEach(async () => {
    await redis.del('sy:cooldowns');
  });

  after(() => {
    for (const router of routers) router.stop();
    redis.disconnect();
  });

  const router = async (env: Record<string, string>) => {
    const made = new ChannelRouter(redis, catalog, log, loadConfig({ MOCK_VENDOR: 'off', ...env }));
    await made.start();
    routers.push(made);
    return made;
  };
  const model = (id: string) => catalog.get(id)!;
  const authFailure = () => new GatewayError(502, 'bad vendor key', { code: 'vendor_auth_failed' });
  const rateLimit = (ms: number) => new GatewayError(429, 'slow down', { retryable: true, retryAfterMs: ms });

  it('moves traffic off a channel whose credential failed, for every worker', async () => {
    const env = { OPENAI_API_KEY: 'sk-one,sk-two' };
    const a = await router(env);
    const first = a.route(model('gpt-4o-mini'));
    a.reportFailure(first, authFailure());
    for (let i = 0; i < 20; i++) assert.notEqual(a.route(model('gpt-4o-mini')).channel.id, first.channel.id);
    assert.equal(a.canRoute(model('gpt-4o-mini')), true);

    // A second worker learns the cooldown from Redis (written in the background).
    await waitFor(async () => (await redis.hlen('sy:cooldowns')) === 1, 5000, 'the cooldown shared');
    const b = await router(env);
    for (let i = 0; i < 20; i++) assert.notEqual(b.route(model('gpt-4o-mini')).channel.id, first.channel.id);
  });

  it('rests the whole channel, not just the model, on every channel fault the failure policy names', async () => {
    for (const code of channelFaultCodes) {
      await redis.del('sy:cooldowns');
      const a = await router({ OPENAI_API_KEY: 'sk-one,sk-two' });
      const first = a.route(model('gpt-4o-mini'));
      a.reportFailure(first, new GatewayError(502, 'key refused', { code }));
      // A sibling model on the same channel is moved off it too.
      for (let i = 0; i < 20; i++) assert.notEqual(a.route(model('gpt-4o')).channel.id, first.channel.id, code);
      await waitFor(
        async () => (await redis.hget('sy:cooldowns', first.channel.id)) !== null,
        5000,
        `${code}: the channel's rest shared`,
      );
    }
  });

  it('still tries the only channel after an auth failure: resting it would move traffic nowhere', async () => {
    const a = await router({ OPENAI_API_KEY: 'sk-only' });
    const first = a.route(model('gpt-4o-mini'));
    a.reportFailure(first, authFailure());
    assert.equal(a.canRoute(model('gpt-4o-mini')), false, 'no healthy channel to switch to');
    assert.equal(a.route(model('gpt-4o-mini')).channel.id, first.channel.id);
  });

  it('makes the job wait when every channel is rate limited, then serves again', async () => {
    const a = await router({ OPENAI_API_KEY: 'sk-only' });
    const first = a.route(model('gpt-4o-mini'));
    a.reportFailure(first, rateLimit(300));
    assert.throws(
      () => a.route(model('gpt-4o-mini')),
      (error: unknown) =>
        error instanceof GatewayError &&
        error.code === 'channels_cooling_down' &&
        error.retryable &&
        (error.retryAfterMs ?? 0) <= 1000,
    );
    // Per model: a sibling model on the same channel is not held back.
    assert.equal(a.route(model('gpt-4o')).channel.id, first.channel.id);
    await new Promise((r) => setTimeout(r, 350));
    assert.equal(a.route(model('gpt-4o-mini')).channel.id, first.channel.id);
  });

  it('cools a channel after repeated server errors, not after one', async () => {
    const a = await router({ OPENAI_API_KEY: 'sk-one,sk-two', CHANNEL_FAILURE_THRESHOLD: '3' });
    const first = a.route(model('gpt-4o-mini'));
    const boom = new GatewayError(502, 'upstream 500', { retryable: true });
    a.reportFailure(first, boom);
    a.reportFailure(first, boom);
    assert.equal(await redis.hlen('sy:cooldowns'), 0, 'two failures are not yet a pattern');
    a.reportFailure(first, boom);
    await waitFor(
      async () => (await redis.hlen('sy:cooldowns')) === 1,
      5000,
      'the third failure starts a shared cooldown',
    );
    for (let i = 0; i < 20; i++) assert.notEqual(a.route(model('gpt-4o-mini')).channel.id, first.channel.id);
  });

  it(
    "counts a model's vendor faults on its channel where every worker reads them (the console's Channels page), " +
      'not a request the vendor refused',
    async () => {
      const a = await router({ OPENAI_API_KEY: 'sk-one', CHANNEL_FAILURE_THRESHOLD: '3' });
      const route = a.route(model('gpt-4o'));
      const field = `${route.channel.id}|${route.upstreamModel}`;
      const before = (await readChannelFailures(redis)).get(field) ?? 0;
      // The refusal first: its write, were there one, would land before the others' on the one connection.
      a.reportFailure(route, new GatewayError(400, 'bad request', { code: 'invalid_request_error' }));
      a.reportFailure(route, new GatewayError(502, 'upstream 500', { retryable: true }));
      a.reportFailure(route, rateLimit(50));
      await waitFor(
        async () => ((await readChannelFailures(redis)).get(field) ?? 0) >= before + 2,
        5000,
        'the two faults counted',
      );
      assert.equal((await readChannelFailures(redis)).get(field), before + 2);
      // Counted over the last 15 minutes: one of 20 minutes ago is not.
      await recordChannelFailure(redis, route.channel.id, 'an-old-model', Date.now() - 20 * 60_000);
      assert.equal((await readChannelFailures(redis)).get(`${route.channel.id}|an-old-model`), undefined);
      await recordChannelFailure(redis, route.channel.id, 'an-old-model', Date.now() - 10 * 60_000);
      assert.equal((await readChannelFailures(redis)).get(`${route.channel.id}|an-old-model`), 1);
    },
  );

  it('says no route (not a wait) for a model no configured vendor serves', async () => {
    const a = await router({ OPENAI_API_KEY: 'sk-only' });
    assert.throws(
      () => a.route(model('claude-sonnet-4-5')),
      (error: unknown) => error instanceof GatewayError && error.code === 'no_route' && !error.retryable,
    );
  });
});
