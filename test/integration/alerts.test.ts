import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import type OpenAI from 'openai';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { startFakeWebhook, type FakeWebhook } from '../support/fake-webhook.js';
import type { AlertView } from '../../shared/console-api.js';

const adminToken = 'alerts-admin-token';
const secret = 'alerts-test-secret-0123456789';
// Offline the mock answers gpt-4o at gpt-4o's prices; one output token, so what is reserved is what is billed.
const model = 'gpt-4o';
const cached = { headers: { 'cache-control': 'max-age=600' } };
const ask = (content: string): OpenAI.ChatCompletionCreateParamsNonStreaming => ({
  model,
  messages: [{ role: 'user', content }],
  max_tokens: 1,
});

/**
 * A receiver's check of a delivery: the signature over `<t>.<raw body>` under `key`, and `t` within `toleranceS` of
 * now.
 */
function verifies(header: string | undefined, raw: string, key: string, toleranceS = 300): boolean {
  const parts = Object.fromEntries((header ?? '').split(',').map((part) => part.split('=', 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(Date.now() / 1000 - t) > toleranceS || !parts.v1) return false;
  const expected = createHmac('sha256', key).update(`${t}.${raw}`).digest('hex');
  return expected === parts.v1;
}

// Budget alerts end to end: settlements (of queued requests and of cache hits) decide each crossing once, the worker
// records it and delivers it to a webhook, signed, retried on 5xx and timeouts, refused for good on other 4xx.
describe('budget alerts', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let webhook: FakeWebhook;
  let seq = 0;
  const { admin } = adminClient(() => gateway.url, adminToken);

  before(async () => {
    webhook = await startFakeWebhook();
    const fresh = await freshRedis(11);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        ADMIN_TOKEN: adminToken,
        ALERT_WEBHOOK_URL: webhook.url,
        ALERT_WEBHOOK_SECRET: secret,
        ALERT_WEBHOOK_TIMEOUT_MS: '400',
        ALERT_WEBHOOK_BACKOFF_MS: '50',
        ALERT_WEBHOOK_ATTEMPTS: '4',
        CACHE_HIT_PRICE: '1',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    await webhook?.close();
    redis?.disconnect();
  });

  /** A team with $10 and a key of its own (`limit_usd` as given). */
  async function team(keySettings: Json = {}): Promise<{ id: string; key: string; keyId: string; client: OpenAI }> {
    const n = ++seq;
    const made = await admin('POST', '/admin/accounts', {
      email: `team-${n}@alerts.test`,
      name: `Team ${n}`,
      password: 'team-password-1',
      role: 'member',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 10 })).status, 200);
    const key = await admin('POST', '/admin/keys', { name: `key-${n}`, account_id: id, ...keySettings });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { id, key: String(key.json.key), keyId: String(key.json.id), client: gateway.client(String(key.json.key)) };
  }

  /** What one `ask` costs (micros), measured on a team of its own. */
  async function costOfOne(): Promise<number> {
    const probe = await team();
    await probe.client.chat.completions.create(ask('probe'));
    let spent = 0;
    await waitFor(
      async () => {
        const keyView = await admin('GET', `/admin/keys/${probe.keyId}`);
        spent = Math.round(Number(keyView.json.spent_usd ?? 0) * 1_000_000);
        return spent > 0;
      },
      10_000,
      'the probe settled',
    );
    return spent;
  }

  async function alertsOf(teamId: string): Promise<AlertView[]> {
    const res = await admin('GET', `/admin/alerts?team_id=${encodeURIComponent(teamId)}`);
    assert.equal(res.status, 200, JSON.stringify(res.json));
    return res.json.data as unknown as AlertView[];
  }

  const deliveriesOf = (teamId: string) => webhook.deliveries.filter((delivery) => delivery.body.team_id === teamId);

  it(
    'crossing 50, 80 and 100 % of a team budget under concurrent requests (cache hits) sends each threshold once, ' +
      'signed',
    async () => {
      const cost = await costOfOne();
      const t = await team();
      assert.equal(
        (
          await admin('PATCH', `/admin/accounts/${t.id}`, {
            budget_usd: (10 * cost) / 1_000_000,
            budget_period: 'month',
          })
        ).status,
        200,
      );
      // The answer stored by a miss (10 %), then hits at its exact price, at once: nine fit, the budget refuses the rest.
      await t.client.chat.completions.create(ask('probe'), cached);
      const settled = await Promise.allSettled(
        Array.from({ length: 24 }, () => t.client.chat.completions.create(ask('probe'), cached)),
      );
      assert.equal(settled.filter((s) => s.status === 'fulfilled').length, 9, 'the budget admits nine hits');
      await waitFor(
        async () => (await alertsOf(t.id)).filter((a) => a.state === 'delivered').length === 3,
        15_000,
        'three alerts delivered',
      );
      const alerts = await alertsOf(t.id);
      assert.deepEqual(
        alerts.map((a) => a.threshold_percent).sort((a, b) => a - b),
        [50, 80, 100],
      );
      for (const alert of alerts) {
        assert.equal(alert.state, 'delivered', JSON.stringify(alert));
        assert.equal(alert.attempts, 1);
        assert.equal(alert.kind, 'team');
        assert.equal(alert.scope_id, t.id);
        assert.equal(alert.scope_name, '', 'the team’s own budget needs no other name');
        assert.equal(alert.period, 'month');
        assert.equal(alert.limit_usd, ((10 * cost) / 1_000_000).toFixed(6));
      }
      assert.equal(alerts.find((a) => a.threshold_percent === 100)!.spent_usd, ((10 * cost) / 1_000_000).toFixed(6));
      const deliveries = deliveriesOf(t.id);
      assert.deepEqual(deliveries.map((d) => d.body.threshold_percent).sort(), [100, 50, 80]);
      for (const delivery of deliveries) {
        const header = delivery.headers['switchyard-signature'] as string;
        assert.ok(verifies(header, delivery.raw, secret), header);
        assert.ok(!verifies(header, delivery.raw, 'another-secret-0123456789'));
        assert.ok(
          !verifies(header, delivery.raw.replace('"threshold_percent":', '"threshold_percent": '), secret),
          'a changed body fails',
        );
        assert.equal(delivery.body.team_name, `Team ${seq}`);
        assert.equal(delivery.body.scope_name, '');
        assert.equal(delivery.body.type, 'budget.threshold_crossed');
        assert.match(String(delivery.body.period_start), /^\d{4}-\d{2}-01T00:00:00\.000Z$/);
      }
      // Nothing more to cross this period: no fourth alert.
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(deliveriesOf(t.id).length, 3);
    },
  );

  it(
    'a webhook that answers 500, then times out, then 200 is tried again and the alert delivered; a lifetime limit ' +
      'alerts once ever',
    async () => {
      const cost = await costOfOne();
      const t = await team({ limit_usd: (2 * cost) / 1_000_000 });
      webhook.answer(t.id, [500, 'hang', 200]);
      // Queued and settled by the worker: half the key's limit.
      await t.client.chat.completions.create(ask('probe'));
      await waitFor(
        async () => (await alertsOf(t.id)).some((a) => a.state === 'delivered'),
        15_000,
        'the alert delivered',
      );
      const [alert] = await alertsOf(t.id);
      assert.equal(alert!.kind, 'key_lifetime');
      assert.equal(alert!.scope_id, t.keyId);
      // Named as people read it, in the console and in the body sent.
      assert.match(alert!.scope_name, /^key-\d+$/);
      assert.equal(deliveriesOf(t.id).at(-1)!.body.scope_name, alert!.scope_name);
      assert.equal(alert!.period, null);
      assert.equal(alert!.threshold_percent, 50);
      assert.equal(alert!.attempts, 3);
      assert.equal(alert!.last_status, 200);
      assert.deepEqual(
        deliveriesOf(t.id).map((d) => d.answer),
        [500, 'hang', 200],
      );
      // The same alert each time, each signed afresh.
      assert.equal(new Set(deliveriesOf(t.id).map((d) => d.body.id)).size, 1);

      // The rest at exact prices (an answer another key of the team stored): 100 %, then refused, and no alert again.
      const other = await admin('POST', '/admin/keys', { name: 'store', account_id: t.id });
      await gateway.client(String(other.json.key)).chat.completions.create(ask('probe'), cached);
      await t.client.chat.completions.create(ask('probe'), cached);
      await waitFor(async () => (await alertsOf(t.id)).length === 3, 15_000, 'the 80 and 100 % alerts');
      const again = await t.client.chat.completions.create(ask('probe'), cached).then(
        () => 'answered',
        (error: { status?: number }) => error.status,
      );
      assert.equal(again, 429);
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(
        (await alertsOf(t.id)).map((a) => a.threshold_percent).sort((a, b) => a - b),
        [50, 80, 100],
      );
    },
  );

  it('a 400 is final: the alert is failed after one attempt', async () => {
    const cost = await costOfOne();
    const t = await team({ limit_usd: (2 * cost) / 1_000_000 });
    webhook.answer(t.id, [400]);
    await t.client.chat.completions.create(ask('probe'));
    await waitFor(async () => (await alertsOf(t.id)).some((a) => a.state === 'failed'), 15_000, 'the alert failed');
    const [alert] = await alertsOf(t.id);
    assert.equal(alert!.attempts, 1);
    assert.equal(alert!.last_status, 400);
    assert.match(alert!.last_error ?? '', /400/);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(deliveriesOf(t.id).length, 1);
  });

  it('refuses hostile listing queries clearly', async () => {
    for (const query of ['limit=0', 'limit=abc', 'limit=501', 'colour=red']) {
      const res = await admin('GET', `/admin/alerts?${query}`);
      assert.equal(res.status, 400, query);
      assert.equal(res.json.error.type, 'invalid_request_error');
    }
    assert.deepEqual((await admin('GET', '/admin/alerts?before=no-such-alert')).json.data, []);
  });
});

