import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { freshRedis, requestRecord, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { ConsoleClient } from '../support/console-client.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { testRecord } from '../support/record.js';
import { budgetCounter, periodEnd } from '../../shared/money/budgets.js';
import { billKey } from '../../shared/redis-keys.js';
import type { RecordDb } from '../../storage/record/database.js';

const adminToken = 'budgets-http-admin-token';
const model = 'gpt-4o-mini';

type ErrorBody = { error?: { code: string | null; param: string | null; message: string; type: string } };

function expectError(
  res: { status: number; json: Json & ErrorBody },
  status: number,
  code: string,
  param?: string,
): void {
  assert.equal(res.status, status, JSON.stringify(res.json));
  assert.equal(res.json.error?.code, code, JSON.stringify(res.json));
  if (param !== undefined) assert.equal(res.json.error?.param, param, JSON.stringify(res.json));
}

/** A refusal by the OpenAI SDK: its status, code and message. */
async function refusal(
  call: Promise<unknown>,
): Promise<{ status: number; code: string | null | undefined; message: string }> {
  try {
    await call;
  } catch (error) {
    if (error instanceof OpenAI.APIError)
      return { status: error.status ?? 0, code: error.code, message: error.message };
    throw error;
  }
  assert.fail('the request was admitted');
}

// Budgets over HTTP, end to end: two api processes and a worker on one Redis and one record, people in a team made
// through the admin API and their keys through the console (so each key is theirs), requests with the official
// OpenAI SDK. Admission itself is tested on the scripts in budgets.test.ts; here, that every part is wired to it.
describe('budgets over HTTP: a team’s, a member’s cap, a key’s, a cache hit, the console’s routes', () => {
  let redis: Redis;
  let upstream: FakeOpenAI;
  let apiA: GatewayProcess;
  let apiB: GatewayProcess;
  let worker: GatewayProcess;
  let record: RecordDb;
  let seq = 0;
  const { admin } = adminClient(() => apiA.url, adminToken);

  before(async () => {
    upstream = await startFakeOpenAI();
    const fresh = await freshRedis(8);
    redis = fresh.redis;
    const env = {
      REDIS_URL: fresh.url,
      ADMIN_TOKEN: adminToken,
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: upstream.url,
      // A hit costs the stored answer's price: a budget holds it as any request.
      CACHE_HIT_PRICE: '1',
      // Budgets changed through one api are seen at once by the other (accessChangedChannel), whatever its cache.
      KEY_CACHE_TTL_MS: '60000',
    };
    [apiA, apiB, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    record = await testRecord(redis);
  });

  after(async () => {
    await Promise.all([apiA?.stop(), apiB?.stop(), worker?.stop()]);
    await upstream?.close();
    redis?.disconnect();
  });

  interface Person {
    id: string;
    email: string;
    console: ConsoleClient;
    /** The console in the team (the x-team header its pages send). */
    inTeam: <T = Json>(
      method: string,
      path: string,
      body?: unknown,
    ) => Promise<{ status: number; json: T & ErrorBody }>;
  }

  /** Someone with an account, signed in to the console of api A. */
  async function person(name: string, team: string): Promise<Person> {
    const email = `${name}-${++seq}@budgets-http.test`;
    const made = await admin('POST', '/admin/accounts', { email, password: 'person-password', role: 'member' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const console = new ConsoleClient(apiA.url);
    assert.equal((await console.signIn(email, 'person-password')).status, 200);
    return {
      id: String(made.json.id),
      email,
      console,
      inTeam: (method, path, body) => console.request(method, path, body, { headers: { 'x-team': team } }),
    };
  }

  /**
   * A team with $100, an owner, two members and a viewer (through the admin API), each member with a key they made in
   * the console.
   */
  async function team(): Promise<{
    id: string;
    owner: Person;
    alice: Person;
    bob: Person;
    viewer: Person;
    aliceKey: string;
    bobKey: string;
    aliceKeyId: string;
  }> {
    const made = await admin('POST', '/admin/teams', { name: `Budget team ${++seq}` });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 100 })).status, 200);
    const [owner, alice, bob, viewer] = await Promise.all([
      person('owner', id),
      person('alice', id),
      person('bob', id),
      person('viewer', id),
    ]);
    for (const [who, role] of [
      [owner, 'owner'],
      [alice, 'member'],
      [bob, 'member'],
      [viewer, 'viewer'],
    ] as const) {
      const added = await admin('POST', `/admin/teams/${id}/members`, { email: who.email, role });
      assert.equal(added.status, 201, JSON.stringify(added.json));
    }
    const aliceKey = await alice.inTeam<{ id: string; key: string }>('POST', '/console/api/keys', { name: 'alice' });
    const bobKey = await bob.inTeam<{ id: string; key: string }>('POST', '/console/api/keys', { name: 'bob' });
    assert.equal(aliceKey.status, 201, JSON.stringify(aliceKey.json));
    assert.equal(bobKey.status, 201, JSON.stringify(bobKey.json));
    return {
      id,
      owner,
      alice,
      bob,
      viewer,
      aliceKey: aliceKey.json.key,
      bobKey: bobKey.json.key,
      aliceKeyId: aliceKey.json.id,
    };
  }

  const ask = (api: GatewayProcess, key: string, content: string, headers: Record<string, string> = {}) =>
    api
      .client(key)
      .chat.completions.create({ model, max_tokens: 16, messages: [{ role: 'user', content }] }, { headers });

  /** What one request of `ask`'s size costs, settled: measured on a team with no budget. */
  async function costOfOne(): Promise<number> {
    const { aliceKey } = await team();
    const answer = await ask(apiA, aliceKey, 'How much am I?');
    const row = await requestRecord(apiA.url, aliceKey, answer.id);
    return Math.round(row.cost_usd * 1_000_000);
  }

  /** The usage rows of a team, once every request of it is settled in the record. */
  async function settledRows(teamId: string, expected: number) {
    let rows: Array<{ cost_micros: number; key_id: string }> = [];
    await waitFor(
      async () => {
        rows = await record
          .selectFrom('usage')
          .select(['cost_micros', 'key_id'])
          .where('account_id', '=', teamId)
          .where('settled', '=', true)
          .execute();
        return rows.length === expected;
      },
      15_000,
      `${expected} settled rows of ${teamId}`,
    );
    return rows.map((row) => ({ ...row, cost_micros: Number(row.cost_micros) }));
  }

  it(
    'never passes a team’s budget under concurrent requests of two members through two api processes; the record ' +
      'holds the exact micros',
    async () => {
      const cost = await costOfOne();
      assert.ok(cost > 0, 'a request costs something');
      const t = await team();
      // Room for a few requests, not for twenty.
      const budgetMicros = cost * 4 + Math.floor(cost / 2);
      const set = await t.owner.inTeam('PUT', `/console/api/teams/${t.id}/budget`, {
        budget_usd: budgetMicros / 1_000_000,
        budget_period: 'month',
      });
      assert.equal(set.status, 200, JSON.stringify(set.json));

      const outcomes = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          ask(i % 2 === 0 ? apiA : apiB, i % 4 < 2 ? t.aliceKey : t.bobKey, `Spend ${i}`),
        ),
      );
      const admitted = outcomes.filter((o) => o.status === 'fulfilled').length;
      const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
      assert.ok(admitted >= 1 && refused.length >= 1, `admitted ${admitted}, refused ${refused.length}`);
      const now = Date.now();
      for (const reason of refused) {
        assert.ok(reason instanceof OpenAI.APIError, String(reason));
        assert.equal(reason.status, 429);
        assert.equal(reason.code, 'insufficient_quota');
        assert.match(reason.message, /the team's monthly budget/);
        assert.ok(
          reason.message.includes(`It resets at ${new Date(periodEnd('month', now) * 1000).toISOString()}`),
          reason.message,
        );
      }
      const rows = await settledRows(t.id, admitted);
      const settled = rows.reduce((sum, row) => sum + row.cost_micros, 0);
      assert.ok(settled <= budgetMicros, `settled ${settled} > budget ${budgetMicros}`);
      // The counter admission held is the record's sum, to the micro-dollar, and nothing is left held.
      const counter = budgetCounter({ scope: 'team', period: 'month' }, now);
      const [spent, reserved] = await redis.hmget(billKey(t.id), `${counter}.spent`, `${counter}.reserved`);
      assert.equal(Number(spent), settled);
      assert.equal(Number(reserved ?? 0), 0);
      // The console shows the same spend.
      const view = await t.viewer.inTeam<{ budget_spent_usd: number; budget_usd: number; budget_period: string }>(
        'GET',
        `/console/api/teams/${t.id}/budget`,
      );
      assert.equal(view.status, 200);
      assert.equal(Math.round(view.json.budget_spent_usd * 1_000_000), settled);
      assert.equal(view.json.budget_period, 'month');
    },
  );

  it('a member’s cap refuses that member’s keys only', async () => {
    const t = await team();
    const capped = await t.owner.inTeam('PUT', `/console/api/teams/${t.id}/members/${t.alice.id}/cap`, {
      cap_usd: 0,
      cap_period: 'day',
    });
    assert.equal(capped.status, 200, JSON.stringify(capped.json));
    // Set through api A's console, refused by api B at once: the change was published to every api.
    const refused = await refusal(ask(apiB, t.aliceKey, 'Capped?'));
    assert.equal(refused.status, 429);
    assert.equal(refused.code, 'insufficient_quota');
    assert.match(refused.message, /your daily cap in team "Budget team \d+"/);
    assert.ok(
      refused.message.includes(`It resets at ${new Date(periodEnd('day', Date.now()) * 1000).toISOString()}`),
      refused.message,
    );
    const teammate = await ask(apiB, t.bobKey, 'Not capped');
    assert.equal(teammate.object, 'chat.completion');
    // Cleared, the member spends again.
    assert.equal(
      (await t.owner.inTeam('PUT', `/console/api/teams/${t.id}/members/${t.alice.id}/cap`, { cap_usd: null })).status,
      200,
    );
    assert.equal((await ask(apiA, t.aliceKey, 'Free again')).object, 'chat.completion');
  });

  it('a key’s daily budget refuses that key, named as the key’s', async () => {
    const t = await team();
    const patched = await t.alice.inTeam('PATCH', `/console/api/keys/${t.aliceKeyId}`, {
      budget_usd: 0,
      budget_period: 'day',
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.json));
    assert.equal(patched.json.budget_usd, 0);
    assert.equal(patched.json.budget_period, 'day');
    assert.equal(patched.json.budget_resets_at, new Date(periodEnd('day', Date.now()) * 1000).toISOString());
    const refused = await refusal(ask(apiA, t.aliceKey, 'Key budget'));
    assert.equal(refused.status, 429);
    assert.equal(refused.code, 'insufficient_quota');
    assert.match(refused.message, /this API key's daily budget/);
    assert.equal((await ask(apiB, t.bobKey, 'Other key')).object, 'chat.completion');
    // Hostile: a budget without its period, an unknown period, a negative or a huge amount.
    expectError(
      await t.alice.inTeam('PATCH', `/console/api/keys/${t.aliceKeyId}`, { budget_usd: 5 }),
      400,
      'missing_required_parameter',
      'budget_period',
    );
    expectError(
      await t.alice.inTeam('PATCH', `/console/api/keys/${t.aliceKeyId}`, { budget_usd: 5, budget_period: 'year' }),
      400,
      'invalid_value',
    );
    expectError(
      await t.alice.inTeam('PATCH', `/console/api/keys/${t.aliceKeyId}`, { budget_usd: -1, budget_period: 'day' }),
      400,
      'invalid_value',
    );
    expectError(
      await t.alice.inTeam('PATCH', `/console/api/keys/${t.aliceKeyId}`, { budget_usd: 1e12, budget_period: 'day' }),
      400,
      'invalid_value',
    );
  });

  it('refuses a cache hit by the team’s budget', async () => {
    const t = await team();
    const cached = { 'cache-control': 'max-age=600' };
    const first = await ask(apiA, t.aliceKey, 'Cache me', cached);
    await requestRecord(apiA.url, t.aliceKey, first.id);
    // A hit now: served from the cache while nothing holds it.
    const hit = await apiB
      .client(t.bobKey)
      .chat.completions.create(
        { model, max_tokens: 16, messages: [{ role: 'user', content: 'Cache me' }] },
        { headers: cached },
      )
      .withResponse();
    assert.match(hit.response.headers.get('cache-status') ?? '', /hit/);
    // A budget of nothing: the next hit is refused, as a request sent upstream would be.
    assert.equal(
      (await t.owner.inTeam('PUT', `/console/api/teams/${t.id}/budget`, { budget_usd: 0, budget_period: 'week' }))
        .status,
      200,
    );
    const calls = upstream.requests.length;
    const refused = await refusal(ask(apiB, t.bobKey, 'Cache me', cached));
    assert.equal(refused.status, 429);
    assert.equal(refused.code, 'insufficient_quota');
    assert.match(refused.message, /the team's weekly budget/);
    assert.equal(upstream.requests.length, calls);
  });

  it(
    'counts the Playground as any key: the budget’s spent, a member’s cap spent and Usage are one number to the ' +
      'micro-dollar',
    async () => {
      const t = await team();
      const path = `/console/api/teams/${t.id}`;
      // A request before the budget is set: the period's spend counts it all the same.
      await ask(apiA, t.aliceKey, 'Before any budget');
      await settledRows(t.id, 1);
      assert.equal(
        (await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 10, budget_period: 'month' })).status,
        200,
      );
      assert.equal(
        (await t.owner.inTeam('PUT', `${path}/members/${t.alice.id}/cap`, { cap_usd: 5, cap_period: 'month' })).status,
        200,
      );
      await ask(apiA, t.aliceKey, 'Through my key');
      await ask(apiB, t.bobKey, 'Through bob’s key');
      const played = await t.alice.inTeam('POST', '/console/api/playground/chat/completions', {
        model,
        max_tokens: 16,
        messages: [{ role: 'user', content: 'Through the Playground' }],
      });
      assert.equal(played.status, 200, JSON.stringify(played.json));
      const rows = await settledRows(t.id, 4);
      const total = rows.reduce((sum, row) => sum + row.cost_micros, 0);
      const keys = await record
        .selectFrom('api_keys')
        .select(['id', 'created_by'])
        .where('account_id', '=', t.id)
        .execute();
      const madeBy = new Map(keys.map((key) => [key.id, key.created_by]));
      const aliceTotal = rows
        .filter((row) => madeBy.get(row.key_id) === t.alice.id)
        .reduce((sum, row) => sum + row.cost_micros, 0);
      assert.equal(
        rows.filter((row) => madeBy.get(row.key_id) === t.alice.id).length,
        3,
        'her key’s two requests and her Playground’s',
      );
      const micros = (usd: number | null) => Math.round((usd ?? Number.NaN) * 1_000_000);
      const budget = await t.owner.inTeam<{
        budget_spent_usd: number;
        members: Array<{ id: string; cap_spent_usd: number | null }>;
      }>('GET', `${path}/budget`);
      assert.equal(
        micros(budget.json.budget_spent_usd),
        total,
        'the team’s budget counts every request, the Playground’s too',
      );
      assert.equal(
        micros(budget.json.members.find((m) => m.id === t.alice.id)!.cap_spent_usd),
        aliceTotal,
        'her cap counts her Playground',
      );
      const usage = await t.owner.inTeam<{ totals: { cost_usd: number } }>('GET', '/console/api/usage?days=7');
      assert.equal(micros(usage.json.totals.cost_usd), total, 'Usage says the same');
      const hers = await t.alice.inTeam<{ totals: { cost_usd: number } }>('GET', '/console/api/usage?days=7');
      assert.equal(micros(hers.json.totals.cost_usd), aliceTotal, 'her Usage says the same as her cap');
      // A key's budget set now counts that key's spend of the period too.
      const keyTotal = rows.filter((row) => row.key_id === t.aliceKeyId).reduce((sum, row) => sum + row.cost_micros, 0);
      const patched = await admin('PATCH', `/admin/keys/${t.aliceKeyId}`, { budget_usd: 3, budget_period: 'day' });
      assert.equal(patched.status, 200, JSON.stringify(patched.json));
      assert.equal(
        micros(patched.json.budget_spent_usd as number),
        keyTotal,
        'the key’s budget counts its two requests of the day',
      );
    },
  );

  it(
    'the console’s budget routes: anyone in the team reads, owners set, members and viewers get 403, hostile ' +
      'bodies 400',
    async () => {
      const t = await team();
      const path = `/console/api/teams/${t.id}`;
      expectError(
        await t.alice.inTeam('PUT', `${path}/budget`, { budget_usd: 10, budget_period: 'month' }),
        403,
        'permission_denied',
      );
      expectError(
        await t.viewer.inTeam('PUT', `${path}/budget`, { budget_usd: 10, budget_period: 'month' }),
        403,
        'permission_denied',
      );
      expectError(
        await t.viewer.inTeam('PUT', `${path}/members/${t.bob.id}/cap`, { cap_usd: 1, cap_period: 'day' }),
        403,
        'permission_denied',
      );
      expectError(
        await t.alice.inTeam('PUT', `${path}/members/${t.bob.id}/cap`, { cap_usd: 1, cap_period: 'day' }),
        403,
        'permission_denied',
      );

      const set = await t.owner.inTeam<{
        budget_usd: number;
        budget_period: string;
        budget_spent_usd: number;
        budget_resets_at: string;
      }>('PUT', `${path}/budget`, { budget_usd: 10, budget_period: 'week' });
      assert.equal(set.status, 200, JSON.stringify(set.json));
      assert.deepEqual(
        [set.json.budget_usd, set.json.budget_period, set.json.budget_spent_usd, set.json.budget_resets_at],
        [10, 'week', 0, new Date(periodEnd('week', Date.now()) * 1000).toISOString()],
      );
      const cap = await t.owner.inTeam<{ cap_usd: number; cap_period: string }>(
        'PUT',
        `${path}/members/${t.bob.id}/cap`,
        { cap_usd: 2.5, cap_period: 'day' },
      );
      assert.equal(cap.status, 200, JSON.stringify(cap.json));
      assert.deepEqual([cap.json.cap_usd, cap.json.cap_period], [2.5, 'day']);

      // Readable by every role, with every member's cap.
      for (const who of [t.alice, t.viewer]) {
        const read = await who.inTeam<{
          budget_usd: number;
          members: Array<{
            id: string;
            cap_usd: number | null;
            cap_period: string | null;
            cap_spent_usd: number | null;
          }>;
        }>('GET', `${path}/budget`);
        assert.equal(read.status, 200);
        assert.equal(read.json.budget_usd, 10);
        assert.deepEqual(
          read.json.members.find((m) => m.id === t.bob.id),
          { ...read.json.members.find((m) => m.id === t.bob.id), cap_usd: 2.5, cap_period: 'day', cap_spent_usd: 0 },
        );
        assert.equal(read.json.members.find((m) => m.id === t.alice.id)?.cap_usd, null);
      }
      const alerts = await t.viewer.inTeam<{ object: string; data: unknown[] }>('GET', `${path}/alerts`);
      assert.equal(alerts.status, 200);
      assert.equal(alerts.json.object, 'list');

      // Hostile bodies: refused clearly, nothing changed.
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 10 }),
        400,
        'missing_required_parameter',
        'budget_period',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 'NaN', budget_period: 'day' }),
        400,
        'invalid_type',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: -5, budget_period: 'day' }),
        400,
        'invalid_value',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 1e300, budget_period: 'day' }),
        400,
        'invalid_value',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 1, budget_period: 'fortnight' }),
        400,
        'invalid_value',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/budget`, { budget_usd: 1, budget_period: 'day', extra: true }),
        400,
        'unknown_parameter',
      );
      expectError(await t.owner.inTeam('PUT', `${path}/budget`, '[1,2'), 400, 'invalid_json');
      expectError(
        await t.owner.inTeam('PUT', `${path}/members/${t.bob.id}/cap`, { cap_usd: 1 }),
        400,
        'missing_required_parameter',
        'cap_period',
      );
      expectError(
        await t.owner.inTeam('PUT', `${path}/members/nobody/cap`, { cap_usd: 1, cap_period: 'day' }),
        404,
        'member_not_found',
      );
      expectError(await t.owner.inTeam('GET', `${path}/alerts?limit=0`), 400, 'invalid_value');
      const after = await t.owner.inTeam<{ budget_usd: number; budget_period: string }>('GET', `${path}/budget`);
      assert.deepEqual([after.json.budget_usd, after.json.budget_period], [10, 'week']);
      // Someone outside the team: as an unknown team.
      const outsider = await person('outsider', t.id);
      expectError(await outsider.inTeam('GET', `${path}/budget`), 404, 'team_not_found');
    },
  );
});
