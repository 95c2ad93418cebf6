import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type { Selectable } from 'kysely';
import type { AuditLogTable, RecordDb } from '../../storage/record/database.js';
import { verifyAudit, type AuditRow } from '../../storage/record/audit-log.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { onDatabase, recordUrlFor, testRecord } from '../support/record.js';
import { ConsoleClient } from '../support/console-client.js';
import { startTestProvider, testClientId, testClientSecret, type TestProvider } from '../support/oidc-provider.js';

const adminEmail = 'break-glass@oidc.test';
const adminPassword = 'break-glass-password';
const adminToken = 'oidc-admin-token';
const callbackPath = '/console/api/oidc/callback';
/** Every browser of this file says so, so each audit row's user agent can be checked. */
const userAgent = 'oidc-test-browser/1.0';

// Sign-in through a real OpenID Connect provider (oidc-provider in this process) against a real gateway process.
describe('console sign-in through an OpenID Connect provider', () => {
  let redis: Redis;
  let record: RecordDb;
  let provider: TestProvider;
  let gateway: GatewayProcess;
  let addressCounter = 0;
  const browser = () => new ConsoleClient(gateway.url, `198.51.100.${++addressCounter}`, userAgent);

  /** Back on the console's own pages: where a sign-in ends, made or refused. */
  const onConsolePage = (next: URL) => next.origin === gateway.url && next.pathname === '/console/';

  /** Signs `subject` in from the console's button, as a browser does; the place it lands on the console. */
  async function signInAs(subject: string, client = browser()): Promise<{ client: ConsoleClient; landed: URL }> {
    provider.nextLogin = subject;
    const { url } = await client.navigate(`${gateway.url}/console/api/oidc/login`, onConsolePage);
    return { client, landed: url };
  }

  const refusal = (landed: URL) => landed.searchParams.get('sso_error');

  async function sessionOf(client: ConsoleClient): Promise<{ id: string; email: string; role: string } | null> {
    const res = await client.request<{ account: { id: string; email: string; role: string } | null }>(
      'GET',
      '/console/api/session',
    );
    assert.equal(res.status, 200);
    return res.json.account;
  }

  async function teamsOf(personId: string): Promise<Record<string, { role: string; source: string }>> {
    const rows = await record
      .selectFrom('team_members')
      .innerJoin('accounts', 'accounts.id', 'team_members.team_id')
      .select(['accounts.name', 'team_members.role', 'team_members.source'])
      .where('team_members.member_id', '=', personId)
      .execute();
    return Object.fromEntries(rows.map((row) => [row.name, { role: row.role, source: row.source }]));
  }

  async function adminApi(
    method: string,
    path: string,
    body?: unknown,
  ): Promise<{ status: number; json: Record<string, unknown> }> {
    const res = await fetch(`${gateway.url}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  }

  /**
   * Runs the sign-in up to the provider's redirect back to the gateway, and returns that callback URL, not yet called.
   */
  async function callbackUrlFor(subject: string, client: ConsoleClient): Promise<URL> {
    provider.nextLogin = subject;
    const { url } = await client.navigate(
      `${gateway.url}/console/api/oidc/login`,
      (next) => next.origin === gateway.url && next.pathname === callbackPath,
    );
    assert.equal(url.pathname, callbackPath, url.href);
    return url;
  }

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(7));
    record = await testRecord(redis);
    provider = await startTestProvider();
    gateway = await startGateway({
      env: {
        REDIS_URL: url,
        TRUST_PROXY: 'on',
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        CONSOLE_SIGNUP: 'open',
        OIDC_ISSUER: provider.issuer,
        OIDC_CLIENT_ID: testClientId,
        OIDC_CLIENT_SECRET: testClientSecret,
        OIDC_SCOPES: 'openid email profile groups',
        OIDC_TEAM_MAP:
          'eng=Engineering:member,eng-leads=Engineering:owner,finance=Finance:viewer,ops=Operations:member,research=Research:member,research-leads=Research:owner,audit=Audited:member',
        OIDC_ADMIN_GROUPS: 'gateway-admins',
        OIDC_ONLY: 'on',
        OIDC_BREAK_GLASS: adminEmail,
        OIDC_NAME: 'Sign in with Test IdP',
        OIDC_TIMEOUT_MS: '1500',
      },
    });
    // The gateway reads the provider's metadata at its first sign-in: the client is registered once its URL is known.
    provider.people.set('alice', { email: 'alice@oidc.test', name: 'Alice', groups: ['eng', 'finance'] });
    provider.people.set('mallory', { email: 'mallory@oidc.test', groups: ['marketing'] });
    provider.people.set('root', { email: 'root@oidc.test', groups: ['gateway-admins'] });
  });

  after(async () => {
    await gateway?.stop();
    await provider?.close();
    redis?.disconnect();
  });

  it('refuses a sign-in while the provider does not answer, within its timeout, then signs in once it does', async () => {
    provider.hang = true;
    const refused = await signInAs('alice');
    assert.equal(refusal(refused.landed), 'provider_unreachable');
    assert.equal(await sessionOf(refused.client), null);
    provider.hang = false;
    await provider.register({
      redirectUri: `${gateway.url}${callbackPath}`,
      postLogoutRedirectUri: `${gateway.url}/console/`,
    });
  });

  it('tells the console that sign-in through the provider is on and passwords are for break-glass admins only', async () => {
    const res = await browser().request<{
      sso: { on: boolean; label: string };
      password_signin: boolean;
      signup: boolean;
    }>('GET', '/console/api/config');
    assert.deepEqual(res.json.sso, { on: true, label: 'Sign in with Test IdP' });
    assert.equal(res.json.password_signin, false);
    assert.equal(res.json.signup, false);
  });

  it('makes the person on first sign-in, in the teams their groups map to, with the roles mapped', async () => {
    const { client, landed } = await signInAs('alice');
    assert.equal(landed.search, '', landed.href);
    const account = await sessionOf(client);
    assert.equal(account?.email, 'alice@oidc.test');
    assert.equal(account?.role, 'member');
    const row = await record
      .selectFrom('accounts')
      .select(['kind', 'oidc_issuer', 'oidc_subject', 'password', 'name'])
      .where('id', '=', account!.id)
      .executeTakeFirstOrThrow();
    assert.deepEqual(row, {
      kind: 'person',
      oidc_issuer: provider.issuer,
      oidc_subject: 'alice',
      password: '',
      name: 'Alice',
    });
    assert.deepEqual(await teamsOf(account!.id), {
      Engineering: { role: 'member', source: 'oidc' },
      Finance: { role: 'viewer', source: 'oidc' },
    });
  });

  it(
    'keeps the name of a team OIDC_TEAM_MAP gives: renaming it is refused by the admin API (both its PATCHes) and ' +
      'the console, with the map to change',
    async () => {
      const engineering = await record
        .selectFrom('accounts')
        .select(['id', 'name'])
        .where('kind', '=', 'team')
        .where('name', '=', 'Engineering')
        .executeTakeFirstOrThrow();
      const refused = await adminApi('PATCH', `/teams/${engineering.id}`, { name: 'Platform' });
      assert.equal(refused.status, 409, JSON.stringify(refused.json));
      const error = refused.json.error as { code: string; message: string };
      assert.equal(error.code, 'team_name_mapped');
      assert.match(error.message, /OIDC_TEAM_MAP/);
      // Nor through the account's own PATCH.
      const viaAccount = await adminApi('PATCH', `/accounts/${engineering.id}`, { name: 'Platform' });
      assert.equal(viaAccount.status, 409, JSON.stringify(viaAccount.json));
      assert.equal((viaAccount.json.error as { code: string }).code, 'team_name_mapped');
      const { client } = await signInAs('alice');
      // The console reads its session (and with it the CSRF token) once back from the provider.
      assert.equal((await sessionOf(client))?.email, 'alice@oidc.test');
      // Alice is a member of it, not its owner: the console refuses her before the map does.
      const asMember = await client.request<{ error: { code: string } }>(
        'PATCH',
        `/console/api/teams/${engineering.id}`,
        { name: 'Platform' },
        { headers: { 'x-team': engineering.id } },
      );
      assert.equal(asMember.status, 403, JSON.stringify(asMember.json));
      assert.equal(asMember.json.error.code, 'permission_denied');
      // The same name in another letter case is the same team to the map: allowed, and recorded.
      const recased = await adminApi('PATCH', `/teams/${engineering.id}`, { name: 'ENGINEERING' });
      assert.equal(recased.status, 200, JSON.stringify(recased.json));
      assert.equal(recased.json.name, 'ENGINEERING');
      assert.equal((await adminApi('PATCH', `/teams/${engineering.id}`, { name: 'Engineering' })).status, 200);
      assert.equal(
        (await record.selectFrom('accounts').select('name').where('id', '=', engineering.id).executeTakeFirstOrThrow())
          .name,
        'Engineering',
      );
    },
  );

  it(
    'follows the groups at every sign-in: a group added adds its team, one removed removes its membership, others’ ' +
      'rows stay',
    async () => {
      const first = await signInAs('alice');
      const alice = (await sessionOf(first.client))!;
      // A membership an admin gave by hand, in a team no group maps: never the provider's to remove.
      const manual = await record
        .insertInto('accounts')
        .values({
          id: 'acct_manual_team',
          kind: 'team',
          email: '',
          name: 'Manual',
          role: 'member',
          created: 0,
          password: '',
          unlimited: false,
          disabled: false,
          deleted: false,
          credits_micros: 0,
          settled_micros: 0,
          playground_key: null,
        })
        .returning('id')
        .executeTakeFirstOrThrow();
      await record
        .insertInto('team_members')
        .values({
          team_id: manual.id,
          member_id: alice.id,
          role: 'viewer',
          source: 'admin',
          cap_micros: null,
          cap_period: null,
          created: 0,
        })
        .execute();

      provider.people.get('alice')!.groups = ['eng', 'eng-leads', 'ops'];
      const again = await signInAs('alice');
      assert.equal(refusal(again.landed), null);
      assert.equal((await sessionOf(again.client))?.id, alice.id, 'the same person, found by issuer and subject');
      assert.deepEqual(await teamsOf(alice.id), {
        Engineering: { role: 'owner', source: 'oidc' },
        Operations: { role: 'member', source: 'oidc' },
        Manual: { role: 'viewer', source: 'admin' },
      });
      const teams = await record
        .selectFrom('accounts')
        .select('name')
        .where('kind', '=', 'team')
        .where('name', '=', 'Engineering')
        .execute();
      assert.equal(teams.length, 1, 'a team is made once, on first mention');
    },
  );

  it('refuses a person in no group the gateway maps, and makes no account for them', async () => {
    const { client, landed } = await signInAs('mallory');
    assert.equal(refusal(landed), 'not_in_mapped_group');
    assert.equal(await sessionOf(client), null);
    assert.equal(
      await record.selectFrom('accounts').select('id').where('email', '=', 'mallory@oidc.test').executeTakeFirst(),
      undefined,
    );
  });

  it('makes a person in an admin group an admin, with no team needed', async () => {
    const { client, landed } = await signInAs('root');
    assert.equal(refusal(landed), null);
    assert.equal((await sessionOf(client))?.role, 'admin');
    // Out of the group, out of the role, at the next sign-in (and with no team, out altogether).
    provider.people.get('root')!.groups = ['eng'];
    const again = await signInAs('root');
    assert.equal((await sessionOf(again.client))?.role, 'member');
  });

  for (const tamper of ['forged', 'expired', 'wrong-nonce'] as const) {
    it(`refuses an ID token ${tamper === 'forged' ? 'signed by another key' : tamper === 'expired' ? 'past its expiry' : 'with another nonce'}`, async () => {
      provider.tamper = tamper;
      try {
        const { client, landed } = await signInAs('alice');
        assert.equal(refusal(landed), 'token_invalid');
        assert.equal(await sessionOf(client), null);
      } finally {
        provider.tamper = 'none';
      }
    });
  }

  it('refuses a callback with no state, a wrong one, one used already, or one another browser started', async () => {
    const client = browser();
    const callback = await callbackUrlFor('alice', client);
    const withState = (state: string | null) => {
      const url = new URL(callback);
      if (state === null) url.searchParams.delete('state');
      else url.searchParams.set('state', state);
      return url.href;
    };
    for (const bad of [withState(null), withState('a-state-nobody-made')]) {
      const { url } = await client.navigate(bad, onConsolePage);
      assert.equal(refusal(url), 'state_invalid', bad);
    }
    const good = await client.navigate(callback.href, onConsolePage);
    assert.equal(refusal(good.url), null, 'the right state still signs in after wrong ones');
    const reused = await browser().navigate(callback.href, onConsolePage);
    assert.equal(refusal(reused.url), 'state_invalid');
    const replayed = await client.navigate(callback.href, onConsolePage);
    assert.equal(refusal(replayed.url), 'state_invalid');

    // Another browser handed this browser's callback: the state is not bound to it.
    const victim = browser();
    const stolen = await callbackUrlFor('alice', victim);
    const attacker = browser();
    const { url } = await attacker.navigate(stolen.href, onConsolePage);
    assert.equal(refusal(url), 'state_invalid');
    assert.equal(await sessionOf(attacker), null);
  });

  it(
    'leaves a browser’s state to it when another browser calls back with it: refused, and the real callback still ' +
      'signs in',
    async () => {
      const victim = browser();
      const stolen = await callbackUrlFor('alice', victim);
      // A browser with no cookie of its own, then one with its own (an attempt it started, for someone else).
      const bare = browser();
      assert.equal(refusal((await bare.navigate(stolen.href, onConsolePage)).url), 'state_invalid');
      assert.equal(await sessionOf(bare), null);
      const attacker = browser();
      const own = await callbackUrlFor('mallory', attacker);
      assert.ok(attacker.cookies.get('sy_oidc'), 'the attacker has a cookie of its own');
      assert.notEqual(attacker.cookies.get('sy_oidc'), victim.cookies.get('sy_oidc'));
      assert.equal(refusal((await attacker.navigate(stolen.href, onConsolePage)).url), 'state_invalid');
      assert.equal(await sessionOf(attacker), null);
      // The victim's own callback, after both: the state was not used up.
      const real = await victim.navigate(stolen.href, onConsolePage);
      assert.equal(refusal(real.url), null, real.url.href);
      assert.equal((await sessionOf(victim))?.email, 'alice@oidc.test');
      // Used now, by its own browser: once only.
      assert.equal(refusal((await victim.navigate(stolen.href, onConsolePage)).url), 'state_invalid');
      // The attacker's own attempt was left alone too.
      assert.equal(refusal((await attacker.navigate(own.href, onConsolePage)).url), 'not_in_mapped_group');
    },
  );

  it('of a forged callback and the real one racing, the real one signs in', async () => {
    const victim = browser();
    const stolen = await callbackUrlFor('alice', victim);
    const forgers = Array.from({ length: 4 }, () => browser());
    // The forged callbacks sent first, the real one on their heels: none of them may use the state up.
    const forging = forgers.map((forger) => forger.navigate(stolen.href, onConsolePage));
    const [real, ...forged] = await Promise.all([victim.navigate(stolen.href, onConsolePage), ...forging]);
    assert.equal(refusal(real.url), null, real.url.href);
    assert.equal((await sessionOf(victim))?.email, 'alice@oidc.test');
    for (const one of forged) assert.equal(refusal(one.url), 'state_invalid');
  });

  it('links an account that has the email only when the provider says the email is verified', async () => {
    const made = await adminApi('POST', '/accounts', {
      email: 'carol@oidc.test',
      password: 'carol-password',
      role: 'member',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    provider.people.set('carol', { email: 'carol@oidc.test', email_verified: false, groups: ['eng'] });
    const unverified = await signInAs('carol');
    assert.equal(refusal(unverified.landed), 'email_taken');
    provider.people.get('carol')!.email_verified = true;
    const verified = await signInAs('carol');
    assert.equal((await sessionOf(verified.client))?.id, made.json.id);
  });

  it('under OIDC_ONLY refuses password sign-in and sign-up, but not the break-glass admin’s', async () => {
    const made = await adminApi('POST', '/accounts', {
      email: 'dave@oidc.test',
      password: 'dave-password',
      role: 'member',
    });
    assert.equal(made.status, 201);
    const member = browser();
    const refused = await member.signIn('dave@oidc.test', 'dave-password');
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error?.code, 'password_signin_disabled');
    const signup = await member.request('POST', '/console/api/signup', {
      email: 'eve@oidc.test',
      password: 'eve-password',
    });
    assert.equal(signup.status, 403);
    assert.equal(signup.json.error?.code, 'signup_disabled');
    const admin = browser();
    const allowed = await admin.signIn(adminEmail, adminPassword);
    assert.equal(allowed.status, 200, JSON.stringify(allowed.json));
    assert.equal((await sessionOf(admin))?.role, 'admin');
  });

  it('signs out: the session ends and the answer points at the provider’s end-session endpoint', async () => {
    const { client } = await signInAs('alice');
    // The console reads its session (and with it the session's CSRF token) once back from the provider.
    assert.equal((await sessionOf(client))?.email, 'alice@oidc.test');
    const res = await client.request<{ end_session_url: string | null }>('DELETE', '/console/api/session');
    assert.equal(res.status, 200);
    const end = new URL(res.json.end_session_url!);
    assert.equal(`${end.origin}${end.pathname}`, `${provider.issuer}/session/end`);
    assert.ok(end.searchParams.get('id_token_hint')?.split('.').length === 3);
    assert.equal(end.searchParams.get('post_logout_redirect_uri'), `${gateway.url}/console/`);
    assert.equal(await sessionOf(client), null);
    // A password session has no provider to sign out of.
    const admin = browser();
    await admin.signIn(adminEmail, adminPassword);
    assert.equal(
      (await admin.request<{ end_session_url: string | null }>('DELETE', '/console/api/session')).json.end_session_url,
      null,
    );
  });

  it('ends the session when the ID token expires', async () => {
    provider.idTokenSeconds = 2;
    try {
      const { client } = await signInAs('alice');
      const signedIn = await sessionOf(client);
      assert.equal(signedIn?.email, 'alice@oidc.test');
      const exp = await redis.keys('*session:*');
      const ends = (await Promise.all(exp.map((key) => redis.hget(key, 'ends')))).map(Number).filter(Boolean);
      assert.ok(
        ends.some((at) => at <= Date.now() + 2000),
        `a session ending with its token: ${ends.join(', ')}`,
      );
      await new Promise((resolve) =>
        setTimeout(resolve, Math.max(0, Math.max(...ends.filter((at) => at <= Date.now() + 2000)) - Date.now()) + 100),
      );
      assert.equal(await sessionOf(client), null);
    } finally {
      provider.idTokenSeconds = 3600;
    }
  });

  it('refuses the sign-in when the provider stops answering at the code exchange', async () => {
    const client = browser();
    const callback = await callbackUrlFor('alice', client);
    provider.hang = true;
    try {
      const { url } = await client.navigate(callback.href, onConsolePage);
      assert.equal(refusal(url), 'provider_unreachable');
      assert.equal(await sessionOf(client), null);
    } finally {
      provider.hang = false;
    }
  });

  // ---- the audit log: what a sign-in through the provider records ----

  type Row = Selectable<AuditLogTable>;

  /** The audit log's newest id: the rows a step writes are those after it. */
  const auditHead = async () =>
    Number(
      (
        await record
          .selectFrom('audit_log')
          .select((eb) => eb.fn.max('id').as('id'))
          .executeTakeFirst()
      )?.id ?? 0,
    );
  const rowsAfter = (head: number): Promise<Row[]> =>
    record.selectFrom('audit_log').selectAll().where('id', '>', head).orderBy('id').execute();
  const only = (rows: Row[], action: string): Row => {
    const found = rows.filter((row) => row.action === action);
    assert.equal(found.length, 1, `one ${action} row: ${JSON.stringify(rows.map((row) => row.action))}`);
    return found[0]!;
  };

  /** Who, when and from where: the browser's address and user agent, whoever the actor. */
  function assertFrom(row: Row, client: ConsoleClient, actor: string, actorEmail: string | null, since: number): void {
    assert.equal(row.actor, actor);
    assert.equal(row.actor_email, actorEmail);
    assert.equal(row.ip, client.forwardedFor);
    assert.equal(row.user_agent, userAgent);
    assert.ok(Number(row.time) >= since && Number(row.time) <= Date.now(), `time ${row.time}`);
  }

  /** A team's rows in the console: its owner reads this one as the record holds it; someone else is refused. */
  async function assertReadByOwnerOnly(row: Row, owner: ConsoleClient, other: ConsoleClient): Promise<void> {
    const read = await owner.request<{ data: AuditRow[] }>(
      'GET',
      `/console/api/audit?team=${row.team_id}&action=${row.action}&limit=100`,
    );
    assert.equal(read.status, 200, JSON.stringify(read.json));
    const seen = read.json.data.find((r) => r.id === Number(row.id));
    assert.ok(seen, `the owner reads row ${row.id}`);
    assert.deepEqual(
      [seen.actor, seen.target, seen.before, seen.after, seen.hash],
      [row.actor, row.target, row.before, row.after, row.hash],
    );
    const refused = await other.request('GET', `/console/api/audit?team=${row.team_id}&action=${row.action}`);
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error?.code, 'audit_forbidden');
  }

  const researchTeam = async () =>
    (
      await record
        .selectFrom('accounts')
        .select('id')
        .where('kind', '=', 'team')
        .where('name', '=', 'Research')
        .executeTakeFirstOrThrow()
    ).id;

  it('records a sign-in through the provider as the person, and the account it made as the gateway’s', async () => {
    provider.people.set('olga', { email: 'olga@oidc.test', name: 'Olga', groups: ['eng'] });
    const head = await auditHead();
    const since = Date.now();
    const { client, landed } = await signInAs('olga');
    assert.equal(refusal(landed), null);
    const olga = (await sessionOf(client))!;
    const rows = await rowsAfter(head);
    const made = only(rows, 'account.created');
    assertFrom(made, client, 'system', null, since);
    assert.equal(made.team_id, olga.id);
    assert.equal(made.target, olga.id);
    assert.equal(made.before, null);
    assert.deepEqual(
      [
        (made.after as Record<string, unknown>).email,
        (made.after as Record<string, unknown>).role,
        (made.after as Record<string, unknown>).via,
      ],
      ['olga@oidc.test', 'member', 'oidc'],
    );
    const signedIn = only(rows, 'signin.succeeded');
    assertFrom(signedIn, client, olga.id, 'olga@oidc.test', since);
    assert.equal(signedIn.team_id, olga.id);
    assert.equal(signedIn.target, olga.id);
    assert.equal(signedIn.before, null);
    assert.deepEqual(signedIn.after, { method: 'oidc', issuer: provider.issuer, subject: 'olga' });
    assert.ok(Number(made.id) < Number(signedIn.id), 'the account is made before the sign-in it ends in');
    await assertReadByOwnerOnly(signedIn, client, (await signInAs('alice')).client);

    // Signed in again: a sign-in row, and no second account.
    const again = await auditHead();
    const second = await signInAs('olga');
    assert.deepEqual(
      (await rowsAfter(again)).map((row) => row.action),
      ['signin.succeeded'],
    );
    assert.equal((await rowsAfter(again))[0]!.ip, second.client.forwardedFor);
  });

  it(
    'records a sign-in the gateway refused after the provider answered, as anonymous with the reason; a callback ' +
      'with no valid state is not recorded',
    async () => {
      const head = await auditHead();
      const since = Date.now();
      const { client, landed } = await signInAs('mallory');
      assert.equal(refusal(landed), 'not_in_mapped_group');
      const rows = await rowsAfter(head);
      assert.deepEqual(
        rows.map((row) => row.action),
        ['signin.failed'],
      );
      const failed = rows[0]!;
      assertFrom(failed, client, 'anonymous', null, since);
      assert.equal(failed.team_id, null);
      assert.equal(failed.target, null);
      assert.equal(failed.before, null);
      assert.deepEqual(failed.after, {
        method: 'oidc',
        issuer: provider.issuer,
        reason: 'not_in_mapped_group',
        detail: 'groups: marketing',
      });
      // No team's: an admin reads it, a person does not see it among their own rows.
      const admin = browser();
      assert.equal((await admin.signIn(adminEmail, adminPassword)).status, 200);
      const read = await admin.request<{ data: AuditRow[] }>(
        'GET',
        '/console/api/audit?action=signin.failed&limit=100',
      );
      assert.ok(read.json.data.some((row) => row.id === Number(failed.id)));
      const alice = (await signInAs('alice')).client;
      const mine = await alice.request<{ data: AuditRow[] }>(
        'GET',
        '/console/api/audit?action=signin.failed&limit=100',
      );
      assert.equal(mine.status, 200);
      assert.ok(!mine.json.data.some((row) => row.id === Number(failed.id)));

      // A callback with no state, or one nobody started: refused, logged, never a row (anyone may call that URL).
      const quiet = await auditHead();
      const other = browser();
      const callback = await callbackUrlFor('alice', other);
      for (const state of [null, 'a-state-nobody-made']) {
        const url = new URL(callback);
        if (state === null) url.searchParams.delete('state');
        else url.searchParams.set('state', state);
        assert.equal(refusal((await other.navigate(url.href, onConsolePage)).url), 'state_invalid');
      }
      assert.deepEqual(await rowsAfter(quiet), []);
    },
  );

  it('records a password sign-in refused under OIDC_ONLY, with the email tried and never the password', async () => {
    assert.equal(
      (await adminApi('POST', '/accounts', { email: 'fay@oidc.test', password: 'fay-password-1', role: 'member' }))
        .status,
      201,
    );
    const head = await auditHead();
    const since = Date.now();
    const client = browser();
    const refused = await client.signIn('fay@oidc.test', 'fay-password-1');
    assert.equal(refused.status, 403);
    const rows = await rowsAfter(head);
    assert.deepEqual(
      rows.map((row) => row.action),
      ['signin.failed'],
    );
    const failed = rows[0]!;
    assertFrom(failed, client, 'anonymous', 'fay@oidc.test', since);
    assert.equal(failed.team_id, null);
    assert.equal(failed.target, null);
    assert.deepEqual(failed.after, { method: 'password', reason: 'password_signin_disabled' });
    assert.doesNotMatch(JSON.stringify(failed), /fay-password-1/);
  });

  it('records a team a sign-in’s groups name first, made by the gateway, once', async () => {
    provider.people.set('rita', { email: 'rita@oidc.test', name: 'Rita', groups: ['research-leads'] });
    provider.people.set('ravi', { email: 'ravi@oidc.test', name: 'Ravi', groups: ['research'] });
    const head = await auditHead();
    const since = Date.now();
    const rita = await signInAs('rita');
    assert.equal(refusal(rita.landed), null);
    const team = await researchTeam();
    const made = only(await rowsAfter(head), 'team.created');
    assertFrom(made, rita.client, 'system', null, since);
    assert.equal(made.team_id, team);
    assert.equal(made.target, team);
    assert.equal(made.before, null);
    assert.deepEqual(made.after, { name: 'Research', via: 'oidc' });
    // Named again by another sign-in: the same team, no second row.
    const ravi = await signInAs('ravi');
    assert.equal(refusal(ravi.landed), null);
    assert.equal((await rowsAfter(head)).filter((row) => row.action === 'team.created').length, 1);
    // Rita owns it by her group: she reads its rows; Ravi, a member, does not.
    await assertReadByOwnerOnly(made, rita.client, ravi.client);
  });

  /** Nina signed in with these groups: the Research rows that sign-in wrote, and her browser. */
  async function ninaSignsIn(
    groups: string[],
  ): Promise<{ rows: Row[]; client: ConsoleClient; since: number; id: string }> {
    provider.people.set('nina', { email: 'nina@oidc.test', name: 'Nina', groups });
    const head = await auditHead();
    const since = Date.now();
    const { client, landed } = await signInAs('nina');
    assert.equal(refusal(landed), null);
    const team = await researchTeam();
    return {
      rows: (await rowsAfter(head)).filter((row) => row.team_id === team),
      client,
      since,
      id: (await sessionOf(client))!.id,
    };
  }
  const rita = async () => (await signInAs('rita')).client;
  const ravi = async () => (await signInAs('ravi')).client;

  it('records a member the groups add to a team, as the gateway’s, with the role and source', async () => {
    const nina = await ninaSignsIn(['research']);
    const added = only(nina.rows, 'team.member_added');
    assertFrom(added, nina.client, 'system', null, nina.since);
    assert.equal(added.target, nina.id);
    assert.equal(added.before, null);
    assert.deepEqual(added.after, { role: 'member', source: 'oidc' });
    await assertReadByOwnerOnly(added, await rita(), await ravi());
  });

  it('records a member’s role the groups change, before and after; a sign-in with the same groups changes nothing', async () => {
    const nina = await ninaSignsIn(['research-leads']);
    const updated = only(nina.rows, 'team.member_updated');
    assertFrom(updated, nina.client, 'system', null, nina.since);
    assert.equal(updated.target, nina.id);
    assert.deepEqual(updated.before, { role: 'member' });
    assert.deepEqual(updated.after, { role: 'owner' });
    await assertReadByOwnerOnly(updated, await rita(), await ravi());
    assert.deepEqual((await ninaSignsIn(['research-leads'])).rows, []);
  });

  it('records a member the groups take out of a team, with the role they had', async () => {
    const nina = await ninaSignsIn(['eng']);
    const removed = only(nina.rows, 'team.member_removed');
    assertFrom(removed, nina.client, 'system', null, nina.since);
    assert.equal(removed.target, nina.id);
    assert.deepEqual(removed.before, { role: 'owner', source: 'oidc' });
    assert.equal(removed.after, null);
    await assertReadByOwnerOnly(removed, await rita(), await ravi());
    assert.deepEqual(await teamsOf(nina.id), { Engineering: { role: 'member', source: 'oidc' } });
  });

  it('records a role OIDC_ADMIN_GROUPS changes at sign-in as an account change by the gateway', async () => {
    provider.people.set('una', { email: 'una@oidc.test', name: 'Una', groups: ['gateway-admins'] });
    const first = await signInAs('una');
    const una = (await sessionOf(first.client))!;
    assert.equal(una.role, 'admin');
    const made = await record
      .selectFrom('audit_log')
      .select('after')
      .where('action', '=', 'account.created')
      .where('target', '=', una.id)
      .executeTakeFirstOrThrow();
    assert.equal((made.after as Record<string, unknown>).role, 'admin');

    // Out of the admin group: a member at this sign-in, and the change recorded.
    provider.people.get('una')!.groups = ['eng'];
    const head = await auditHead();
    const since = Date.now();
    const again = await signInAs('una');
    assert.equal((await sessionOf(again.client))?.role, 'member');
    const updated = only(await rowsAfter(head), 'account.updated');
    assertFrom(updated, again.client, 'system', null, since);
    assert.equal(updated.team_id, una.id);
    assert.equal(updated.target, una.id);
    assert.deepEqual(updated.before, { role: 'admin' });
    assert.deepEqual(updated.after, { role: 'member' });
    await assertReadByOwnerOnly(updated, again.client, (await signInAs('alice')).client);

    // The same groups again: nothing changed, no account row.
    const quiet = await auditHead();
    await signInAs('una');
    assert.deepEqual(
      (await rowsAfter(quiet)).map((row) => row.action),
      ['signin.succeeded'],
    );
  });

  it('answers 500 audit_not_recorded when the team a sign-in made could not be recorded, and signs nobody in', async () => {
    provider.people.set('zed', { email: 'zed@oidc.test', name: 'Zed', groups: ['audit'] });
    const url = await recordUrlFor(redis);
    // The record itself refuses the row (a real trigger, as a full disk or a lost connection would refuse it).
    await onDatabase(url, (db) =>
      db.query(`create function refuse_team_created() returns trigger language plpgsql as $$ begin
        if new.action = 'team.created' then raise exception 'team.created refused by the test'; end if; return new; end $$;
        create trigger refuse_team_created before insert on audit_log for each row execute function refuse_team_created()`),
    );
    try {
      const client = browser();
      const callback = await callbackUrlFor('zed', client);
      const res = await fetch(callback, {
        redirect: 'manual',
        headers: {
          cookie: [...client.cookies].map(([n, v]) => `${n}=${v}`).join('; '),
          'x-forwarded-for': client.forwardedFor!,
        },
      });
      assert.equal(res.status, 500);
      const body = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, 'audit_not_recorded');
      assert.match(body.error.message, /team\.created/);
      assert.equal(await sessionOf(client), null);
    } finally {
      await onDatabase(url, (db) =>
        db.query('drop trigger refuse_team_created on audit_log; drop function refuse_team_created()'),
      );
    }
    // The team was made (the change comes first, as everywhere): the next sign-in finds it and goes through.
    const again = await signInAs('zed');
    assert.equal(refusal(again.landed), null);
    assert.deepEqual(await teamsOf((await sessionOf(again.client))!.id), {
      Audited: { role: 'member', source: 'oidc' },
    });
  });

  it('verifies the chain every sign-in above appended to', async () => {
    const verdict = await verifyAudit(record);
    assert.equal(verdict.intact, true, JSON.stringify(verdict.broken));
    assert.ok(verdict.rows > 0);
  });
});