describe('budget alerts with no webhook', () => {
  it('are recorded as no_webhook', async () => {
    const fresh = await freshRedis(12);
    const gateway = await startGateway({ env: { REDIS_URL: fresh.url, ADMIN_TOKEN: adminToken } });
    try {
      const { admin } = adminClient(() => gateway.url, adminToken);
      const made = await admin('POST', '/admin/accounts', {
        email: 'solo@alerts.test',
        name: 'Solo',
        password: 'solo-password-1',
        role: 'member',
      });
      const id = String(made.json.id);
      await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 10 });
      const probe = await admin('POST', '/admin/keys', { name: 'probe', account_id: id });
      await gateway.client(String(probe.json.key)).chat.completions.create(ask('probe'));
      let cost = 0;
      await waitFor(
        async () =>
          (cost = Math.round(
            Number((await admin('GET', `/admin/keys/${String(probe.json.id)}`)).json.spent_usd ?? 0) * 1_000_000,
          )) > 0,
        10_000,
        'the probe settled',
      );
      const key = await admin('POST', '/admin/keys', {
        name: 'solo',
        account_id: id,
        limit_usd: (2 * cost) / 1_000_000,
      });
      await gateway.client(String(key.json.key)).chat.completions.create(ask('probe'));
      await waitFor(
        async () => ((await admin('GET', `/admin/alerts?team_id=${id}`)).json.data as unknown[]).length > 0,
        15_000,
        'the alert recorded',
      );
      const [alert] = (await admin('GET', `/admin/alerts?team_id=${id}`)).json.data as unknown as AlertView[];
      assert.equal(alert!.state, 'no_webhook');
      assert.equal(alert!.attempts, 0);
    } finally {
      await gateway.stop();
      fresh.redis.disconnect();
    }
  });
});
