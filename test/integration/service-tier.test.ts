import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import type { RequestView } from '../../shared/money/usage.js';

/*
 * `service_tier` past the answer: what a request is charged at its tier's
 * prices (reserved at admission, charged at settlement), and the tier on its
 * request-log row, as `GET /v1/generation` and `GET /admin/requests` (with its
 * `service_tier` filter) show it. The gateway's default tier prices: flex 0.5,
 * priority 2.
 */

const model = 'gpt-4o';
const adminToken = 'service-tier-admin-token';

describe('service tiers in the bill and the request log', () => {
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(3));
    gateway = await startGateway({ env: { REDIS_URL: url, ADMIN_TOKEN: adminToken } });
  });
  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  const post = (key: string, path: string, body: unknown) =>
    fetch(`${gateway.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const admin = async (query: string) => {
    const res = await fetch(`${gateway.url}/admin/requests${query}`, { headers: { authorization: `Bearer ${adminToken}` } });
    return { status: res.status, body: (await res.json()) as { data: RequestView[]; error?: { param?: string } } };
  };

  it('charges each tier its multiple of the token price, and records the tier on the row', async () => {
    const { key, account } = await paidAccountKey(redis, 5_000_000);
    const served: Record<string, RequestView> = {};
    for (const [asked, tier] of [[undefined, 'default'], ['flex', 'flex'], ['priority', 'priority'], ['auto', 'default']] as const) {
      const res = await post(key, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Tell me about tiers' }], max_tokens: 40, ...(asked ? { service_tier: asked } : {}) });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal(((await res.json()) as { service_tier: string }).service_tier, tier);
      const record = await requestRecord(gateway.url, key, res.headers.get('x-request-id')!);
      assert.equal(record.service_tier, tier, `the row of a request asking ${asked ?? 'nothing'}`);
      served[asked ?? 'none'] = record;
    }
    const base = served.none!;
    assert.ok(base.cost_micros > 0);
    for (const record of Object.values(served)) {
      assert.deepEqual([record.input_tokens, record.output_tokens], [base.input_tokens, base.output_tokens], 'the same answer each time');
    }
    assert.equal(served.flex!.cost_micros, Math.ceil(base.cost_micros / 2));
    assert.equal(served.priority!.cost_micros, base.cost_micros * 2);
    assert.equal(served.auto!.cost_micros, base.cost_micros);

    // A Responses request is billed and logged in its tier too.
    const response = await post(key, '/v1/responses', { model, input: 'Tell me about tiers', max_output_tokens: 40, service_tier: 'flex' });
    assert.equal(response.status, 200);
    const responseRow = await requestRecord(gateway.url, key, response.headers.get('x-request-id')!);
    assert.equal(responseRow.service_tier, 'flex');

    // The admin's list filters by tier.
    const flexRows = await admin(`?account_id=${account}&service_tier=flex`);
    assert.equal(flexRows.status, 200);
    assert.deepEqual(flexRows.body.data.map((row) => row.id).sort(), [served.flex!.id, responseRow.id].sort());
    const defaultRows = await admin(`?account_id=${account}&service_tier=default`);
    assert.deepEqual(defaultRows.body.data.map((row) => row.id).sort(), [served.none!.id, served.auto!.id].sort());
    assert.ok(defaultRows.body.data.every((row) => row.service_tier === 'default'));
    const everything = await admin(`?account_id=${account}`);
    assert.equal(everything.body.data.length, 5);
    const refused = await admin(`?service_tier=turbo`);
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error?.param, 'service_tier');
  });

  it('reserves at the tier named: a balance that covers a request at default and flex prices refuses it at priority, and the refusal is logged in its tier', async () => {
    // 1,000 output tokens of gpt-4o: 10,000 micros reserved at default, 5,000 at flex, 20,000 at priority (plus the prompt).
    const { key } = await paidAccountKey(redis, 15_000);
    const ask = (serviceTier?: string) => post(key, '/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1000, ...(serviceTier ? { service_tier: serviceTier } : {}) });
    const atPriority = await ask('priority');
    assert.equal(atPriority.status, 429);
    assert.equal(((await atPriority.json()) as { error: { code: string } }).error.code, 'insufficient_quota');
    const row = await requestRecord(gateway.url, key, atPriority.headers.get('x-request-id')!, false);
    assert.equal(row.status, 'refused');
    assert.equal(row.service_tier, 'priority');
    for (const tier of [undefined, 'flex']) {
      const res = await ask(tier);
      assert.equal(res.status, 200, `${tier ?? 'default'}: ${await res.clone().text()}`);
      await res.arrayBuffer();
    }
  });
});
