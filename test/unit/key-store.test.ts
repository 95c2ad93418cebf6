import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import { billKey } from '../../shared/redis-keys.js';
import { creditScript } from '../../shared/money/scripts.js';
import type { Redis } from 'ioredis';
import { defaultAccountId } from '../../shared/accounts.js';
import {
  accessChangedChannel,
  accountEmailsKey,
  accountKey,
  accountKeysKey,
  apiKeyHashesKey,
  apiKeyIdsKey,
  apiKeyRecordKey,
} from '../../shared/redis-keys.js';
import { reserve } from '../../shared/money/billing.js';
import { GatewayError } from '../../shared/errors.js';
import { hashPassword, usdToMicros, verifyPassword } from '../../api/accounts/account-store.js';
import { hashSecret, KeyCache, KeyStore } from '../../api/accounts/key-store.js';
import { readUsage, usageQuerySchema } from '../../api/accounts/admin-usage.js';
import { freshRedis } from '../support/gateway.js';
import { emptyRecord, testRecord } from '../support/record.js';
import { loadHotState } from '../../storage/record/hot-state.js';

// Against a real Redis: the store is Lua scripts whose point is to hold together under races.
let redis: Redis;
let store: KeyStore;

before(async () => {
  redis = (await freshRedis(12)).redis;
  store = new KeyStore(redis, await testRecord(redis));
});
after(() => redis.disconnect());
beforeEach(async () => {
  await redis.flushdb();
  await emptyRecord(store.record);
});

const isError = (status: number, code: string) => (error: unknown) =>
  error instanceof GatewayError && error.status === status && error.code === code;

