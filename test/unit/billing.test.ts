import assert from 'node:assert/strict';
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { utcDay } from '../../shared/accounts.js';
import {
  billingBucket,
  billKey,
  reservationDeadlinesKey,
  settledKey,
  usageDayKey,
  usageStreamKey,
} from '../../shared/redis-keys.js';
import {
  charge,
  readBill,
  readKeySpend,
  releaseExpiredReservations,
  releaseReservation,
  reserve,
  settle,
  type Reservation,
} from '../../shared/money/billing.js';
import { freshRedis } from '../support/gateway.js';
import { usageEntry } from '../support/usage-entry.js';

let redis: Redis;
let url: string;
const policy = { bufferRecords: 1000 };

before(async () => {
  ({ redis, url } = await freshRedis(11));
});
after(() => redis.disconnect());
beforeEach(() => redis.flushdb());

async function account(id: string, balanceMicros: number | 'unlimited'): Promise<void> {
  await redis.hset(billKey(id), {
    id,
    reserved: 0,
    ...(balanceMicros === 'unlimited' ? { unlimited: '1' } : { balance: balanceMicros }),
  });
}

async function key(id: string, accountId = 'a1'): Promise<void> {
  await redis.hset(billKey(accountId), { [`${id}.spent`]: 0, [`${id}.reserved`]: 0 });
}

const bucket = billingBucket('a1');
const stream = usageStreamKey(bucket);
const balance = async (accountId = 'a1') => (await readBill(redis, accountId))?.balanceMicros;
const accountReserved = async (accountId = 'a1') => (await readBill(redis, accountId))?.reservedMicros;
const spent = async (keyId = 'k1') => (await readKeySpend(redis, 'a1', keyId))?.spentMicros;
const keyReserved = async (keyId = 'k1') => (await readKeySpend(redis, 'a1', keyId))?.reservedMicros;

const resv = (requestId: string, micros: number, extra: Partial<Reservation> = {}): Reservation => ({
  requestId,
  keyId: 'k1',
  accountId: 'a1',
  micros,
  tokens: 100,
  deadline: Date.now() + 60_000,
  ...extra,
});

const usage = usageEntry;

