import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { defaultAccountId, type KeyAccess } from '../../shared/accounts.js';
import { readBill, readKeySpend, reserve, settle } from '../../shared/money/billing.js';
import type { UsageEntry } from '../../shared/money/usage.js';
import { KeyCache, type KeyStore } from '../../api/accounts/key-store.js';
import { limitsInForce } from '../../shared/money/billing.js';
import { freshRedis, testKeyStore } from '../support/gateway.js';
import { usageEntry } from '../support/usage-entry.js';

/*
 * Issue 45, item 6: the Default account's key (made with no account, as `POST /admin/keys {"name":"perf"}` makes it)
 * was reported slower than a credited account's limited key. What admission and settlement send to Redis for each is
 * counted here, command by command: the Default account's key may send no more than a credited key (it checks no
 * balance), and once cached it sends nothing to be recognised. Counts, not timings.
 */

let redis: Redis;
let store: KeyStore;

before(async () => {
  redis = (await freshRedis(12)).redis;
  store = await testKeyStore(redis);
});
after(() => redis.disconnect());

/** The names of the commands `run` sends on `redis` (scripts already loaded: one EVALSHA per script call). */
async function commandsOf(run: () => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  const original = redis.sendCommand.bind(redis);
  redis.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
    sent.push(command.name);
    return (original as (...args: unknown[]) => unknown)(command, ...rest);
  }) as typeof redis.sendCommand;
  try {
    await run();
  } finally {
    redis.sendCommand = original;
  }
  return sent;
}

const usage = (access: KeyAccess, requestId: string, costMicros: number): UsageEntry =>
  usageEntry(requestId, costMicros, { account_id: access.accountId, key_id: access.keyId, duration_ms: 1 });

/** One request's admission and settlement, as the api and the worker run them. */
async function request(access: KeyAccess, requestId: string): Promise<void> {
  const reserved = await reserve(
    redis,
    {
      requestId,
      keyId: access.keyId,
      accountId: access.accountId,
      micros: 1_000,
      tokens: 100,
      deadline: Date.now() + 60_000,
    },
    limitsInForce(access, {} as never),
  );
  assert.equal(reserved.ok, true, `${access.accountId}'s request was admitted`);
  const settled = await settle(redis, usage(access, requestId, 400), { bufferRecords: 1000 });
  assert.deepEqual(settled, { applied: true, reservedMicros: 1_000, alerts: [] });
}

describe("the Default account's key on the request path", () => {
  it(
    'costs admission and settlement no more Redis commands than a credited key, and none to be recognised once ' +
      'cached',
    async () => {
      const perf = await store.create('perf');
      assert.equal(perf.accountId, defaultAccountId, "a key made with no account is the Default account's");
      const account = await store.accounts.create({ email: 'credited@example.com', name: 'credited' });
      await store.accounts.credit(account.id, 10 ** 9, 'test');
      const limited = await store.create('limited', {
        accountId: account.id,
        limitMicros: 10 ** 9,
        rpm: 10 ** 6,
        tpm: 10 ** 8,
      });

      const cache = new KeyCache(store, 60_000);
      const accesses: Record<string, KeyAccess> = {};
      for (const [name, secret] of [
        ['default', perf.key],
        ['credited', limited.key],
      ] as const) {
        const first = await cache.check(secret);
        assert.ok('access' in first, `${name} key accepted`);
        accesses[name] = first.access;
        // Cached: recognised with no round trip, whichever account it bills.
        assert.deepEqual(await commandsOf(() => cache.check(secret)), [], `${name} key recognised from the cache`);
        // A first request loads the scripts; the next is measured.
        await request(first.access, `req_${name}_warm`);
      }
      const perRequest = {
        default: await commandsOf(() => request(accesses.default!, 'req_default')),
        credited: await commandsOf(() => request(accesses.credited!, 'req_credited')),
      };
      assert.deepEqual(
        perRequest.credited,
        ['evalsha', 'evalsha'],
        'a credited key: one script to reserve, one to settle',
      );
      assert.deepEqual(
        perRequest.default,
        perRequest.credited,
        "the Default account's key sends what a credited key sends",
      );

      // Money stays exact on both: the key's spend counts each cost once; only the credited account's balance moves.
      const spend = await readKeySpend(redis, defaultAccountId, perf.id);
      assert.deepEqual([spend?.spentMicros, spend?.reservedMicros], [800, 0]);
      assert.deepEqual(await readBill(redis, defaultAccountId), { reservedMicros: 0, unlimited: true });
      assert.deepEqual(await readBill(redis, account.id), {
        balanceMicros: 10 ** 9 - 800,
        reservedMicros: 0,
        unlimited: false,
      });
      assert.equal((await readKeySpend(redis, account.id, limited.id))!.spentMicros, 800);
    },
  );
});