describe('AccountStore', () => {
  it('creates accounts with unique emails in any letter case, and never keeps a password in clear', async () => {
    const a = await store.accounts.create({
      email: ' Ann@Example.com ',
      name: 'Ann',
      password: 'correct horse',
      role: 'admin',
    });
    assert.equal(a.email, 'Ann@Example.com');
    assert.equal(a.balanceMicros, undefined, 'an admin spends without a balance unless one is set for it');
    assert.equal(
      (await store.accounts.create({ email: 'member@example.com' })).balanceMicros,
      0,
      'a member starts at 0',
    );
    assert.equal(
      (await store.accounts.create({ email: 'metered-admin@example.com', role: 'admin', unlimited: false }))
        .balanceMicros,
      0,
    );
    assert.equal(await redis.hget(accountEmailsKey, 'ann@example.com'), a.id);
    await assert.rejects(store.accounts.create({ email: 'ANN@example.COM' }), isError(409, 'account_exists'));
    const stored = await redis.hget(accountKey(a.id), 'password');
    assert.match(stored!, /^scrypt\$/);
    assert.ok(!stored!.includes('correct horse'));
    assert.equal(await store.accounts.checkPassword(a.id, 'correct horse'), true);
    assert.equal(await store.accounts.checkPassword(a.id, 'wrong horse!'), false);
    assert.equal('password' in (await store.accounts.get(a.id))!, false);
  });

  it('moves an email on update, refuses one another account holds, allows a change of case', async () => {
    const a = await store.accounts.create({ email: 'a@example.com' });
    const b = await store.accounts.create({ email: 'b@example.com' });
    await assert.rejects(store.accounts.update(b.id, { email: 'A@EXAMPLE.COM' }), isError(409, 'account_exists'));
    assert.equal((await store.accounts.update(a.id, { email: 'A@Example.com', name: 'A' }))!.email, 'A@Example.com');
    await store.accounts.update(a.id, { email: 'new@example.com' });
    assert.equal(await redis.hget(accountEmailsKey, 'a@example.com'), null, 'the old email is freed');
    assert.equal(await redis.hget(accountEmailsKey, 'new@example.com'), a.id);
    assert.equal(await store.accounts.update('acct_nope', { name: 'x' }), undefined);
    await store.accounts.update(a.id, { password: 'a new password' });
    assert.equal(await store.accounts.checkPassword(a.id, 'a new password'), true);
    await store.accounts.update(a.id, { password: null });
    assert.equal(await store.accounts.checkPassword(a.id, 'a new password'), false);
  });

  it('credits with a ledger entry per change, negative corrections included', async () => {
    const a = await store.accounts.create({ email: 'c@example.com' });
    assert.equal(await store.accounts.credit(a.id, usdToMicros(10), 'top-up'), 10_000_000);
    assert.equal(await store.accounts.credit(a.id, usdToMicros(-2.5), 'refund'), 7_500_000);
    const ledger = await store.accounts.ledger(a.id, 10);
    assert.deepEqual(
      ledger.map(({ amountMicros, balanceMicros, note }) => ({ amountMicros, balanceMicros, note })),
      [
        { amountMicros: -2_500_000, balanceMicros: 7_500_000, note: 'refund' },
        { amountMicros: 10_000_000, balanceMicros: 10_000_000, note: 'top-up' },
      ],
    );
    assert.ok(Math.abs(ledger[0]!.time - Date.now() / 1000) < 5);
    await assert.rejects(store.accounts.credit('acct_nope', 1), isError(404, 'account_not_found'));
    await assert.rejects(store.accounts.credit(defaultAccountId, 1), isError(400, 'unlimited_balance'));
  });

  it('answers each credit with the balance right after it, also when a later credit reached Redis first', async () => {
    const a = await store.accounts.create({ email: 'overtaken@example.com' });
    assert.equal(await store.accounts.credit(a.id, usdToMicros(10), 'first'), 10_000_000);
    const [first] = await store.accounts.ledger(a.id, 1);
    // Two later entries (ids first+1 and first+2), the second applied before the first: their Lua calls as the store
    // makes them.
    const credit = (bill: string, credits: number, ledgerId: number | string, amount: number) =>
      creditScript(redis, { bill, credits, ledgerId, amount });
    const bill = billKey(a.id);
    assert.deepEqual(await credit(bill, 13_000_000, first!.id + 2, 2_000_000), [1, 13_000_000]);
    assert.deepEqual(
      await credit(bill, 11_000_000, first!.id + 1, 1_000_000),
      [1, 11_000_000],
      'the overtaken entry: the balance right after it',
    );
    assert.deepEqual(
      await credit(bill, 13_000_000, first!.id + 2, 2_000_000),
      [1, 13_000_000],
      'a retry answers the same',
    );
    assert.equal((await readBill(redis, a.id))?.balanceMicros, 13_000_000, 'and nothing moved twice');
  });

  it('keeps a default account: lazily made, unlimited, undeletable', async () => {
    await store.accounts.ensureDefault();
    await store.accounts.ensureDefault();
    const list = await store.accounts.list();
    assert.equal(list.length, 1);
    assert.equal(list[0]!.id, defaultAccountId);
    assert.equal(list[0]!.balanceMicros, undefined);
    await assert.rejects(store.accounts.delete(defaultAccountId), isError(400, 'default_account'));
  });

  it('deletes an account: marked, email freed, every key revoked and announced', async () => {
    const a = await store.accounts.create({ email: 'd@example.com' });
    const k1 = await store.create('one', { accountId: a.id });
    const k2 = await store.create('two', { accountId: a.id });
    const other = await store.create('other');
    const sub = redis.duplicate();
    const messages: string[] = [];
    sub.on('message', (_channel: string, message: string) => messages.push(message));
    await sub.subscribe(accessChangedChannel);
    try {
      assert.equal(await store.accounts.delete(a.id), 2);
      assert.equal(await redis.hget(accountKey(a.id), 'deleted'), '1');
      assert.equal(await store.accounts.get(a.id), undefined);
      assert.equal(await store.accounts.delete(a.id), undefined);
      for (const k of [k1, k2]) {
        assert.equal(await redis.hget(apiKeyHashesKey, hashSecret(k.key)), null);
        assert.equal(await redis.sismember(apiKeyIdsKey, k.id), 0);
        assert.equal(await store.access(hashSecret(k.key)), undefined);
      }
      assert.equal(await redis.exists(accountKeysKey(a.id)), 0);
      assert.ok(await store.access(hashSecret(other.key)), 'keys of other accounts stay');
      assert.ok((await store.accounts.create({ email: 'D@example.com' })).id !== a.id, 'the email can be used again');
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(messages, [`account:${a.id}`]);
    } finally {
      sub.disconnect();
    }
  });

  it('hashes passwords with a fresh salt each time', async () => {
    const [one, two] = [await hashPassword('same password'), await hashPassword('same password')];
    assert.notEqual(one, two);
    assert.equal(await verifyPassword('same password', one), true);
    assert.equal(await verifyPassword('same password', 'plain'), false);
  });
});

