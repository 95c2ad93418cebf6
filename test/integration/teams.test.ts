import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { testRecord, waitForUsage } from '../support/record.js';
import { ConsoleClient, type ConsoleResponse } from '../support/console-client.js';

const adminEmail = 'root@teams.test';
const adminPassword = 'root-password-1';
const adminToken = 'teams-admin-token';

type Json = Record<string, unknown>;
type Creator = { id: string; email: string; name: string } | null;
type Key = { id: string; name: string; key?: string; account_id: string; created_by: Creator };
type Member = { id: string; email: string; role: string; source: string | null };
type Team = { id: string; kind: string; name: string; role: string; members: Member[] };

function expectError(res: ConsoleResponse, status: number, code: string): void {
  assert.equal(res.status, status, JSON.stringify(res.json));
  assert.equal(res.json.error?.code, code, JSON.stringify(res.json));
  assert.equal(typeof res.json.error?.message, 'string');
}

// Teams through the console's JSON API of a real gateway (Redis, PostgreSQL, a worker billing the mock's answers):
// people sharing a team's money through keys they made, and what each role may see and change.
describe('teams', () => {
  let redis: Redis;
  let gateway: GatewayProcess;
  let admin: ConsoleClient;
  let addressCounter = 0;
  const client = () => new ConsoleClient(gateway.url, `198.51.100.${++addressCounter}`);
  /** A console client working in `team` (the x-team header the console's pages send). */
  const inTeam = (console: ConsoleClient, team: string) => ({
    request: <T = Json>(method: string, path: string, body?: unknown) =>
      console.request<T>(method, path, body, { headers: { 'x-team': team } }),
  });

  async function person(email: string): Promise<{ console: ConsoleClient; id: string }> {
    const made = await admin.request<{ id: string }>('POST', '/console/api/admin/accounts', {
      email,
      password: 'person-password',
      role: 'member',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const console = client();
    assert.equal((await console.signIn(email, 'person-password')).status, 200);
    return { console, id: made.json.id };
  }

  let team: Team;
  let owner: { console: ConsoleClient; id: string };
  let ana: { console: ConsoleClient; id: string };
  let ben: { console: ConsoleClient; id: string };
  let vic: { console: ConsoleClient; id: string };
  let outsider: { console: ConsoleClient; id: string };

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(7));
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        TRUST_PROXY: 'on',
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        MOCK_BILLING: 'on',
      },
    });
    admin = client();
    assert.equal((await admin.signIn(adminEmail, adminPassword)).status, 200);
    const people = await Promise.all(
      ['owner@teams.test', 'ana@teams.test', 'ben@teams.test', 'vic@teams.test', 'out@teams.test'].map(person),
    );
    [owner, ana, ben, vic, outsider] = people as [typeof owner, typeof ana, typeof ben, typeof vic, typeof outsider];
    const made = await admin.request<Team>('POST', '/console/api/teams', {
      name: 'Research',
      owner_email: ' OWNER@teams.test ',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    team = made.json;
    assert.equal(team.kind, 'team');
    assert.deepEqual(
      team.members.map((m) => [m.email, m.role, m.source]),
      [['owner@teams.test', 'owner', 'admin']],
    );
    const credited = await admin.request('POST', `/console/api/admin/accounts/${team.id}/credits`, { amount_usd: 5 });
    assert.equal(credited.status, 200, JSON.stringify(credited.json));
    for (const [who, role] of [
      ['Ana@Teams.test', 'member'],
      ['ben@teams.test ', 'member'],
      ['vic@teams.test', 'viewer'],
    ] as const) {
      const added = await inTeam(owner.console, team.id).request<Member>(
        'POST',
        `/console/api/teams/${team.id}/members`,
        { email: who, role },
      );
      assert.equal(added.status, 201, JSON.stringify(added.json));
      assert.equal(added.json.role, role);
    }
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it("lists a person's teams with their role, their own account first", async () => {
    const mine = await ana.console.request<{
      data: Array<{ id: string; kind: string; role: string; balance_usd: number | null }>;
      all_teams: unknown;
    }>('GET', '/console/api/teams');
    assert.equal(mine.status, 200);
    assert.deepEqual(
      mine.json.data.map((t) => [t.id, t.kind, t.role]),
      [
        [ana.id, 'person', 'owner'],
        [team.id, 'team', 'member'],
      ],
    );
    // Each with what it has left to spend (the console's sidebar shows the current team's): the team's $5 credit.
    assert.equal(mine.json.data[1]!.balance_usd, 5);
    assert.equal(mine.json.all_teams, null);
    const every = await admin.request<{
      all_teams: Array<{ id: string; members: number; balance_usd: number | null }>;
    }>('GET', '/console/api/teams');
    assert.deepEqual(every.json.all_teams.find((t) => t.id === team.id)?.members, 4);
    assert.equal(every.json.all_teams.find((t) => t.id === team.id)?.balance_usd, 5);
  });

  it("has two members spend the team's balance through keys they made, each key showing who made it", async () => {
    const keys: Key[] = [];
    for (const who of [ana, ben]) {
      const made = await inTeam(who.console, team.id).request<Key>('POST', '/console/api/keys', {
        name: `${who.id} key`,
      });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      assert.equal(made.json.account_id, team.id);
      assert.equal(made.json.created_by?.id, who.id);
      keys.push(made.json);
    }
    for (const key of keys) {
      await new OpenAI({ apiKey: key.key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'spend' }],
      });
    }
    const rows = await Promise.all(keys.map((key) => waitForUsage(redis, (row) => row.key_id === key.id)));
    for (const row of rows) {
      assert.equal(row.account_id, team.id);
      assert.ok(row.cost_micros > 0);
    }
    const spent = rows.reduce((sum, row) => sum + row.cost_micros, 0);

    // The owner sees the team's keys, every one with its maker; the team's usage and balance.
    const all = await inTeam(owner.console, team.id).request<{ data: Key[] }>('GET', '/console/api/keys');
    assert.deepEqual(all.json.data.map((key) => key.created_by?.email).sort(), ['ana@teams.test', 'ben@teams.test']);
    const usage = await inTeam(vic.console, team.id).request<{
      account_id: string;
      balance_usd: number;
      totals: { requests: number };
    }>('GET', '/console/api/usage');
    assert.equal(usage.status, 200, JSON.stringify(usage.json));
    assert.equal(usage.json.account_id, team.id);
    assert.equal(usage.json.totals.requests, 2);
    assert.equal(Math.round(usage.json.balance_usd * 1e6), 5_000_000 - spent);

    // A member's usage and requests are the keys they made only.
    const anaUsage = await inTeam(ana.console, team.id).request<{ totals: { requests: number } }>(
      'GET',
      '/console/api/usage',
    );
    assert.equal(anaUsage.json.totals.requests, 1);
    const anaRequests = await inTeam(ana.console, team.id).request<{ data: Array<{ key_id: string }> }>(
      'GET',
      '/console/api/requests',
    );
    assert.deepEqual(
      anaRequests.json.data.map((r) => r.key_id),
      [keys[0]!.id],
    );
    const csv = await ana.console.request('GET', `/console/api/usage.csv?team=${team.id}`);
    assert.equal(csv.status, 200);

    // A member sees and changes only their own: another member's key is missing to them.
    const anaKeys = await inTeam(ana.console, team.id).request<{ data: Key[] }>('GET', '/console/api/keys');
    assert.deepEqual(
      anaKeys.json.data.map((key) => key.id),
      [keys[0]!.id],
    );
    expectError(
      await inTeam(ana.console, team.id).request('PATCH', `/console/api/keys/${keys[1]!.id}`, { name: 'mine now' }),
      404,
      'key_not_found',
    );
    expectError(
      await inTeam(ana.console, team.id).request('DELETE', `/console/api/keys/${keys[1]!.id}`),
      404,
      'key_not_found',
    );
    // Nor through their own account: the key is the team's.
    expectError(await ana.console.request('DELETE', `/console/api/keys/${keys[1]!.id}`), 404, 'key_not_found');
    // The owner changes anyone's.
    const renamed = await inTeam(owner.console, team.id).request<Key>('PATCH', `/console/api/keys/${keys[1]!.id}`, {
      name: 'renamed by owner',
    });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.json));
    assert.equal(renamed.json.created_by?.id, ben.id);
  });

  it('refuses a viewer every change with 403 permission_denied, but lets them read usage and members', async () => {
    const viewer = inTeam(vic.console, team.id);
    expectError(await viewer.request('GET', '/console/api/keys'), 403, 'permission_denied');
    expectError(await viewer.request('POST', '/console/api/keys', { name: 'nope' }), 403, 'permission_denied');
    const someKey = (await inTeam(owner.console, team.id).request<{ data: Key[] }>('GET', '/console/api/keys')).json
      .data[0]!;
    expectError(
      await viewer.request('PATCH', `/console/api/keys/${someKey.id}`, { name: 'x' }),
      403,
      'permission_denied',
    );
    expectError(await viewer.request('DELETE', `/console/api/keys/${someKey.id}`), 403, 'permission_denied');
    expectError(
      await viewer.request('POST', '/console/api/playground/chat/completions', {
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'hi' }],
      }),
      403,
      'permission_denied',
    );
    expectError(await viewer.request('GET', '/console/api/batches'), 403, 'permission_denied');
    expectError(
      await viewer.request('POST', `/console/api/teams/${team.id}/members`, {
        email: 'out@teams.test',
        role: 'viewer',
      }),
      403,
      'permission_denied',
    );
    expectError(
      await viewer.request('PATCH', `/console/api/teams/${team.id}/members/${ana.id}`, { role: 'viewer' }),
      403,
      'permission_denied',
    );
    expectError(
      await viewer.request('DELETE', `/console/api/teams/${team.id}/members/${ana.id}`),
      403,
      'permission_denied',
    );
    // A member may not manage members either.
    expectError(
      await inTeam(ana.console, team.id).request('DELETE', `/console/api/teams/${team.id}/members/${ben.id}`),
      403,
      'permission_denied',
    );
    assert.equal((await viewer.request('GET', '/console/api/requests')).status, 200);
    assert.equal((await viewer.request('GET', '/console/api/requests/histogram')).status, 200);
    const members = await vic.console.request<Team>('GET', `/console/api/teams/${team.id}`);
    assert.equal(members.status, 200);
    assert.equal(members.json.role, 'viewer');
    assert.equal(members.json.members.length, 4);
  });

  it('gives each person in a team a Playground key of their own there, billed to the team', async () => {
    const played = await inTeam(ana.console, team.id).request('POST', '/console/api/playground/chat/completions', {
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(played.status, 200, JSON.stringify(played.json));
    const anaKeys = await inTeam(ana.console, team.id).request<{ data: Key[] }>('GET', '/console/api/keys');
    // Named for her, so the team's several Playground keys tell apart.
    const playground = anaKeys.json.data.find((key) => key.name === 'Playground (ana@teams.test)');
    assert.equal(playground?.created_by?.id, ana.id);
    const benKeys = await inTeam(ben.console, team.id).request<{ data: Key[] }>('GET', '/console/api/keys');
    assert.equal(
      benKeys.json.data.find((key) => key.name.startsWith('Playground')),
      undefined,
    );
    // Their own account's Playground key is another, of that account.
    const own = await ana.console.request('POST', '/console/api/playground/chat/completions', {
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(own.status, 200, JSON.stringify(own.json));
    const ownKeys = await ana.console.request<{ data: Key[] }>('GET', '/console/api/keys');
    const ownPlayground = ownKeys.json.data.find((key) => key.name === 'Playground');
    assert.equal(ownPlayground?.account_id, ana.id);
    assert.notEqual(ownPlayground?.id, playground?.id);

    // One made before each was named for its person ("Playground" alone in the record): Usage and Activity name it
    // for her as well, the owner's report and key names alike.
    await waitForUsage(redis, (row) => row.key_id === playground!.id);
    await (
      await testRecord(redis)
    )
      .updateTable('api_keys')
      .set({ name: 'Playground' })
      .where('id', '=', playground!.id)
      .execute();
    const owners = inTeam(owner.console, team.id);
    const names = await owners.request<{ data: Array<{ id: string; name: string }> }>('GET', '/console/api/key-names');
    assert.equal(
      names.json.data.find((key) => key.id === playground!.id)?.name,
      'Playground (ana@teams.test)',
      JSON.stringify(names.json),
    );
    const usage = await owners.request<{ by_key: Array<{ key_id: string; key_name: string }> }>(
      'GET',
      '/console/api/usage?days=7',
    );
    assert.equal(
      usage.json.by_key.find((row) => row.key_id === playground!.id)?.key_name,
      'Playground (ana@teams.test)',
      JSON.stringify(usage.json.by_key),
    );
  });

  it('answers 404 for a team one is not in, as for an unknown one', async () => {
    for (const id of [team.id, 'acct_0000000000000000', 'x'.repeat(5000)]) {
      const res = await outsider.console.request('GET', '/console/api/usage', undefined, { headers: { 'x-team': id } });
      expectError(res, 404, 'team_not_found');
    }
    expectError(await outsider.console.request('GET', `/console/api/teams/${team.id}`), 404, 'team_not_found');
    expectError(
      await outsider.console.request('POST', `/console/api/teams/${team.id}/members`, {
        email: 'out@teams.test',
        role: 'owner',
      }),
      404,
      'team_not_found',
    );
    // Another person's own account is not a team one can enter either.
    expectError(
      await outsider.console.request('GET', '/console/api/keys', undefined, { headers: { 'x-team': ana.id } }),
      404,
      'team_not_found',
    );
  });

  it('lets an owner manage members, and never removes or demotes the last owner', async () => {
    const owners = inTeam(owner.console, team.id);
    const promoted = await owners.request<Member>('PATCH', `/console/api/teams/${team.id}/members/${vic.id}`, {
      role: 'member',
    });
    assert.equal(promoted.json.role, 'member');
    assert.equal(
      (await owners.request<Member>('PATCH', `/console/api/teams/${team.id}/members/${vic.id}`, { role: 'viewer' }))
        .json.role,
      'viewer',
    );
    expectError(await owners.request('DELETE', `/console/api/teams/${team.id}/members/${owner.id}`), 409, 'last_owner');
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}/members/${owner.id}`, { role: 'member' }),
      409,
      'last_owner',
    );
    expectError(
      await owners.request('DELETE', `/console/api/teams/${team.id}/members/${outsider.id}`),
      404,
      'member_not_found',
    );
    expectError(
      await owners.request('POST', `/console/api/teams/${team.id}/members`, {
        email: 'nobody@teams.test',
        role: 'member',
      }),
      404,
      'account_not_found',
    );
    // Two owners: one may go.
    assert.equal(
      (
        await owners.request('POST', `/console/api/teams/${team.id}/members`, {
          email: 'out@teams.test',
          role: 'owner',
        })
      ).status,
      201,
    );
    assert.equal((await owners.request('DELETE', `/console/api/teams/${team.id}/members/${outsider.id}`)).status, 200);
    // A person always owns their own account.
    expectError(
      await ana.console.request('DELETE', `/console/api/teams/${ana.id}/members/${ana.id}`),
      409,
      'own_account',
    );
    // Removed, a member's next request is refused (their session stays).
    assert.equal(
      (
        await owners.request('POST', `/console/api/teams/${team.id}/members`, {
          email: 'out@teams.test',
          role: 'member',
        })
      ).status,
      201,
    );
    assert.equal((await inTeam(outsider.console, team.id).request('GET', '/console/api/keys')).status, 200);
    assert.equal((await owners.request('DELETE', `/console/api/teams/${team.id}/members/${outsider.id}`)).status, 200);
    expectError(await inTeam(outsider.console, team.id).request('GET', '/console/api/keys'), 404, 'team_not_found');
    assert.equal((await outsider.console.request('GET', '/console/api/keys')).status, 200);
  });

  it('refuses hostile bodies and odd team names with a clear 400 or 409', async () => {
    const owners = inTeam(owner.console, team.id);
    expectError(
      await owners.request('POST', `/console/api/teams/${team.id}/members`, {
        email: 'ana@teams.test',
        role: 'member',
        admin: true,
      }),
      400,
      'unknown_parameter',
    );
    expectError(
      await owners.request('POST', `/console/api/teams/${team.id}/members`, { email: 'ana@teams.test', role: 'god' }),
      400,
      'invalid_value',
    );
    expectError(
      await owners.request('POST', `/console/api/teams/${team.id}/members`, {
        email: `${'a'.repeat(400)}@teams.test`,
        role: 'member',
      }),
      400,
      'invalid_value',
    );
    expectError(
      await owners.request('POST', `/console/api/teams/${team.id}/members`, { email: 'not an email', role: 'member' }),
      400,
      'invalid_value',
    );
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}/members/${ana.id}`, {
        role: 'member',
        email: 'x@y.z',
      }),
      400,
      'unknown_parameter',
    );
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}/members/${'x'.repeat(3000)}`, { role: 'member' }),
      404,
      'member_not_found',
    );
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}/members/%00`, { role: 'member' }),
      400,
      'invalid_path',
    );
    expectError(await admin.request('POST', '/console/api/teams', { name: ' research ' }), 409, 'team_exists');
    expectError(await admin.request('POST', '/console/api/teams', { name: 'two\nlines' }), 400, 'invalid_value');
    expectError(await admin.request('POST', '/console/api/teams', { name: 'x'.repeat(300) }), 400, 'invalid_value');
    expectError(
      await admin.request('POST', '/console/api/teams', { name: 'Ghost', owner_email: 'ghost@teams.test' }),
      404,
      'account_not_found',
    );
    expectError(await owner.console.request('POST', '/console/api/teams', { name: 'Mine' }), 403, 'permission_denied');
    // Teams need no email: many are made, none signs in or is found by an empty email.
    for (const name of ['Alpha', 'Beta'])
      assert.equal((await admin.request('POST', '/console/api/teams', { name })).status, 201);
    expectError(await client().signIn('', 'anything-at-all'), 401, 'invalid_credentials');
  });

  it('lets an owner rename a team, refuses a name another team has (at once too) and everyone else, and records it', async () => {
    const owners = inTeam(owner.console, team.id);
    const renamed = await owners.request<Team>('PATCH', `/console/api/teams/${team.id}`, { name: '  Research Lab ' });
    assert.equal(renamed.status, 200, JSON.stringify(renamed.json));
    assert.equal(renamed.json.name, 'Research Lab');
    assert.equal(renamed.json.role, 'owner');
    assert.equal(renamed.json.members.length, 4);
    // Everyone in it reads the new name at their next request.
    const anaTeams = await ana.console.request<{ data: Team[] }>('GET', '/console/api/teams');
    assert.equal(anaTeams.json.data.find((t) => t.id === team.id)?.name, 'Research Lab');
    // Who may not: a member, a viewer, someone outside it.
    expectError(
      await inTeam(ana.console, team.id).request('PATCH', `/console/api/teams/${team.id}`, { name: 'Mine now' }),
      403,
      'permission_denied',
    );
    expectError(
      await inTeam(vic.console, team.id).request('PATCH', `/console/api/teams/${team.id}`, { name: 'Mine now' }),
      403,
      'permission_denied',
    );
    expectError(
      await outsider.console.request('PATCH', `/console/api/teams/${team.id}`, { name: 'Mine now' }),
      404,
      'team_not_found',
    );
    // A person's own account takes its person's name.
    expectError(
      await ana.console.request('PATCH', `/console/api/teams/${ana.id}`, { name: 'Ana Inc' }),
      409,
      'own_account',
    );
    // Bodies: strict, one line, not empty.
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}`, { name: 'X', kind: 'person' }),
      400,
      'unknown_parameter',
    );
    expectError(await owners.request('PATCH', `/console/api/teams/${team.id}`, { name: '   ' }), 400, 'invalid_value');
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}`, { name: 'two\nlines' }),
      400,
      'invalid_value',
    );
    expectError(await owners.request('PATCH', `/console/api/teams/${team.id}`, {}), 400, 'missing_required_parameter');
    // Two teams renamed to one name at once: one gets it, the other is told it is taken; a third name in another case
    // too.
    const [one, two] = await Promise.all(
      ['Gamma', 'Delta'].map(async (name) => (await admin.request<Team>('POST', '/console/api/teams', { name })).json),
    );
    const raced = await Promise.all(
      [one!, two!].map((t) =>
        admin.request<Team>(
          'PATCH',
          `/console/api/teams/${t.id}`,
          { name: 'Epsilon' },
          { headers: { 'x-team': t.id } },
        ),
      ),
    );
    assert.deepEqual(raced.map((res) => res.status).sort(), [200, 409], JSON.stringify(raced.map((res) => res.json)));
    expectError(
      raced.find((res) => res.status === 409)!,
      409,
      'team_exists',
    );
    expectError(
      await owners.request('PATCH', `/console/api/teams/${team.id}`, { name: 'EPSILON' }),
      409,
      'team_exists',
    );
    // The admin API's account PATCH holds a team's name to the same rule.
    const viaAccounts = await fetch(`${gateway.url}/admin/accounts/${team.id}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'epsilon' }),
    });
    assert.equal(viaAccounts.status, 409);
    // Each rename that took is one audit row: who, the name before and after.
    const audit = await owners.request<{
      data: Array<{ action: string; actor: string; target: string; before: unknown; after: unknown }>;
    }>('GET', `/console/api/audit?action=team.updated`);
    assert.equal(audit.status, 200, JSON.stringify(audit.json));
    const rows = audit.json.data.filter((row) => row.target === team.id);
    assert.deepEqual(
      rows.map((row) => [row.actor, row.before, row.after]),
      [[owner.id, { name: 'Research' }, { name: 'Research Lab' }]],
    );
  });

  it("gives an admin the gateway's usage and requests whichever team they work in, one account by its filter", async () => {
    // A request outside the team: the admin's own, through their Playground.
    const own = await admin.request('POST', '/console/api/playground/chat/completions', {
      model: 'mock-chat',
      messages: [{ role: 'user', content: 'mine' }],
    });
    assert.equal(own.status, 200, JSON.stringify(own.json));
    const ownId = (own.json as { id: string }).id;
    await waitForUsage(redis, (row) => row.answer_id === ownId || row.request_id === ownId);
    const everywhere = await admin.request<{ accounts: { total: number } | null; totals: { requests: number } }>(
      'GET',
      '/console/api/usage?days=7',
    );
    const inResearch = await inTeam(admin, team.id).request<{
      accounts: { total: number } | null;
      totals: { requests: number };
    }>('GET', '/console/api/usage?days=7');
    assert.equal(inResearch.status, 200, JSON.stringify(inResearch.json));
    assert.ok(
      everywhere.json.accounts && everywhere.json.accounts.total >= 7,
      JSON.stringify(everywhere.json.accounts),
    );
    assert.deepEqual(
      inResearch.json.accounts,
      everywhere.json.accounts,
      "the Accounts card is the gateway's in a team too",
    );
    assert.equal(inResearch.json.totals.requests, everywhere.json.totals.requests);
    const teamOnly = await inTeam(admin, team.id).request<{ totals: { requests: number } }>(
      'GET',
      `/console/api/usage?days=7&account_id=${team.id}`,
    );
    const owners = await inTeam(owner.console, team.id).request<{ totals: { requests: number } }>(
      'GET',
      '/console/api/usage?days=7',
    );
    assert.equal(
      teamOnly.json.totals.requests,
      owners.json.totals.requests,
      'one account by the filter: what its owner sees',
    );
    assert.ok(
      everywhere.json.totals.requests > teamOnly.json.totals.requests,
      "other accounts' requests are in the gateway's",
    );
    const listed = await inTeam(admin, team.id).request<{ counts: { requests: number } }>(
      'GET',
      '/console/api/requests',
    );
    const listedEverywhere = await admin.request<{ counts: { requests: number } }>('GET', '/console/api/requests');
    assert.equal(listed.status, 200, JSON.stringify(listed.json));
    assert.equal(listed.json.counts.requests, listedEverywhere.json.counts.requests);
  });

  it('lets the admin API make teams and put members in and out', async () => {
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${gateway.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      }).then(async (res) => ({ status: res.status, json: (await res.json()) as Json }));
    const made = await call('POST', '/admin/teams', { name: 'Ops', owner_email: 'ben@teams.test' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    assert.equal(made.json.kind, 'team');
    const id = made.json.id as string;
    assert.equal(
      (await call('POST', `/admin/teams/${id}/members`, { email: 'vic@teams.test', role: 'viewer' })).status,
      201,
    );
    const members = await call('GET', `/admin/teams/${id}/members`);
    assert.deepEqual(
      (members.json.data as Member[]).map((m) => [m.email, m.role, m.source]),
      [
        ['ben@teams.test', 'owner', 'admin'],
        ['vic@teams.test', 'viewer', 'admin'],
      ],
    );
    assert.equal((await call('DELETE', `/admin/teams/${id}/members/${vic.id}`)).status, 200);
    assert.equal((await call('DELETE', `/admin/teams/${id}/members/${ben.id}`)).status, 409);
    assert.equal((await call('POST', '/admin/teams', { name: 'ops' })).status, 409);
    const listed = await call('GET', '/admin/accounts');
    assert.equal((listed.json.data as Array<{ id: string; kind: string }>).find((a) => a.id === id)?.kind, 'team');
    // Teams listed as teams: both made here, each with its members, and nobody's own account among them.
    const teamsListed = await call('GET', '/admin/teams');
    assert.equal(teamsListed.status, 200, JSON.stringify(teamsListed.json));
    assert.equal(teamsListed.json.object, 'list');
    const rows = teamsListed.json.data as Array<Team & { object: string }>;
    const teamIds = (listed.json.data as Array<{ id: string; kind: string }>)
      .filter((a) => a.kind === 'team')
      .map((a) => a.id);
    assert.deepEqual(rows.map((t) => t.id).sort(), [...teamIds].sort());
    assert.ok(rows.length >= 2 && rows.every((t) => t.kind === 'team' && t.object === 'account'), JSON.stringify(rows));
    assert.deepEqual(
      rows.find((t) => t.id === id)!.members.map((m) => [m.email, m.role]),
      [['ben@teams.test', 'owner']],
    );
    const researchMembers = (await call('GET', `/admin/teams/${team.id}/members`)).json.data as Member[];
    assert.deepEqual(
      rows.find((t) => t.id === team.id)!.members.map((m) => m.email),
      researchMembers.map((m) => m.email),
    );
    assert.ok(researchMembers.length >= 3);
    const one = await call('GET', `/admin/teams/${id}`);
    assert.equal(one.status, 200, JSON.stringify(one.json));
    assert.deepEqual([one.json.id, one.json.name, (one.json.members as Member[]).length], [id, 'Ops', 1]);
    // A person's account is not a team, and an unknown id is none either.
    for (const other of [ben.id, 'acct_nothing_here']) {
      const missing = await call('GET', `/admin/teams/${other}`);
      assert.equal(missing.status, 404, JSON.stringify(missing.json));
      assert.equal((missing.json.error as Json).code, 'team_not_found');
    }
    assert.equal((await fetch(`${gateway.url}/admin/teams`)).status, 401);
  });
});
