import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { sql } from 'kysely';
import { defaultAccountId, type KeyAccess } from '../../shared/accounts.js';
import { accessChangedChannel, accountKey } from '../../shared/redis-keys.js';
import { hashSecret, type KeyStore } from '../../api/accounts/key-store.js';
import { openRecord, type RecordDb } from '../../storage/record/database.js';
import { loadHotState } from '../../storage/record/hot-state.js';
import { adminClient, expectAdminError } from '../support/admin-client.js';
import { ConsoleClient } from '../support/console-client.js';
import { freshRedis, startGateway, testKeyStore, type GatewayProcess } from '../support/gateway.js';
import { freshDatabase } from '../support/record.js';

/*
 * The service tiers an admin grants an account (`service_tiers`), end to end against a real Redis, PostgreSQL
 * and api process: the migration that adds the column, the admin API and the console's admin route that set,
 * show and reset them, the record and the Redis hash that keep them, the access every key of the account
 * carries (`KeyAccess.tiers`), the change message that drops the api instances' cached access, and the load
 * of Redis from the record.
 */

const adminToken = 'service-tiers-admin-token';
const adminEmail = 'tiers-admin@example.com';
const adminPassword = 'tiers-admin-password';

describe('an account’s service tiers, set by an admin', () => {
  let redis: Redis;
  let redisUrl: string;
  let gateway: GatewayProcess;
  let keys: KeyStore;
  let record: RecordDb;
  let subscriber: Redis;
  const messages: string[] = [];

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(9));
    gateway = await startGateway({
      role: 'api',
      env: {
        REDIS_URL: redisUrl,
        ADMIN_TOKEN: adminToken,
        ADMIN_EMAIL: adminEmail,
        ADMIN_PASSWORD: adminPassword,
        MOCK_VENDOR: 'on',
        // A cache that would trust a key for a minute: only the change message drops it.
        KEY_CACHE_TTL_MS: '60000',
        SERVICE_TIERS_GRANTED: 'default',
      },
    });
    keys = await testKeyStore(redis);
    record = keys.record;
    subscriber = redis.duplicate();
    subscriber.on('message', (_channel: string, message: string) => void messages.push(message));
    await subscriber.subscribe(accessChangedChannel);
  });

  after(async () => {
    await gateway?.stop();
    subscriber?.disconnect();
    redis?.disconnect();
  });

  const { admin } = adminClient(() => gateway.url, adminToken);

  /** An account made through the admin API, and a key of it. */
  async function accountWithKey(email: string): Promise<{ id: string; secret: string }> {
    const account = await admin('POST', '/admin/accounts', { email });
    assert.equal(account.status, 201, JSON.stringify(account.json));
    const key = await admin('POST', '/admin/keys', { name: 'tiers', account_id: account.json.id });
    assert.equal(key.status, 201, JSON.stringify(key.json));
    return { id: String(account.json.id), secret: String(key.json.key) };
  }

  const accessOf = async (secret: string): Promise<KeyAccess> => {
    const access = await keys.access(hashSecret(secret));
    assert.ok(access && access !== 'disabled', 'the key is known');
    return access;
  };
  const stored = async (id: string) =>
    (await record.selectFrom('accounts').select('service_tiers').where('id', '=', id).executeTakeFirstOrThrow())
      .service_tiers;

  it(
    'the migration adds accounts.service_tiers on a fresh database: nullable text naming only priority, default ' +
      'and flex',
    async () => {
      const url = await freshDatabase('service_tiers_migration');
      const db = await openRecord(url, { max: 1 });
      try {
        const applied = await sql<{ name: string }>`select name from record_migrations order by name`.execute(db);
        assert.ok(
          applied.rows.some((row) => row.name === '0007_account_service_tiers'),
          applied.rows.map((row) => row.name).join(' '),
        );
        const column = await sql<{ data_type: string; is_nullable: string; column_default: string | null }>`
        select data_type, is_nullable, column_default from information_schema.columns where table_name = 'accounts' and column_name = 'service_tiers'`.execute(
          db,
        );
        assert.deepEqual(column.rows, [{ data_type: 'text', is_nullable: 'YES', column_default: null }]);
        const insert = (id: string, tiers: string | null) =>
          sql`insert into accounts (id, created, service_tiers) values (${id}, 1, ${tiers})`.execute(db);
        await insert('acct_none', null);
        await insert('acct_one', 'priority');
        await insert('acct_all', 'priority,default,flex');
        for (const bad of ['', 'gold', 'priority,', 'priority default', 'fast', ',flex']) {
          await assert.rejects(
            insert(`acct_bad_${bad.length}_${bad.replace(/\W/g, '')}`, bad),
            (error: { code?: string }) => error.code === '23514',
            `'${bad}' is refused`,
          );
        }
        // Applied once: opening the record again migrates nothing more, and keeps what it holds.
        const again = await openRecord(url, { max: 1 });
        try {
          const rows = await again.selectFrom('accounts').select(['id', 'service_tiers']).orderBy('id').execute();
          assert.deepEqual(rows, [
            { id: 'acct_all', service_tiers: 'priority,default,flex' },
            { id: 'acct_none', service_tiers: null },
            { id: 'acct_one', service_tiers: 'priority' },
          ]);
        } finally {
          await again.destroy();
        }
      } finally {
        await db.destroy();
      }
    },
  );

  it(
    'PATCH sets service_tiers (in the tiers’ order), GET shows them, null goes back to the default; the record, ' +
      'Redis and the key’s access follow',
    async () => {
      const { id, secret } = await accountWithKey('tiered@example.com');
      const made = await admin('GET', `/admin/accounts/${id}`);
      assert.equal(made.json.service_tiers, null, 'none of its own: the configured default');
      assert.equal(await stored(id), null);
      assert.equal('tiers' in (await accessOf(secret)), false, 'no tiers on the access: the configured default');

      messages.length = 0;
      const patched = await admin('PATCH', `/admin/accounts/${id}`, { service_tiers: ['flex', 'priority'] });
      assert.equal(patched.status, 200, JSON.stringify(patched.json));
      assert.deepEqual(patched.json.service_tiers, ['priority', 'flex']);
      assert.deepEqual((await admin('GET', `/admin/accounts/${id}`)).json.service_tiers, ['priority', 'flex']);
      const listed = (await admin('GET', '/admin/accounts')).json.data as Array<{ id: string; service_tiers: unknown }>;
      assert.deepEqual(listed.find((a) => a.id === id)?.service_tiers, ['priority', 'flex']);
      assert.deepEqual(
        listed.filter((a) => a.id !== id).map((a) => a.service_tiers),
        listed.filter((a) => a.id !== id).map(() => null),
        'the others keep the default',
      );
      assert.equal(await stored(id), 'priority,flex', 'kept in the record');
      assert.equal(await redis.hget(accountKey(id), 'tiers'), 'priority,flex', 'and in the account’s hash');
      assert.deepEqual((await accessOf(secret)).tiers, ['priority', 'flex'], 'every key of the account carries them');
      // Every api drops what it cached of the account's keys, as for a change of weight or a disable.
      const deadline = Date.now() + 2000;
      while (!messages.includes(`account:${id}`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.ok(messages.includes(`account:${id}`), `account:${id} on ${accessChangedChannel}: ${messages.join(' ')}`);

      // With the weight in the same change; a grant of one.
      const both = await admin('PATCH', `/admin/accounts/${id}`, { weight: 4, service_tiers: ['priority'] });
      assert.equal(both.status, 200, JSON.stringify(both.json));
      assert.deepEqual([both.json.weight, both.json.service_tiers], [4, ['priority']]);
      assert.deepEqual(await accessOf(secret), {
        keyId: (await accessOf(secret)).keyId,
        accountId: id,
        weight: 4,
        tiers: ['priority'],
      });

      // Another change leaves them alone.
      assert.deepEqual((await admin('PATCH', `/admin/accounts/${id}`, { name: 'Renamed' })).json.service_tiers, [
        'priority',
      ]);

      const reset = await admin('PATCH', `/admin/accounts/${id}`, { service_tiers: null });
      assert.equal(reset.status, 200, JSON.stringify(reset.json));
      assert.equal(reset.json.service_tiers, null);
      assert.equal((await admin('GET', `/admin/accounts/${id}`)).json.service_tiers, null);
      assert.equal(await stored(id), null, 'NULL in the record');
      assert.equal(await redis.hget(accountKey(id), 'tiers'), '', "'' in the hash");
      assert.equal('tiers' in (await accessOf(secret)), false, 'back to the configured default');
    },
  );

  it('refuses what is not a list of distinct tiers with the OpenAI-shaped 400, changing nothing', async () => {
    const { id, secret } = await accountWithKey('refused@example.com');
    assert.equal((await admin('PATCH', `/admin/accounts/${id}`, { service_tiers: ['default'] })).status, 200);
    const refused: Array<[unknown, string, string]> = [
      [[], 'invalid_value', 'service_tiers'],
      [['gold'], 'invalid_value', 'service_tiers[0]'],
      [['fast'], 'invalid_value', 'service_tiers[0]'],
      [['auto'], 'invalid_value', 'service_tiers[0]'],
      [['default', 'default'], 'invalid_value', 'service_tiers'],
      [['priority', 'default', 'flex', 'flex'], 'invalid_value', 'service_tiers'],
      [[1], 'invalid_value', 'service_tiers[0]'],
      ['priority', 'invalid_type', 'service_tiers'],
      ['priority,flex', 'invalid_type', 'service_tiers'],
      [{ priority: true }, 'invalid_type', 'service_tiers'],
    ];
    for (const [value, code, param] of refused) {
      const error = await expectAdminError(admin('PATCH', `/admin/accounts/${id}`, { service_tiers: value }), 400, {
        type: 'invalid_request_error',
        code,
        param,
      });
      assert.match(error.message, /service_tiers/, JSON.stringify(value));
    }
    // A misspelt field is refused as every other is.
    await expectAdminError(admin('PATCH', `/admin/accounts/${id}`, { service_tier: ['priority'] }), 400, {
      code: 'unknown_parameter',
      param: 'service_tier',
    });
    assert.deepEqual((await admin('GET', `/admin/accounts/${id}`)).json.service_tiers, ['default'], 'unchanged');
    assert.equal(await stored(id), 'default');
    assert.deepEqual((await accessOf(secret)).tiers, ['default']);
    // The store refuses an empty grant too (null is how the default is asked for).
    await assert.rejects(
      keys.accounts.update(id, { serviceTiers: [] }),
      (error: { status?: number; param?: string }) => error.status === 400 && error.param === 'service_tiers',
    );
  });

  it('the console’s admin route sets and shows them, with the configured default beside; the member sees their own', async () => {
    const member = await admin('POST', '/admin/accounts', {
      email: 'console-tiers@example.com',
      password: 'member-password',
    });
    const id = String(member.json.id);
    const console = new ConsoleClient(gateway.url);
    assert.equal((await console.signIn(adminEmail, adminPassword)).status, 200);
    const list = await console.request<{
      data: Array<{ id: string; service_tiers: unknown }>;
      default_service_tiers: unknown;
    }>('GET', '/console/api/admin/accounts');
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.default_service_tiers, ['default'], 'SERVICE_TIERS_GRANTED');
    assert.equal(list.json.data.find((a) => a.id === id)?.service_tiers, null);
    const patched = await console.request('PATCH', `/console/api/admin/accounts/${id}`, {
      service_tiers: ['default', 'priority'],
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.json));
    assert.deepEqual(patched.json.service_tiers, ['priority', 'default']);
    assert.equal(await stored(id), 'priority,default');
    const bad = await console.request('PATCH', `/console/api/admin/accounts/${id}`, { service_tiers: ['premium'] });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error?.param, 'service_tiers[0]');
    // A member's own session shows what they were granted; a member cannot grant themselves more.
    const own = new ConsoleClient(gateway.url);
    assert.equal((await own.signIn('console-tiers@example.com', 'member-password')).status, 200);
    const session = await own.request<{ account: { service_tiers: unknown } }>('GET', '/console/api/session');
    assert.deepEqual(session.json.account.service_tiers, ['priority', 'default']);
    assert.equal(
      (
        await own.request('PATCH', `/console/api/admin/accounts/${id}`, {
          service_tiers: ['priority', 'default', 'flex'],
        })
      ).status,
      403,
    );
    const reset = await console.request('PATCH', `/console/api/admin/accounts/${id}`, { service_tiers: null });
    assert.equal(reset.json.service_tiers, null);
    assert.equal(await stored(id), null);
  });

  it('comes back into Redis from the record, and the Playground’s access carries it as any key of the account', async () => {
    const { id, secret } = await accountWithKey('reloaded@example.com');
    assert.equal((await admin('PATCH', `/admin/accounts/${id}`, { service_tiers: ['priority', 'flex'] })).status, 200);
    // Redis lost the field (an older snapshot, say): the record's load brings it back.
    await redis.hdel(accountKey(id), 'tiers');
    assert.equal('tiers' in (await accessOf(secret)), false);
    await loadHotState(redis, record);
    assert.equal(await redis.hget(accountKey(id), 'tiers'), 'priority,flex');
    assert.deepEqual((await accessOf(secret)).tiers, ['priority', 'flex']);
    // An account with none of its own gets '' (the configured default).
    const plain = await accountWithKey('plain@example.com');
    await redis.hdel(accountKey(plain.id), 'tiers');
    await loadHotState(redis, record);
    assert.equal(await redis.hget(accountKey(plain.id), 'tiers'), '');
    assert.equal('tiers' in (await accessOf(plain.secret)), false);

    const playground = await keys.playgroundAccess(id);
    assert.deepEqual([playground.accountId, playground.tiers], [id, ['priority', 'flex']]);
    assert.deepEqual(
      (await keys.playgroundAccess(id)).tiers,
      ['priority', 'flex'],
      'the second time too (the key made the first)',
    );
    assert.equal('tiers' in (await keys.playgroundAccess(plain.id)), false);
  });

  it('a key of the default account carries none (the configured default), until an admin grants it some', async () => {
    const key = await admin('POST', '/admin/keys', { name: 'default-account' });
    assert.equal(key.status, 201);
    const secret = String(key.json.key);
    assert.equal((await accessOf(secret)).accountId, defaultAccountId);
    assert.equal('tiers' in (await accessOf(secret)), false);
    assert.equal(
      (await admin('PATCH', `/admin/accounts/${defaultAccountId}`, { service_tiers: ['priority', 'default', 'flex'] }))
        .status,
      200,
    );
    assert.deepEqual((await accessOf(secret)).tiers, ['priority', 'default', 'flex']);
    assert.equal(await stored(defaultAccountId), 'priority,default,flex');
  });
});
