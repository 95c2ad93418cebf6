import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { freshRedis, requestRecord, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { ConsoleClient } from '../support/console-client.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { testRecord } from '../support/record.js';
import { startTestProvider, testClientId, testClientSecret, type TestProvider } from '../support/oidc-provider.js';
import { budgetCounter } from '../../shared/money/budgets.js';
import { billKey } from '../../shared/redis-keys.js';
import type { RecordDb } from '../../storage/record/database.js';

const adminToken = 'member-keys-admin-token';
const model = 'gpt-4o-mini';
const callbackPath = '/console/api/oidc/callback';

type ErrorBody = { error?: { code: string | null; param: string | null; message: string; type: string } };

/** What a request with the official SDK came to: 200, or the refusal's status and code. */
async function outcome(call: Promise<unknown>): Promise<{ status: number; code?: string | null; message?: string }> {
  try {
    await call;
    return { status: 200 };
  } catch (error) {
    if (error instanceof OpenAI.APIError)
      return { status: error.status ?? 0, code: error.code, message: error.message };
    throw error;
  }
}

// "What is taken away is gone at once": a person removed from a team, or made a viewer there (by an owner in the
// console, by an admin, or by the identity provider's groups at sign-in), loses the keys they made in it, on every
// api process at once; and the console's Playground is held by a member's cap as their own keys are. Two api
// processes and a worker on one Redis and one record, a fake OpenAI upstream, a real OIDC provider, the official SDK.
describe('a member’s keys go with their membership; the Playground keeps to their cap', () => {
  let redis: Redis;
  let upstream: FakeOpenAI;
  let provider: TestProvider;
  let apiA: GatewayProcess;
  let apiB: GatewayProcess;
  let worker: GatewayProcess;
  let record: RecordDb;
  let seq = 0;
  const { admin } = adminClient(() => apiA.url, adminToken);

  before(async () => {
    upstream = await startFakeOpenAI();
    provider = await startTestProvider();
    const fresh = await freshRedis(9);
    redis = fresh.redis;
    const env = {
      REDIS_URL: fresh.url,
      ADMIN_TOKEN: adminToken,
      TRUST_PROXY: 'on',
      OPENAI_API_KEY: 'sk-openai-test',
      OPENAI_BASE_URL: upstream.url,
      // Keys stay cached for a minute: only the revocation's announcement can make an api drop one in time.
      KEY_CACHE_TTL_MS: '60000',
      OIDC_ISSUER: provider.issuer,
      OIDC_CLIENT_ID: testClientId,
      OIDC_CLIENT_SECRET: testClientSecret,
      OIDC_SCOPES: 'openid email profile groups',
      OIDC_TEAM_MAP: 'mk-eng=MK Engineering:member,mk-ops=MK Operations:member,mk-ops-view=MK Operations:viewer',
      OIDC_TIMEOUT_MS: '5000',
    };
    [apiA, apiB, worker] = await Promise.all([
      startGateway({ role: 'api', env }),
      startGateway({ role: 'api', env }),
      startGateway({ role: 'worker', env }),
    ]);
    await provider.register({
      redirectUri: `${apiA.url}${callbackPath}`,
      postLogoutRedirectUri: `${apiA.url}/console/`,
    });
    record = await testRecord(redis);
  });

  after(async () => {
    await Promise.all([apiA?.stop(), apiB?.stop(), worker?.stop()]);
    await provider?.close();
    await upstream?.close();
    redis?.disconnect();
  });

  interface Person {
    id: string;
    email: string;
    console: ConsoleClient;
    inTeam: <T = Json>(
      method: string,
      path: string,
      body?: unknown,
    ) => Promise<{ status: number; json: T & ErrorBody }>;
  }

  const personIn = (id: string, email: string, console: ConsoleClient, team: string): Person => ({
    id,
    email,
    console,
    inTeam: (method, path, body) => console.request(method, path, body, { headers: { 'x-team': team } }),
  });

  /** Someone with an account (and $5 in it), signed in to the console of api A. */
  async function person(name: string, team: string): Promise<Person> {
    const email = `${name}-${++seq}@member-keys.test`;
    const made = await admin('POST', '/admin/accounts', { email, password: 'person-password', role: 'member' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 5 })).status, 200);
    const console = new ConsoleClient(apiA.url, `198.51.100.${seq}`);
    assert.equal((await console.signIn(email, 'person-password')).status, 200);
    return personIn(id, email, console, team);
  }

  /** A key `who` makes in the console in their current team (or `team`); its secret and id. */
  async function keyOf(who: Person, name: string): Promise<{ id: string; key: string }> {
    const made = await who.inTeam<{ id: string; key: string }>('POST', '/console/api/keys', { name });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    return { id: made.json.id, key: made.json.key };
  }

  /** A team with $100 and an owner (through the admin API), and members added by the owner in the console. */
  async function team(
    members: Array<[string, 'member' | 'viewer']>,
  ): Promise<{ id: string; owner: Person; people: Person[] }> {
    const made = await admin('POST', '/admin/teams', { name: `Member keys ${++seq}` });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 100 })).status, 200);
    const owner = await person('owner', id);
    assert.equal(
      (await admin('POST', `/admin/teams/${id}/members`, { email: owner.email, role: 'owner' })).status,
      201,
    );
    const people: Person[] = [];
    for (const [name, role] of members) {
      const who = await person(name, id);
      const added = await owner.inTeam('POST', `/console/api/teams/${id}/members`, { email: who.email, role });
      assert.equal(added.status, 201, JSON.stringify(added.json));
      people.push(who);
    }
    return { id, owner, people };
  }

  const ask = (api: GatewayProcess, key: string, content = 'hello') =>
    api.client(key).chat.completions.create({ model, max_tokens: 16, messages: [{ role: 'user', content }] });
  const status = async (api: GatewayProcess, key: string) => (await outcome(ask(api, key))).status;
  const playground = (who: Person, content = 'from the playground') =>
    who.inTeam<{ id: string; object: string }>('POST', '/console/api/playground/chat/completions', {
      model,
      max_tokens: 16,
      messages: [{ role: 'user', content }],
    });

  /** Polls api B (which did not make the change) until the key is refused: at most a second. */
  async function refusedOnB(key: string): Promise<void> {
    const started = Date.now();
    let last = 0;
    await waitFor(
      async () => (last = await status(apiB, key)) === 401,
      1000,
      `the key refused by api B (last: ${last})`,
    );
    assert.ok(Date.now() - started <= 1000);
  }

  /** The `key.revoked` rows of a key in the audit log. */
  const revocations = (keyId: string) =>
    record
      .selectFrom('audit_log')
      .select(['actor', 'team_id', 'before', 'after'])
      .where('action', '=', 'key.revoked')
      .where('target', '=', keyId)
      .execute();

  const revokedAt = async (keyId: string) =>
    (await record.selectFrom('api_keys').select('revoked').where('id', '=', keyId).executeTakeFirstOrThrow()).revoked;

  it(
    'removing a member revokes the keys they made in the team at once on every api, audited; the owner’s, an ' +
      'admin’s and their own account’s keys stay; re-added, the old keys stay gone',
    async () => {
      const t = await team([
        ['alice', 'member'],
        ['bob', 'member'],
      ]);
      const [alice, bob] = t.people as [Person, Person];
      const aliceKey = await keyOf(alice, 'alice');
      const bobKey = await keyOf(bob, 'bob');
      const ownerKey = await keyOf(t.owner, 'owner');
      const adminKey = await admin('POST', '/admin/keys', { name: 'the team’s, by an admin', account_id: t.id });
      assert.equal(adminKey.status, 201, JSON.stringify(adminKey.json));
      // A key of alice's own account (a team of one): never touched by what happens in another team.
      const ownAccountKey = await personIn(alice.id, alice.email, alice.console, alice.id);
      const aliceOwn = await keyOf(ownAccountKey, 'alice, own account');
      // Her Playground key in the team is made on first use.
      const tried = await playground(alice);
      assert.equal(tried.status, 200, JSON.stringify(tried.json));
      const aliceHerePlayground = await record
        .selectFrom('api_keys')
        .select('id')
        .where('account_id', '=', t.id)
        .where('created_by', '=', alice.id)
        .where('name', '=', `Playground (${alice.email})`)
        .executeTakeFirstOrThrow();

      // Every key answers on both apis, and is cached there now.
      for (const key of [aliceKey.key, bobKey.key, ownerKey.key, String(adminKey.json.key), aliceOwn.key]) {
        assert.equal(await status(apiA, key), 200);
        assert.equal(await status(apiB, key), 200);
      }

      const removed = await t.owner.inTeam('DELETE', `/console/api/teams/${t.id}/members/${alice.id}`);
      assert.equal(removed.status, 200, JSON.stringify(removed.json));
      // The api that made the change refuses it from the answer on; the other within a second.
      const refused = await outcome(ask(apiA, aliceKey.key));
      assert.equal(refused.status, 401);
      assert.equal(refused.code, 'invalid_api_key');
      await refusedOnB(aliceKey.key);
      assert.equal(await status(apiA, aliceKey.key), 401);

      // Revoked in the record, both of her keys in the team, each audited with why and by whom.
      for (const keyId of [aliceKey.id, aliceHerePlayground.id]) {
        assert.notEqual(await revokedAt(keyId), null, keyId);
        const rows = await revocations(keyId);
        assert.equal(rows.length, 1, JSON.stringify(rows));
        assert.equal(rows[0]!.actor, t.owner.id);
        assert.equal(rows[0]!.team_id, t.id);
        assert.deepEqual(rows[0]!.after, { revoked: true, reason: 'member_removed', member: alice.id });
      }
      // The Playground refuses her too: she is no longer in the team.
      assert.equal((await playground(alice)).status, 404);

      // What is not hers stays: bob's, the owner's, the admin's key in the team, her own account's key.
      for (const key of [bobKey.key, ownerKey.key, String(adminKey.json.key), aliceOwn.key]) {
        assert.equal(await status(apiA, key), 200);
        assert.equal(await status(apiB, key), 200);
      }
      assert.equal(await revokedAt(adminKey.json.id as string), null);
      assert.equal(await revokedAt(aliceOwn.id), null);

      // Put back in the team, she gets none of the old keys back: they stay refused, and new ones work.
      const again = await t.owner.inTeam('POST', `/console/api/teams/${t.id}/members`, {
        email: alice.email,
        role: 'member',
      });
      assert.equal(again.status, 201, JSON.stringify(again.json));
      assert.equal(await status(apiA, aliceKey.key), 401);
      assert.equal(await status(apiB, aliceKey.key), 401);
      const listed = await alice.inTeam<{ data: Array<{ id: string }> }>('GET', '/console/api/keys');
      assert.equal(listed.status, 200);
      assert.deepEqual(listed.json.data, []);
      const fresh = await keyOf(alice, 'alice again');
      assert.equal(await status(apiB, fresh.key), 200);
      assert.equal((await playground(alice)).status, 200);
    },
  );

  it(
    'making a member a viewer revokes their keys in the team at once, by the console and by the admin API; other ' +
      'role changes keep them',
    async () => {
      const t = await team([
        ['vera', 'member'],
        ['carl', 'member'],
        ['dora', 'member'],
      ]);
      const [vera, carl, dora] = t.people as [Person, Person, Person];
      const [veraKey, carlKey, doraKey] = [
        await keyOf(vera, 'vera'),
        await keyOf(carl, 'carl'),
        await keyOf(dora, 'dora'),
      ];
      for (const key of [veraKey.key, carlKey.key, doraKey.key]) assert.equal(await status(apiB, key), 200);

      // The console's role change.
      const demoted = await t.owner.inTeam<{ role: string }>('PATCH', `/console/api/teams/${t.id}/members/${vera.id}`, {
        role: 'viewer',
      });
      assert.equal(demoted.status, 200, JSON.stringify(demoted.json));
      assert.equal(demoted.json.role, 'viewer');
      assert.equal(await status(apiA, veraKey.key), 401);
      await refusedOnB(veraKey.key);
      const rows = await revocations(veraKey.id);
      assert.equal(rows.length, 1);
      assert.deepEqual(rows[0]!.after, { revoked: true, reason: 'member_demoted', member: vera.id });
      assert.equal(rows[0]!.actor, t.owner.id);

      // The admin API's (a member added again with another role).
      const byAdmin = await admin('POST', `/admin/teams/${t.id}/members`, { email: carl.email, role: 'viewer' });
      assert.equal(byAdmin.status, 201, JSON.stringify(byAdmin.json));
      assert.equal(await status(apiA, carlKey.key), 401);
      await refusedOnB(carlKey.key);
      const carlRows = await revocations(carlKey.id);
      assert.equal(carlRows.length, 1);
      assert.equal(carlRows[0]!.actor, 'admin-token');
      assert.deepEqual(carlRows[0]!.after, { revoked: true, reason: 'member_demoted', member: carl.id });

      // Made an owner and a member again: nothing is taken away, the key works throughout.
      assert.equal(
        (await t.owner.inTeam('PATCH', `/console/api/teams/${t.id}/members/${dora.id}`, { role: 'owner' })).status,
        200,
      );
      assert.equal(
        (await t.owner.inTeam('PATCH', `/console/api/teams/${t.id}/members/${dora.id}`, { role: 'member' })).status,
        200,
      );
      assert.equal(await status(apiB, doraKey.key), 200);
      assert.equal(await revokedAt(doraKey.id), null);
      // A viewer made a member again gets no key back.
      assert.equal(
        (await t.owner.inTeam('PATCH', `/console/api/teams/${t.id}/members/${vera.id}`, { role: 'member' })).status,
        200,
      );
      assert.equal(await status(apiB, veraKey.key), 401);
      assert.equal(await status(apiB, (await keyOf(vera, 'vera again')).key), 200);
    },
  );

  it(
    'a person the provider takes out of a group loses their keys in that team at their next sign-in; made a viewer ' +
      'by the groups, too',
    async () => {
      const subject = `olga-${++seq}`;
      provider.people.set(subject, {
        email: `${subject}@member-keys.test`,
        email_verified: true,
        name: 'Olga',
        groups: ['mk-eng', 'mk-ops'],
      });
      const signIn = async (): Promise<ConsoleClient> => {
        const browser = new ConsoleClient(apiA.url, `203.0.113.${seq}`);
        provider.nextLogin = subject;
        const { url } = await browser.navigate(
          `${apiA.url}/console/api/oidc/login`,
          (next) => next.origin === apiA.url && next.pathname === '/console/',
        );
        assert.equal(url.search, '', url.href);
        return browser;
      };
      const browser = await signIn();
      const me = await browser.request<{ account: { id: string; email: string } }>('GET', '/console/api/session');
      const olga = me.json.account;
      const teamIds = Object.fromEntries(
        (
          await record
            .selectFrom('accounts')
            .select(['id', 'name'])
            .where('kind', '=', 'team')
            .where('name', 'in', ['MK Engineering', 'MK Operations'])
            .execute()
        ).map((row) => [row.name, row.id]),
      );
      const eng = personIn(olga.id, olga.email, browser, teamIds['MK Engineering']!);
      const ops = personIn(olga.id, olga.email, browser, teamIds['MK Operations']!);
      for (const id of Object.values(teamIds))
        assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 10 })).status, 200);
      const engKey = await keyOf(eng, 'olga in engineering');
      const opsKey = await keyOf(ops, 'olga in operations');
      assert.equal(await status(apiB, engKey.key), 200);
      assert.equal(await status(apiB, opsKey.key), 200);

      // Out of the engineering group at the provider: her next sign-in takes the membership and its keys away.
      provider.people.set(subject, {
        email: `${subject}@member-keys.test`,
        email_verified: true,
        name: 'Olga',
        groups: ['mk-ops'],
      });
      await signIn();
      assert.equal(await status(apiA, engKey.key), 401);
      await refusedOnB(engKey.key);
      assert.equal(await status(apiB, opsKey.key), 200);
      const rows = await revocations(engKey.id);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.actor, 'system');
      assert.deepEqual(rows[0]!.after, { revoked: true, reason: 'member_removed', member: olga.id });

      // A viewer of operations by the groups: that key goes too.
      provider.people.set(subject, {
        email: `${subject}@member-keys.test`,
        email_verified: true,
        name: 'Olga',
        groups: ['mk-ops-view'],
      });
      await signIn();
      assert.equal(await status(apiA, opsKey.key), 401);
      await refusedOnB(opsKey.key);
      assert.deepEqual((await revocations(opsKey.id))[0]?.after, {
        revoked: true,
        reason: 'member_demoted',
        member: olga.id,
      });
    },
  );

  it('the Playground is refused by a member’s cap once it is spent, and what it spends counts on that cap', async () => {
    const t = await team([
      ['mia', 'member'],
      ['measure', 'member'],
    ]);
    const [mia, measure] = t.people as [Person, Person];
    // What one request costs, settled: measured on a member with no cap.
    const measureKey = await keyOf(measure, 'measure');
    const measured = await ask(apiA, measureKey.key, 'How much am I?');
    const cost = Math.round((await requestRecord(apiA.url, measureKey.key, measured.id)).cost_usd * 1_000_000);
    assert.ok(cost > 0, 'a request costs something');
    const capMicros = cost * 10;
    const capped = await t.owner.inTeam('PUT', `/console/api/teams/${t.id}/members/${mia.id}/cap`, {
      cap_usd: capMicros / 1_000_000,
      cap_period: 'day',
    });
    assert.equal(capped.status, 200, JSON.stringify(capped.json));

    let admitted = 0;
    let refusal: { status: number; json: ErrorBody } | undefined;
    for (let i = 0; i < 40 && !refusal; i++) {
      const res = await playground(mia, `Spend ${i}`);
      if (res.status === 200) admitted++;
      else refusal = res;
    }
    assert.ok(admitted >= 1, 'the Playground answers while the cap has room');
    assert.ok(
      refusal,
      `the Playground was never refused (${admitted} answered past a cap of ${capMicros} micros at ${cost} each)`,
    );
    assert.equal(refusal.status, 429, JSON.stringify(refusal.json));
    assert.equal(refusal.json.error?.code, 'insufficient_quota');
    assert.match(refusal.json.error?.message ?? '', /your daily cap in team "Member keys \d+"/);

    // What it spent is on her cap: settled in the record, counted by the cap's counter, shown on the Budgets page.
    const playgroundKey = await record
      .selectFrom('api_keys')
      .select('id')
      .where('account_id', '=', t.id)
      .where('created_by', '=', mia.id)
      .where('name', '=', `Playground (${mia.email})`)
      .executeTakeFirstOrThrow();
    let settled = 0;
    await waitFor(
      async () => {
        const rows = await record
          .selectFrom('usage')
          .select('cost_micros')
          .where('key_id', '=', playgroundKey.id)
          .where('settled', '=', true)
          .execute();
        settled = rows.reduce((sum, row) => sum + Number(row.cost_micros), 0);
        return rows.length === admitted;
      },
      15_000,
      `${admitted} settled Playground requests`,
    );
    assert.ok(settled <= capMicros, `settled ${settled} > cap ${capMicros}`);
    const counter = budgetCounter({ scope: 'member', ownerId: mia.id, period: 'day' }, Date.now());
    assert.equal(Number(await redis.hget(billKey(t.id), `${counter}.spent`)), settled);
    const view = await mia.inTeam<{ members: Array<{ id: string; cap_spent_usd: number | null }> }>(
      'GET',
      `/console/api/teams/${t.id}/budget`,
    );
    assert.equal(view.status, 200, JSON.stringify(view.json));
    assert.equal(Math.round((view.json.members.find((m) => m.id === mia.id)?.cap_spent_usd ?? 0) * 1_000_000), settled);

    // One cap for both ways in: her own key is refused as well now, the teammate's is not.
    const ownKey = await keyOf(mia, 'mia');
    const own = await outcome(ask(apiB, ownKey.key));
    assert.equal(own.status, 429);
    assert.equal(own.code, 'insufficient_quota');
    assert.equal(await status(apiB, measureKey.key), 200);
  });
});
