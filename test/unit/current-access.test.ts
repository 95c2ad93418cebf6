import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { setTimeout as sleep } from 'node:timers/promises';
import { accessChangedChannel } from '../../shared/redis-keys.js';
import { CurrentAccess, namesKey, readKeyAccess } from '../../shared/access/index.js';
import { hashSecret, KeyStore } from '../../api/accounts/key-store.js';
import { freshRedis } from '../support/gateway.js';
import { emptyRecord, testRecord } from '../support/record.js';

// What a key may do now, as admitted work reads it (shared/access): the same script at the door (by the secret's
// hash) and at each step of running work (by the key's id), against a real Redis and the record.
let redis: Redis;
let store: KeyStore;

before(async () => {
  redis = (await freshRedis(13)).redis;
  store = new KeyStore(redis, await testRecord(redis));
});
after(() => redis.disconnect());
beforeEach(async () => {
  await redis.flushdb();
  await emptyRecord(store.record);
});

describe('what a key may do now (shared/access)', () => {
  it(
    'reads the same access by the secret’s hash and by the key’s id, "disabled" for a disabled account, nothing ' +
      'for a revoked key',
    async () => {
      const account = await store.accounts.create({ email: 'now@example.com', name: 'Now' });
      const made = await store.create('k', {
        accountId: account.id,
        limitMicros: 5_000,
        models: ['gpt-4o-mini'],
        budget: { micros: 700, period: 'day' },
      });
      const byHash = await readKeyAccess(redis, { hash: hashSecret(made.key) });
      const byId = await readKeyAccess(redis, { keyId: made.id });
      assert.deepEqual(byId, byHash);
      assert.ok(byId && byId !== 'disabled');
      assert.equal(byId.limitMicros, 5_000);
      assert.deepEqual(byId.models, ['gpt-4o-mini']);
      assert.deepEqual(byId.budgets, [{ scope: 'key', ownerId: made.id, micros: 700, period: 'day' }]);
      // An id that is not a key, or a hash beside a wrong id, is nothing.
      assert.equal(await readKeyAccess(redis, { keyId: 'key_nope' }), undefined);
      await store.accounts.update(account.id, { disabled: true });
      assert.equal(await readKeyAccess(redis, { keyId: made.id }), 'disabled');
      await store.accounts.update(account.id, { disabled: false });
      assert.equal(await store.revoke(made.id), true);
      assert.equal(await readKeyAccess(redis, { keyId: made.id }), undefined);
      assert.equal(await readKeyAccess(redis, { hash: hashSecret(made.key) }), undefined);
    },
  );

  it('keeps a reading no longer than its freshness, drops it at once on a change message, and tells listeners', async () => {
    const account = await store.accounts.create({ email: 'cache@example.com', name: 'Cache' });
    const made = await store.create('k', { accountId: account.id });
    const other = await store.create('other', { accountId: account.id });
    const access = new CurrentAccess(redis, 200);
    const heard: string[] = [];
    const stop = access.listen((message) => heard.push(message));
    assert.ok('access' in (await access.of(made.id)));
    assert.ok('access' in (await access.of(other.id)));

    // Changed behind its back (no message): still what it read, until the reading is stale.
    await store.update(made.id, { models: ['gpt-4o-mini'] });
    const before = await access.of(made.id);
    assert.ok('access' in before && before.access.models === undefined, 'a fresh reading is kept');
    await sleep(250);
    const stale = await access.of(made.id);
    assert.ok('access' in stale && stale.access.models?.[0] === 'gpt-4o-mini', 'a stale one is read again');

    // A key's message: that key is read again at once.
    await store.revoke(made.id);
    access.changed(made.id);
    assert.deepEqual(await access.of(made.id), { refused: 'revoked' });
    // An account's message: every key of it.
    await store.accounts.update(account.id, { disabled: true });
    access.changed(`account:${account.id}`);
    assert.deepEqual(await access.of(other.id), { refused: 'disabled' });
    assert.deepEqual(heard, [made.id, `account:${account.id}`]);
    access.clear();
    assert.deepEqual(heard.at(-1), '*');
    stop();
    access.changed('x');
    assert.equal(heard.length, 3, 'a listener that left hears nothing more');
  });

  it('refuses an expired key, and names what a change message reaches', async () => {
    const made = await store.create('k', { expiresAt: Math.floor(Date.now() / 1000) + 1 });
    const access = new CurrentAccess(redis, 0);
    assert.ok('access' in (await access.of(made.id)));
    await sleep(1100);
    assert.deepEqual(await access.of(made.id), { refused: 'expired' });
    assert.equal(namesKey(made.id, made.id, 'acct_a'), true);
    assert.equal(namesKey('account:acct_a', made.id, 'acct_a'), true);
    assert.equal(namesKey('*', made.id, 'acct_a'), true);
    assert.equal(namesKey('account:acct_b', made.id, 'acct_a'), false);
    assert.equal(namesKey('key_other', made.id, 'acct_a'), false);
  });

  it('every change through the store is announced on the channel the workers hear', async () => {
    const sub = redis.duplicate();
    const messages: string[] = [];
    sub.on('message', (_channel: string, message: string) => messages.push(message));
    await sub.subscribe(accessChangedChannel);
    try {
      const account = await store.accounts.create({ email: 'heard@example.com', name: 'Heard' });
      const made = await store.create('k', { accountId: account.id });
      await store.update(made.id, { limitMicros: 10 });
      await store.accounts.update(account.id, { disabled: true });
      await store.revoke(made.id);
      await sleep(100);
      assert.ok(messages.includes(made.id), messages.join(' '));
      assert.ok(messages.includes(`account:${account.id}`), messages.join(' '));
    } finally {
      sub.disconnect();
    }
  });
});