describe('KeyStore', () => {
  it('keeps create(name) working: the key belongs to the default account, which it creates', async () => {
    const created = await store.create('legacy caller');
    assert.equal(created.accountId, defaultAccountId);
    assert.equal(await redis.hget(accountKey(defaultAccountId), 'unlimited'), '1');
    assert.equal(await store.lookup(hashSecret(created.key)), created.id);
    assert.deepEqual(await store.access(hashSecret(created.key)), { keyId: created.id, accountId: defaultAccountId });
  });

  it('stores limits the way the billing scripts read them, and returns them as access', async () => {
    const a = await store.accounts.create({ email: 'k@example.com' });
    const created = await store.create('limited', {
      accountId: a.id,
      limitMicros: 5_000_000,
      rpm: 60,
      tpm: 1000,
      models: ['mock-chat'],
      expiresAt: 4_000_000_000,
    });
    const record = await redis.hgetall(apiKeyRecordKey(created.id));
    assert.deepEqual(
      {
        account: record.account,
        limit: record.limit,
        rpm: record.rpm,
        tpm: record.tpm,
        models: record.models,
        expires: record.expires,
      },
      { account: a.id, limit: '5000000', rpm: '60', tpm: '1000', models: '["mock-chat"]', expires: '4000000000' },
    );
    // Its spend starts in its account's bill, where admission counts it.
    assert.deepEqual(await readKeySpend(redis, a.id, created.id), { spentMicros: 0, reservedMicros: 0 });
    const gone = await store.create('gone', { accountId: a.id });
    await store.revoke(gone.id);
    assert.equal(await readKeySpend(redis, a.id, gone.id), undefined, 'revoked: out of the bill');
    assert.deepEqual(await store.access(hashSecret(created.key)), {
      keyId: created.id,
      accountId: a.id,
      limitMicros: 5_000_000,
      rpm: 60,
      tpm: 1000,
      models: ['mock-chat'],
      expiresAt: 4_000_000_000,
    });
    assert.equal(await redis.sismember(accountKeysKey(a.id), created.id), 1);
    await assert.rejects(store.create('orphan', { accountId: 'acct_nope' }), isError(404, 'account_not_found'));

    const changed = await store.update(created.id, {
      rpm: null,
      models: null,
      limitMicros: 1_000_000,
      name: 'renamed',
    });
    assert.equal(changed!.rpm, undefined);
    assert.equal(changed!.models, undefined);
    assert.equal(changed!.limitMicros, 1_000_000);
    assert.equal(changed!.name, 'renamed');
    assert.equal(await redis.hget(apiKeyRecordKey(created.id), 'rpm'), '');
    assert.equal(await store.update('key_nope', { rpm: 1 }), undefined);
    assert.equal(await redis.exists(apiKeyRecordKey('key_nope')), 0, 'an update does not make a half record');
    assert.deepEqual(
      (await store.list({ accountId: a.id })).map((k) => k.id),
      [created.id],
    );
  });

  it(
    "carries the key's default cache TTL and its account's cache cap on the access: set, cleared, 0, and reloaded " +
      'from the record',
    async () => {
      const a = await store.accounts.create({ email: 'cache-settings@example.com' });
      const made = await store.create('cached', { accountId: a.id, rpm: 5, cacheTtlS: 600 }, 'member');
      assert.equal(made.cacheTtlS, 600);
      assert.equal(await redis.hget(apiKeyRecordKey(made.id), 'cache_ttl'), '600');
      const row = () =>
        store.record
          .selectFrom('api_keys')
          .select(['cache_ttl_s', 'admin_rpm'])
          .where('id', '=', made.id)
          .executeTakeFirstOrThrow();
      assert.deepEqual(await row(), { cache_ttl_s: 600, admin_rpm: null });
      const hash = hashSecret(made.key);
      assert.deepEqual(await store.access(hash), { keyId: made.id, accountId: a.id, rpm: 5, cacheTtlS: 600 });

      // The account's cap: a number, 0 (caching forbidden: kept on the access as 0), or none (left out).
      const messages: string[] = [];
      store.onAccessChanged = (message) => void messages.push(message);
      try {
        assert.equal((await store.accounts.update(a.id, { cacheMaxTtlS: 60 }))!.cacheMaxTtlS, 60);
        assert.deepEqual(messages, [`account:${a.id}`], 'every api drops the cached access of the account’s keys');
        assert.deepEqual(await store.access(hash), {
          keyId: made.id,
          accountId: a.id,
          rpm: 5,
          cacheTtlS: 600,
          cacheMaxTtlS: 60,
        });
        assert.equal((await store.accounts.update(a.id, { cacheMaxTtlS: 0 }))!.cacheMaxTtlS, 0);
        assert.equal(await redis.hget(accountKey(a.id), 'cache_max_ttl'), '0');
        assert.equal(((await store.access(hash)) as { cacheMaxTtlS?: number }).cacheMaxTtlS, 0);
        const cap = async () =>
          (
            await store.record
              .selectFrom('accounts')
              .select('cache_max_ttl_s')
              .where('id', '=', a.id)
              .executeTakeFirstOrThrow()
          ).cache_max_ttl_s;
        assert.equal(await cap(), 0);

        // A member changes the key's default as freely as it likes: no ceiling applies (none is kept of it either).
        messages.length = 0;
        assert.equal((await store.update(made.id, { cacheTtlS: 7200 }, 'member'))!.cacheTtlS, 7200);
        assert.deepEqual(messages, [made.id]);
        assert.deepEqual(await row(), { cache_ttl_s: 7200, admin_rpm: null });
        // 0 is kept as set, and means no default: the access leaves it out.
        assert.equal((await store.update(made.id, { cacheTtlS: 0 }, 'member'))!.cacheTtlS, 0);
        assert.equal('cacheTtlS' in ((await store.access(hash)) as object), false);
        assert.equal((await store.update(made.id, { cacheTtlS: 30 }, 'admin'))!.cacheTtlS, 30);
        assert.deepEqual(
          await store.withAdminLimits([(await store.get(made.id))!]).then(([key]) => key!.adminLimits),
          {},
          'an admin’s TTL is no ceiling',
        );

        // Redis loses both (an older snapshot): the record's load brings them back.
        await redis.hdel(apiKeyRecordKey(made.id), 'cache_ttl');
        await redis.hdel(accountKey(a.id), 'cache_max_ttl');
        assert.deepEqual(await store.access(hash), { keyId: made.id, accountId: a.id, rpm: 5 });
        await loadHotState(redis, store.record);
        // (The load writes the account's weight too, 1, which the account made here had not.)
        assert.deepEqual(await store.access(hash), {
          keyId: made.id,
          accountId: a.id,
          weight: 1,
          rpm: 5,
          cacheTtlS: 30,
          cacheMaxTtlS: 0,
        });
        assert.deepEqual(
          [(await store.playgroundAccess(a.id)).cacheMaxTtlS, (await store.playgroundAccess(a.id)).cacheTtlS],
          [0, undefined],
          'the Playground key carries the account’s cap',
        );

        // Cleared: null in the record, '' in Redis, left out of the access.
        await store.update(made.id, { cacheTtlS: null });
        assert.equal((await store.accounts.update(a.id, { cacheMaxTtlS: null }))!.cacheMaxTtlS, undefined);
        assert.deepEqual(
          [
            await redis.hget(apiKeyRecordKey(made.id), 'cache_ttl'),
            await redis.hget(accountKey(a.id), 'cache_max_ttl'),
          ],
          ['', ''],
        );
        assert.deepEqual(await row(), { cache_ttl_s: null, admin_rpm: null });
        assert.equal(await cap(), null);
        assert.deepEqual(await store.access(hash), { keyId: made.id, accountId: a.id, weight: 1, rpm: 5 });
        await loadHotState(redis, store.record);
        assert.deepEqual(await store.access(hash), { keyId: made.id, accountId: a.id, weight: 1, rpm: 5 });
      } finally {
        store.onAccessChanged = undefined;
      }
    },
  );

  it(
    "carries the key's and its team's MCP tools on the access: an admin's alone to set, kept in the record and " +
      'reloaded from it',
    async () => {
      const a = await store.accounts.create({ email: 'mcp-tools@example.com' });
      const made = await store.create('agent', { accountId: a.id, mcpTools: ['notes/*'] }, 'admin');
      const hash = hashSecret(made.key);
      assert.deepEqual(made.mcpTools, ['notes/*']);
      assert.deepEqual((await store.access(hash)) as object, {
        keyId: made.id,
        accountId: a.id,
        mcpTools: ['notes/*'],
      });
      // A member may neither make a key with tools nor change them, even to fewer.
      await assert.rejects(
        store.create('mine', { accountId: a.id, mcpTools: ['notes/read'] }, 'member'),
        isError(403, 'admin_only'),
      );
      await assert.rejects(store.update(made.id, { mcpTools: [] }, 'member'), isError(403, 'admin_only'));
      assert.equal((await store.accounts.update(a.id, { mcpTools: ['notes/read', 'github/*'] }))!.mcpTools?.length, 2);
      assert.deepEqual((await store.access(hash)) as object, {
        keyId: made.id,
        accountId: a.id,
        mcpTools: ['notes/*'],
        teamMcpTools: ['notes/read', 'github/*'],
      });
      const rows = async () => [
        (
          await store.record
            .selectFrom('api_keys')
            .select('mcp_tools')
            .where('id', '=', made.id)
            .executeTakeFirstOrThrow()
        ).mcp_tools,
        (await store.record.selectFrom('accounts').select('mcp_tools').where('id', '=', a.id).executeTakeFirstOrThrow())
          .mcp_tools,
      ];
      assert.deepEqual(await rows(), ['["notes/*"]', '["notes/read","github/*"]']);
      // Redis loses both: the record's load brings them back.
      await redis.hdel(apiKeyRecordKey(made.id), 'mcp_tools');
      await redis.hdel(accountKey(a.id), 'mcp_tools');
      assert.deepEqual((await store.access(hash)) as object, { keyId: made.id, accountId: a.id });
      await loadHotState(redis, store.record);
      assert.deepEqual((await store.access(hash)) as object, {
        keyId: made.id,
        accountId: a.id,
        weight: 1,
        mcpTools: ['notes/*'],
        teamMcpTools: ['notes/read', 'github/*'],
      });
      // Lifted: every tool again (an empty list would be none).
      await store.update(made.id, { mcpTools: null }, 'admin');
      await store.accounts.update(a.id, { mcpTools: [] });
      assert.deepEqual(await rows(), [null, '[]']);
      assert.deepEqual((await store.access(hash)) as object, {
        keyId: made.id,
        accountId: a.id,
        weight: 1,
        teamMcpTools: [],
      });
    },
  );

  it('gives the Playground key its own default cache TTL, as any key', async () => {
    const a = await store.accounts.create({ email: 'playground-cache@example.com' });
    await store.accounts.update(a.id, { cacheMaxTtlS: 120 });
    const first = await store.playgroundAccess(a.id);
    assert.deepEqual([first.cacheMaxTtlS, 'cacheTtlS' in first], [120, false]);
    await store.update(first.keyId, { cacheTtlS: 90 }, 'member');
    const again = await store.playgroundAccess(a.id);
    assert.deepEqual([again.keyId, again.cacheTtlS, again.cacheMaxTtlS], [first.keyId, 90, 120]);
  });

  it(
    'names each person’s Playground key in a team for them; one named "Playground" before is found again and ' +
      'renamed on its next use',
    async () => {
      const team = await store.accounts.createTeam({ name: 'Research' });
      const ana = await store.accounts.create({ email: 'ana@example.com' });
      const ben = await store.accounts.create({ email: 'ben@example.com' });
      const anaKey = (await store.playgroundAccess(team.id, ana.id)).keyId;
      const benKey = (await store.playgroundAccess(team.id, ben.id)).keyId;
      assert.deepEqual(
        [(await store.get(anaKey))!.name, (await store.get(benKey))!.name],
        ['Playground (ana@example.com)', 'Playground (ben@example.com)'],
      );
      // A person's own account holds one Playground key: "Playground" says which.
      assert.equal((await store.get((await store.playgroundAccess(ana.id)).keyId))!.name, 'Playground');
      // Ben's, as one made before it was named for him, and Redis lost which key it is: found in the record by its old
      // name, renamed.
      await store.update(benKey, { name: 'Playground' });
      await redis.hdel(accountKey(team.id), `playground_key:${ben.id}`);
      assert.equal((await store.playgroundAccess(team.id, ben.id)).keyId, benKey);
      assert.equal((await store.get(benKey))!.name, 'Playground (ben@example.com)');
      const named = await store.record
        .selectFrom('api_keys')
        .select('name')
        .where('id', '=', benKey)
        .executeTakeFirstOrThrow();
      assert.equal(named.name, 'Playground (ben@example.com)', 'renamed in the record too');
      // Found again by its new name as well.
      await redis.hdel(accountKey(team.id), `playground_key:${ben.id}`);
      assert.equal((await store.playgroundAccess(team.id, ben.id)).keyId, benKey);
      // A name never longer than a key name may be.
      const long = await store.accounts.create({ email: `${'x'.repeat(240)}@example.com` });
      const longName = (await store.get((await store.playgroundAccess(team.id, long.id)).keyId))!.name;
      assert.ok(longName.length <= 200 && longName.startsWith('Playground (xxx') && longName.endsWith('…)'), longName);
    },
  );

  it('makes records the billing admission accepts: the account balance decides', async () => {
    const a = await store.accounts.create({ email: 'b@example.com' });
    const key = await store.create('billed', { accountId: a.id });
    const ask = (requestId: string) =>
      reserve(
        redis,
        { requestId, keyId: key.id, accountId: a.id, micros: 1000, tokens: 10, deadline: Date.now() + 60_000 },
        {},
      );
    assert.equal((await ask('r1')).ok, false);
    await store.accounts.credit(a.id, usdToMicros(1));
    assert.equal((await ask('r2')).ok, true);
    const free = await store.create('free');
    const outcome = await reserve(
      redis,
      {
        requestId: 'r3',
        keyId: free.id,
        accountId: defaultAccountId,
        micros: 1000,
        tokens: 10,
        deadline: Date.now() + 60_000,
      },
      {},
    );
    assert.equal(outcome.ok, true);
  });

  it('reads keys made before accounts: no account field means the default account, made if missing', async () => {
    const hash = hashSecret('sy-legacy');
    await redis.hset(apiKeyRecordKey('key_old'), { id: 'key_old', name: 'old', created: '1', hash, hint: 'sy-lega…' });
    await redis.hset(apiKeyHashesKey, hash, 'key_old');
    await redis.sadd(apiKeyIdsKey, 'key_old');
    assert.deepEqual(await store.access(hash), { keyId: 'key_old', accountId: defaultAccountId });
    assert.equal(await redis.hget(accountKey(defaultAccountId), 'unlimited'), '1');
    assert.equal((await store.get('key_old'))!.accountId, defaultAccountId);
    assert.equal(await store.revoke('key_old'), true);
    assert.equal(await store.access(hash), undefined);
  });
});

