import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes, scrypt } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { ConsoleClient } from '../support/console-client.js';
import { adminClient, type Json } from '../support/admin-client.js';
import { recordUrlFor, testRecord } from '../support/record.js';
import { accountKey } from '../../shared/redis-keys.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const adminToken = 'member-limits-admin-token';
const adminEmail = 'root@limits.test';
const adminPassword = 'root-password-1';
const maxKeys = 4;

type Limits = {
  limit_usd: number | null;
  rpm: number | null;
  tpm: number | null;
  models: string[] | null;
  expires_at: number | null;
};
type Key = Limits & { id: string; key?: string; name: string; admin_limits?: Limits };

function expectError(
  res: {
    status: number;
    json: Json & { error?: { code: string | null; param: string | null; message: string; type: string } };
  },
  status: number,
  code: string,
  param?: string,
): void {
  assert.equal(res.status, status, JSON.stringify(res.json));
  assert.equal(res.json.error?.code, code, JSON.stringify(res.json));
  if (param !== undefined) assert.equal(res.json.error?.param, param, JSON.stringify(res.json));
  assert.equal(typeof res.json.error?.message, 'string');
  assert.equal(typeof res.json.error?.type, 'string');
}

const limitsOf = (key: Key): Limits => ({
  limit_usd: key.limit_usd,
  rpm: key.rpm,
  tpm: key.tpm,
  models: key.models,
  expires_at: key.expires_at,
});

/** A password hashed the way accounts were before: scrypt at N = 2^14, in the stored format. */
function oldHash(password: string): Promise<string> {
  const salt = randomBytes(16);
  return new Promise((resolve, reject) =>
    scrypt(password, salt, 64, { N: 16384, r: 8, p: 1 }, (error, hash) =>
      error ? reject(error) : resolve(`scrypt$16384$8$1$${salt.toString('base64')}$${hash.toString('base64')}`),
    ),
  );
}