describe('billing: reserve and settle', () => {
  it('reserves against the key limit and the account balance, then settles the actual cost once', async () => {
    await account('a1', 1_000_000);
    await key('k1');
    const limits = { limitMicros: 600_000 };
    assert.deepEqual(await reserve(redis, resv('r1', 500_000), limits), { ok: true });
    assert.equal(await keyReserved(), 500_000);
    assert.equal(await accountReserved(), 500_000);

    const refused = await reserve(redis, resv('r2', 200_000), limits);
    assert.equal(refused.ok, false);
    assert.equal(!refused.ok && refused.reason, 'key_limit');

    assert.equal((await settle(redis, usage('r1', 123_456), policy)).applied, true);
    assert.equal(
      (await settle(redis, usage('r1', 123_456), policy)).applied,
      false,
      'a second settlement of the same request does nothing',
    );
    assert.equal(await keyReserved(), 0);
    assert.equal(await spent(), 123_456);
    assert.equal(await accountReserved(), 0);
    assert.equal(await balance(), 1_000_000 - 123_456);
    assert.equal(await redis.hexists(billKey('a1'), 'r:r1'), 0, 'the reservation is gone from the bill');
    assert.equal(await redis.zcard(reservationDeadlinesKey(bucket)), 0);
    assert.equal(await redis.exists(settledKey('a1', 'r1')), 1);
    assert.equal(await redis.xlen(stream), 1);
    const [[, fields]] = (await redis.xrange(stream, '-', '+')) as [[string, string[]]];
    const written = JSON.parse(fields[1]!) as Record<string, unknown>;
    assert.equal(written.cost_micros, 123_456);
    assert.equal(written.request_id, 'r1');
    assert.equal(written.account_id, 'a1');
    assert.equal(
      await redis.exists(usageDayKey(utcDay(Date.now()))),
      0,
      'day totals are summed in the record, not in Redis',
    );
  });

  it(
    'holds one reservation per request id, and makes none for a request settled already (a job run again after its ' +
      'worker died)',
    async () => {
      await account('a1', 1_000_000);
      await key('k1');
      assert.deepEqual(await reserve(redis, resv('again', 300_000), {}), { ok: true });
      assert.deepEqual(await reserve(redis, resv('again', 300_000), {}), { ok: true });
      assert.equal(await accountReserved(), 300_000, 'reserved once');
      assert.equal((await settle(redis, usage('again', 1_000), policy)).applied, true);
      assert.equal(await accountReserved(), 0);
      // Its worker died after the settlement: the run again reserves nothing that no settlement would take back.
      assert.deepEqual(await reserve(redis, resv('again', 300_000), {}), { ok: true });
      assert.equal(await accountReserved(), 0);
      assert.equal(await keyReserved(), 0);
      assert.equal(await redis.hexists(billKey('a1'), 'r:again'), 0);
    },
  );

  it('settles and releases a free model (a reservation of 0 micros) like any other', async () => {
    await account('a1', 0);
    await key('k1');
    assert.equal((await reserve(redis, resv('free1', 0), {})).ok, true);
    assert.equal((await settle(redis, usage('free1', 0, { model: 'mock-chat' }), policy)).applied, true);
    const [[, fields]] = (await redis.xrange(stream, '-', '+')) as [[string, string[]]];
    assert.equal((JSON.parse(fields[1]!) as { model: string }).model, 'mock-chat');
    assert.equal((await reserve(redis, resv('free2', 0), {})).ok, true);
    assert.equal(await releaseReservation(redis, 'a1', 'free2'), true);
    assert.equal(await accountReserved(), 0);
    assert.equal(await keyReserved(), 0);
  });

  it('refuses what the account balance cannot cover, and never touches an unlimited account balance', async () => {
    await account('a1', 100);
    await key('k1');
    const refused = await reserve(redis, resv('r1', 101), {});
    assert.equal(!refused.ok && refused.reason, 'account_balance');
    assert.equal(await accountReserved(), 0, 'a refusal reserves nothing');

    await account('free', 'unlimited');
    await key('k1', 'free');
    assert.equal((await reserve(redis, resv('r2', 10 ** 12, { accountId: 'free' }), {})).ok, true);
    await settle(redis, usage('r2', 10 ** 12, { account_id: 'free' }), policy);
    assert.equal(await redis.hget(billKey('free'), 'balance'), null);
    assert.equal(
      (await readKeySpend(redis, 'free', 'k1'))?.spentMicros,
      10 ** 12,
      'its key still counts what it spent',
    );
  });

  it('refuses a key or account that does not exist or was deleted', async () => {
    await account('a1', 100);
    const unknownKey = await reserve(redis, resv('r1', 1), {});
    assert.equal(!unknownKey.ok && unknownKey.reason, 'no_access');
    await key('k1');
    assert.equal((await reserve(redis, resv('r1', 1), {})).ok, true);
    await redis.del(billKey('a1'));
    await key('k1');
    const refused = await reserve(redis, resv('r2', 1), {});
    assert.equal(!refused.ok && refused.reason, 'no_access', 'a key left without its account bill');
  });

  it('keeps large amounts exact: no float formatting of micro-dollars', async () => {
    const big = 2 ** 53 - 1;
    await account('a1', big);
    await key('k1');
    assert.equal((await reserve(redis, resv('r1', 10 ** 15 + 1), {})).ok, true);
    assert.equal(await redis.hget(billKey('a1'), 'reserved'), '1000000000000001');
    await settle(redis, usage('r1', 10 ** 15 + 1), policy);
    assert.equal(await redis.hget(billKey('a1'), 'balance'), String(big - 10 ** 15 - 1));
    assert.equal(await redis.hget(billKey('a1'), 'k1.spent'), '1000000000000001');
  });

  it('limits requests per minute with a retry-after, and reports what remains', async () => {
    await account('a1', 'unlimited');
    await key('k1');
    const now = 1_000_000;
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push(await reserve(redis, resv(`r${i}`, 1), { rpm: 3 }, now));
    assert.deepEqual(
      outcomes.map((o) => o.ok),
      [true, true, true, false],
    );
    assert.deepEqual(outcomes[0]!.requests, { limit: 3, remaining: 2, resetMs: 20_000 });
    assert.equal(outcomes[2]!.requests!.remaining, 0);
    const refused = outcomes[3]!;
    assert.equal(!refused.ok && refused.reason, 'rpm');
    assert.equal(!refused.ok && refused.retryAfterMs, 20_000);
    assert.equal(
      (await reserve(redis, resv('later', 1), { rpm: 3 }, now + 20_000)).ok,
      true,
      'one more fits once a slot has passed',
    );
  });

  it('limits tokens per minute by the estimate and gives back what settlement shows unused', async () => {
    await account('a1', 'unlimited');
    await key('k1');
    const now = Date.now();
    assert.equal((await reserve(redis, resv('r1', 1, { tokens: 600 }), { tpm: 1000 }, now)).ok, true);
    const refused = await reserve(redis, resv('r2', 1, { tokens: 600 }), { tpm: 1000 }, now);
    assert.equal(!refused.ok && refused.reason, 'tpm');
    await settle(redis, usage('r1', 1, { input_tokens: 50, output_tokens: 50 }), policy, now);
    assert.equal(
      (await reserve(redis, resv('r2', 1, { tokens: 600 }), { tpm: 1000 }, now)).ok,
      true,
      '500 unused tokens came back',
    );
  });

  it('releases a reservation nothing will settle, and one past its deadline, once', async () => {
    await account('a1', 1000);
    await key('k1');
    await reserve(redis, resv('r1', 400), {});
    assert.equal(await releaseReservation(redis, 'a1', 'r1'), true);
    assert.equal(await releaseReservation(redis, 'a1', 'r1'), false);
    assert.equal(await accountReserved(), 0);

    // Accounts in other buckets: the sweep goes through every bucket.
    const other = ['a2', 'a3', 'a4', 'a5', 'a6'].find((id) => billingBucket(id) !== bucket)!;
    await account(other, 1000);
    await key('k9', other);
    await reserve(redis, resv('lost', 300, { deadline: Date.now() - 10_000 }), {});
    await reserve(redis, resv('lost2', 100, { accountId: other, keyId: 'k9', deadline: Date.now() - 10_000 }), {});
    await reserve(redis, resv('live', 200), {});
    assert.equal(await releaseExpiredReservations(redis, 5_000), 2);
    assert.equal(await accountReserved(), 200);
    assert.equal(await keyReserved(), 200);
    assert.equal(await accountReserved(other), 0);

    // A lost job that completes after all is still billed, exactly once.
    assert.equal((await settle(redis, usage('lost', 250), policy)).applied, true);
    assert.equal(await balance(), 750);
    assert.equal(await accountReserved(), 200);
  });
});