describe('KeyCache', () => {
  it('caches, refuses expired keys as such, and forgets by key id or account', async () => {
    const a = await store.accounts.create({ email: 'cache@example.com' });
    const one = await store.create('one', { accountId: a.id });
    const two = await store.create('two', { accountId: a.id });
    const cache = new KeyCache(store, 60_000);
    assert.equal((await cache.resolve(one.key))!.keyId, one.id);
    await cache.resolve(two.key);

    // Changed behind the cache's back: still served from it until told.
    await redis.hset(apiKeyRecordKey(one.id), 'expires', String(Math.floor(Date.now() / 1000) - 10));
    assert.equal((await cache.resolve(one.key))!.keyId, one.id);
    cache.forget(one.id);
    const verdict = await cache.check(one.key);
    assert.ok('refused' in verdict && verdict.refused === 'expired');
    assert.equal(await cache.resolve(one.key), undefined);

    await store.accounts.delete(a.id);
    assert.ok(await cache.resolve(two.key), 'cached until the message arrives');
    cache.forget(`account:${a.id}`);
    assert.deepEqual(await cache.check(two.key), { refused: 'unknown' });
    assert.deepEqual(await cache.check('sy-never-issued'), { refused: 'unknown' });
  });

  it('forgets a key named by the hash of its secret (the older change message)', async () => {
    const key = await store.create('hashed');
    const cache = new KeyCache(store, 60_000);
    assert.equal((await cache.resolve(key.key))!.keyId, key.id);
    await redis.hset(apiKeyRecordKey(key.id), 'expires', String(Math.floor(Date.now() / 1000) - 10));
    cache.forget('key_someone_else');
    assert.equal((await cache.resolve(key.key))!.keyId, key.id, "another key's message changes nothing");
    cache.forget(hashSecret(key.key));
    const verdict = await cache.check(key.key);
    assert.ok('refused' in verdict && verdict.refused === 'expired');
  });

  it('does not cache a lookup that raced a change', async () => {
    const key = await store.create('raced');
    const cache = new KeyCache(store, 60_000);
    const pending = cache.resolve(key.key);
    cache.forget(key.id);
    assert.ok(await pending);
    await store.revoke(key.id);
    assert.equal(await cache.resolve(key.key), undefined, 'the raced lookup was not cached');
  });
});

