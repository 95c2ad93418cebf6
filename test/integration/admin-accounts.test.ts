import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { defaultAccountId, utcDay } from '../../shared/accounts.js';
import { accountKey, apiKeyHashesKey, apiKeyRecordKey, billKey } from '../../shared/redis-keys.js';
import { hashSecret } from '../../api/accounts/key-store.js';
import { freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { adminClient, expectAdminError, type ErrorBody, type Json } from '../support/admin-client.js';
import { freshDatabase, recordUrlFor, testRecord } from '../support/record.js';
import { sql } from 'kysely';
import { openRecord } from '../../storage/record/database.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const adminToken = 'admin-accounts-test-token';

// The admin API over HTTP against real api processes: accounts, credits, keys with limits, usage, and the CLI.
describe('admin API: accounts, credits, keys and usage', () => {
  let redis: Redis;
  let redisUrl: string;
  let api: GatewayProcess;
  let second: GatewayProcess;

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(13));
    // A cache that would trust a key for a minute: only the change messages can make the gateway notice within a
    // second.
    const env = { REDIS_URL: redisUrl, ADMIN_TOKEN: adminToken, MOCK_VENDOR: 'on', KEY_CACHE_TTL_MS: '60000' };
    [api, second] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'api', env })]);
  });

  after(async () => {
    await Promise.all([api?.stop(), second?.stop()]);
    redis?.disconnect();
  });

  const { admin } = adminClient(() => api.url, adminToken);
  const expectError = expectAdminError;

  const models = (gateway: GatewayProcess, key: string) =>
    fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });

  /**
   * Polls both apis until `status` (each request goes to Redis only if the cache was told), and returns how long it
   * took.
   */
  async function untilStatus(key: string, status: number): Promise<number> {
    const start = Date.now();
    for (const gateway of [api, second]) {
      while ((await models(gateway, key)).status !== status) {
        assert.ok(Date.now() - start < 1000, `a ${status} within a second`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    return Date.now() - start;
  }

  it('creates, lists, reads, patches accounts; emails unique in any case; no password out', async () => {
    const created = await admin('POST', '/admin/accounts', {
      email: 'Grace@Example.com',
      name: 'Grace',
      password: 'hopper-1906',
      role: 'admin',
    });
    assert.equal(created.status, 201);
    const { id, ...rest } = created.json;
    assert.match(String(id), /^acct_/);
    assert.deepEqual(
      { ...rest, created: typeof rest.created },
      {
        object: 'account',
        kind: 'person',
        email: 'Grace@Example.com',
        name: 'Grace',
        role: 'admin',
        balance_usd: null,
        unlimited: true,
        disabled: false,
        weight: 1,
        service_tiers: null,
        cache_max_ttl_s: null,
        mcp_tools: null,
        created: 'number',
      },
    );
    assert.match((await redis.hget(accountKey(String(id)), 'password'))!, /^scrypt\$/);

    await expectError(admin('POST', '/admin/accounts', { email: 'grace@EXAMPLE.com' }), 409, {
      code: 'account_exists',
      param: 'email',
    });
    await expectError(admin('POST', '/admin/accounts', { email: 'not an email' }), 400, {
      param: 'email',
      type: 'invalid_request_error',
    });
    await expectError(admin('POST', '/admin/accounts', { email: 'x@example.com', role: 'owner' }), 400, {
      param: 'role',
    });
    await expectError(admin('POST', '/admin/accounts', { email: 'x@example.com', password: 'short' }), 400, {
      param: 'password',
    });
    const unknown = await expectError(admin('POST', '/admin/accounts', { email: 'x@example.com', plan: 'gold' }), 400, {
      param: 'plan',
      code: 'unknown_parameter',
    });
    assert.match(unknown.message, /'plan'/);

    const listed = await admin('GET', '/admin/accounts');
    assert.equal(listed.json.object, 'list');
    const data = listed.json.data as Json[];
    assert.deepEqual(data.map((a) => a.id).sort(), [defaultAccountId, id].sort());
    assert.equal(data.find((a) => a.id === defaultAccountId)!.balance_usd, null, 'the default account is unlimited');
    assert.ok(!JSON.stringify(listed.json).includes('password') && !JSON.stringify(listed.json).includes('scrypt'));

    assert.equal((await admin('GET', `/admin/accounts/${id}`)).json.email, 'Grace@Example.com');
    await expectError(admin('GET', '/admin/accounts/acct_nope'), 404, { code: 'account_not_found' });

    const other = await admin('POST', '/admin/accounts', { email: 'ada@example.com' });
    assert.equal(other.json.role, 'member');
    await expectError(admin('PATCH', `/admin/accounts/${other.json.id}`, { email: 'GRACE@example.com' }), 409, {
      code: 'account_exists',
    });
    const patched = await admin('PATCH', `/admin/accounts/${other.json.id}`, {
      email: 'ADA@example.com',
      name: 'Ada',
      role: 'admin',
      password: 'lovelace-1815',
    });
    assert.equal(patched.status, 200);
    assert.deepEqual([patched.json.email, patched.json.name, patched.json.role], ['ADA@example.com', 'Ada', 'admin']);
    await expectError(admin('PATCH', `/admin/accounts/${other.json.id}`, { nickname: 'a' }), 400, {
      param: 'nickname',
    });
    await expectError(admin('PATCH', '/admin/accounts/acct_nope', { name: 'a' }), 404, { code: 'account_not_found' });
    await expectError(admin('DELETE', `/admin/accounts/${defaultAccountId}`), 400, { code: 'default_account' });
  });

  it('credits and debits with a ledger; refuses non-finite and zero amounts', async () => {
    const { json: account } = await admin('POST', '/admin/accounts', { email: 'credits@example.com' });
    const path = `/admin/accounts/${account.id}/credits`;
    assert.deepEqual((await admin('POST', path, { amount_usd: 12.5, note: 'invoice 7' })).json.balance_usd, 12.5);
    const corrected = await admin('POST', path, { amount_usd: -2.25 });
    assert.equal(corrected.status, 200);
    assert.equal(corrected.json.balance_usd, 10.25);
    assert.equal(
      await redis.hget(billKey(String(account.id)), 'balance'),
      '10250000',
      'the balance admission reads, in the account bill',
    );
    assert.equal((await admin('GET', `/admin/accounts/${account.id}`)).json.balance_usd, 10.25);

    await expectError(admin('POST', path, '{"amount_usd": 1e999}'), 400, { param: 'amount_usd' });
    await expectError(admin('POST', path, { amount_usd: '5' }), 400, { param: 'amount_usd', code: 'invalid_type' });
    await expectError(admin('POST', path, { amount_usd: 0 }), 400, { param: 'amount_usd' });
    await expectError(admin('POST', path, {}), 400, { param: 'amount_usd', code: 'missing_required_parameter' });
    await expectError(admin('POST', '/admin/accounts/acct_nope/credits', { amount_usd: 1 }), 404, {
      code: 'account_not_found',
    });
    await expectError(admin('POST', `/admin/accounts/${defaultAccountId}/credits`, { amount_usd: 1 }), 400, {
      code: 'unlimited_balance',
    });

    const ledger = await admin('GET', `/admin/accounts/${account.id}/ledger`);
    const entries = ledger.json.data as Json[];
    assert.deepEqual(
      entries.map((e) => [e.object, e.amount_usd, e.balance_usd, e.note]),
      [
        ['ledger_entry', -2.25, 10.25, ''],
        ['ledger_entry', 12.5, 12.5, 'invoice 7'],
      ],
    );
    assert.equal(((await admin('GET', `/admin/accounts/${account.id}/ledger?limit=1`)).json.data as Json[]).length, 1);
    await expectError(admin('GET', `/admin/accounts/${account.id}/ledger?limit=0`), 400, { param: 'limit' });
  });

  it('creates keys with limits, reads, filters, patches (null clears) and validates them', async () => {
    const { json: account } = await admin('POST', '/admin/accounts', { email: 'keys@example.com' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', account_id: 'acct_nope' }), 404, {
      code: 'account_not_found',
    });
    await expectError(admin('POST', '/admin/keys', { name: 'k', limit_usd: -1 }), 400, { param: 'limit_usd' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', rpm: 1.5 }), 400, { param: 'rpm' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', tpm: 0 }), 400, { param: 'tpm' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', models: ['ok', ''] }), 400, { param: 'models[1]' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', expires_at: 'soon' }), 400, { param: 'expires_at' });
    await expectError(admin('POST', '/admin/keys', { name: 'k', budget: 5 }), 400, { param: 'budget' });

    const created = await admin('POST', '/admin/keys', {
      name: 'limited',
      account_id: account.id,
      limit_usd: 5,
      rpm: 60,
      tpm: 10000,
      models: ['mock-chat', 'mock-embedding'],
      expires_at: 4_000_000_000,
      cache_ttl_s: 3600,
    });
    assert.equal(created.status, 201);
    const keyId = String(created.json.id);
    assert.match(String(created.json.key), /^sy-/);
    const view = (await admin('GET', `/admin/keys/${keyId}`)).json;
    assert.deepEqual(
      { ...view, created: typeof view.created, hint: typeof view.hint },
      {
        id: keyId,
        object: 'api_key',
        name: 'limited',
        hint: 'string',
        created: 'number',
        account_id: account.id,
        limit_usd: 5,
        rpm: 60,
        tpm: 10000,
        models: ['mock-chat', 'mock-embedding'],
        expires_at: 4_000_000_000,
        cache_ttl_s: 3600,
        mcp_tools: null,
        spent_usd: 0,
        last_used_at: null,
        // No budget per period: none set.
        budget_usd: null,
        budget_period: null,
        budget_spent_usd: null,
        budget_resets_at: null,
        // Set by an admin: ceilings for the account's members too.
        admin_limits: {
          limit_usd: 5,
          rpm: 60,
          tpm: 10000,
          models: ['mock-chat', 'mock-embedding'],
          expires_at: 4_000_000_000,
        },
      },
    );
    assert.equal(await redis.hget(apiKeyRecordKey(keyId), 'limit'), '5000000');
    assert.equal(await redis.hget(apiKeyRecordKey(keyId), 'cache_ttl'), '3600');

    const plain = await admin('POST', '/admin/keys', { name: 'plain' });
    assert.equal(plain.json.account_id, defaultAccountId);
    assert.deepEqual(
      [plain.json.limit_usd, plain.json.rpm, plain.json.models, plain.json.expires_at, plain.json.cache_ttl_s],
      [null, null, null, null, null],
    );

    const filtered = (await admin('GET', `/admin/keys?account_id=${account.id}`)).json.data as Json[];
    assert.deepEqual(
      filtered.map((k) => k.id),
      [keyId],
    );
    assert.ok(((await admin('GET', '/admin/keys')).json.data as Json[]).some((k) => k.id === plain.json.id));
    await expectError(admin('GET', '/admin/keys?account_id=acct_nope'), 404, { code: 'account_not_found' });

    const patched = await admin('PATCH', `/admin/keys/${keyId}`, {
      rpm: null,
      models: null,
      limit_usd: 7.5,
      name: 'renamed',
    });
    assert.equal(patched.status, 200);
    assert.deepEqual(
      [patched.json.rpm, patched.json.models, patched.json.limit_usd, patched.json.name, patched.json.tpm],
      [null, null, 7.5, 'renamed', 10000],
    );
    assert.equal(patched.json.cache_ttl_s, 3600, 'left alone by a change of other fields');
    await expectError(admin('PATCH', `/admin/keys/${keyId}`, { limit_usd: -0.5 }), 400, { param: 'limit_usd' });
    await expectError(admin('PATCH', `/admin/keys/${keyId}`, { account_id: 'acct_x' }), 400, { param: 'account_id' });
    await expectError(admin('PATCH', '/admin/keys/key_nope', { rpm: 5 }), 404, { code: 'key_not_found' });
    await expectError(admin('GET', '/admin/keys/key_nope'), 404, { code: 'key_not_found' });
  });

  it(
    'the migration 0009 adds api_keys.cache_ttl_s and accounts.cache_max_ttl_s: nullable integers, never negative, ' +
      'NULL on every row before',
    async () => {
      const url = await freshDatabase('cache_settings_migration');
      const db = await openRecord(url, { max: 1 });
      try {
        const applied = await sql<{ name: string }>`select name from record_migrations order by name`.execute(db);
        assert.ok(
          applied.rows.some((row) => row.name === '0009_cache_settings'),
          applied.rows.map((row) => row.name).join(' '),
        );
        const columns = await sql<{
          table_name: string;
          column_name: string;
          data_type: string;
          is_nullable: string;
          column_default: string | null;
        }>`
        select table_name, column_name, data_type, is_nullable, column_default from information_schema.columns
        where (table_name, column_name) in (('api_keys', 'cache_ttl_s'), ('accounts', 'cache_max_ttl_s')) order by table_name`.execute(
          db,
        );
        assert.deepEqual(columns.rows, [
          {
            table_name: 'accounts',
            column_name: 'cache_max_ttl_s',
            data_type: 'integer',
            is_nullable: 'YES',
            column_default: null,
          },
          {
            table_name: 'api_keys',
            column_name: 'cache_ttl_s',
            data_type: 'integer',
            is_nullable: 'YES',
            column_default: null,
          },
        ]);
        await sql`insert into accounts (id, created) values ('acct_before', 1)`.execute(db);
        await sql`insert into api_keys (id, account_id, created, hash) values ('key_before', 'acct_before', 1, 'h1')`.execute(
          db,
        );
        await sql`insert into accounts (id, created, cache_max_ttl_s) values ('acct_off', 1, 0)`.execute(db);
        await sql`insert into api_keys (id, account_id, created, hash, cache_ttl_s) values ('key_ttl', 'acct_off', 1, 'h2', 3600)`.execute(
          db,
        );
        const negative = (error: { code?: string }) => error.code === '23514';
        await assert.rejects(
          sql`insert into accounts (id, created, cache_max_ttl_s) values ('acct_bad', 1, -1)`.execute(db),
          negative,
        );
        await assert.rejects(
          sql`insert into api_keys (id, account_id, created, hash, cache_ttl_s) values ('key_bad', 'acct_off', 1, 'h3', -1)`.execute(
            db,
          ),
          negative,
        );
        assert.deepEqual(await db.selectFrom('accounts').select(['id', 'cache_max_ttl_s']).orderBy('id').execute(), [
          { id: 'acct_before', cache_max_ttl_s: null },
          { id: 'acct_off', cache_max_ttl_s: 0 },
        ]);
        assert.deepEqual(await db.selectFrom('api_keys').select(['id', 'cache_ttl_s']).orderBy('id').execute(), [
          { id: 'key_before', cache_ttl_s: null },
          { id: 'key_ttl', cache_ttl_s: 3600 },
        ]);
        // Applied once: opening the record again migrates nothing more.
        const again = await openRecord(url, { max: 1 });
        await again.destroy();
      } finally {
        await db.destroy();
      }
    },
  );

  it(
    "sets and clears an account's cache cap (cache_max_ttl_s) and a key's default cache TTL (cache_ttl_s); refuses " +
      'what is not whole seconds',
    async () => {
      const record = await testRecord(redis);
      const { json: account } = await admin('POST', '/admin/accounts', { email: 'cache-cap@example.com' });
      const id = String(account.id);
      assert.equal(account.cache_max_ttl_s, null, 'no cap of its own');
      const cap = async () =>
        (await record.selectFrom('accounts').select('cache_max_ttl_s').where('id', '=', id).executeTakeFirstOrThrow())
          .cache_max_ttl_s;
      for (const [value, hash] of [
        [600, '600'],
        [0, '0'],
        [31_536_000, '31536000'],
      ] as const) {
        const patched = await admin('PATCH', `/admin/accounts/${id}`, { cache_max_ttl_s: value });
        assert.equal(patched.status, 200, JSON.stringify(patched.json));
        assert.equal(patched.json.cache_max_ttl_s, value);
        assert.equal((await admin('GET', `/admin/accounts/${id}`)).json.cache_max_ttl_s, value);
        assert.equal(await cap(), value, 'kept in the record');
        assert.equal(await redis.hget(accountKey(id), 'cache_max_ttl'), hash, 'and in the account’s hash');
      }
      // Another change leaves it alone; null lifts it.
      assert.equal(
        (await admin('PATCH', `/admin/accounts/${id}`, { name: 'Capped' })).json.cache_max_ttl_s,
        31_536_000,
      );
      assert.equal(
        (await admin('PATCH', `/admin/accounts/${id}`, { cache_max_ttl_s: 0, weight: 2 })).json.cache_max_ttl_s,
        0,
      );
      for (const [value, code] of [
        [-1, 'invalid_value'],
        // Not whole: said as zod's int (as rpm's).
        [1.5, 'invalid_type'],
        [31_536_001, 'invalid_value'],
        ['60', 'invalid_type'],
        [true, 'invalid_type'],
      ] as const) {
        const error = await expectError(admin('PATCH', `/admin/accounts/${id}`, { cache_max_ttl_s: value }), 400, {
          type: 'invalid_request_error',
          code,
          param: 'cache_max_ttl_s',
        });
        assert.match(error.message, /cache_max_ttl_s/, JSON.stringify(value));
      }
      assert.equal(
        (await admin('GET', `/admin/accounts/${id}`)).json.cache_max_ttl_s,
        0,
        'unchanged by what was refused',
      );
      const lifted = await admin('PATCH', `/admin/accounts/${id}`, { cache_max_ttl_s: null });
      assert.equal(lifted.json.cache_max_ttl_s, null);
      assert.equal(await cap(), null);
      assert.equal(await redis.hget(accountKey(id), 'cache_max_ttl'), '');
      // Only PATCH sets it, as the weight and the tiers.
      await expectError(
        admin('POST', '/admin/accounts', { email: 'capped-at-birth@example.com', cache_max_ttl_s: 60 }),
        400,
        { code: 'unknown_parameter', param: 'cache_max_ttl_s' },
      );

      // A key's default TTL: set on creation, changed, 0 kept as set, null clears; bounded as whole seconds.
      const made = await admin('POST', '/admin/keys', { name: 'cached', account_id: id, cache_ttl_s: 120 });
      assert.equal(made.status, 201, JSON.stringify(made.json));
      assert.equal(made.json.cache_ttl_s, 120);
      // Not a limit: no ceiling is kept of it.
      assert.deepEqual(made.json.admin_limits, {
        limit_usd: null,
        rpm: null,
        tpm: null,
        models: null,
        expires_at: null,
      });
      const keyId = String(made.json.id);
      const ttl = async () =>
        (await record.selectFrom('api_keys').select('cache_ttl_s').where('id', '=', keyId).executeTakeFirstOrThrow())
          .cache_ttl_s;
      assert.equal(await ttl(), 120);
      assert.equal((await admin('PATCH', `/admin/keys/${keyId}`, { cache_ttl_s: 86_400 })).json.cache_ttl_s, 86_400);
      assert.equal(await redis.hget(apiKeyRecordKey(keyId), 'cache_ttl'), '86400');
      assert.equal((await admin('PATCH', `/admin/keys/${keyId}`, { cache_ttl_s: 0 })).json.cache_ttl_s, 0);
      assert.equal(await ttl(), 0);
      for (const [value, code] of [
        [-5, 'invalid_value'],
        [2.5, 'invalid_type'],
        [31_536_001, 'invalid_value'],
        ['3600', 'invalid_type'],
      ] as const) {
        await expectError(admin('PATCH', `/admin/keys/${keyId}`, { cache_ttl_s: value }), 400, {
          type: 'invalid_request_error',
          code,
          param: 'cache_ttl_s',
        });
        await expectError(admin('POST', '/admin/keys', { name: 'bad ttl', cache_ttl_s: value }), 400, {
          type: 'invalid_request_error',
          code,
          param: 'cache_ttl_s',
        });
      }
      const cleared = await admin('PATCH', `/admin/keys/${keyId}`, { cache_ttl_s: null });
      assert.equal(cleared.json.cache_ttl_s, null);
      assert.equal(await ttl(), null);
      assert.equal(await redis.hget(apiKeyRecordKey(keyId), 'cache_ttl'), '');
    },
  );

  it("refuses a deleted account's keys on every api within a second", async () => {
    const { json: account } = await admin('POST', '/admin/accounts', { email: 'doomed@example.com' });
    const { json: key } = await admin('POST', '/admin/keys', { name: 'doomed', account_id: account.id });
    const secret = String(key.key);
    for (const gateway of [api, second]) assert.equal((await models(gateway, secret)).status, 200);

    const deleted = await admin('DELETE', `/admin/accounts/${account.id}`);
    assert.deepEqual(deleted.json, { id: account.id, object: 'account', deleted: true, keys_revoked: 1 });
    await untilStatus(secret, 401);
    assert.equal(await redis.hget(apiKeyHashesKey, hashSecret(secret)), null);
    await expectError(admin('GET', `/admin/accounts/${account.id}`), 404, { code: 'account_not_found' });
    await expectError(admin('DELETE', `/admin/accounts/${account.id}`), 404, { code: 'account_not_found' });
    await expectError(admin('GET', `/admin/keys/${key.id}`), 404, { code: 'key_not_found' });
    assert.equal(
      (await admin('POST', '/admin/accounts', { email: 'doomed@example.com' })).status,
      201,
      'the email is free again',
    );
  });

  it('applies a key change on every api within a second: expiry says so', async () => {
    const { json: key } = await admin('POST', '/admin/keys', { name: 'expiring' });
    const secret = String(key.key);
    for (const gateway of [api, second]) assert.equal((await models(gateway, secret)).status, 200);

    await admin('PATCH', `/admin/keys/${key.id}`, { expires_at: Math.floor(Date.now() / 1000) - 1 });
    await untilStatus(secret, 401);
    const res = await models(api, secret);
    const body = (await res.json()) as ErrorBody;
    assert.equal(body.error.code, 'invalid_api_key');
    assert.match(body.error.message, /expired/);

    await admin('PATCH', `/admin/keys/${key.id}`, { expires_at: null });
    await untilStatus(secret, 200);
    assert.equal((await admin('DELETE', `/admin/keys/${key.id}`)).status, 200);
    await untilStatus(secret, 401);
  });

  it('reports usage from the per-day aggregates, grouped and filtered', async () => {
    const today = utcDay(Date.now());
    const yesterday = utcDay(Date.now() - 86_400_000);
    // As the usage writer keeps them: a row per day, account, key and model in the record.
    const record = await testRecord(redis);
    const add = (day: string, field: string, value: number) => {
      const [account, key, model, metric] = field.split('|') as [string, string, string, string];
      return record
        .insertInto('usage_daily')
        .values({ day, account_id: account, key_id: key, model, [metric]: value } as never)
        .onConflict((oc) =>
          oc.columns(['account_id', 'day', 'key_id', 'model']).doUpdateSet({ [metric]: value } as never),
        )
        .execute();
    };
    await add(yesterday, 'acct_u|key_1|mock-chat|requests', 3);
    await add(yesterday, 'acct_u|key_1|mock-chat|input_tokens', 30);
    await add(yesterday, 'acct_u|key_1|mock-chat|cost_micros', 1_250_000);
    await add(today, 'acct_u|key_2|mock-image|requests', 1);
    await add(today, 'acct_u|key_2|mock-image|images', 2);
    await add(today, 'acct_u|key_2|mock-image|cost_micros', 40_000);
    await add(today, 'acct_v|key_3|mock-chat|requests', 5);
    await add('2020-01-01', 'acct_u|key_1|mock-chat|requests', 100);

    // What the vendor's prompt cache read, wrote and saved, in a day row of their own.
    await add(today, 'acct_u|key_2|mock-image|cache_write_tokens', 7);
    await add(today, 'acct_u|key_2|mock-image|prompt_cache_saved_micros', -3);
    const usage = async (query: string) =>
      ((await admin('GET', `/admin/usage?${query}`)).json.data as Json[]).map(({ cached_tokens: _, ...row }) => row);
    assert.deepEqual(await usage('group_by=day&account_id=acct_u'), [
      {
        day: yesterday,
        requests: 3,
        input_tokens: 30,
        cache_write_tokens: 0,
        output_tokens: 0,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_usd: 1.25,
        saved_micros: 0,
        prompt_cache_saved_micros: 0,
      },
      {
        day: today,
        requests: 1,
        input_tokens: 0,
        cache_write_tokens: 7,
        output_tokens: 0,
        images: 2,
        audio_seconds: 0,
        video_seconds: 0,
        cost_usd: 0.04,
        saved_micros: 0,
        prompt_cache_saved_micros: -3,
      },
    ]);
    assert.deepEqual(
      (await usage('group_by=model')).map((r) => [r.model, r.requests]),
      [
        ['mock-chat', 8],
        ['mock-image', 1],
      ],
    );
    assert.deepEqual(
      (await usage('group_by=key&model=mock-chat')).map((r) => [r.key_id, r.requests]),
      [
        ['key_1', 3],
        ['key_3', 5],
      ],
    );
    assert.deepEqual(
      (await usage('key_id=key_1')).map((r) => r.requests),
      [3],
      'without group_by: one total over the default 30 days',
    );
    assert.deepEqual(
      (await usage('from=2020-01-01&to=2020-01-02&group_by=day')).map((r) => [r.day, r.requests]),
      [['2020-01-01', 100]],
    );

    await expectError(admin('GET', `/admin/usage?from=2020-01-01&to=${today}`), 400, { param: 'from' });
    await expectError(admin('GET', '/admin/usage?from=2020-01-05&to=2020-01-01'), 400, { param: 'from' });
    await expectError(admin('GET', '/admin/usage?from=yesterday'), 400, { param: 'from' });
    await expectError(admin('GET', '/admin/usage?group_by=week'), 400, { param: 'group_by' });
    await expectError(admin('GET', '/admin/usage?account=acct_u'), 400, { param: 'account' });
  });

  it('npm run accounts / keys: create, credit, and a key with limits in that account', async () => {
    const env = { ...process.env, REDIS_URL: redisUrl, DATABASE_URL: await recordUrlFor(redisUrl) };
    const cli = (script: string, args: string[]) =>
      run(process.execPath, ['--import', 'tsx', `bin/${script}.ts`, ...args], { cwd: root, env });
    const created = await cli('accounts', [
      'create',
      '--email',
      'cli@example.com',
      '--name',
      'CLI',
      '--role',
      'member',
      '--password',
      'cli-password',
    ]);
    const accountId = created.stdout.trim();
    assert.match(accountId, /^acct_[0-9a-f]+$/);
    assert.equal((await cli('accounts', ['credit', accountId, '20', '--note', 'from the cli'])).stdout.trim(), '20');
    assert.equal((await cli('accounts', ['credit', accountId, '-1.5'])).stdout.trim(), '18.5');
    assert.equal((await admin('GET', `/admin/accounts/${accountId}`)).json.balance_usd, 18.5);
    assert.match(
      (await cli('accounts', ['list'])).stdout,
      new RegExp(`${accountId}\\tcli@example.com\\tmember\\t18.5 USD`),
    );
    assert.match((await cli('accounts', ['ledger', accountId])).stdout, /\t20\t20\tfrom the cli/);
    await assert.rejects(cli('accounts', ['create', '--email', 'CLI@example.com']), /already exists/);
    await assert.rejects(cli('accounts', ['credit', accountId, 'lots']), /non-zero amount/);

    const key = await cli('keys', [
      'create',
      '--name',
      'cli key',
      '--account',
      accountId,
      '--limit-usd',
      '5',
      '--rpm',
      '60',
      '--models',
      'mock-chat,mock-embedding',
      '--expires-at',
      '4000000000',
      '--cache-ttl-s',
      '300',
    ]);
    const keyId = await redis.hget(apiKeyHashesKey, hashSecret(key.stdout.trim()));
    const view = (await admin('GET', `/admin/keys/${keyId}`)).json;
    assert.deepEqual(
      [view.account_id, view.limit_usd, view.rpm, view.tpm, view.models, view.expires_at, view.cache_ttl_s],
      [accountId, 5, 60, null, ['mock-chat', 'mock-embedding'], 4_000_000_000, 300],
    );
    assert.equal((await models(api, key.stdout.trim())).status, 200);
    await assert.rejects(cli('keys', ['create', '--name', 'bad', '--rpm', '1.5']), /--rpm must be a whole number/);
    await assert.rejects(
      cli('keys', ['create', '--name', 'bad', '--cache-ttl-s', '1.5']),
      /--cache-ttl-s must be a whole number of seconds/,
    );
    await assert.rejects(
      cli('keys', ['create', '--name', 'orphan', '--account', 'acct_nope']),
      /switchyard keys: no account with the id acct_nope \(npm run accounts -- list shows them\)\n$/,
    );
  });
});