describe('billing: a cache hit, admitted and billed in one step', () => {
  const hit = (requestId: string, micros: number, keyId = 'k1') =>
    usage(requestId, micros, { key_id: keyId, vendor: 'cache', cache: 'hit', input_tokens: 0, output_tokens: 0 });

  it(
    'takes the price once, with its usage entry, and refuses what the key limit or the balance (less what is ' +
      'reserved) cannot pay, writing nothing',
    async () => {
      await account('a1', 10_000);
      await key('k1');
      assert.deepEqual(await charge(redis, hit('h1', 3000), { limitMicros: 7000 }, policy), { ok: true });
      assert.deepEqual(
        await charge(redis, hit('h1', 3000), { limitMicros: 7000 }, policy),
        { ok: true },
        'sent again (a reconnect’s resend): charged once',
      );
      assert.equal(await spent(), 3000);
      assert.equal(await balance(), 7000);
      assert.equal(await redis.xlen(stream), 1);
      assert.equal(await keyReserved(), 0, 'nothing held: there is nothing between admission and settlement');
      const overKey = await charge(redis, hit('h2', 4001), { limitMicros: 7000 }, policy);
      assert.equal(!overKey.ok && overKey.reason, 'key_limit');
      // Another request's reservation holds part of the balance: a hit may not take it.
      assert.deepEqual(await reserve(redis, resv('r1', 5000), {}), { ok: true });
      const overBalance = await charge(redis, hit('h3', 2001), {}, policy);
      assert.equal(!overBalance.ok && overBalance.reason, 'account_balance');
      assert.equal(await balance(), 7000, 'a refusal takes nothing');
      assert.equal(await spent(), 3000);
      assert.equal(await redis.xlen(stream), 1, 'and records nothing');
      assert.equal(await redis.exists(settledKey('a1', 'h3')), 0, 'nor marks the request charged');
      assert.deepEqual(await charge(redis, hit('h4', 2000), {}, policy), { ok: true }, 'exactly what is left fits');
      assert.equal(await balance(), 5000);
      assert.equal((await readBill(redis, 'a1'))!.reservedMicros, 5000);
    },
  );

  it(
    'counts against the key’s requests per minute, not its tokens per minute; a free hit passes where its price ' +
      'fits',
    async () => {
      await account('a1', 0);
      await key('k1');
      const first = await charge(redis, hit('h1', 0), { rpm: 2 }, policy);
      assert.equal(first.ok, true);
      assert.equal(first.requests?.remaining, 1);
      assert.equal(
        (await charge(redis, hit('h2', 0), { rpm: 2 }, policy)).ok,
        true,
        'free: an empty balance covers it',
      );
      const third = await charge(redis, hit('h3', 0), { rpm: 2 }, policy);
      assert.equal(!third.ok && third.reason, 'rpm');
      assert.ok(!third.ok && third.retryAfterMs > 0);
      assert.equal(await redis.hget(billKey('a1'), 'k1.tpm'), null, 'no tokens counted');
    },
  );

  it('refuses a key or account that does not exist', async () => {
    const outcome = await charge(redis, hit('h1', 0), {}, policy);
    assert.equal(!outcome.ok && outcome.reason, 'no_access');
  });
});