// Issue 35, item 6: limits an admin sets on a key are ceilings its account's members may only tighten; the operator's
// default rates are ceilings for members' own keys; keys per account are capped. Every way in: the console's member
// API, the admin API, the console's admin API and `npm run keys`.
describe('members and the limits on their keys', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  let addresses = 0;
  const { admin } = adminClient(() => gateway.url, adminToken);

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(14));
    gateway = await startGateway({
      env: {
        REDIS_URL: redisUrl,
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        TRUST_PROXY: 'on',
        KEY_CACHE_TTL_MS: '60000',
        DEFAULT_KEY_RPM: '3',
        MAX_KEYS_PER_ACCOUNT: String(maxKeys),
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  /** A member account with $5 (made by the admin API), signed in to the console. */
  async function member(): Promise<{ id: string; console: ConsoleClient }> {
    const email = `member-${++addresses}@limits.test`;
    const made = await admin('POST', '/admin/accounts', { email, password: 'member-password', role: 'member' });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    assert.equal((await admin('POST', `/admin/accounts/${id}/credits`, { amount_usd: 5 })).status, 200);
    const console = new ConsoleClient(gateway.url, `198.51.100.${addresses}`);
    assert.equal((await console.signIn(email, 'member-password')).status, 200);
    return { id, console };
  }

  async function adminKey(accountId: string, limits: Partial<Limits>): Promise<Key> {
    const made = await admin('POST', '/admin/keys', { name: 'from the admin', account_id: accountId, ...limits });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    return made.json as unknown as Key;
  }

  const ownKeys = async (console: ConsoleClient) =>
    (await console.request<{ data: Key[] }>('GET', '/console/api/keys')).json.data;
  const patch = (console: ConsoleClient, id: string, body: Json) =>
    console.request<Key>('PATCH', `/console/api/keys/${id}`, body);
  const chat = (key: string, model: string) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 }),
    });

  it("refuses every way a member would lift an admin's limits, and the key stays limited as the admin set it", async () => {
    const { id, console } = await member();
    const expiresAt = Math.floor(Date.now() / 1000) + 86_400;
    const key = await adminKey(id, {
      limit_usd: 0.0001,
      models: ['mock-chat'],
      rpm: 1,
      tpm: 500,
      expires_at: expiresAt,
    });
    const set: Limits = { limit_usd: 0.0001, rpm: 1, tpm: 500, models: ['mock-chat'], expires_at: expiresAt };

    // The request, all at once, then each lift alone.
    expectError(await patch(console, key.id, { limit_usd: null, models: null, rpm: null }), 403, 'limit_set_by_admin');
    const lifts: Array<[string, Json]> = [
      ['limit_usd', { limit_usd: null }],
      ['limit_usd', { limit_usd: 0.0002 }],
      ['rpm', { rpm: null }],
      ['rpm', { rpm: 2 }],
      ['rpm', { rpm: 1_000_000_000 }],
      ['tpm', { tpm: null }],
      ['tpm', { tpm: 501 }],
      ['models', { models: null }],
      ['models', { models: ['mock-chat', 'gpt-4o'] }],
      ['models', { models: ['gpt-4o'] }],
      ['expires_at', { expires_at: null }],
      ['expires_at', { expires_at: expiresAt + 1 }],
    ];
    for (const [param, body] of lifts)
      expectError(await patch(console, key.id, { name: 'renamed', ...body }), 403, 'limit_set_by_admin', param);

    // Nothing of a refused change was made, not even the name beside it.
    assert.deepEqual(key.admin_limits, set);
    const listed = (await ownKeys(console)).find((k) => k.id === key.id)!;
    assert.equal(listed.name, 'from the admin');
    assert.deepEqual(limitsOf(listed), set);
    assert.deepEqual(listed.admin_limits, set, 'the member sees which limits the admin set');
    const seen = await admin('GET', `/admin/keys/${key.id}`);
    assert.deepEqual(limitsOf(seen.json as unknown as Key), set);

    // The requests are limited as the admin set them: gpt-4o is not on the list.
    const refused = await chat(key.key!, 'gpt-4o');
    assert.equal(refused.status, 403);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'model_not_allowed');
  });

  it('lets a member tighten below the ceilings (and loosen back up to them), and the requests follow', async () => {
    const { id, console } = await member();
    const expiresAt = Math.floor(Date.now() / 1000) + 86_400;
    const key = await adminKey(id, {
      limit_usd: 1,
      models: ['mock-chat', 'mock-embedding'],
      rpm: 10,
      tpm: 100_000,
      expires_at: expiresAt,
    });

    const tightened = await patch(console, key.id, {
      limit_usd: 0.5,
      models: ['mock-chat'],
      rpm: 1,
      tpm: 50_000,
      expires_at: expiresAt - 60,
      name: 'mine now',
    });
    assert.equal(tightened.status, 200, JSON.stringify(tightened.json));
    assert.deepEqual(limitsOf(tightened.json), {
      limit_usd: 0.5,
      models: ['mock-chat'],
      rpm: 1,
      tpm: 50_000,
      expires_at: expiresAt - 60,
    });
    // The ceilings stay the admin's.
    assert.deepEqual(tightened.json.admin_limits, {
      limit_usd: 1,
      models: ['mock-chat', 'mock-embedding'],
      rpm: 10,
      tpm: 100_000,
      expires_at: expiresAt,
    });

    // The requests are limited as the member set: one request a minute, mock-chat only.
    assert.equal((await chat(key.key!, 'mock-chat')).status, 200);
    const limited = await chat(key.key!, 'mock-chat');
    assert.equal(limited.status, 429);
    assert.equal(((await limited.json()) as { error: { code: string } }).error.code, 'rate_limit_exceeded');
    const embedding = await fetch(`${gateway.url}/v1/embeddings`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-embedding', input: 'hi' }),
    });
    assert.equal(embedding.status, 403);

    // Back up to the admin's values is still within them.
    const loosened = await patch(console, key.id, {
      limit_usd: 1,
      models: ['mock-embedding', 'mock-chat'],
      rpm: 10,
      tpm: 100_000,
      expires_at: expiresAt,
    });
    assert.equal(loosened.status, 200, JSON.stringify(loosened.json));
    assert.equal(loosened.json.rpm, 10);
    expectError(await patch(console, key.id, { rpm: 11 }), 403, 'limit_set_by_admin', 'rpm');
  });

  it("bounds a member's own keys by the operator's default rates (DEFAULT_KEY_RPM=3), made or patched", async () => {
    const { console } = await member();
    expectError(
      await console.request('POST', '/console/api/keys', { name: 'greedy', rpm: 1_000_000_000 }),
      403,
      'above_default_limit',
      'rpm',
    );
    expectError(
      await console.request('POST', '/console/api/keys', { name: 'greedy', rpm: 4 }),
      403,
      'above_default_limit',
      'rpm',
    );
    assert.equal((await ownKeys(console)).length, 0, 'no key was made');

    const made = await console.request<Key>('POST', '/console/api/keys', {
      name: 'own',
      rpm: 3,
      tpm: 1_000_000_000,
      limit_usd: 1000,
      models: ['gpt-4o'],
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    assert.deepEqual(made.json.admin_limits, { limit_usd: null, rpm: null, tpm: null, models: null, expires_at: null });
    // The request: the default is not lifted by a key's own rpm.
    expectError(await patch(console, made.json.id, { rpm: 1_000_000_000 }), 403, 'above_default_limit', 'rpm');
    // The member's own limits (no admin's) are the member's to lift; no rpm of its own runs at the default.
    const own = await patch(console, made.json.id, { rpm: null, models: null, limit_usd: null });
    assert.equal(own.status, 200, JSON.stringify(own.json));
    assert.deepEqual(limitsOf(own.json), {
      limit_usd: null,
      rpm: null,
      tpm: 1_000_000_000,
      models: null,
      expires_at: null,
    });
    const answer = await chat(made.json.key!, 'mock-chat');
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get('x-ratelimit-limit-requests'), '3');
  });

  it('lets admins set and lift anything: the admin API, the console admin API, an admin on their own keys', async () => {
    const { id, console } = await member();
    const key = await adminKey(id, { limit_usd: 0.0001, models: ['mock-chat'], rpm: 1 });

    const lifted = await admin('PATCH', `/admin/keys/${key.id}`, { limit_usd: null, models: null, rpm: null });
    assert.equal(lifted.status, 200, JSON.stringify(lifted.json));
    assert.deepEqual((lifted.json as unknown as Key).admin_limits, {
      limit_usd: null,
      rpm: null,
      tpm: null,
      models: null,
      expires_at: null,
    });
    assert.equal((await chat(key.key!, 'gpt-4o')).status, 200, 'the admin lifted the model list');
    // Lifted by the admin: the member is bound by the operator's default again, no more.
    expectError(await patch(console, key.id, { rpm: 4 }), 403, 'above_default_limit', 'rpm');

    // The console's admin API sets a ceiling above the default: the member may use it, not more.
    const adminConsole = new ConsoleClient(gateway.url, '198.51.100.200');
    assert.equal((await adminConsole.signIn(adminEmail, adminPassword)).status, 200);
    const raised = await adminConsole.request<Key>('PATCH', `/console/api/admin/keys/${key.id}`, { rpm: 100 });
    assert.equal(raised.status, 200, JSON.stringify(raised.json));
    assert.equal(raised.json.admin_limits?.rpm, 100);
    assert.equal((await patch(console, key.id, { rpm: 50 })).status, 200);
    expectError(await patch(console, key.id, { rpm: 101 }), 403, 'limit_set_by_admin', 'rpm');
    // A member cannot reach the console's admin API.
    expectError(await console.request('PATCH', `/console/api/admin/keys/${key.id}`, { rpm: null }), 403, 'admin_only');
    expectError(
      await adminConsole.request('PATCH', '/console/api/admin/keys/key_nope', { rpm: 1 }),
      404,
      'key_not_found',
    );

    // An admin's own keys in the console: no default bounds them.
    const own = await adminConsole.request<Key>('POST', '/console/api/keys', { name: 'admin own', rpm: 1_000_000 });
    assert.equal(own.status, 201, JSON.stringify(own.json));
    assert.equal(
      (await adminConsole.request('PATCH', `/console/api/keys/${own.json.id}`, { rpm: 2_000_000 })).status,
      200,
    );
  });

  it(
    `caps keys per account (MAX_KEYS_PER_ACCOUNT=${maxKeys}) for members, the admin API and npm run keys; revoked ` +
      `keys and the Playground key do not count`,
    async () => {
      const { id, console } = await member();
      // Made all at once: exactly the cap is made, the rest refused.
      const made = await Promise.all(
        Array.from({ length: maxKeys + 3 }, (_, i) =>
          console.request<Key>('POST', '/console/api/keys', { name: `k${i}` }),
        ),
      );
      assert.equal(made.filter((res) => res.status === 201).length, maxKeys, made.map((res) => res.status).join(' '));
      for (const res of made.filter((res) => res.status !== 201)) expectError(res, 409, 'too_many_keys');
      assert.equal((await ownKeys(console)).length, maxKeys);

      const byAdmin = await admin('POST', '/admin/keys', { name: 'one more', account_id: id });
      expectError(byAdmin, 409, 'too_many_keys');
      // The command reads the setting from its own environment, as the gateway does.
      const env = {
        ...process.env,
        REDIS_URL: redisUrl,
        DATABASE_URL: await recordUrlFor(redisUrl),
        MAX_KEYS_PER_ACCOUNT: String(maxKeys),
      };
      await assert.rejects(
        run(process.execPath, ['--import', 'tsx', 'bin/keys.ts', 'create', '--name', 'cli', '--account', id], {
          cwd: root,
          env,
        }),
        (error: Error & { stderr: string; code: number }) =>
          error.code === 1 && /already has 4 API keys/.test(error.stderr),
      );

      // The Playground makes its own key whatever the cap, and it does not count.
      const playground = await console.request('POST', '/console/api/playground/chat/completions', {
        model: 'mock-chat',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 5,
      });
      assert.equal(playground.status, 200, JSON.stringify(playground.json));

      // A revoked key frees its place.
      const first = made.find((res) => res.status === 201)!.json;
      assert.equal((await console.request('DELETE', `/console/api/keys/${first.id}`)).status, 200);
      const again = await console.request<Key>('POST', '/console/api/keys', { name: 'after a revoke' });
      assert.equal(again.status, 201, JSON.stringify(again.json));
      expectError(await console.request('POST', '/console/api/keys', { name: 'over' }), 409, 'too_many_keys');
    },
  );

  // Issue 35, item 13: passwords hashed at N = 2^17, and an older hash made again at the sign-in that proves it.
  it('hashes new passwords at N = 2^17 and rehashes an older hash at the next right sign-in, never at a wrong one', async () => {
    const made = await admin('POST', '/admin/accounts', {
      email: 'old-hash@limits.test',
      password: 'old-password-1',
      role: 'member',
    });
    assert.equal(made.status, 201, JSON.stringify(made.json));
    const id = String(made.json.id);
    const record = await testRecord(redisUrl);
    const stored = async () => {
      const row = await record.selectFrom('accounts').select('password').where('id', '=', id).executeTakeFirstOrThrow();
      const hot = await redis.hget(accountKey(id), 'password');
      assert.equal(hot, row.password, "Redis's copy is the record's");
      return row.password;
    };
    assert.match(await stored(), /^scrypt\$131072\$8\$1\$/);

    // As if made before: the same password under the old parameters, in the record and in Redis.
    const old = await oldHash('old-password-1');
    await record.updateTable('accounts').set({ password: old }).where('id', '=', id).execute();
    await redis.hset(accountKey(id), 'password', old);

    const wrong = await new ConsoleClient(gateway.url, '198.51.100.201').signIn(
      'old-hash@limits.test',
      'not-the-password',
    );
    assert.equal(wrong.status, 401);
    assert.equal(await stored(), old, 'a wrong password rehashes nothing');

    const console = new ConsoleClient(gateway.url, '198.51.100.202');
    assert.equal((await console.signIn('old-hash@limits.test', 'old-password-1')).status, 200);
    const fresh = await stored();
    assert.match(fresh, /^scrypt\$131072\$8\$1\$/);
    assert.notEqual(fresh, old);
    // The new hash signs in; the old password is still the password.
    assert.equal(
      (await new ConsoleClient(gateway.url, '198.51.100.203').signIn('old-hash@limits.test', 'old-password-1')).status,
      200,
    );
    assert.equal(await stored(), fresh, "a hash of today's parameters is kept");
  });

  it(
    'runs at most 2 password hashes at once per process (1 on 2 cores) and queues at most 8: a burst past that ' +
      'from many addresses is a 429, not an endless queue',
    async () => {
      // 40 sign-ins at once from 40 addresses (the per-address and per-email throttle lets each through), unknown
      // emails: each costs one scrypt against the decoy hash.
      const answers = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          const client = new ConsoleClient(gateway.url, `192.0.2.${i + 1}`);
          return client.signIn(`nobody-${i}@limits.test`, 'some-password');
        }),
      );
      const statuses = answers.map((res) => res.status);
      const refused = answers.filter((res) => res.status === 429);
      // 1 or 2 hashing (by the cores) and 8 waiting: 30 or 31 refused at once, fewer if some finish while the rest
      // arrive.
      assert.ok(refused.length >= 20 && refused.length <= 40 - 1 - 8, statuses.join(' '));
      for (const res of refused) {
        expectError(res, 429, 'rate_limit_exceeded');
        assert.equal(res.headers.get('retry-after'), '1');
      }
      assert.ok(
        answers.every((res) => res.status === 429 || res.status === 401),
        statuses.join(' '),
      );
    },
  );

  it("makes npm run keys' limits an admin's: ceilings for the account's members", async () => {
    const { id, console } = await member();
    const env = { ...process.env, REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
    await run(
      process.execPath,
      [
        '--import',
        'tsx',
        'bin/keys.ts',
        'create',
        '--name',
        'cli key',
        '--account',
        id,
        '--rpm',
        '2',
        '--models',
        'mock-chat',
      ],
      { cwd: root, env },
    );
    const [key] = await ownKeys(console);
    assert.deepEqual(key!.admin_limits, {
      limit_usd: null,
      rpm: 2,
      tpm: null,
      models: ['mock-chat'],
      expires_at: null,
    });
    expectError(await patch(console, key!.id, { models: null }), 403, 'limit_set_by_admin', 'models');
    expectError(await patch(console, key!.id, { rpm: 3 }), 403, 'limit_set_by_admin', 'rpm');
    assert.equal((await patch(console, key!.id, { rpm: 1 })).status, 200);
  });
});
