import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { Queue } from 'bullmq';
import { shardQueueName } from '../../shared/queues.js';
import { accountSessionsKey, sessionKey } from '../../shared/redis-keys.js';
import { createBatch, newBatchId, recordBatchResult } from '../../shared/batches/index.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { recordUrlFor } from '../support/record.js';
import { ConsoleClient, type ConsoleResponse } from '../support/console-client.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const adminEmail = 'root@console.test';
const adminPassword = 'root-password-1';
const adminToken = 'console-api-admin-token';

type Json = Record<string, unknown>;
type Key = {
  id: string;
  name: string;
  hint: string;
  key?: string;
  account_id: string;
  rpm: number | null;
  cache_ttl_s: number | null;
  spent_usd: number;
  admin_limits?: Json;
};
type Account = {
  id: string;
  email: string;
  role: string;
  balance_usd: number | null;
  disabled: boolean;
  cache_max_ttl_s: number | null;
};

function expectError(res: ConsoleResponse, status: number, code: string): void {
  assert.equal(res.status, status, JSON.stringify(res.json));
  assert.equal(res.json.error?.code, code, JSON.stringify(res.json));
  assert.equal(typeof res.json.error?.message, 'string');
  assert.ok('param' in res.json.error! && 'type' in res.json.error!);
}