describe('usage aggregates', () => {
  it('groups and filters the per-day totals', async () => {
    const day1 = '2025-03-01';
    const day2 = '2025-03-02';
    // As the usage writer keeps them: one row per day, account, key and model in the record.
    const record = await testRecord(redis);
    const add = (day: string, account: string, key: string, model: string, metric: string, value: number) =>
      record
        .insertInto('usage_daily')
        .values({ day, account_id: account, key_id: key, model, [metric]: value } as never)
        .onConflict((oc) =>
          oc.columns(['account_id', 'day', 'key_id', 'model']).doUpdateSet({ [metric]: value } as never),
        )
        .execute();
    await add(day1, 'acct_a', 'key_1', 'gpt|x', 'requests', 2);
    await add(day1, 'acct_a', 'key_1', 'gpt|x', 'cost_micros', 1500);
    await add(day2, 'acct_a', 'key_2', 'claude', 'requests', 1);
    await add(day2, 'acct_a', 'key_2', 'claude', 'input_tokens', 40);
    await add(day2, 'acct_b', 'key_3', 'claude', 'requests', 5);
    const query = (q: Record<string, string>) =>
      readUsage(record, usageQuerySchema.parse({ from: day1, to: day2, ...q }));

    assert.deepEqual(
      (await query({ group_by: 'model' })).map((r) => [r.model, r.requests, r.cost_usd]),
      [
        ['claude', 6, 0],
        ['gpt|x', 2, 0.0015],
      ],
    );
    assert.deepEqual(
      (await query({ group_by: 'day,key', account_id: 'acct_a' })).map((r) => [
        r.day,
        r.key_id,
        r.requests,
        r.input_tokens,
      ]),
      [
        [day1, 'key_1', 2, 0],
        [day2, 'key_2', 1, 40],
      ],
    );
    const [total] = await query({});
    assert.equal(total!.requests, 8);
    assert.equal(total!.day, undefined);
    assert.deepEqual(await query({ group_by: 'day', from: '2025-04-01', to: '2025-04-02' }), []);
    assert.equal(usageQuerySchema.parse({}).days.length, 30);
    assert.equal(usageQuerySchema.safeParse({ from: '2020-01-01', to: '2025-01-01' }).success, false);
    assert.equal(usageQuerySchema.safeParse({ from: '2025-02-30' }).success, false);
  });
});
