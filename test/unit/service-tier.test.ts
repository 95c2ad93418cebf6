import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { buildJob, type JobOrigin } from '../../api/requests/build-job.js';
import { loadConfig } from '../../shared/config.js';
import { withServiceTier } from '../../workers/answers/chat-encoder.js';
import { decimalRatio, ratioText, servingTier } from '../../shared/scheduling/service-tier.js';
import { grantRequestTier, isContended } from '../../shared/scheduling/index.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';

const origin: JobOrigin = {
  requestId: 'req_1',
  replyTo: 'reply',
  keyId: 'key_1',
  model: 'mock-gpt',
  baseUrl: 'http://localhost',
};
const chat = { model: 'mock-gpt', messages: [{ role: 'user' as const, content: 'hi' }] };

describe('service tiers', () => {
  it('serves auto, scale and no tier as default, fast as priority', () => {
    assert.equal(servingTier(undefined), 'default');
    assert.equal(servingTier(null), 'default');
    assert.equal(servingTier('auto'), 'default');
    assert.equal(servingTier('scale'), 'default');
    assert.equal(servingTier('default'), 'default');
    assert.equal(servingTier('flex'), 'flex');
    assert.equal(servingTier('priority'), 'priority');
    assert.equal(servingTier('fast'), 'priority');
  });

  it('reads a multiplier as the exact ratio its decimal names', () => {
    assert.deepEqual(decimalRatio('0.5'), { numerator: 1, denominator: 2 });
    assert.deepEqual(decimalRatio('2'), { numerator: 2, denominator: 1 });
    assert.deepEqual(decimalRatio('1.25'), { numerator: 5, denominator: 4 });
    assert.deepEqual(decimalRatio('0.1'), { numerator: 1, denominator: 10 });
    assert.deepEqual(decimalRatio('0.000001'), { numerator: 1, denominator: 1_000_000 });
    assert.deepEqual(decimalRatio('0'), { numerator: 0, denominator: 1 });
    assert.equal(ratioText(decimalRatio('0.333333')), '0.333333');
    assert.equal(ratioText(decimalRatio('2.50')), '2.5');
  });

  it(
    'takes the tier prices from SERVICE_TIER_PRICE_FLEX and SERVICE_TIER_PRICE_PRIORITY (0.5 and 2 unset), and ' +
      'refuses what is not a decimal',
    () => {
      const defaults = loadConfig({}).serviceTierPrices;
      assert.deepEqual(defaults, {
        priority: { numerator: 2, denominator: 1 },
        default: { numerator: 1, denominator: 1 },
        flex: { numerator: 1, denominator: 2 },
      });
      const set = loadConfig({ SERVICE_TIER_PRICE_FLEX: '0.25', SERVICE_TIER_PRICE_PRIORITY: '1.5' }).serviceTierPrices;
      assert.deepEqual(set.flex, { numerator: 1, denominator: 4 });
      assert.deepEqual(set.priority, { numerator: 3, denominator: 2 });
      for (const bad of ['-1', '1e3', 'half', '0.1234567', '1001']) {
        assert.throws(() => loadConfig({ SERVICE_TIER_PRICE_FLEX: bad }), /SERVICE_TIER_PRICE_FLEX must be a decimal/);
      }
    },
  );

  it(
    'gives a flex request FLEX_DEADLINE_MS (30 min unset) in place of the chat queue deadline; other tiers keep ' +
      'the queue deadline',
    () => {
      const config = loadConfig({ REQUEST_DEADLINE_MS_CHAT: '60000' });
      assert.equal(config.flexDeadlineMs, 1_800_000);
      const before = Date.now();
      const flex = buildJob('chat.completions', { payload: chat, serviceTier: 'flex' }, origin, 'held', config);
      const standard = buildJob('chat.completions', { payload: chat, serviceTier: 'default' }, origin, 'held', config);
      const priority = buildJob('chat.completions', { payload: chat, serviceTier: 'priority' }, origin, 'held', config);
      const after = Date.now();
      assert.ok(
        flex.deadline >= before + 1_800_000 && flex.deadline <= after + 1_800_000,
        `flex deadline ${flex.deadline - before} ms ahead`,
      );
      assert.equal(flex.data.deadline, flex.deadline);
      assert.equal(flex.data.serviceTier, 'flex');
      for (const job of [standard, priority])
        assert.ok(job.deadline >= before + 60_000 && job.deadline <= after + 60_000);
      const shorter = buildJob(
        'chat.completions',
        { payload: chat, serviceTier: 'flex' },
        origin,
        'held',
        loadConfig({ FLEX_DEADLINE_MS: '5000' }),
      );
      assert.ok(shorter.deadline <= Date.now() + 5_000);
    },
  );

  it("says the serving tier on a vendor's own chat body or chunk: its value replaced, or the field added", () => {
    assert.equal(
      withServiceTier('{"id":"a","service_tier":"default","choices":[]}', 'flex'),
      '{"id":"a","service_tier":"flex","choices":[]}',
    );
    assert.equal(
      withServiceTier('{"id":"a","service_tier":null,"choices":[]}', 'priority'),
      '{"id":"a","service_tier":"priority","choices":[]}',
    );
    assert.equal(
      withServiceTier('{"id":"a","choices":[]}\n', 'default'),
      '{"id":"a","choices":[],"service_tier":"default"}\n',
    );
    assert.equal(withServiceTier('{ }', 'flex'), '{ "service_tier":"flex"}');
    // The key inside a string value (its quotes escaped) is text, not the field.
    const quoted = JSON.stringify({ id: 'a', choices: [{ delta: { content: '"service_tier":"flex"' } }] });
    assert.deepEqual(JSON.parse(withServiceTier(quoted, 'priority')), {
      ...JSON.parse(quoted),
      service_tier: 'priority',
    });
  });
});

describe('the tier a request is queued in, decided once', () => {
  const config = { tiersGranted: ['default', 'flex'] as ServiceTier[], tierNotGranted: 'downgrade' as const };

  it('grants what the account may use, and says `default` in the body for what it may not', () => {
    const asked = { service_tier: 'fast' };
    assert.equal(grantRequestTier(asked, { tiers: ['priority', 'default'] }, config), 'priority');
    assert.equal(asked.service_tier, 'fast', 'a granted tier keeps the name the client gave it');
    const refused = { service_tier: 'priority' };
    assert.equal(grantRequestTier(refused, {}, config), 'default');
    assert.equal(refused.service_tier, 'default');
    const none: { service_tier?: string | null } = {};
    assert.equal(grantRequestTier(none, {}, config), 'default');
    assert.deepEqual(none, {}, 'no field is added');
    assert.equal(grantRequestTier({ service_tier: 'flex' }, {}, config), 'flex');
    assert.throws(
      () => grantRequestTier({ service_tier: 'priority' }, {}, { ...config, tierNotGranted: 'refuse' }),
      (error: { status?: number; code?: string }) => error.status === 403 && error.code === 'service_tier_not_granted',
    );
  });

  it('places a job fairly only where jobs wait', () => {
    assert.equal(isContended('lane:openai', 0), true, "a capped vendor's lane");
    assert.equal(isContended(undefined, 3), true, 'a shared lane with jobs waiting');
    assert.equal(isContended(undefined, 0), false);
  });
});
