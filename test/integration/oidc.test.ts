import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type { RecordDb } from '../../storage/record/database.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { testRecord } from '../support/record.js';
import { ConsoleClient } from '../support/console-client.js';
import { startTestProvider, testClientId, testClientSecret, type TestProvider } from '../support/oidc-provider.js';

const adminEmail = 'break-glass@oidc.test';
const adminPassword = 'break-glass-password';
const adminToken = 'oidc-admin-token';
const callbackPath = '/console/api/oidc/callback';

// Sign-in through a real OpenID Connect provider (oidc-provider in this process) against a real gateway process.
describe('console sign-in through an OpenID Connect provider', () => {
  let redis: Redis;
  let record: RecordDb;
  let provider: TestProvider;
  let gateway: GatewayProcess;
  let addressCounter = 0;
  const browser = () => new ConsoleClient(gateway.url, `198.51.100.${++addressCounter}`);

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
    const res = await client.request<{ account: { id: string; email: string; role: string } | null }>('GET', '/console/api/session');
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

  async function adminApi(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
    const res = await fetch(`${gateway.url}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  }

  /** Runs the sign-in up to the provider's redirect back to the gateway, and returns that callback URL, not yet called. */
  async function callbackUrlFor(subject: string, client: ConsoleClient): Promise<URL> {
    provider.nextLogin = subject;
    const { url } = await client.navigate(`${gateway.url}/console/api/oidc/login`, (next) => next.origin === gateway.url && next.pathname === callbackPath);
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
        OIDC_TEAM_MAP: 'eng=Engineering:member,eng-leads=Engineering:owner,finance=Finance:viewer,ops=Operations:member',
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
    await provider.register({ redirectUri: `${gateway.url}${callbackPath}`, postLogoutRedirectUri: `${gateway.url}/console/` });
  });

  it('tells the console that sign-in through the provider is on and passwords are for break-glass admins only', async () => {
    const res = await browser().request<{ sso: { on: boolean; label: string }; password_signin: boolean; signup: boolean }>('GET', '/console/api/config');
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
    const row = await record.selectFrom('accounts').select(['kind', 'oidc_issuer', 'oidc_subject', 'password', 'name']).where('id', '=', account!.id).executeTakeFirstOrThrow();
    assert.deepEqual(row, { kind: 'person', oidc_issuer: provider.issuer, oidc_subject: 'alice', password: '', name: 'Alice' });
    assert.deepEqual(await teamsOf(account!.id), { Engineering: { role: 'member', source: 'oidc' }, Finance: { role: 'viewer', source: 'oidc' } });
  });

  it('follows the groups at every sign-in: a group added adds its team, one removed removes its membership, others’ rows stay', async () => {
    const first = await signInAs('alice');
    const alice = (await sessionOf(first.client))!;
    // A membership an admin gave by hand, in a team no group maps: never the provider's to remove.
    const manual = await record.insertInto('accounts').values({ id: 'acct_manual_team', kind: 'team', email: '', name: 'Manual', role: 'member', created: 0, password: '', unlimited: false, disabled: false, deleted: false, credits_micros: 0, settled_micros: 0, playground_key: null }).returning('id').executeTakeFirstOrThrow();
    await record.insertInto('team_members').values({ team_id: manual.id, member_id: alice.id, role: 'viewer', source: 'admin', cap_micros: null, cap_period: null, created: 0 }).execute();

    provider.people.get('alice')!.groups = ['eng', 'eng-leads', 'ops'];
    const again = await signInAs('alice');
    assert.equal(refusal(again.landed), null);
    assert.equal((await sessionOf(again.client))?.id, alice.id, 'the same person, found by issuer and subject');
    assert.deepEqual(await teamsOf(alice.id), {
      Engineering: { role: 'owner', source: 'oidc' },
      Operations: { role: 'member', source: 'oidc' },
      Manual: { role: 'viewer', source: 'admin' },
    });
    const teams = await record.selectFrom('accounts').select('name').where('kind', '=', 'team').where('name', '=', 'Engineering').execute();
    assert.equal(teams.length, 1, 'a team is made once, on first mention');
  });

  it('refuses a person in no group the gateway maps, and makes no account for them', async () => {
    const { client, landed } = await signInAs('mallory');
    assert.equal(refusal(landed), 'not_in_mapped_group');
    assert.equal(await sessionOf(client), null);
    assert.equal(await record.selectFrom('accounts').select('id').where('email', '=', 'mallory@oidc.test').executeTakeFirst(), undefined);
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

  it('links an account that has the email only when the provider says the email is verified', async () => {
    const made = await adminApi('POST', '/accounts', { email: 'carol@oidc.test', password: 'carol-password', role: 'member' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    provider.people.set('carol', { email: 'carol@oidc.test', email_verified: false, groups: ['eng'] });
    const unverified = await signInAs('carol');
    assert.equal(refusal(unverified.landed), 'email_taken');
    provider.people.get('carol')!.email_verified = true;
    const verified = await signInAs('carol');
    assert.equal((await sessionOf(verified.client))?.id, made.json.id);
  });

  it('under OIDC_ONLY refuses password sign-in and sign-up, but not the break-glass admin’s', async () => {
    const made = await adminApi('POST', '/accounts', { email: 'dave@oidc.test', password: 'dave-password', role: 'member' });
    assert.equal(made.status, 201);
    const member = browser();
    const refused = await member.signIn('dave@oidc.test', 'dave-password');
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error?.code, 'password_signin_disabled');
    const signup = await member.request('POST', '/console/api/signup', { email: 'eve@oidc.test', password: 'eve-password' });
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
    assert.equal((await admin.request<{ end_session_url: string | null }>('DELETE', '/console/api/session')).json.end_session_url, null);
  });

  it('ends the session when the ID token expires', async () => {
    provider.idTokenSeconds = 2;
    try {
      const { client } = await signInAs('alice');
      const signedIn = await sessionOf(client);
      assert.equal(signedIn?.email, 'alice@oidc.test');
      const exp = await redis.keys('*session:*');
      const ends = (await Promise.all(exp.map((key) => redis.hget(key, 'ends')))).map(Number).filter(Boolean);
      assert.ok(ends.some((at) => at <= Date.now() + 2000), `a session ending with its token: ${ends.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, Math.max(...ends.filter((at) => at <= Date.now() + 2000)) - Date.now()) + 100));
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
});
