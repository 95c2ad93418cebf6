import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { sql, type Selectable } from 'kysely';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshDatabase, onDatabase, recordUrlFor, testRecord } from '../support/record.js';
import {
  appendAudit,
  auditRowHash,
  genesisHash,
  pruneAuditOlderThanDays,
  verifyAudit,
  type AuditRow,
} from '../../storage/record/audit-log.js';
import { openRecord, type AuditLogTable, type RecordDb } from '../../storage/record/database.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const adminToken = 'audit-log-admin-token';
const adminEmail = 'root@audit.test';
const adminPassword = 'root-password-1';
/** Every request of this file comes from here (TRUST_PROXY is on), so each row's address can be checked. */
const clientIp = '203.0.113.7';
const userAgent = 'audit-test/1.0';

type Json = Record<string, unknown>;
type Row = Selectable<AuditLogTable>;

/** A command line's outcome, whatever its exit code. */
async function command(
  script: string,
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', script, ...args], {
      cwd: root,
      env: { ...process.env, ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as Error & { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

/** A fresh, empty record holding only the rows `rows` appends: a log of its own to tamper with. */
async function logOf(
  name: string,
  rows: (record: RecordDb) => Promise<void>,
): Promise<{ url: string; record: RecordDb }> {
  const url = await freshDatabase(`audit_${name}`);
  const record = await openRecord(url, { max: 2 });
  await rows(record);
  return { url, record };
}

/**
 * Runs SQL on a log's database as an attacker who owns it: a superuser session with triggers off
 * (session_replication_role).
 */
async function asAttacker(url: string, statements: string[]): Promise<void> {
  await onDatabase(url, async (client) => {
    await client.query('set session_replication_role = replica');
    for (const statement of statements) await client.query(statement);
  });
}

describe('the audit log', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  let record: RecordDb;
  let started: number;
  let addresses = 0;

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(15));
    gateway = await startGateway({
      env: {
        REDIS_URL: redisUrl,
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        TRUST_PROXY: 'on',
        CONSOLE_SIGNUP: 'open',
        SIGNUP_CREDIT_USD: '2',
      },
    });
    record = await testRecord(redisUrl);
    started = Date.now();
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
    const res = await fetch(`${gateway.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        'content-type': 'application/json',
        'x-forwarded-for': clientIp,
        'user-agent': userAgent,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Json };
  }

  function browser(): ConsoleClient {
    return new ConsoleClient(gateway.url, clientIp, userAgent);
  }

  async function signedInAdmin(): Promise<ConsoleClient> {
    const client = browser();
    assert.equal((await client.signIn(adminEmail, adminPassword)).status, 200);
    return client;
  }

  /** A member account made by the admin API, signed in to the console. */
  async function member(): Promise<{ id: string; email: string; client: ConsoleClient }> {
    const email = `member-${++addresses}@audit.test`;
    const made = await admin('POST', '/admin/accounts', { email, password: 'member-password', role: 'member' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const client = browser();
    assert.equal((await client.signIn(email, 'member-password')).status, 200);
    return { id: String(made.json.id), email, client };
  }

  /** The newest row of an action about a target; fails when there is none. */
  async function rowOf(action: string, target: string): Promise<Row> {
    const row = await record
      .selectFrom('audit_log')
      .selectAll()
      .where('action', '=', action)
      .where('target', '=', target)
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    assert.ok(row, `no ${action} row for ${target}`);
    return row;
  }

  /** Who, when and from where, as every row made over HTTP in this file has them. */
  function assertFromClient(row: Row, actor: string, actorEmail: string | null): void {
    assert.equal(row.actor, actor);
    assert.equal(row.actor_email, actorEmail);
    assert.equal(row.ip, clientIp);
    assert.ok(Number(row.time) >= started && Number(row.time) <= Date.now(), `time ${row.time}`);
  }

  /** The rows of an action about a target, oldest first. */
  async function rowsOf(action: string, target: string): Promise<Row[]> {
    return record
      .selectFrom('audit_log')
      .selectAll()
      .where('action', '=', action)
      .where('target', '=', target)
      .orderBy('id')
      .execute();
  }

  /** A team made by the admin API, with a first owner and a plain member, both signed in to the console. */
  async function teamWithPeople(
    name: string,
  ): Promise<{ team: string; owner: Awaited<ReturnType<typeof member>>; plain: Awaited<ReturnType<typeof member>> }> {
    const owner = await member();
    const plain = await member();
    const made = await admin('POST', '/admin/teams', { name, owner_email: owner.email });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const team = String(made.json.id);
    assert.equal(
      (await admin('POST', `/admin/teams/${team}/members`, { email: plain.email, role: 'member' })).status,
      201,
    );
    return { team, owner, plain };
  }

  /**
   * A team's row as everyone sees it: who made it, when, from where (address and user agent), which team; and in
   * the console, the team's owner reads it as the record holds it while a plain member of the team is refused.
   */
  async function assertTeamRow(
    row: Row,
    by: { actor: string; email: string | null },
    team: string,
    owner: ConsoleClient,
    plain: ConsoleClient,
  ): Promise<void> {
    assertFromClient(row, by.actor, by.email);
    assert.equal(row.user_agent, userAgent);
    assert.equal(row.team_id, team);
    const read = await owner.request<{ data: AuditRow[] }>(
      'GET',
      `/console/api/audit?team=${team}&action=${row.action}&limit=100`,
    );
    assert.equal(read.status, 200, JSON.stringify(read.json));
    const seen = read.json.data.find((r) => r.id === Number(row.id));
    assert.ok(seen, `the owner reads row ${row.id}`);
    assert.deepEqual(
      {
        actor: seen.actor,
        team_id: seen.team_id,
        target: seen.target,
        before: seen.before,
        after: seen.after,
        ip: seen.ip,
        user_agent: seen.user_agent,
        hash: seen.hash,
      },
      {
        actor: row.actor,
        team_id: row.team_id,
        target: row.target,
        before: row.before,
        after: row.after,
        ip: row.ip,
        user_agent: row.user_agent,
        hash: row.hash,
      },
    );
    const refused = await plain.request('GET', `/console/api/audit?team=${team}&action=${row.action}`);
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error?.code, 'audit_forbidden');
  }

  it('records a team made, from the console by an admin and from the admin API, readable by its owner', async () => {
    const client = await signedInAdmin();
    const me = (await client.request<{ account: { id: string } }>('GET', '/console/api/session')).json.account.id;
    const owner = await member();
    const plain = await member();
    const made = await client.request<{ id: string }>('POST', '/console/api/teams', {
      name: 'Console Made',
      owner_email: owner.email,
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const team = made.json.id;
    assert.equal(
      (await admin('POST', `/admin/teams/${team}/members`, { email: plain.email, role: 'member' })).status,
      201,
    );
    const created = await rowOf('team.created', team);
    assert.equal(created.target, team);
    assert.equal(created.before, null);
    assert.deepEqual(created.after, { name: 'Console Made' });
    await assertTeamRow(created, { actor: me, email: adminEmail }, team, owner.client, plain.client);

    const other = await teamWithPeople('Api Made');
    const apiCreated = await rowOf('team.created', other.team);
    assert.equal(apiCreated.target, other.team);
    assert.equal(apiCreated.before, null);
    assert.deepEqual(apiCreated.after, { name: 'Api Made' });
    await assertTeamRow(
      apiCreated,
      { actor: 'admin-token', email: null },
      other.team,
      other.owner.client,
      other.plain.client,
    );

    // A team refused (no such first owner, or a member asking) is no team and no row.
    const count = async () =>
      (
        await record
          .selectFrom('audit_log')
          .select((eb) => eb.fn.countAll<string>().as('n'))
          .where('action', '=', 'team.created')
          .executeTakeFirstOrThrow()
      ).n;
    const rows = await count();
    assert.equal(
      (await admin('POST', '/admin/teams', { name: 'Nobody Owns', owner_email: 'nobody-here@audit.test' })).status,
      404,
    );
    assert.equal((await owner.client.request('POST', '/console/api/teams', { name: 'Not Mine To Make' })).status, 403);
    assert.equal(await count(), rows);
  });

  it(
    'records a member added, by the team’s owner in the console and by the admin API, with their role and who ' +
      'added them',
    async () => {
      const { team, owner, plain } = await teamWithPeople('Adders');
      const newcomer = await member();
      const added = await owner.client.request('POST', `/console/api/teams/${team}/members`, {
        email: newcomer.email,
        role: 'viewer',
      });
      assert.equal(added.status, 201, JSON.stringify(added.json));
      const row = await rowOf('team.member_added', newcomer.id);
      assert.equal(row.before, null);
      assert.deepEqual(row.after, { email: newcomer.email, role: 'viewer', source: 'console' });
      await assertTeamRow(row, { actor: owner.id, email: owner.email }, team, owner.client, plain.client);

      const byApi = await member();
      assert.equal(
        (await admin('POST', `/admin/teams/${team}/members`, { email: byApi.email, role: 'member' })).status,
        201,
      );
      const apiRow = await rowOf('team.member_added', byApi.id);
      assert.deepEqual(apiRow.after, { email: byApi.email, role: 'member', source: 'admin' });
      await assertTeamRow(apiRow, { actor: 'admin-token', email: null }, team, owner.client, plain.client);

      // The first owner named with the team is added too, as the admin's.
      assert.deepEqual((await rowOf('team.member_added', owner.id)).after, {
        email: owner.email,
        role: 'owner',
        source: 'admin',
      });
      // Refused: a plain member may not add, nor may anyone add an unknown email; neither leaves a row.
      const stranger = await member();
      assert.equal(
        (
          await plain.client.request('POST', `/console/api/teams/${team}/members`, {
            email: stranger.email,
            role: 'member',
          })
        ).status,
        403,
      );
      assert.equal(
        (
          await owner.client.request('POST', `/console/api/teams/${team}/members`, {
            email: 'nobody-here@audit.test',
            role: 'member',
          })
        ).status,
        404,
      );
      assert.deepEqual(await rowsOf('team.member_added', stranger.id), []);
    },
  );

  it(
    'records a member’s role changed, before and after, by the owner in the console and by the admin API; no row ' +
      'when nothing changed',
    async () => {
      const { team, owner, plain } = await teamWithPeople('Changers');
      const changed = await owner.client.request('PATCH', `/console/api/teams/${team}/members/${plain.id}`, {
        role: 'viewer',
      });
      assert.equal(changed.status, 200, JSON.stringify(changed.json));
      const row = await rowOf('team.member_updated', plain.id);
      assert.equal(row.target, plain.id);
      assert.deepEqual(row.before, { role: 'member' });
      assert.deepEqual(row.after, { role: 'viewer' });
      await assertTeamRow(row, { actor: owner.id, email: owner.email }, team, owner.client, plain.client);

      // The admin API changes a role by adding the member again with another.
      assert.equal(
        (await admin('POST', `/admin/teams/${team}/members`, { email: plain.email, role: 'member' })).status,
        201,
      );
      const apiRow = await rowOf('team.member_updated', plain.id);
      assert.deepEqual([apiRow.before, apiRow.after], [{ role: 'viewer' }, { role: 'member' }]);
      await assertTeamRow(apiRow, { actor: 'admin-token', email: null }, team, owner.client, plain.client);

      // The same role again, and the last owner refused a demotion (409): no row.
      assert.equal(
        (await owner.client.request('PATCH', `/console/api/teams/${team}/members/${plain.id}`, { role: 'member' }))
          .status,
        200,
      );
      const last = await owner.client.request('PATCH', `/console/api/teams/${team}/members/${owner.id}`, {
        role: 'member',
      });
      assert.equal(last.status, 409);
      assert.equal(last.json.error?.code, 'last_owner');
      assert.equal((await rowsOf('team.member_updated', plain.id)).length, 2);
      assert.deepEqual(await rowsOf('team.member_updated', owner.id), []);
    },
  );

  it('records a member removed, with the role they had, by the owner in the console and by the admin API', async () => {
    const { team, owner, plain } = await teamWithPeople('Removers');
    const leaving = await member();
    const alsoLeaving = await member();
    assert.equal(
      (await admin('POST', `/admin/teams/${team}/members`, { email: leaving.email, role: 'viewer' })).status,
      201,
    );
    assert.equal(
      (await admin('POST', `/admin/teams/${team}/members`, { email: alsoLeaving.email, role: 'member' })).status,
      201,
    );

    assert.equal(
      (await owner.client.request('DELETE', `/console/api/teams/${team}/members/${leaving.id}`)).status,
      200,
    );
    const row = await rowOf('team.member_removed', leaving.id);
    assert.deepEqual(row.before, { role: 'viewer' });
    assert.equal(row.after, null);
    await assertTeamRow(row, { actor: owner.id, email: owner.email }, team, owner.client, plain.client);

    assert.equal((await admin('DELETE', `/admin/teams/${team}/members/${alsoLeaving.id}`)).status, 200);
    const apiRow = await rowOf('team.member_removed', alsoLeaving.id);
    assert.deepEqual([apiRow.before, apiRow.after], [{ role: 'member' }, null]);
    await assertTeamRow(apiRow, { actor: 'admin-token', email: null }, team, owner.client, plain.client);

    // Someone not in the team (404) and the last owner (409): nothing removed, no row.
    assert.equal(
      (await owner.client.request('DELETE', `/console/api/teams/${team}/members/${leaving.id}`)).status,
      404,
    );
    assert.equal((await admin('DELETE', `/admin/teams/${team}/members/${owner.id}`)).status, 409);
    assert.equal((await rowsOf('team.member_removed', leaving.id)).length, 1);
    assert.deepEqual(await rowsOf('team.member_removed', owner.id), []);
  });

  it('records budgets and members’ caps set, before and after, from the console’s budget routes and the admin API', async () => {
    const { team, owner, plain } = await teamWithPeople('Budgeted');
    const budget = await owner.client.request('PUT', `/console/api/teams/${team}/budget`, {
      budget_usd: 50,
      budget_period: 'month',
    });
    assert.equal(budget.status, 200, JSON.stringify(budget.json));
    const set = await rowOf('budget.updated', team);
    assert.deepEqual(set.before, { budget_usd: null, budget_period: null });
    assert.deepEqual(set.after, { budget_usd: 50, budget_period: 'month' });
    await assertTeamRow(set, { actor: owner.id, email: owner.email }, team, owner.client, plain.client);

    const cap = await owner.client.request('PUT', `/console/api/teams/${team}/members/${plain.id}/cap`, {
      cap_usd: 5,
      cap_period: 'day',
    });
    assert.equal(cap.status, 200, JSON.stringify(cap.json));
    const capRow = await rowOf('budget.updated', plain.id);
    assert.deepEqual(
      [capRow.before, capRow.after],
      [
        { cap_usd: null, cap_period: null },
        { cap_usd: 5, cap_period: 'day' },
      ],
    );
    await assertTeamRow(capRow, { actor: owner.id, email: owner.email }, team, owner.client, plain.client);

    // The admin API's PATCH of the budget alone: a budget row, and no account row with nothing in it.
    const patched = await admin('PATCH', `/admin/accounts/${team}`, { budget_usd: 80, budget_period: 'week' });
    assert.equal(patched.status, 200, JSON.stringify(patched.json));
    const apiSet = await rowOf('budget.updated', team);
    assert.deepEqual(
      [apiSet.before, apiSet.after],
      [
        { budget_usd: 50, budget_period: 'month' },
        { budget_usd: 80, budget_period: 'week' },
      ],
    );
    await assertTeamRow(apiSet, { actor: 'admin-token', email: null }, team, owner.client, plain.client);
    assert.deepEqual(await rowsOf('account.updated', team), []);

    // The admin API's cap: what it replaced as before, not nothing.
    const apiCap = await admin('PUT', `/admin/accounts/${team}/members/${plain.id}/cap`, {
      budget_usd: 2,
      budget_period: 'week',
    });
    assert.equal(apiCap.status, 200, JSON.stringify(apiCap.json));
    const apiCapRow = await rowOf('budget.updated', plain.id);
    assert.deepEqual(
      [apiCapRow.before, apiCapRow.after],
      [
        { cap_usd: 5, cap_period: 'day' },
        { cap_usd: 2, cap_period: 'week' },
      ],
    );
    await assertTeamRow(apiCapRow, { actor: 'admin-token', email: null }, team, owner.client, plain.client);
    assert.equal(
      (await admin('PUT', `/admin/accounts/${team}/members/${plain.id}/cap`, { budget_usd: null })).status,
      200,
    );
    assert.deepEqual((await rowOf('budget.updated', plain.id)).after, { cap_usd: null, cap_period: null });

    // Refused: a plain member setting the budget, a cap for someone not in the team; no row for either.
    const rows = (await rowsOf('budget.updated', team)).length;
    assert.equal(
      (await plain.client.request('PUT', `/console/api/teams/${team}/budget`, { budget_usd: 1, budget_period: 'day' }))
        .status,
      403,
    );
    const stranger = await member();
    assert.equal(
      (
        await admin('PUT', `/admin/accounts/${team}/members/${stranger.id}/cap`, {
          budget_usd: 1,
          budget_period: 'day',
        })
      ).status,
      404,
    );
    assert.equal(
      (
        await owner.client.request('PUT', `/console/api/teams/${team}/members/${stranger.id}/cap`, {
          cap_usd: 1,
          cap_period: 'day',
        })
      ).status,
      404,
    );
    assert.equal((await rowsOf('budget.updated', team)).length, rows);
    assert.deepEqual(await rowsOf('budget.updated', stranger.id), []);
  });

  it('records a console sign-in that succeeded, and ones that failed, with who tried and from where', async () => {
    const { id, email } = await member();
    const ok = await rowOf('signin.succeeded', id);
    assertFromClient(ok, id, email);
    assert.equal(ok.team_id, id);
    assert.deepEqual(ok.after, { method: 'password' });

    const wrong = browser();
    assert.equal((await wrong.signIn(email, 'not-the-password')).status, 401);
    const failed = await rowOf('signin.failed', id);
    assertFromClient(failed, id, email);
    assert.deepEqual(failed.after, { method: 'password', reason: 'invalid_credentials' });
    assert.doesNotMatch(JSON.stringify(failed), /not-the-password/);

    assert.equal((await browser().signIn('nobody@audit.test', 'whatever-password')).status, 401);
    const unknown = await record
      .selectFrom('audit_log')
      .selectAll()
      .where('action', '=', 'signin.failed')
      .where('actor', '=', 'anonymous')
      .orderBy('id', 'desc')
      .executeTakeFirstOrThrow();
    assertFromClient(unknown, 'anonymous', 'nobody@audit.test');
    assert.equal(unknown.team_id, null);
  });

  it('records a sign-up (the account made by the person) and its sign-up credit (granted by the gateway)', async () => {
    const client = browser();
    await client.open();
    const res = await client.request<{ account: { id: string } }>('POST', '/console/api/signup', {
      email: 'new@audit.test',
      password: 'new-password-1',
      name: 'New',
    });
    assert.equal(res.status, 201, JSON.stringify(res.json));
    const id = res.json.account.id;
    const made = await rowOf('account.created', id);
    assertFromClient(made, id, 'new@audit.test');
    assert.equal((made.after as Json).email, 'new@audit.test');
    assert.equal((made.after as Json).signup, true);
    assert.equal(made.before, null);
    assert.doesNotMatch(JSON.stringify(made), /new-password-1/);
    const credit = await rowOf('credit.granted', id);
    assertFromClient(credit, 'system', null);
    assert.equal((credit.after as Json).amount_micros, 2_000_000);
  });

  it('records console keys made, changed and revoked by their owner, the changed fields only, never the secret', async () => {
    const { id, email, client } = await member();
    const made = await client.request<{ id: string; key: string }>('POST', '/console/api/keys', {
      name: 'mine',
      rpm: 2,
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const keyId = made.json.id;
    const created = await rowOf('key.created', keyId);
    assertFromClient(created, id, email);
    assert.equal(created.team_id, id);
    assert.equal((created.after as Json).name, 'mine');
    assert.equal((created.after as Json).rpm, 2);
    assert.ok(!JSON.stringify(created).includes(made.json.key), 'the secret is not in the log');

    assert.equal(
      (await client.request('PATCH', `/console/api/keys/${keyId}`, { name: 'renamed', rpm: 1 })).status,
      200,
    );
    const updated = await rowOf('key.updated', keyId);
    assertFromClient(updated, id, email);
    assert.deepEqual(updated.before, { name: 'mine', rpm: 2 });
    assert.deepEqual(updated.after, { name: 'renamed', rpm: 1 });

    assert.equal((await client.request('DELETE', `/console/api/keys/${keyId}`)).status, 200);
    const revoked = await rowOf('key.revoked', keyId);
    assertFromClient(revoked, id, email);
    assert.deepEqual(revoked.after, { revoked: true });
  });

  it('records the admin API: accounts made, changed (each field before and after) and deleted, credits, keys', async () => {
    const made = await admin('POST', '/admin/accounts', {
      email: 'api@audit.test',
      name: 'Api',
      password: 'api-password-1',
    });
    assert.equal(made.status, 201);
    const id = String(made.json.id);
    const created = await rowOf('account.created', id);
    assertFromClient(created, 'admin-token', null);
    assert.equal(created.user_agent, userAgent);

    const patched = await admin('PATCH', `/admin/accounts/${id}`, {
      role: 'admin',
      weight: 5,
      service_tiers: ['default'],
      cache_max_ttl_s: 60,
      name: 'Api 2',
      email: 'api2@audit.test',
      password: 'another-password',
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.json));
    const updated = await rowOf('account.updated', id);
    assertFromClient(updated, 'admin-token', null);
    assert.deepEqual(updated.before, {
      role: 'member',
      weight: 1,
      service_tiers: null,
      cache_max_ttl_s: null,
      name: 'Api',
      email: 'api@audit.test',
      unlimited: false,
    });
    assert.deepEqual(updated.after, {
      role: 'admin',
      weight: 5,
      service_tiers: ['default'],
      cache_max_ttl_s: 60,
      name: 'Api 2',
      email: 'api2@audit.test',
      unlimited: true,
      password_changed: true,
    });
    assert.doesNotMatch(JSON.stringify(updated), /another-password/);

    assert.equal((await admin('PATCH', `/admin/accounts/${id}`, { disabled: true })).status, 200);
    assert.deepEqual((await rowOf('account.updated', id)).after, { disabled: true });

    const member = await admin('POST', '/admin/accounts', { email: 'credit@audit.test' });
    const memberId = String(member.json.id);
    assert.equal(
      (await admin('POST', `/admin/accounts/${memberId}/credits`, { amount_usd: 3.5, note: 'welcome' })).status,
      200,
    );
    const credit = await rowOf('credit.granted', memberId);
    assertFromClient(credit, 'admin-token', null);
    assert.deepEqual(credit.after, { amount_micros: 3_500_000, note: 'welcome', balance_micros: 3_500_000 });

    const key = await admin('POST', '/admin/keys', { name: 'admin key', account_id: memberId, limit_usd: 1 });
    assert.equal(key.status, 201);
    const keyId = String(key.json.id);
    assert.equal((await rowOf('key.created', keyId)).team_id, memberId);
    assert.equal((await admin('PATCH', `/admin/keys/${keyId}`, { limit_usd: 2 })).status, 200);
    const keyUpdated = await rowOf('key.updated', keyId);
    assert.equal((keyUpdated.before as Json).limit_usd, 1);
    assert.equal((keyUpdated.after as Json).limit_usd, 2);
    assert.equal((await admin('DELETE', `/admin/keys/${keyId}`)).status, 200);
    assertFromClient(await rowOf('key.revoked', keyId), 'admin-token', null);

    assert.equal((await admin('DELETE', `/admin/accounts/${memberId}`)).status, 200);
    assert.deepEqual((await rowOf('account.deleted', memberId)).after, { deleted: true, keys_revoked: 0 });
  });

  it(
    'records the console admin pages: accounts made and changed, credits, keys changed and revoked, by the ' +
      'signed-in admin',
    async () => {
      const client = await signedInAdmin();
      const me = (await client.request<{ account: { id: string } }>('GET', '/console/api/session')).json.account.id;
      const made = await client.request<{ id: string }>('POST', '/console/api/admin/accounts', {
        email: 'page@audit.test',
      });
      assert.equal(made.status, 201);
      const id = made.json.id;
      assertFromClient(await rowOf('account.created', id), me, adminEmail);
      assert.equal(
        (await client.request('PATCH', `/console/api/admin/accounts/${id}`, { weight: 7, disabled: true })).status,
        200,
      );
      const updated = await rowOf('account.updated', id);
      assertFromClient(updated, me, adminEmail);
      assert.deepEqual(updated.before, { weight: 1, disabled: false });
      assert.deepEqual(updated.after, { weight: 7, disabled: true });
      assert.equal(
        (await client.request('PATCH', `/console/api/admin/accounts/${id}`, { disabled: false })).status,
        200,
      );
      assert.equal(
        (await client.request('POST', `/console/api/admin/accounts/${id}/credits`, { amount_usd: 1 })).status,
        200,
      );
      assertFromClient(await rowOf('credit.granted', id), me, adminEmail);

      const key = await admin('POST', '/admin/keys', { name: 'for the page', account_id: id });
      const keyId = String(key.json.id);
      assert.equal((await client.request('PATCH', `/console/api/admin/keys/${keyId}`, { rpm: 9 })).status, 200);
      const keyUpdated = await rowOf('key.updated', keyId);
      assertFromClient(keyUpdated, me, adminEmail);
      assert.deepEqual(keyUpdated.after, {
        rpm: 9,
        admin_limits: { limit_usd: null, rpm: 9, tpm: null, models: null, expires_at: null },
      });
      assert.equal((await client.request('DELETE', `/console/api/admin/keys/${keyId}`)).status, 200);
      assertFromClient(await rowOf('key.revoked', keyId), me, adminEmail);
    },
  );

  it('records a key named with a lone surrogate as the record keeps the name (U+FFFD), and the chain verifies', async () => {
    // A client may send any JSON string: `"\ud800"` is one UTF-16 half, which jsonb refuses as an escape.
    const res = await fetch(`${gateway.url}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: '{"name":"half \\ud800 and \\udfff end"}',
    });
    assert.equal(res.status, 201, await res.clone().text());
    const id = String(((await res.json()) as Json).id);
    const row = await rowOf('key.created', id);
    assert.equal((row.after as Json).name, 'half \ufffd and \ufffd end');
    assert.equal((await verifyAudit(record)).intact, true);
  });

  it('records a purge of the response cache, with what it named and how many answers went', async () => {
    const made = await admin('POST', '/admin/accounts', { email: 'purge@audit.test' });
    const id = String(made.json.id);
    const purged = await admin('DELETE', `/admin/cache?account_id=${id}&model=mock-chat`);
    assert.equal(purged.status, 200);
    const row = await rowOf('cache.purged', id);
    assertFromClient(row, 'admin-token', null);
    assert.deepEqual(row.after, { purged: 0, account_id: id, model: 'mock-chat' });
    assert.equal((await admin('DELETE', '/admin/cache')).status, 200);
    assert.equal((await rowOf('cache.purged', 'all accounts')).team_id, null);
  });

  it('records the command lines (npm run keys, npm run accounts) as the cli, with the user who ran them', async () => {
    const env = { REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
    const made = await command('bin/accounts.ts', ['create', '--email', 'cli@audit.test', '--name', 'Cli'], env);
    assert.equal(made.code, 0, made.stderr);
    const id = made.stdout.trim();
    const created = await rowOf('account.created', id);
    assert.equal(created.actor, 'cli');
    assert.equal(created.ip, null);
    assert.match(created.user_agent ?? '', /^switchyard-cli accounts\.ts \(.+@.+\)$/);
    assert.ok(Number(created.time) >= started);

    assert.equal((await command('bin/accounts.ts', ['credit', id, '4', '--note', 'from the shell'], env)).code, 0);
    assert.deepEqual((await rowOf('credit.granted', id)).after, {
      amount_micros: 4_000_000,
      note: 'from the shell',
      balance_micros: 4_000_000,
    });
    assert.equal((await rowOf('credit.granted', id)).actor, 'cli');

    const key = await command('bin/keys.ts', ['create', '--name', 'shell', '--account', id, '--rpm', '3'], env);
    assert.equal(key.code, 0, key.stderr);
    const keyId = /created (key_\w+)/.exec(key.stderr)?.[1] ?? '';
    const keyRow = await rowOf('key.created', keyId);
    assert.equal(keyRow.actor, 'cli');
    assert.equal(keyRow.team_id, id);
    assert.equal((keyRow.after as Json).rpm, 3);
    assert.ok(!JSON.stringify(keyRow).includes(key.stdout.trim()), 'the secret is not in the log');
    assert.equal((await command('bin/keys.ts', ['revoke', keyId], env)).code, 0);
    assert.equal((await rowOf('key.revoked', keyId)).actor, 'cli');

    assert.equal((await command('bin/accounts.ts', ['delete', id], env)).code, 0);
    assert.equal((await rowOf('account.deleted', id)).actor, 'cli');
  });

  it('refuses UPDATE, DELETE and TRUNCATE through SQL, and a prune setting reaches no row past the one it names', async () => {
    const { id: target } = await member();
    const row = await rowOf('signin.succeeded', target);
    await assert.rejects(
      onDatabase(await recordUrlFor(redisUrl), (client) =>
        client.query(`update audit_log set actor = 'someone else' where id = $1`, [row.id]),
      ),
      /append-only: UPDATE refused/,
    );
    await assert.rejects(
      onDatabase(await recordUrlFor(redisUrl), (client) =>
        client.query('delete from audit_log where id = $1', [row.id]),
      ),
      /append-only: DELETE refused/,
    );
    await assert.rejects(
      onDatabase(await recordUrlFor(redisUrl), (client) => client.query('truncate audit_log')),
      /append-only: TRUNCATE refused/,
    );
    // The retention's own way in, misused: it may delete rows up to the id it names, and no further.
    await assert.rejects(
      onDatabase(await recordUrlFor(redisUrl), async (client) => {
        await client.query('begin');
        await client.query(`select set_config('switchyard.audit_prune_through', '1', true)`);
        await client.query('delete from audit_log where id = $1', [row.id]);
      }),
      /append-only: DELETE refused/,
    );
    assert.equal((await rowOf('signin.succeeded', target)).actor, target);
  });

  it('keeps one chain while two processes append at once', async () => {
    const { url, record: log } = await logOf('concurrent', async () => undefined);
    try {
      const appender = fileURLToPath(new URL('../support/audit-appender.ts', import.meta.url));
      // Both start appending when both are ready, however long each took to start.
      const appenders = ['a', 'b'].map((name) =>
        spawn(process.execPath, ['--import', 'tsx', appender, url, '60', name], {
          cwd: root,
          stdio: ['pipe', 'pipe', 'inherit'],
        }),
      );
      const ready = appenders.map(async (proc) => {
        for await (const chunk of proc.stdout!) if (String(chunk).includes('ready')) return;
        throw new Error('an appender ended before it was ready');
      });
      const ended = appenders.map((proc) => once(proc, 'exit') as Promise<[number | null]>);
      await Promise.all(ready);
      for (const proc of appenders) proc.stdin!.end('go\n');
      assert.deepEqual(
        (await Promise.all(ended)).map(([code]) => code),
        [0, 0],
      );
      const rows = await log.selectFrom('audit_log').selectAll().orderBy('id').execute();
      assert.equal(rows.length, 120);
      // Both processes' rows interleave, each linked to the one before it: no two rows share a predecessor.
      assert.ok(
        new Set(rows.slice(0, 60).map((row) => row.target!.split('-')[0])).size === 2,
        'the two processes appended at the same time',
      );
      rows.forEach((row, i) => assert.equal(row.prev_hash, i === 0 ? genesisHash : rows[i - 1]!.hash, `row ${row.id}`));
      assert.equal(new Set(rows.map((row) => row.prev_hash)).size, 120);
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 0, verified.stderr);
      assert.equal(JSON.parse(verified.stdout).rows, 120);
    } finally {
      await log.destroy();
    }
  });

  /** A log of ten rows of its own. */
  const tenRows = (name: string) =>
    logOf(name, async (log) => {
      for (let i = 1; i <= 10; i++)
        await appendAudit(log, {
          actor: 'system',
          action: 'channel.updated',
          target: `row-${i}`,
          teamId: 'acct_t',
          after: { n: i },
        });
    });

  it('verify passes on an intact log, with a summary', async () => {
    const { url, record: log } = await tenRows('intact');
    try {
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 0, verified.stderr);
      const summary = JSON.parse(verified.stdout) as Json;
      const last = await log
        .selectFrom('audit_log')
        .select(['id', 'hash'])
        .orderBy('id', 'desc')
        .executeTakeFirstOrThrow();
      assert.deepEqual(summary, { intact: true, rows: 10, first_id: 1, last_id: last.id, last_hash: last.hash });
      assert.match(verified.stderr, /audit log intact: 10 rows/);
    } finally {
      await log.destroy();
    }
  });

  it('verify names a row changed directly in PostgreSQL', async () => {
    const { url, record: log } = await tenRows('changed');
    try {
      await asAttacker(url, [`update audit_log set after = '{"n": 40}' where id = 4`]);
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 1);
      assert.deepEqual(JSON.parse(verified.stdout).break, {
        kind: 'changed',
        id: 4,
        message: 'row 4 was changed: its fields no longer give its hash',
      });
      assert.match(verified.stderr, /BROKEN: row 4 was changed/);
    } finally {
      await log.destroy();
    }
  });

  it('verify names rows deleted directly in PostgreSQL, in the middle and at the start', async () => {
    const { url, record: log } = await tenRows('deleted');
    try {
      await asAttacker(url, ['delete from audit_log where id in (5, 6)']);
      const middle = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(middle.code, 1);
      assert.deepEqual(JSON.parse(middle.stdout).break, {
        kind: 'deleted',
        after: 4,
        before: 7,
        message: 'rows were deleted after row 4: row 7 does not link to row 4',
      });
      await asAttacker(url, ['delete from audit_log where id <= 4']);
      const start = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(start.code, 1);
      assert.equal(JSON.parse(start.stdout).break.kind, 'deleted');
      assert.equal(JSON.parse(start.stdout).break.after, null);
    } finally {
      await log.destroy();
    }
  });

  it('verify names a row inserted directly in PostgreSQL, whether it links to the row before it or not', async () => {
    // Ids with gaps between them, as appends that rolled back leave: 1, 3, 5, 7, 9.
    const { url, record: log } = await logOf('inserted', async (log) => {
      for (let i = 1; i <= 5; i++) {
        await appendAudit(log, { actor: 'system', action: 'channel.updated', target: `row-${i}` });
        await sql`select nextval(pg_get_serial_sequence('audit_log', 'id'))`.execute(log);
      }
    });
    try {
      const third = await log.selectFrom('audit_log').selectAll().where('id', '=', 3).executeTakeFirstOrThrow();
      // A forged row in the gap after row 3, linked to it, its hash right for itself: only the next link gives it away.
      const forged = {
        id: 4,
        time: Number(third.time) + 1,
        actor: 'forger',
        actor_email: null,
        team_id: null,
        action: 'key.created',
        target: 'forged',
        ip: null,
        user_agent: null,
        before: null,
        after: null,
        prev_hash: third.hash,
      };
      const insert = (prev: string, hash: string) =>
        `insert into audit_log (id, time, actor, action, target, prev_hash, hash) values (4, ${forged.time}, ` +
        `'forger', 'key.created', 'forged', '${prev}', '${hash}')`;
      await asAttacker(url, [insert(forged.prev_hash, auditRowHash(forged))]);
      const linked = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(linked.code, 1, linked.stdout);
      assert.deepEqual(JSON.parse(linked.stdout).break, {
        kind: 'inserted',
        id: 4,
        message: 'row 4 was inserted: the chain goes around it',
      });
      // The same row linked to nothing: the row after it still links to the row before it.
      const unlinked = { ...forged, prev_hash: 'f'.repeat(64) };
      await asAttacker(url, ['delete from audit_log where id = 4', insert(unlinked.prev_hash, auditRowHash(unlinked))]);
      const loose = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(loose.code, 1, loose.stdout);
      assert.equal(JSON.parse(loose.stdout).break.kind, 'inserted');
      assert.equal(JSON.parse(loose.stdout).break.id, 4);
    } finally {
      await log.destroy();
    }
  });

  it('a retention prune keeps verify green, and is itself in the log; a deletion elsewhere still breaks it', async () => {
    const day = 86_400_000;
    const { url, record: log } = await logOf('prune', async (log) => {
      for (let i = 1; i <= 6; i++)
        await appendAudit(log, {
          actor: 'system',
          action: 'channel.updated',
          target: `old-${i}`,
          time: Date.now() - 30 * day,
        });
      for (let i = 1; i <= 4; i++)
        await appendAudit(log, { actor: 'system', action: 'channel.updated', target: `new-${i}` });
    });
    try {
      const pruned = await command('bin/audit.ts', ['prune'], { DATABASE_URL: url, AUDIT_RETENTION_DAYS: '10' });
      assert.equal(pruned.code, 0, pruned.stderr);
      assert.match(pruned.stderr, /pruned 6 audit log rows/);
      const left = await log.selectFrom('audit_log').selectAll().orderBy('id').execute();
      assert.deepEqual(
        left.map((row) => row.target),
        ['new-1', 'new-2', 'new-3', 'new-4', null],
      );
      assert.equal(left.at(-1)!.action, 'audit.pruned');
      assert.equal(left.at(-1)!.actor, 'cli');
      // The prune row names the anchor it set: the last pruned row's id and hash (what the first row kept links to).
      assert.deepEqual(
        { ...(left.at(-1)!.after as Json), older_than: 0 },
        { rows: 6, through_id: 6, anchor_sha256: left[0]!.prev_hash, older_than: 0 },
      );
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 0, verified.stderr);
      assert.match(verified.stderr, /from the anchor after pruned row 6/);
      assert.deepEqual(JSON.parse(verified.stdout).anchor, { after_id: 6, proof: 'full' });
      // Appends after a prune go on from the head; with every row pruned they go on from the anchor.
      await appendAudit(log, { actor: 'system', action: 'channel.updated', target: 'after' });
      assert.equal((await command('bin/audit.ts', ['verify'], { DATABASE_URL: url })).code, 0);
      await asAttacker(url, [`delete from audit_log where target = 'new-2'`]);
      const broken = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(broken.code, 1);
      assert.equal(JSON.parse(broken.stdout).break.kind, 'deleted');
    } finally {
      await log.destroy();
    }
  });

  /** Sets the chain's anchor as an attacker would: straight into record_meta. */
  const forgeAnchor = (id: number, hash: string) =>
    `insert into record_meta (name, value) values ('audit_anchor', '${JSON.stringify({ id, hash })}') on ` +
    `conflict (name) do update set value = excluded.value`;

  it('verify refuses an anchor no audit.pruned row set: the oldest rows deleted and a matching anchor forged', async () => {
    const { url, record: log } = await tenRows('forged-anchor');
    try {
      const fourth = await log
        .selectFrom('audit_log')
        .select(['id', 'hash'])
        .where('id', '=', 4)
        .executeTakeFirstOrThrow();
      // What a prune would have done, done by hand with the trigger off: rows 1-4 gone, the anchor at row 4. The chain
      // from row 5 on links to it, whole; only the missing prune row gives it away.
      await asAttacker(url, ['delete from audit_log where id <= 4', forgeAnchor(4, fourth.hash)]);
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 1, verified.stderr);
      const broken = JSON.parse(verified.stdout).break as Json;
      assert.deepEqual(
        { kind: broken.kind, id: broken.id, pruned: broken.pruned },
        { kind: 'anchor', id: 4, pruned: null },
      );
      assert.match(
        String(broken.message),
        /the anchor after row 4 was not set by a prune: no audit\.pruned row explains it/,
      );
      assert.match(verified.stderr, /BROKEN: the anchor after row 4 was not set by a prune/);
      const verdict = await verifyAudit(log);
      assert.equal(verdict.intact, false);
      assert.equal(verdict.broken?.kind, 'anchor');
    } finally {
      await log.destroy();
    }
  });

  it('verify refuses an anchor moved past the one the latest prune set, and passes a real prune', async () => {
    const day = 86_400_000;
    const { url, record: log } = await logOf('moved-anchor', async (log) => {
      for (let i = 1; i <= 3; i++)
        await appendAudit(log, {
          actor: 'system',
          action: 'channel.updated',
          target: `old-${i}`,
          time: Date.now() - 30 * day,
        });
      for (let i = 1; i <= 4; i++)
        await appendAudit(log, { actor: 'system', action: 'channel.updated', target: `new-${i}` });
    });
    try {
      // A real prune: verify passes, the anchor proven by the prune row.
      assert.equal(await pruneAuditOlderThanDays(log, 10), 3);
      const real = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(real.code, 0, real.stderr);
      assert.deepEqual(JSON.parse(real.stdout).anchor, { after_id: 3, proof: 'full' });
      const pruneRow = await log
        .selectFrom('audit_log')
        .select(['id', 'actor'])
        .where('action', '=', 'audit.pruned')
        .executeTakeFirstOrThrow();
      assert.equal(pruneRow.actor, 'system');
      // Then the attacker takes the oldest row kept too, and moves the anchor to it: the prune row names another.
      const first = await log
        .selectFrom('audit_log')
        .select(['id', 'hash'])
        .orderBy('id')
        .limit(1)
        .executeTakeFirstOrThrow();
      await asAttacker(url, [`delete from audit_log where id = ${first.id}`, forgeAnchor(first.id, first.hash)]);
      const moved = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(moved.code, 1, moved.stderr);
      const broken = JSON.parse(moved.stdout).break as Json;
      assert.deepEqual(
        { kind: broken.kind, id: broken.id, pruned: broken.pruned },
        { kind: 'anchor', id: first.id, pruned: Number(pruneRow.id) },
      );
      assert.match(
        String(broken.message),
        new RegExp(`the latest audit\\.pruned row ${pruneRow.id} names the anchor after row 3`),
      );
      // The anchor's id kept, its hash swapped for another: named too.
      await asAttacker(url, [forgeAnchor(3, first.hash)]);
      const swapped = await verifyAudit(log);
      assert.equal(swapped.broken?.kind, 'anchor');
      assert.match(swapped.broken!.message, /names another hash for row 3/);
    } finally {
      await log.destroy();
    }
  });

  it('verify takes a prune row from before prune rows named the hash on its id, and says so', async () => {
    const { url, record: log } = await tenRows('legacy-prune');
    try {
      // A prune as the gateway did it before: rows 1-3 gone, the anchor at row 3, then a row with the id only.
      const third = await log
        .selectFrom('audit_log')
        .select(['id', 'hash'])
        .where('id', '=', 3)
        .executeTakeFirstOrThrow();
      await asAttacker(url, ['delete from audit_log where id <= 3', forgeAnchor(3, third.hash)]);
      await appendAudit(log, {
        actor: 'system',
        action: 'audit.pruned',
        after: { rows: 3, through_id: 3, older_than: 0 },
      });
      const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: url });
      assert.equal(verified.code, 0, verified.stderr);
      assert.deepEqual(JSON.parse(verified.stdout).anchor, { after_id: 3, proof: 'id-only' });
      assert.match(verified.stderr, /taken on its id only/);
      // Its id must still be the anchor's.
      const fourth = await log
        .selectFrom('audit_log')
        .select(['id', 'hash'])
        .where('id', '=', 4)
        .executeTakeFirstOrThrow();
      await asAttacker(url, ['delete from audit_log where id = 4', forgeAnchor(4, fourth.hash)]);
      const moved = await verifyAudit(log);
      assert.equal(moved.intact, false);
      assert.equal(moved.broken?.kind, 'anchor');
    } finally {
      await log.destroy();
    }
  });

  it('exports JSON Lines filtered by action, team and time, over the console and the command line', async () => {
    const client = await signedInAdmin();
    const { id } = await member();
    const res = await fetch(`${gateway.url}/console/api/audit.jsonl?action=signin.succeeded&team=${id}`, {
      headers: { cookie: [...client.cookies].map(([n, v]) => `${n}=${v}`).join('; ') },
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/jsonl/);
    const lines = (await res.text())
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as AuditRow);
    assert.ok(lines.length >= 1);
    for (const line of lines) {
      assert.equal(line.action, 'signin.succeeded');
      assert.equal(line.team_id, id);
      assert.equal(typeof line.hash, 'string');
    }

    const env = { REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
    const exported = await command(
      'bin/audit.ts',
      ['export', '--action', 'account.created', '--since', new Date(started).toISOString()],
      env,
    );
    assert.equal(exported.code, 0, exported.stderr);
    const rows = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as AuditRow);
    assert.ok(rows.length >= 3);
    assert.ok(rows.every((row) => row.action === 'account.created' && row.time >= started));
    assert.deepEqual(
      rows.map((row) => row.id),
      [...rows.map((row) => row.id)].sort((a, b) => a - b),
    );
    const future = await command('bin/audit.ts', ['export', '--since', '2999-01-01'], env);
    assert.equal(future.stdout, '');
    const bad = await command('bin/audit.ts', ['export', '--action', 'nonsense'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--action must be one of/);
  });

  it('pages newest first for an admin; an owner reads their teams only; a member or viewer of a team gets 403', async () => {
    const adminClient = await signedInAdmin();
    const first = await adminClient.request<{ data: AuditRow[]; has_more: boolean; next_cursor: string }>(
      'GET',
      '/console/api/audit?limit=3',
    );
    assert.equal(first.status, 200);
    assert.equal(first.json.data.length, 3);
    assert.ok(first.json.has_more);
    const second = await adminClient.request<{ data: AuditRow[] }>(
      'GET',
      `/console/api/audit?limit=3&cursor=${first.json.next_cursor}`,
    );
    const ids = [...first.json.data, ...second.json.data].map((row) => row.id);
    assert.deepEqual(
      ids,
      [...ids].sort((a, b) => b - a),
    );
    assert.equal(new Set(ids).size, 6);
    assert.equal((await adminClient.request('GET', '/console/api/audit?cursor=nonsense')).status, 400);
    assert.equal((await adminClient.request('GET', '/console/api/audit?from=yesterday')).status, 400);

    // A team (an account) with an owner and a member besides, as team_members rows (the teams feature writes them).
    const team = String((await admin('POST', '/admin/accounts', { email: 'team@audit.test', name: 'Team' })).json.id);
    await admin('POST', `/admin/accounts/${team}/credits`, { amount_usd: 1 });
    const owner = await member();
    const plain = await member();
    await record
      .insertInto('team_members')
      .values([
        { team_id: team, member_id: owner.id, role: 'owner', cap_micros: null, cap_period: null, created: 0 },
        { team_id: team, member_id: plain.id, role: 'member', cap_micros: null, cap_period: null, created: 0 },
      ])
      .execute();

    const mine = await owner.client.request<{ data: AuditRow[] }>('GET', `/console/api/audit?team=${team}&limit=100`);
    assert.equal(mine.status, 200);
    assert.ok(mine.json.data.length >= 2);
    assert.ok(mine.json.data.every((row) => row.team_id === team));
    const every = await owner.client.request<{ data: AuditRow[] }>('GET', '/console/api/audit?limit=100');
    assert.ok(every.json.data.every((row) => row.team_id === team || row.team_id === owner.id));
    assert.ok(every.json.data.some((row) => row.team_id === owner.id));
    const filtered = await owner.client.request<{ data: AuditRow[] }>(
      'GET',
      `/console/api/audit?team=${team}&action=credit.granted`,
    );
    assert.deepEqual(
      filtered.json.data.map((row) => row.action),
      ['credit.granted'],
    );

    const refused = await plain.client.request('GET', `/console/api/audit?team=${team}`);
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error?.code, 'audit_forbidden');
    assert.equal((await plain.client.request('GET', `/console/api/audit.jsonl?team=${team}`)).status, 403);
    assert.equal((await owner.client.request('GET', `/console/api/audit?team=${plain.id}`)).status, 403);
    assert.equal((await browser().request('GET', '/console/api/audit')).status, 401);
  });

  it('verify passes on the log every test above wrote to', async () => {
    const verified = await command('bin/audit.ts', ['verify'], { DATABASE_URL: await recordUrlFor(redisUrl) });
    assert.equal(verified.code, 0, verified.stderr);
    const summary = JSON.parse(verified.stdout) as Json;
    assert.equal(summary.intact, true);
    const kinds = await record.selectFrom('audit_log').select('action').distinct().execute();
    for (const action of [
      'team.created',
      'team.member_added',
      'team.member_updated',
      'team.member_removed',
      'budget.updated',
    ]) {
      assert.ok(
        kinds.some((row) => row.action === action),
        `a ${action} row in the chain`,
      );
    }
  });
});