describe('billing: concurrency across processes', () => {
  const worker = fileURLToPath(new URL('../support/reserve-race.ts', import.meta.url));

  /** 1,000 reservations of 1,000 micros each, 250 from each of four processes, all fired at once. */
  async function race(keys: string, limit = '', mode = ''): Promise<{ k1: number; k2: number }> {
    const children = [0, 1, 2, 3].map((index) =>
      fork(worker, [url, String(index), '250', keys, limit, mode], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      }),
    );
    const results = await Promise.all(
      children.map(async (child) => {
        const [message] = (await once(child, 'message')) as [{ k1: number; k2: number }];
        await once(child, 'exit');
        return message;
      }),
    );
    return { k1: results.reduce((sum, r) => sum + r.k1, 0), k2: results.reduce((sum, r) => sum + r.k2, 0) };
  }

  /** Settles every admitted request at its full reservation. */
  async function settleAll(): Promise<void> {
    const admitted = await redis.zrange(reservationDeadlinesKey(bucket), '0', '-1');
    await Promise.all(
      admitted.map(async (member) => {
        const requestId = member.split(' ')[1]!;
        const keyId = (await redis.hget(billKey('a1'), `r:${requestId}`))!.split(' ')[0]!;
        await settle(redis, usage(requestId, 1000, { key_id: keyId }), policy);
      }),
    );
  }

  it('admits exactly what a key limit covers when 1,000 reservations race from four processes', async () => {
    await account('a1', 10 ** 9);
    await key('k1');
    const admitted = await race('k1', String(100 * 1000));
    assert.equal(admitted.k1, 100);
    assert.equal(await keyReserved(), 100 * 1000);
    await settleAll();
    assert.equal(await spent(), 100 * 1000, 'spent reaches the limit and never passes it');
    assert.equal(await keyReserved(), 0);
  });

  it('admits exactly what an account balance shared by two keys covers, and the balance ends at zero', async () => {
    await account('a1', 150 * 1000);
    await key('k1');
    await key('k2');
    const admitted = await race('k1,k2');
    assert.equal(admitted.k1 + admitted.k2, 150);
    assert.equal(await accountReserved(), 150 * 1000);
    await settleAll();
    assert.equal(await balance(), 0, 'never below zero');
    assert.equal(await accountReserved(), 0);
  });

  it('admits exactly what a key limit and a balance cover when cache hits race reservations from four processes', async () => {
    await account('a1', 150 * 1000);
    await key('k1');
    await key('k2');
    const admitted = await race('k1,k2', String(100 * 1000), 'mixed');
    assert.equal(admitted.k1 + admitted.k2, 150, 'the balance covers 150 of 1,000');
    assert.ok(admitted.k1 <= 100 && admitted.k2 <= 100, `each key within its limit: ${admitted.k1}, ${admitted.k2}`);
    await settleAll();
    assert.equal(await balance(), 0, 'never below zero');
    assert.equal(await accountReserved(), 0);
    assert.equal((await spent('k1'))! + (await spent('k2'))!, 150 * 1000);
    assert.equal(await redis.xlen(stream), 150, 'one usage entry per admitted request, hit or not');
  });
});

describe('utcDay', () => {
  it('names the UTC day of each time, also when times from different days alternate', () => {
    const late = Date.UTC(2026, 0, 1, 23, 59, 59, 999);
    const next = Date.UTC(2026, 0, 2, 0, 0, 0, 0);
    assert.equal(utcDay(late), '2026-01-01');
    assert.equal(utcDay(late - 1000), '2026-01-01');
    assert.equal(utcDay(next), '2026-01-02');
    assert.equal(utcDay(late), '2026-01-01');
    assert.equal(utcDay(Date.UTC(1999, 11, 31, 12)), '1999-12-31');
  });
});