// The console's JSON API against real gateway processes: sessions, CSRF, throttling, keys, usage, pricing, playground,
// admin.
describe('console API', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  /** A second api with the defaults: sign-up closed; and private pricing. */
  let closed: GatewayProcess;
  let addressCounter = 0;
  /** Each client its own forwarded address, so the per-address throttle of one test does not lock out another. */
  const client = (target: GatewayProcess = gateway) => new ConsoleClient(target.url, `203.0.113.${++addressCounter}`);

  let admin: ConsoleClient;

  async function member(
    email: string,
    password = 'member-password',
    credit = 0,
  ): Promise<{ console: ConsoleClient; account: Account }> {
    const made = await admin.request<Account>('POST', '/console/api/admin/accounts', {
      email,
      password,
      role: 'member',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    if (credit)
      assert.equal(
        (await admin.request('POST', `/console/api/admin/accounts/${made.json.id}/credits`, { amount_usd: credit }))
          .status,
        200,
      );
    const console = client();
    assert.equal((await console.signIn(email, password)).status, 200);
    return { console, account: made.json };
  }

  before(async () => {
    let url: string;
    ({ redis, url } = await freshRedis(9));
    redisUrl = url;
    const common = { REDIS_URL: url, TRUST_PROXY: 'on', KEY_CACHE_TTL_MS: '60000', ADMIN_TOKEN: adminToken };
    gateway = await startGateway({
      env: {
        ...common,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        CONSOLE_SIGNUP: 'open',
        SIGNUP_CREDIT_USD: '2.5',
      },
    });
    closed = await startGateway({ role: 'api', env: { ...common, CONSOLE_PUBLIC_PRICING: 'off' } });
    admin = client();
    const signedIn = await admin.signIn(adminEmail, adminPassword);
    assert.equal(signedIn.status, 200, JSON.stringify(signedIn.json));
  });

  after(async () => {
    await Promise.all([gateway?.stop(), closed?.stop()]);
    redis?.disconnect();
  });

  describe('sessions', () => {
    it('signs in the admin made from ADMIN_EMAIL with an HttpOnly, SameSite=Lax session cookie scoped to /console', async () => {
      const console = client();
      await console.open();
      const res = await console.signIn(adminEmail.toUpperCase(), adminPassword);
      assert.equal(res.status, 200);
      assert.equal((res.json.account as Account).role, 'admin');
      const cookie = res.setCookies.find((line) => line.startsWith('sy_session='));
      assert.ok(cookie, res.setCookies.join('\n'));
      assert.match(cookie, /httponly/i);
      assert.match(cookie, /samesite=lax/i);
      assert.match(cookie, /path=\/console/i);
      // Plain HTTP: a Secure cookie would never be sent back.
      assert.doesNotMatch(cookie, /;\s*secure/i);
      const session = await console.request('GET', '/console/api/session');
      assert.equal((session.json.account as Account).email, adminEmail);
      assert.equal(session.json.csrf_token, res.json.csrf_token);
    });

    it('marks the cookie Secure behind a TLS proxy (TRUST_PROXY and X-Forwarded-Proto: https)', async () => {
      const console = client();
      await console.request('GET', '/console/api/session', undefined, { headers: { 'x-forwarded-proto': 'https' } });
      const res = await console.request(
        'POST',
        '/console/api/session',
        { email: adminEmail, password: adminPassword },
        { headers: { 'x-forwarded-proto': 'https' } },
      );
      assert.equal(res.status, 200);
      assert.match(
        res.setCookies.find((line) => line.startsWith('sy_session='))!,
        /;\s*secure/i,
      );
    });

    it('answers a wrong password and an unknown email alike, with 401 invalid_credentials', async () => {
      const console = client();
      expectError(await console.signIn(adminEmail, 'not-the-password'), 401, 'invalid_credentials');
      const unknown = await console.signIn('nobody@console.test', 'whatever-password');
      expectError(unknown, 401, 'invalid_credentials');
      assert.equal(unknown.json.error!.message, 'Incorrect email or password.');
    });

    it('signing out ends the session on the server: the old cookie no longer works anywhere', async () => {
      const console = client();
      await console.signIn(adminEmail, adminPassword);
      const stolen = console.cookies.get('sy_session')!;
      assert.equal((await console.request('DELETE', '/console/api/session')).status, 200);
      for (const target of [gateway, closed]) {
        const replay = await fetch(`${target.url}/console/api/keys`, { headers: { cookie: `sy_session=${stolen}` } });
        assert.equal(replay.status, 401);
        assert.equal(((await replay.json()) as { error: { code: string } }).error.code, 'not_signed_in');
      }
    });

    it('keeps sessions with an idle expiry in Redis and ends one past its absolute expiry', async () => {
      const console = client();
      await console.signIn(adminEmail, adminPassword);
      const { createHash } = await import('node:crypto');
      const hash = createHash('sha256').update(console.cookies.get('sy_session')!).digest('hex');
      const ttl = await redis.ttl(sessionKey(hash));
      assert.ok(ttl > 86_000 && ttl <= 86_400, `idle TTL ${ttl}`);
      const accountId = ((await console.request('GET', '/console/api/session')).json.account as Account).id;
      assert.equal(await redis.sismember(accountSessionsKey(accountId), hash), 1);
      // Signed in eight days ago: past the 7-day maximum, however recently used.
      await redis.hset(sessionKey(hash), 'created', String(Date.now() - 8 * 86_400_000));
      expectError(await console.request('GET', '/console/api/keys'), 401, 'not_signed_in');
      assert.equal(await redis.exists(sessionKey(hash)), 0);
    });
  });

  describe('CSRF', () => {
    it('refuses every state-changing call without the token, with another token, or from another origin', async () => {
      const { console } = await member('csrf@console.test');
      const created = await console.request<Key>('POST', '/console/api/keys', { name: 'mine' });
      assert.equal(created.status, 201);
      const id = created.json.id;
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x' }, { csrf: false }),
        403,
        'csrf_failed',
      );
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x' }, { csrf: 'A'.repeat(43) }),
        403,
        'csrf_failed',
      );
      expectError(
        await console.request('PATCH', `/console/api/keys/${id}`, { rpm: 5 }, { csrf: false }),
        403,
        'csrf_failed',
      );
      expectError(
        await console.request('DELETE', `/console/api/keys/${id}`, undefined, { csrf: false }),
        403,
        'csrf_failed',
      );
      expectError(
        await console.request('DELETE', '/console/api/session', undefined, { csrf: false }),
        403,
        'csrf_failed',
      );
      expectError(
        await console.request(
          'POST',
          '/console/api/playground/chat/completions',
          { model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }] },
          { csrf: false },
        ),
        403,
        'csrf_failed',
      );
      // The right token, sent from a page of another site (a browser sets Origin on a cross-site POST).
      expectError(
        await console.request(
          'POST',
          '/console/api/keys',
          { name: 'x' },
          { headers: { origin: 'https://evil.example' } },
        ),
        403,
        'csrf_failed',
      );
      // Another browser's pre-session token is no good for this one.
      const other = client();
      await other.open();
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x' }, { csrf: other.csrf }),
        403,
        'csrf_failed',
      );
      assert.equal(
        (await console.request<{ data: Key[] }>('GET', '/console/api/keys')).json.data.length,
        1,
        'nothing refused was made',
      );
    });

    it('rotates the pre-session token at sign-in: it is refused afterwards, and sign-out hands out a new one', async () => {
      const { console } = await member('rotate@console.test');
      const before = client();
      await before.open();
      const preSession = before.csrf;
      const signedIn = await before.signIn('rotate@console.test', 'member-password');
      assert.equal(signedIn.status, 200);
      assert.notEqual(before.csrf, preSession, 'the session has its own token');
      assert.ok(
        signedIn.setCookies.some((line) => /^sy_csrf=;/.test(line) && /max-age=0|expires=Thu, 01 Jan 1970/i.test(line)),
        'the pre-session cookie is cleared',
      );
      // Even with the old cookie still sent beside the session (a browser that kept it), the old token is refused.
      before.cookies.set('sy_csrf', preSession);
      expectError(
        await before.request('POST', '/console/api/keys', { name: 'x' }, { csrf: preSession }),
        403,
        'csrf_failed',
      );
      assert.equal((await before.request('POST', '/console/api/keys', { name: 'ok' })).status, 201);
      const signedOut = await before.request<{ csrf_token: string }>('DELETE', '/console/api/session');
      assert.equal(signedOut.status, 200);
      assert.notEqual(signedOut.json.csrf_token, preSession);
      assert.equal((await console.request('GET', '/console/api/keys')).status, 200);
    });

    it('refuses a sign-in without the pre-session token (login CSRF)', async () => {
      const console = client();
      expectError(
        await console.request(
          'POST',
          '/console/api/session',
          { email: adminEmail, password: adminPassword },
          { csrf: false },
        ),
        403,
        'csrf_failed',
      );
      assert.equal(console.cookies.has('sy_session'), false);
    });
  });

  describe('sign-in throttling', () => {
    it('locks an email after 5 failures, even for the right password, with retry-after', async () => {
      await member('throttled@console.test', 'throttled-password');
      const console = client();
      for (let i = 0; i < 5; i++)
        expectError(await console.signIn('throttled@console.test', `wrong-${i}-password`), 401, 'invalid_credentials');
      const locked = await console.signIn('Throttled@console.test', 'throttled-password');
      expectError(locked, 429, 'rate_limit_exceeded');
      const retryAfter = Number(locked.headers.get('retry-after'));
      assert.ok(retryAfter > 800 && retryAfter <= 900, `retry-after ${retryAfter}`);
      // The lock is per email: from another address the same email is still locked; other emails are not.
      expectError(await client().signIn('throttled@console.test', 'throttled-password'), 429, 'rate_limit_exceeded');
      assert.equal((await client().signIn(adminEmail, adminPassword)).status, 200);
    });

    it(
      'holds against a burst: 100 concurrent tries for one email over two apis run at most 5 wrong password ' +
        'checks, and the right one is locked out after',
      async () => {
        await member('burst@console.test', 'burst-password');
        const tries = Array.from({ length: 100 }, (_, i) => client(i % 2 === 0 ? gateway : closed));
        await Promise.all(tries.map((console) => console.open()));
        const answers = await Promise.all(
          tries.map((console, i) =>
            console.signIn('burst@console.test', i === 50 ? 'burst-password' : `wrong-${i}-password`),
          ),
        );
        const statuses = answers.map((answer) => answer.status);
        // A right password among the first five gives its place back, so one more guess may run: never more than 5 wrong
        // ones.
        const wrong = statuses.filter((status) => status === 401).length;
        assert.ok(wrong <= 5, `wrong passwords checked: ${wrong} (${JSON.stringify(statuses)})`);
        assert.ok(statuses.filter((status) => status !== 429).length <= 6, JSON.stringify(statuses));
        assert.ok(
          statuses.every((status) => status === 401 || status === 429 || status === 200),
          JSON.stringify(statuses),
        );
        for (const answer of answers) if (answer.status === 429) expectError(answer, 429, 'rate_limit_exceeded');
        // Whether or not the right password drew a place, five wrong ones did: it is locked out now.
        expectError(await client().signIn('burst@console.test', 'burst-password'), 429, 'rate_limit_exceeded');
      },
    );

    it('holds against a burst from one address across 100 emails: at most 20 checks', async () => {
      const address = `198.51.100.${++addressCounter % 250}`;
      const tries = Array.from(
        { length: 100 },
        (_, i) => new ConsoleClient((i % 2 === 0 ? gateway : closed).url, address),
      );
      await Promise.all(tries.map((console) => console.open()));
      const answers = await Promise.all(
        tries.map((console, i) => console.signIn(`burst-spray-${i}@console.test`, 'spray-password')),
      );
      const checked = answers.filter((answer) => answer.status !== 429).length;
      assert.ok(checked <= 20, `password checks run: ${checked}`);
      assert.ok(checked >= 1, 'some ran');
    });

    it('locks an address after 20 failures across emails', async () => {
      const console = client();
      for (let i = 0; i < 20; i++)
        expectError(await console.signIn(`spray-${i}@console.test`, 'spray-password'), 401, 'invalid_credentials');
      expectError(await console.signIn(adminEmail, adminPassword), 429, 'rate_limit_exceeded');
      // Counted in Redis: the other api instance refuses that address too.
      const elsewhere = new ConsoleClient(closed.url, console.forwardedFor);
      expectError(await elsewhere.signIn(adminEmail, adminPassword), 429, 'rate_limit_exceeded');
    });
  });

  it("tells the console the gateway's own base URL for its snippets", async () => {
    const config = await client().request<{
      base_url: string;
      signup: boolean;
      public_pricing: boolean;
      has_admin: boolean;
    }>('GET', '/console/api/config');
    assert.deepEqual([config.json.base_url, config.json.signup, config.json.public_pricing], [gateway.url, true, true]);
    // An admin can sign in (ADMIN_EMAIL made one): only that yes or no, never who.
    assert.equal(config.json.has_admin, true);
    assert.ok(!JSON.stringify(config.json).includes(adminEmail));
  });

  describe('sign-up', () => {
    it('is closed by default and opens with CONSOLE_SIGNUP=open, crediting SIGNUP_CREDIT_USD', async () => {
      const shut = client(closed);
      await shut.open();
      expectError(
        await shut.request('POST', '/console/api/signup', { email: 'new@console.test', password: 'new-password' }),
        403,
        'signup_disabled',
      );
      const open = client();
      await open.open();
      const made = await open.request('POST', '/console/api/signup', {
        email: 'new@console.test',
        password: 'new-password',
        name: 'New',
      });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      assert.deepEqual(
        [(made.json.account as Account).role, (made.json.account as Account).balance_usd],
        ['member', 2.5],
      );
      expectError(
        await client().request(
          'POST',
          '/console/api/signup',
          { email: 'NEW@console.test', password: 'new-password' },
          { csrf: false },
        ),
        403,
        'csrf_failed',
      );
      const again = client();
      await again.open();
      expectError(
        await again.request('POST', '/console/api/signup', { email: 'NEW@console.test', password: 'new-password' }),
        409,
        'account_exists',
      );
      expectError(
        await again.request('POST', '/console/api/signup', { email: 'short@console.test', password: 'short' }),
        400,
        'invalid_value',
      );
      // Sign-ups count per address only: six people from six addresses all get in (no shared counter locks sign-up for
      // everyone).
      for (let i = 0; i < 6; i++) {
        const person = client();
        await person.open();
        const res = await person.request('POST', '/console/api/signup', {
          email: `person-${i}@console.test`,
          password: 'person-password',
        });
        assert.equal(res.status, 201, JSON.stringify(res.json));
      }
    });
  });

  describe('keys', () => {
    it(
      'creates a key shown once, which works with the openai client, and revoking it is refused by every api ' +
        'within 1 s',
      async () => {
        const { console } = await member('keys@console.test', 'keys-password', 1);
        const created = await console.request<Key>('POST', '/console/api/keys', {
          name: 'laptop',
          rpm: 600,
          models: ['mock-chat'],
        });
        assert.equal(created.status, 201);
        assert.match(created.json.key!, /^sy-/);
        assert.equal(created.headers.get('cache-control'), 'no-store');
        const listed = await console.request<{ data: Key[] }>('GET', '/console/api/keys');
        assert.equal(JSON.stringify(listed.json).includes(created.json.key!), false, 'the secret is never shown again');
        assert.equal(listed.json.data[0]!.rpm, 600);

        const openai = new OpenAI({ apiKey: created.json.key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
        const other = new OpenAI({ apiKey: created.json.key!, baseURL: `${closed.url}/v1`, maxRetries: 0 });
        const answer = await openai.chat.completions.create({
          model: 'mock-chat',
          messages: [{ role: 'user', content: 'hello' }],
        });
        assert.ok(answer.choices[0]!.message.content);
        await other.models.list(); // cached on the second api too

        const edited = await console.request<Key>('PATCH', `/console/api/keys/${created.json.id}`, {
          rpm: null,
          name: 'laptop 2',
        });
        assert.deepEqual([edited.status, edited.json.rpm, edited.json.name], [200, null, 'laptop 2']);

        const revoked = await console.request('DELETE', `/console/api/keys/${created.json.id}`);
        assert.equal(revoked.status, 200);
        const start = Date.now();
        for (const sdk of [openai, other]) {
          await waitFor(
            async () => {
              try {
                await sdk.models.list();
                return false;
              } catch (error) {
                return error instanceof OpenAI.AuthenticationError;
              }
            },
            1000,
            'the revoked key to be refused',
          );
        }
        assert.ok(Date.now() - start < 1000);
      },
    );

    it(
      'lets a member set, change and clear a key’s default cache TTL (cache_ttl_s), with no ceiling; refuses what ' +
        'is not whole seconds',
      async () => {
        const { console, account } = await member('cache-ttl@console.test', 'cache-ttl-password');
        assert.equal(account.cache_max_ttl_s, null);
        const created = await console.request<Key>('POST', '/console/api/keys', {
          name: 'cached',
          cache_ttl_s: 300,
          rpm: 10,
        });
        assert.equal(created.status, 201, JSON.stringify(created.json));
        assert.equal(created.json.cache_ttl_s, 300);
        // Not a limit: nothing of it among the ceilings.
        assert.deepEqual(created.json.admin_limits, {
          limit_usd: null,
          rpm: null,
          tpm: null,
          models: null,
          expires_at: null,
        });
        const listed = await console.request<{ data: Key[] }>('GET', '/console/api/keys');
        assert.equal(listed.json.data.find((key) => key.id === created.json.id)?.cache_ttl_s, 300);
        const path = `/console/api/keys/${created.json.id}`;
        // Raised past what it was (a limit could not be), lowered to 0 (kept as set: no default), cleared.
        for (const value of [86_400, 0, null, 45]) {
          const edited = await console.request<Key>('PATCH', path, { cache_ttl_s: value });
          assert.deepEqual(
            [edited.status, edited.json.cache_ttl_s, edited.json.rpm],
            [200, value, 10],
            JSON.stringify(edited.json),
          );
        }
        assert.equal(
          (await console.request<Key>('PATCH', path, { name: 'renamed' })).json.cache_ttl_s,
          45,
          'another change leaves it alone',
        );
        for (const [value, code] of [
          [-1, 'invalid_value'],
          [31_536_001, 'invalid_value'],
          [1.5, 'invalid_type'],
          ['60', 'invalid_type'],
        ] as const) {
          for (const res of [
            await console.request('PATCH', path, { cache_ttl_s: value }),
            await console.request('POST', '/console/api/keys', { name: 'bad', cache_ttl_s: value }),
          ]) {
            expectError(res, 400, code);
            assert.equal(res.json.error?.param, 'cache_ttl_s');
          }
        }
        assert.equal(
          (await console.request<{ data: Key[] }>('GET', '/console/api/keys')).json.data.find(
            (key) => key.id === created.json.id,
          )?.cache_ttl_s,
          45,
          'unchanged by what was refused',
        );
        // An admin sets it too, from the console's admin route.
        const byAdmin = await admin.request<Key>('PATCH', `/console/api/admin/keys/${created.json.id}`, {
          cache_ttl_s: 600,
        });
        assert.deepEqual([byAdmin.status, byAdmin.json.cache_ttl_s], [200, 600]);
        assert.equal(
          (await console.request<Key>('PATCH', path, { cache_ttl_s: 1200 })).json.cache_ttl_s,
          1200,
          'and the member still changes it',
        );
      },
    );

    it('never lets a member read or act on another account’s keys, usage or admin data', async () => {
      const { console: alice } = await member('alice@console.test', 'alice-password', 1);
      const { console: bob } = await member('bob@console.test', 'bob-password', 1);
      const aliceKey = (await alice.request<Key>('POST', '/console/api/keys', { name: 'alice key' })).json;
      await new OpenAI({ apiKey: aliceKey.key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).chat.completions.create({
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'spend a little' }],
      });
      expectError(await bob.request('PATCH', `/console/api/keys/${aliceKey.id}`, { rpm: 1 }), 404, 'key_not_found');
      expectError(await bob.request('DELETE', `/console/api/keys/${aliceKey.id}`), 404, 'key_not_found');
      const bobKeys = await bob.request<{ data: Key[] }>('GET', '/console/api/keys');
      assert.equal(
        bobKeys.json.data.some((key) => key.id === aliceKey.id),
        false,
      );
      const bobUsage = await bob.request<{ totals: { requests: number } }>(
        'GET',
        `/console/api/usage?days=7&key_id=${aliceKey.id}`,
      );
      assert.equal(bobUsage.json.totals.requests, 0);
      const csv = await fetch(`${gateway.url}/console/api/usage.csv?days=7&key_id=${aliceKey.id}`, {
        headers: { cookie: `sy_session=${bob.cookies.get('sy_session')}` },
      });
      assert.equal((await csv.text()).trim().split('\n').length, 1, 'header only');
      // Alice's key still works: nothing Bob did touched it.
      assert.equal((await alice.request<{ data: Key[] }>('GET', '/console/api/keys')).json.data[0]!.id, aliceKey.id);

      const adminCalls: Array<[string, string, unknown?]> = [
        ['GET', '/console/api/admin/accounts'],
        [
          'POST',
          '/console/api/admin/accounts',
          { email: 'mallory@console.test', password: 'mallory-password', role: 'admin' },
        ],
        ['PATCH', '/console/api/admin/accounts/acct_default', { disabled: true }],
        ['POST', '/console/api/admin/accounts/acct_default/credits', { amount_usd: 100 }],
        ['GET', '/console/api/admin/keys'],
        ['DELETE', `/console/api/admin/keys/${aliceKey.id}`],
        ['GET', '/console/api/admin/channels'],
        ['GET', '/console/api/admin/queues'],
      ];
      for (const [method, path, body] of adminCalls)
        expectError(await bob.request(method, path, body), 403, 'admin_only');
      // Signed out, every one is a 401.
      for (const [method, path, body] of adminCalls) {
        const anonymous = client();
        await anonymous.open();
        expectError(await anonymous.request(method, path, body), 401, 'not_signed_in');
      }
    });
  });

  describe('batches', () => {
    type Batch = {
      id: string;
      status: string;
      created_at: number;
      expires_at: number;
      ended_at: number | null;
      cancel_initiated_at: number | null;
      total: number;
      counts: Record<'processing' | 'succeeded' | 'errored' | 'canceled' | 'expired', number>;
      cost_usd: number;
      cost_micros: number;
      results_path: string | null;
    };
    type BatchPage = { data: Batch[]; has_more: boolean };
    const dayMs = 86_400_000;

    /**
     * A batch of `total` requests written as the api writes one, created `created` ms, with the results given (outcome,
     * cost in µ$).
     */
    async function batchOf(
      accountId: string,
      created: number,
      total: number,
      results: Array<['succeeded' | 'errored', number]> = [],
    ): Promise<string> {
      const id = newBatchId();
      await createBatch(
        redis,
        { id, accountId, keyId: 'key_batches_test', created, expires: Date.now() + dayMs, total },
        dayMs,
      );
      for (const [index, [outcome, cost]] of results.entries()) {
        const result =
          outcome === 'succeeded'
            ? {
                type: 'succeeded' as const,
                message: { id: `msg_${index}`, type: 'message', role: 'assistant', content: [] },
              }
            : {
                type: 'errored' as const,
                error: {
                  type: 'error' as const,
                  error: { type: 'api_error', message: 'upstream failed' },
                  request_id: null,
                },
              };
        assert.equal(await recordBatchResult(redis, id, index, `req-${index}`, result, dayMs, cost), 'recorded');
      }
      return id;
    }

    it(
      "lists the member's own batches only, newest first, a page at a time, with counts, cost so far and the " +
        'results path once ended',
      async () => {
        const { console: dana, account: danaAccount } = await member('dana@console.test', 'dana-password');
        const { console: eve, account: eveAccount } = await member('eve@console.test', 'eve-password');
        const t0 = Date.now() - 60_000;
        // Oldest: ended (2 succeeded, 1 errored), 4,000 µ$ billed. Then one under way, 1,234 µ$ so far. Newest: nothing
        // run yet.
        const ended = await batchOf(danaAccount.id, t0, 3, [
          ['succeeded', 1500],
          ['succeeded', 2500],
          ['errored', 0],
        ]);
        const running = await batchOf(danaAccount.id, t0 + 1000, 2, [['succeeded', 1234]]);
        const fresh = await batchOf(danaAccount.id, t0 + 2000, 1);
        const eves = await batchOf(eveAccount.id, t0 + 1500, 1, [['succeeded', 99]]);

        const first = await dana.request<BatchPage>('GET', '/console/api/batches?limit=2');
        assert.equal(first.status, 200, JSON.stringify(first.json));
        assert.deepEqual(
          first.json.data.map((b) => b.id),
          [fresh, running],
        );
        assert.equal(first.json.has_more, true);
        const [newest, under] = first.json.data as [Batch, Batch];
        assert.deepEqual(newest, {
          id: fresh,
          account_id: danaAccount.id,
          dialect: 'anthropic',
          endpoint: '/v1/messages',
          status: 'in_progress',
          openai_status: null,
          files: null,
          models: null,
          created_at: Math.floor((t0 + 2000) / 1000),
          expires_at: newest.expires_at,
          ended_at: null,
          cancel_initiated_at: null,
          total: 1,
          counts: { processing: 1, succeeded: 0, errored: 0, canceled: 0, expired: 0 },
          cost_usd: 0,
          cost_micros: 0,
          results_path: null,
        });
        assert.ok(Math.abs(newest.expires_at - (Date.now() + dayMs) / 1000) < 120, `expires_at ${newest.expires_at}`);
        assert.deepEqual(
          [under.status, under.counts, under.cost_micros, under.cost_usd, under.results_path],
          ['in_progress', { processing: 1, succeeded: 1, errored: 0, canceled: 0, expired: 0 }, 1234, 0.001234, null],
        );

        const second = await dana.request<BatchPage>('GET', `/console/api/batches?limit=2&after_id=${running}`);
        assert.equal(second.status, 200, JSON.stringify(second.json));
        assert.deepEqual(
          second.json.data.map((b) => b.id),
          [ended],
        );
        assert.equal(second.json.has_more, false);
        const done = second.json.data[0]!;
        assert.equal(done.status, 'ended');
        assert.deepEqual(done.counts, { processing: 0, succeeded: 2, errored: 1, canceled: 0, expired: 0 });
        assert.deepEqual([done.cost_micros, done.cost_usd], [4000, 0.004]);
        assert.equal(done.results_path, `/v1/messages/batches/${ended}/results`);
        assert.equal(typeof done.ended_at, 'number');
        assert.ok(
          done.ended_at! >= done.created_at && done.ended_at! <= Date.now() / 1000 + 1,
          `ended_at ${done.ended_at}`,
        );

        // The results path is read with an API key of the account, as the page says: its three lines.
        const key = (await dana.request<Key>('POST', '/console/api/keys', { name: 'batch reader' })).json.key!;
        const results = await fetch(`${gateway.url}${done.results_path}`, {
          headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        });
        assert.equal(results.status, 200);
        const lines = (await results.text())
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { custom_id: string; result: { type: string } });
        assert.deepEqual(
          lines.map((line) => [line.custom_id, line.result.type]),
          [
            ['req-0', 'succeeded'],
            ['req-1', 'succeeded'],
            ['req-2', 'errored'],
          ],
        );

        // The default page holds all three; another account's batch is never among them, whatever account_id a member
        // names.
        const all = await dana.request<BatchPage>('GET', '/console/api/batches');
        assert.deepEqual(
          all.json.data.map((b) => b.id),
          [fresh, running, ended],
        );
        assert.equal(all.json.has_more, false);
        const nosy = await dana.request<BatchPage>('GET', `/console/api/batches?account_id=${eveAccount.id}`);
        assert.deepEqual(
          nosy.json.data.map((b) => b.id),
          [fresh, running, ended],
        );
        const eveList = await eve.request<BatchPage>('GET', '/console/api/batches');
        assert.deepEqual(
          eveList.json.data.map((b) => [b.id, b.cost_micros]),
          [[eves, 99]],
        );

        // An admin reads every account's, newest first, unless they name one: a page at a time by its next_cursor.
        type AllPage = BatchPage & { account_id: string | null; next_cursor: string | null };
        const walked: Array<[string, string]> = [];
        let cursor: string | null = null;
        for (let pages = 0; pages < 50; pages++) {
          const page: ConsoleResponse<AllPage> = await admin.request<AllPage>(
            'GET',
            `/console/api/batches?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
          );
          assert.equal(page.status, 200, JSON.stringify(page.json));
          assert.equal(page.json.account_id, null);
          walked.push(
            ...page.json.data.map((b) => [b.id, (b as Batch & { account_id: string }).account_id] as [string, string]),
          );
          assert.equal(page.json.has_more, page.json.next_cursor !== null);
          cursor = page.json.next_cursor;
          if (!cursor) break;
        }
        assert.equal(cursor, null, 'the pages end');
        assert.equal(new Set(walked.map(([id]) => id)).size, walked.length, 'nothing listed twice');
        const mine = new Set([fresh, running, ended, eves]);
        assert.deepEqual(
          walked.filter(([id]) => mine.has(id)),
          [
            [fresh, danaAccount.id],
            [eves, eveAccount.id],
            [running, danaAccount.id],
            [ended, danaAccount.id],
          ],
        );
        expectError(await admin.request('GET', '/console/api/batches?cursor=nonsense'), 400, 'invalid_value');
        const adminOfDana = await admin.request<BatchPage>(
          'GET',
          `/console/api/batches?account_id=${danaAccount.id}&limit=1&after_id=${fresh}`,
        );
        assert.deepEqual([adminOfDana.json.data.map((b) => b.id), adminOfDana.json.has_more], [[running], true]);
        // The flex price's multiple, which the page says batch requests cost.
        assert.equal((adminOfDana.json as BatchPage & { flex_price_multiple: number }).flex_price_multiple, 0.5);
      },
    );

    it('refuses a bad page size or an unknown parameter, and anyone signed out', async () => {
      const { console } = await member('frank@console.test', 'frank-password');
      expectError(await console.request('GET', '/console/api/batches?limit=0'), 400, 'invalid_value');
      expectError(await console.request('GET', '/console/api/batches?limit=101'), 400, 'invalid_value');
      expectError(await console.request('GET', '/console/api/batches?limit=ten'), 400, 'invalid_value');
      expectError(await console.request('GET', '/console/api/batches?before=x'), 400, 'unknown_parameter');
      const anonymous = client();
      await anonymous.open();
      expectError(await anonymous.request('GET', '/console/api/batches'), 401, 'not_signed_in');
    });
  });

  describe('admin', () => {
    it('disabling an account ends its sessions, refuses its keys and its sign-in; enabling restores them', async () => {
      const { console: carol, account } = await member('carol@console.test', 'carol-password', 1);
      const key = (await carol.request<Key>('POST', '/console/api/keys', { name: 'carol' })).json;
      const sdk = new OpenAI({ apiKey: key.key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
      await sdk.models.list();
      const disabled = await admin.request<Account>('PATCH', `/console/api/admin/accounts/${account.id}`, {
        disabled: true,
      });
      assert.equal(disabled.json.disabled, true);
      expectError(await carol.request('GET', '/console/api/keys'), 401, 'not_signed_in');
      await assert.rejects(
        sdk.models.list(),
        (error: unknown) => error instanceof OpenAI.AuthenticationError && /disabled/.test(error.message),
      );
      expectError(await client().signIn('carol@console.test', 'carol-password'), 403, 'account_disabled');
      await admin.request('PATCH', `/console/api/admin/accounts/${account.id}`, { disabled: false });
      await sdk.models.list();
      assert.equal((await client().signIn('carol@console.test', 'carol-password')).status, 200);
      expectError(
        await admin.request(
          'PATCH',
          `/console/api/admin/accounts/${((await admin.request('GET', '/console/api/session')).json.account as Account).id}`,
          { disabled: true },
        ),
        400,
        'own_account',
      );
    });

    it(
      'sets an account’s cache cap (cache_max_ttl_s): 0 forbids caching, null lifts it; the member sees it and ' +
        'cannot change it',
      async () => {
        const { console: dave, account } = await member('cache-cap@console.test', 'dave-password');
        const list = await admin.request<{ data: Account[]; gateway_cache_max_ttl_s: number }>(
          'GET',
          '/console/api/admin/accounts',
        );
        assert.equal(list.json.gateway_cache_max_ttl_s, 86_400, 'CACHE_MAX_TTL_S, for the page to say');
        assert.equal(list.json.data.find((a) => a.id === account.id)?.cache_max_ttl_s, null);
        const path = `/console/api/admin/accounts/${account.id}`;
        for (const value of [900, 0]) {
          const patched = await admin.request<Account>('PATCH', path, { cache_max_ttl_s: value });
          assert.deepEqual([patched.status, patched.json.cache_max_ttl_s], [200, value], JSON.stringify(patched.json));
        }
        // The member's own session shows it (read-only).
        assert.equal(((await dave.request('GET', '/console/api/session')).json.account as Account).cache_max_ttl_s, 0);
        expectError(await dave.request('PATCH', path, { cache_max_ttl_s: 3600 }), 403, 'admin_only');
        for (const [value, code] of [
          [-1, 'invalid_value'],
          [2.5, 'invalid_type'],
          ['3600', 'invalid_type'],
        ] as const) {
          const refused = await admin.request('PATCH', path, { cache_max_ttl_s: value });
          expectError(refused, 400, code);
          assert.equal(refused.json.error?.param, 'cache_max_ttl_s');
        }
        const lifted = await admin.request<Account>('PATCH', path, { cache_max_ttl_s: null });
        assert.deepEqual([lifted.status, lifted.json.cache_max_ttl_s], [200, null]);
        assert.equal(
          ((await dave.request('GET', '/console/api/session')).json.account as Account).cache_max_ttl_s,
          null,
        );
      },
    );

    it('lists every account and key, channels and queue depths', async () => {
      const accounts = await admin.request<{ data: Account[] }>('GET', '/console/api/admin/accounts');
      assert.ok(accounts.json.data.some((a) => a.email === adminEmail));
      const keys = await admin.request<{ data: Array<Key & { account_email: string | null }> }>(
        'GET',
        '/console/api/admin/keys',
      );
      assert.ok(keys.json.data.every((k) => 'account_email' in k && !('key' in k)));
      const channels = await admin.request<{ data: Array<{ id: string; vendor: string; status: string }> }>(
        'GET',
        '/console/api/admin/channels',
      );
      assert.ok(
        channels.json.data.some((c) => c.vendor === 'mock' && c.status === 'ok'),
        JSON.stringify(channels.json),
      );
      const queues = await admin.request<{ data: Array<{ name: string; waiting: number }> }>(
        'GET',
        '/console/api/admin/queues',
      );
      assert.deepEqual(queues.json.data.map((q) => q.name).sort(), [
        'audio',
        'chat',
        'embeddings',
        'image',
        'realtime',
        'video',
      ]);
      assert.ok(queues.json.data.every((q) => Number.isInteger(q.waiting)));
    });

    it(
      'shows the admin every key, the command line’s in the Default account, and usage of every account as ' +
        'Activity counts it',
      async () => {
        // A key made as the docs say, with `npm run keys -- create`: the Default account's, not the admin's.
        const env = { ...process.env, REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
        const made = await promisify(execFile)(
          process.execPath,
          ['--import', 'tsx', 'bin/keys.ts', 'create', '--name', 'made with the CLI'],
          { cwd: root, env },
        );
        const secret = made.stdout.trim();
        const keys = await admin.request<{ data: Array<Key & { account_name: string | null }> }>(
          'GET',
          '/console/api/admin/keys',
        );
        const cliKey = keys.json.data.find((key) => key.name === 'made with the CLI');
        assert.ok(cliKey, JSON.stringify(keys.json));
        assert.equal(cliKey.account_id, 'acct_default');
        assert.equal(cliKey.account_name, 'Default');
        // Not among the admin's own: the Keys page lists it apart, with its account.
        assert.equal(
          (await admin.request<{ data: Key[] }>('GET', '/console/api/keys')).json.data.some(
            (key) => key.id === cliKey.id,
          ),
          false,
        );

        const { console: carol, account: carolAccount } = await member('cli-viewer@console.test', 'carol-password', 1);
        const carolKey = (await carol.request<Key>('POST', '/console/api/keys', { name: 'carol key' })).json;
        for (const apiKey of [secret, secret, carolKey.key!]) {
          await new OpenAI({ apiKey, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).chat.completions.create({
            model: 'mock-chat',
            messages: [{ role: 'user', content: 'count me' }],
          });
        }
        type Usage = {
          account_id: string | null;
          from: string;
          totals: { requests: number; cost_usd: number };
          by_key: Array<{
            key_id: string;
            key_name: string | null;
            key_revoked: boolean;
            key_account_id: string | null;
            requests: number;
          }>;
        };
        let usage!: ConsoleResponse<Usage>;
        await waitFor(
          async () => {
            usage = await admin.request<Usage>('GET', '/console/api/usage?days=7');
            return (
              usage.json.by_key.find((row) => row.key_id === cliKey.id)?.requests === 2 &&
              usage.json.by_key.some((row) => row.key_id === carolKey.id)
            );
          },
          10_000,
          'the CLI key’s and Carol’s requests in the admin’s usage',
        ).catch((error: unknown) => {
          throw new Error(`${(error as Error).message}: ${JSON.stringify(usage?.json)}`);
        });
        // Every account's: no one balance, each key named with its account.
        assert.equal(usage.json.account_id, null);
        const cliRow = usage.json.by_key.find((row) => row.key_id === cliKey.id)!;
        assert.deepEqual(
          [cliRow.key_name, cliRow.key_revoked, cliRow.key_account_id],
          ['made with the CLI', false, 'acct_default'],
        );

        // What Activity counts over the same days (its chart, every account's), refusals included, is what Usage counts.
        const since = Date.parse(`${usage.json.from}T00:00:00Z`) / 1000;
        const until = Math.floor(Date.now() / 1000) + 1;
        const counted = async (query: string) => {
          const activity = await admin.request<{ data: Array<{ requests: number }> }>(
            'GET',
            `/console/api/requests/histogram?since=${since}&until=${until}${query}`,
          );
          assert.equal(activity.status, 200, JSON.stringify(activity.json));
          return activity.json.data.reduce((sum, bar) => sum + bar.requests, 0);
        };
        const all = await counted('');
        assert.ok(all >= 3);
        assert.equal(usage.json.totals.requests, all, 'usage and activity count the same requests');
        // One account's, by name; a member naming another account still reads only its own.
        const carolsOnly = await admin.request<Usage>('GET', `/console/api/usage?days=7&account_id=${carolAccount.id}`);
        assert.deepEqual([carolsOnly.json.account_id, carolsOnly.json.totals.requests], [carolAccount.id, 1]);
        const defaults = await admin.request<Usage>('GET', '/console/api/usage?days=7&account_id=acct_default');
        assert.equal(defaults.json.by_key.find((row) => row.key_id === cliKey.id)?.requests, 2);
        const nosy = await carol.request<Usage>('GET', '/console/api/usage?days=7&account_id=acct_default');
        assert.deepEqual([nosy.json.account_id, nosy.json.totals.requests], [carolAccount.id, 1]);

        // The admin revokes the CLI's key from the console; its usage keeps its name, marked revoked.
        assert.equal((await admin.request('DELETE', `/console/api/admin/keys/${cliKey.id}`)).status, 200);
        expectError(await admin.request('DELETE', `/console/api/admin/keys/${cliKey.id}`), 404, 'key_not_found');
        expectError(await admin.request('DELETE', '/console/api/admin/keys/key_nope'), 404, 'key_not_found');
        assert.equal(
          (await admin.request<{ data: Key[] }>('GET', '/console/api/admin/keys')).json.data.some(
            (key) => key.id === cliKey.id,
          ),
          false,
        );
        await assert.rejects(
          new OpenAI({ apiKey: secret, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).chat.completions.create({
            model: 'mock-chat',
            messages: [{ role: 'user', content: 'revoked' }],
          }),
          (error: { status?: number }) => error.status === 401,
        );
        const after = await admin.request<Usage>('GET', '/console/api/usage?days=7');
        const revokedRow = after.json.by_key.find((row) => row.key_id === cliKey.id)!;
        assert.deepEqual(
          [revokedRow.key_name, revokedRow.key_revoked, revokedRow.requests],
          ['made with the CLI', true, 2],
        );
      },
    );

    it('says a queue paused from the dashboard is paused, its jobs waiting, and they run once it is resumed', async () => {
      type QueueRow = { name: string; waiting: number; active: number; paused: boolean };
      const read = async () =>
        (await admin.request<{ data: QueueRow[] }>('GET', '/console/api/admin/queues')).json.data.find(
          (q) => q.name === 'embeddings',
        )!;
      assert.equal((await read()).paused, false);
      // As the dashboard's pause button does: the queue is paused, not its jobs (BullMQ 6 has no paused job state).
      const embeddings = new Queue(shardQueueName('embeddings', 0, 1), { connection: redis });
      try {
        await embeddings.pause();
        const { console: erin } = await member('erin@console.test', 'erin-password', 1);
        const key = (await erin.request<Key>('POST', '/console/api/keys', { name: 'erin' })).json;
        const sdk = new OpenAI({ apiKey: key.key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 });
        const answer = sdk.embeddings.create({ model: 'mock-embedding', input: 'held' });
        await waitFor(async () => (await read()).waiting === 1, 5000, 'the job waiting in the paused queue');
        // One read each: the job moves on (active, completed) between two reads.
        const held = await read();
        assert.deepEqual(held, { ...held, paused: true, waiting: 1, active: 0 });
        await embeddings.resume();
        assert.equal((await answer).data.length, 1);
        const resumed = await read();
        assert.deepEqual(resumed, { ...resumed, paused: false, waiting: 0 });
      } finally {
        await embeddings.resume();
        await embeddings.close();
      }
    });

    it('shows why and until when a channel cools down', async () => {
      type Channel = {
        id: string;
        vendor: string;
        status: string;
        cooling_until: number | null;
        reason: string | null;
      };
      const read = async () =>
        (await admin.request<{ data: Channel[] }>('GET', '/console/api/admin/channels')).json.data.find(
          (c) => c.vendor === 'mock',
        )!;
      const { id } = await read();
      const until = Date.now() + 60_000;
      // As a worker records a 429 on one model of the channel.
      await redis.hset('sy:cooldowns', `${id}|mock-chat`, `${until}:rate:429`);
      const mock = await read();
      assert.deepEqual([mock.status, mock.cooling_until], ['cooling_down', until]);
      assert.match(mock.reason!, /rate limited.*429.*mock-chat/);
      await redis.hdel('sy:cooldowns', `${id}|mock-chat`);
      assert.equal((await read()).status, 'ok');
    });
  });

  describe('usage, pricing and the playground', () => {
    it('bills the playground through the queue to the Playground key, and usage matches /admin/usage exactly', async () => {
      const { console, account } = await member('dave@console.test', 'dave-password', 3);
      const res = await fetch(`${gateway.url}/console/api/playground/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          cookie: `sy_session=${console.cookies.get('sy_session')}`,
          'x-csrf-token': console.csrf,
        },
        body: JSON.stringify({
          model: 'gpt-4o-mini',
          stream: true,
          messages: [{ role: 'user', content: 'stream to me' }],
        }),
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type')!, /text\/event-stream/);
      const body = await res.text();
      const chunks = body.split('\n\n').filter((frame) => frame.includes('data: {'));
      assert.ok(chunks.length > 2, body);
      assert.ok(body.trimEnd().endsWith('data: [DONE]'));
      const image = await console.request<{ data: Array<{ url?: string; b64_json?: string }> }>(
        'POST',
        '/console/api/playground/images/generations',
        {
          model: 'dall-e-2',
          prompt: 'a lighthouse',
          size: '256x256',
          response_format: 'b64_json',
        },
      );
      assert.equal(image.status, 200, JSON.stringify(image.json));
      assert.ok(image.json.data[0]!.b64_json);

      const keys = await console.request<{ data: Key[] }>('GET', '/console/api/keys');
      const playground = keys.json.data.find((key) => key.name === 'Playground');
      assert.ok(playground, 'the Playground key is listed');
      type Row = {
        model?: string;
        key_id?: string;
        requests: number;
        cost_usd: number;
        input_tokens: number;
        output_tokens: number;
        cache_write_tokens: number;
        prompt_cache_saved_micros: number;
      };
      let usage!: ConsoleResponse<{
        totals: Row;
        by_model: Row[];
        by_key: Array<Row & { key_name: string }>;
        daily: Row[];
        balance_usd: number;
      }>;
      let adminRows: Row[] = [];
      // The console counts a request from its log row, which the api writes before the worker settles it; /admin/usage
      // counts settled requests. Read in that order: once /admin/usage says both are settled, the console's answer
      // read after it has their costs too (read before it, it could count both and price one not yet settled).
      const from = new Date(Date.now() - 6 * 86_400_000).toISOString().slice(0, 10);
      await waitFor(
        async () => {
          const adminUsage = await fetch(
            `${gateway.url}/admin/usage?account_id=${account.id}&group_by=model&from=${from}`,
            {
              headers: { authorization: `Bearer ${adminToken}` },
            },
          );
          adminRows = ((await adminUsage.json()) as { data: Row[] }).data;
          if (adminRows.reduce((sum, row) => sum + row.requests, 0) !== 2) return false;
          usage = await console.request('GET', '/console/api/usage?days=7');
          assert.equal((usage.json as unknown as { from: string }).from, from, 'the same window');
          return usage.json.totals.requests === 2;
        },
        5000,
        'both playground requests to be settled',
      ).catch((error: unknown) => {
        throw new Error(`${(error as Error).message}: ${JSON.stringify({ usage: usage.json, admin: adminRows })}`);
      });
      assert.equal(usage.json.by_key[0]!.key_name, 'Playground');
      assert.equal(usage.json.by_key[0]!.key_id, playground.id);
      assert.deepEqual(
        usage.json.by_model.map(({ model, requests, cost_usd, input_tokens, output_tokens }) => ({
          model,
          requests,
          cost_usd,
          input_tokens,
          output_tokens,
        })),
        adminRows.map(({ model, requests, cost_usd, input_tokens, output_tokens }) => ({
          model,
          requests,
          cost_usd,
          input_tokens,
          output_tokens,
        })),
      );
      const spent = usage.json.totals.cost_usd;
      assert.ok(spent > 0);
      assert.equal(
        Math.round((3 - usage.json.balance_usd) * 1e6),
        Math.round(spent * 1e6),
        'balance fell by exactly what usage shows',
      );

      const csv = await fetch(`${gateway.url}/console/api/usage.csv?days=7`, {
        headers: { cookie: `sy_session=${console.cookies.get('sy_session')}` },
      });
      assert.match(csv.headers.get('content-disposition')!, /attachment; filename="usage-.*\.csv"/);
      const lines = (await csv.text()).trim().split('\r\n');
      // The columns added later come last: a sheet that reads the first ten by position reads them still.
      assert.equal(
        lines[0],
        'day,model,requests,input_tokens,cached_tokens,output_tokens,images,audio_seconds,video_seconds,cost_usd,cache_write_tokens,prompt_cache_saved_usd',
      );
      assert.equal(lines.length - 1, usage.json.daily.length);
      const column = (name: string) => lines[0]!.split(',').indexOf(name);
      const csvSum = (name: string) =>
        lines.slice(1).reduce((sum, line) => sum + Math.round(Number(line.split(',')[column(name)]) * 1e6), 0);
      assert.equal(csvSum('cost_usd'), Math.round(spent * 1e6));
      // The mock reads no prompt from a cache of its own: nothing written to one, nothing it saved, as the report says.
      assert.deepEqual([usage.json.totals.cache_write_tokens, usage.json.totals.prompt_cache_saved_micros], [0, 0]);
      assert.equal(csvSum('prompt_cache_saved_usd'), usage.json.totals.prompt_cache_saved_micros);
    });

    it('refuses a playground request past the balance with insufficient_quota, as any key', async () => {
      const { console } = await member('broke@console.test', 'broke-password');
      expectError(
        await console.request('POST', '/console/api/playground/chat/completions', {
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'hi' }],
        }),
        429,
        'insufficient_quota',
      );
    });

    it('lists the same models as /v1/models with prices, publicly unless CONSOLE_PUBLIC_PRICING=off', async () => {
      const anonymous = await fetch(`${gateway.url}/console/api/pricing`);
      assert.equal(anonymous.status, 200);
      const page = (await anonymous.json()) as {
        data: Array<{ id: string; vendor: string; capability: string; prices: Json | null }>;
        service_tiers: Json;
      };
      const listed = page.data;
      // The tiers' token price multiples (SERVICE_TIER_PRICE_FLEX, SERVICE_TIER_PRICE_PRIORITY, unset here), as exact
      // decimals.
      assert.deepEqual(page.service_tiers, { priority: '2', default: '1', flex: '0.5' });
      const { key } = (await admin.request<Key>('POST', '/console/api/keys', { name: 'models' })).json;
      const v1 = await new OpenAI({ apiKey: key!, baseURL: `${gateway.url}/v1`, maxRetries: 0 }).models.list();
      assert.deepEqual(listed.map((m) => m.id).sort(), v1.data.map((m) => m.id).sort());
      const gpt4o = listed.find((m) => m.id === 'gpt-4o')!;
      assert.equal(typeof gpt4o.prices?.input_per_1m, 'number');
      assert.ok(
        listed.filter((m) => m.capability === 'image').every((m) => m.prices && typeof m.prices.per_image === 'object'),
      );
      const privately = await fetch(`${closed.url}/console/api/pricing`);
      assert.equal(privately.status, 401);
    });

    it('answers hostile bodies with OpenAI-shaped errors', async () => {
      const { console } = await member('hostile@console.test');
      expectError(await console.request('POST', '/console/api/keys', '{"name":'), 400, 'invalid_json');
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x', account_id: 'acct_default' }),
        400,
        'unknown_parameter',
      );
      expectError(await console.request('POST', '/console/api/keys', { name: 'x', rpm: -1 }), 400, 'invalid_value');
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x', cache_ttl_s: -1 }),
        400,
        'invalid_value',
      );
      expectError(
        await console.request('POST', '/console/api/keys', { name: 'x'.repeat(100_000) }),
        413,
        'request_too_large',
      );
      expectError(await console.request('GET', '/console/api/usage?days=365'), 400, 'invalid_value');
      expectError(await console.request('GET', '/console/api/nothing-here'), 404, 'unknown_url');
      expectError(await console.request('POST', '/console/api/session', [1, 2]), 400, 'invalid_json');
      expectError(
        await console.request('POST', '/console/api/session', { email: 'a@b.c', password: 'x', remember: true }),
        400,
        'unknown_parameter',
      );
    });
  });
});
