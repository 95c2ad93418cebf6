import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { freshRedis, testKeyStore } from '../support/gateway.js';
import { testRecord } from '../support/record.js';
import { usageEntry } from '../support/usage-entry.js';
import type { KeyStore } from '../../api/accounts/key-store.js';
import { releaseReservation, reserve, settle, type KeyLimitsInForce } from '../../shared/money/billing.js';
import { budgetCounter, budgetRefusal, periodEnd, periodStart } from '../../shared/money/budgets.js';
import { billKey } from '../../shared/redis-keys.js';
import { loadHotState } from '../../storage/record/hot-state.js';

const policy = { bufferRecords: 10_000, alertThresholds: [50, 80, 100] };

// Budgets per period held by admission in the money scripts themselves: a team's budget, a key's, a member's cap,
// each counted per period in the team's bill; driven here with the scripts' own `now` on both sides of a boundary.
describe('budgets per period', () => {
  let redis: Redis;
  let keys: KeyStore;
  let seq = 0;

  before(async () => {
    ({ redis } = await freshRedis(13));
    keys = await testKeyStore(redis);
  });
  after(() => redis?.disconnect());

  /** A team with $100 and two members, each with a key they made. */
  async function team(): Promise<{ team: string; alice: string; bob: string; aliceKey: string; bobKey: string }> {
    const n = ++seq;
    const made = await keys.accounts.create({ email: `team-${n}@budgets.test`, name: `Team ${n}` });
    await keys.accounts.credit(made.id, 100_000_000, 'test');
    const alice = await keys.accounts.create({ email: `alice-${n}@budgets.test`, name: 'Alice' });
    const bob = await keys.accounts.create({ email: `bob-${n}@budgets.test`, name: 'Bob' });
    const record = await testRecord(redis);
    await record
      .insertInto('team_members')
      .values([
        { team_id: made.id, member_id: alice.id, role: 'member', created: 1 },
        { team_id: made.id, member_id: bob.id, role: 'member', created: 1 },
      ])
      .execute();
    const aliceKey = await keys.create('alice', { accountId: made.id, createdBy: alice.id });
    const bobKey = await keys.create('bob', { accountId: made.id, createdBy: bob.id });
    return { team: made.id, alice: alice.id, bob: bob.id, aliceKey: aliceKey.id, bobKey: bobKey.id };
  }

  /** What admission applies to a key, as the api reads it (the key-access script). */
  async function limitsOf(keyId: string): Promise<KeyLimitsInForce> {
    const secretHash = await redis.hget('sy:{acct}:key:' + keyId, 'hash');
    const access = await keys.access(secretHash!);
    assert.ok(access && access !== 'disabled');
    return {
      ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}),
      ...(access.budgets ? { budgets: access.budgets } : {}),
    };
  }

  const resv = (accountId: string, keyId: string, micros: number, now: number) => ({
    requestId: `r-${++seq}-${Math.random().toString(36).slice(2)}`,
    keyId,
    accountId,
    micros,
    tokens: 1,
    deadline: now + 60_000,
  });

  it("concurrent requests of two members never pass the team's budget, and the counter equals what was settled", async () => {
    const t = await team();
    assert.equal(await keys.setTeamBudget(t.team, { micros: 10_000, period: 'day' }), true);
    const now = Date.now();
    const limits = [await limitsOf(t.aliceKey), await limitsOf(t.bobKey)];
    const tries = Array.from({ length: 40 }, (_, i) => resv(t.team, i % 2 ? t.bobKey : t.aliceKey, 1000, now));
    const outcomes = await Promise.all(tries.map((r, i) => reserve(redis, r, limits[i % 2]!, now)));
    const admitted = tries.filter((_, i) => outcomes[i]!.ok);
    assert.equal(admitted.length, 10);
    const refused = outcomes.find((o) => !o.ok);
    assert.ok(refused && !refused.ok && refused.reason === 'budget' && refused.budget?.scope === 'team');
    await Promise.all(
      admitted.map((r) =>
        settle(redis, usageEntry(r.requestId, 700, { account_id: t.team, key_id: r.keyId }), policy, now),
      ),
    );
    const counter = budgetCounter({ scope: 'team', period: 'day' }, now);
    const [spent, held] = await redis.hmget(billKey(t.team), `${counter}.spent`, `${counter}.reserved`);
    assert.equal(Number(spent), 7000);
    assert.equal(Number(held), 0);
  });

  it("a member's cap refuses their keys but not a teammate's", async () => {
    const t = await team();
    assert.equal(await keys.setMemberCap(t.team, t.alice, { micros: 2000, period: 'week' }), true);
    const now = Date.now();
    const alice = await limitsOf(t.aliceKey);
    const bob = await limitsOf(t.bobKey);
    assert.equal((await reserve(redis, resv(t.team, t.aliceKey, 1500, now), alice, now)).ok, true);
    const refused = await reserve(redis, resv(t.team, t.aliceKey, 1000, now), alice, now);
    assert.ok(
      !refused.ok &&
        refused.reason === 'budget' &&
        refused.budget?.scope === 'member' &&
        refused.budget.ownerId === t.alice,
    );
    assert.match(
      budgetRefusal(refused.budget!, now, 'Team X'),
      /your weekly cap in team "Team X".*resets at \d{4}-\d\d-\d\dT00:00:00\.000Z/,
    );
    assert.equal((await reserve(redis, resv(t.team, t.bobKey, 1000, now), bob, now)).ok, true);
    // Not a member: no cap to set.
    assert.equal(await keys.setMemberCap(t.team, 'acct_nobody', { micros: 1, period: 'day' }), false);
  });

  it("a key's daily budget refuses it, and a release gives its hold back", async () => {
    const t = await team();
    await keys.update(t.aliceKey, { budget: { micros: 3000, period: 'day' } });
    const now = Date.now();
    const limits = await limitsOf(t.aliceKey);
    assert.deepEqual(limits.budgets, [{ scope: 'key', ownerId: t.aliceKey, micros: 3000, period: 'day' }]);
    const first = resv(t.team, t.aliceKey, 2500, now);
    assert.equal((await reserve(redis, first, limits, now)).ok, true);
    const refused = await reserve(redis, resv(t.team, t.aliceKey, 1000, now), limits, now);
    assert.ok(!refused.ok && refused.reason === 'budget' && refused.budget?.scope === 'key');
    assert.equal(await releaseReservation(redis, t.team, first.requestId), true);
    assert.equal((await reserve(redis, resv(t.team, t.aliceKey, 1000, now), limits, now)).ok, true);
  });

  it('a monthly budget starts again at the month boundary; a request admitted before it counts in the old month', async () => {
    const t = await team();
    await keys.setTeamBudget(t.team, { micros: 5000, period: 'month' });
    const limits = await limitsOf(t.aliceKey);
    const boundary = Date.UTC(2031, 2, 1); // 2031-03-01T00:00Z
    const before = boundary - 1000;
    assert.equal(periodEnd('month', before) * 1000, boundary);
    const early = resv(t.team, t.aliceKey, 4000, before);
    assert.equal((await reserve(redis, early, limits, before)).ok, true);
    assert.equal((await reserve(redis, resv(t.team, t.aliceKey, 2000, before), limits, before)).ok, false);
    // A second later the month is new: its budget is whole, though February's request is still held.
    const next = resv(t.team, t.aliceKey, 5000, boundary);
    assert.equal((await reserve(redis, next, limits, boundary)).ok, true);
    const old = budgetCounter({ scope: 'team', period: 'month' }, before);
    const current = budgetCounter({ scope: 'team', period: 'month' }, boundary);
    assert.notEqual(old, current);
    // February's request settles in March: it counts in February, whose counter then goes (nothing held in it).
    await settle(
      redis,
      usageEntry(early.requestId, 3000, { account_id: t.team, key_id: t.aliceKey }),
      policy,
      boundary + 5000,
    );
    const fields = await redis.hgetall(billKey(t.team));
    assert.equal(fields[`${old}.spent`], undefined, 'the past period is deleted once nothing is held in it');
    assert.equal(fields[`${current}.reserved`], '5000');
    assert.equal(fields[`${current}.spent`] ?? '0', '0');
    assert.equal(periodStart('month', boundary) * 1000, boundary);
    assert.equal(periodStart('week', Date.UTC(2031, 2, 1, 12)) * 1000, Date.UTC(2031, 1, 24)); // a Saturday: the week began Monday the 24th
  });

  it("Redis lost and loaded from the record keeps the period's spend", async () => {
    const t = await team();
    await keys.setTeamBudget(t.team, { micros: 10_000, period: 'day' });
    await keys.setMemberCap(t.team, t.bob, { micros: 8000, period: 'day' });
    const now = Date.now();
    const record = await testRecord(redis);
    // Settled and written by the record's writer: two rows today, one yesterday (not counted).
    const row = (id: string, key: string, cost: number, created: number) => ({
      ...usageEntry(id, cost, { account_id: t.team, key_id: key, created }),
      settled: true,
    });
    await record
      .insertInto('usage')
      .values([
        row(`u-${seq}-1`, t.bobKey, 6000, Math.floor(now / 1000)),
        row(`u-${seq}-2`, t.aliceKey, 1000, Math.floor(now / 1000)),
        row(`u-${seq}-3`, t.bobKey, 9000, Math.floor(now / 1000) - 2 * 86_400),
      ])
      .execute();
    await redis.flushdb();
    await loadHotState(redis, record);
    const bob = await limitsOf(t.bobKey);
    const counter = budgetCounter({ scope: 'team', period: 'day' }, now);
    assert.equal(await redis.hget(billKey(t.team), `${counter}.spent`), '7000');
    // Bob's cap has 2000 left, the team's 3000.
    const refused = await reserve(redis, resv(t.team, t.bobKey, 2500, now), bob, now);
    assert.ok(!refused.ok && refused.reason === 'budget' && refused.budget?.scope === 'member');
    assert.equal((await reserve(redis, resv(t.team, t.bobKey, 2000, now), bob, now)).ok, true);
  });

  it('settled spend crossing 50, 80 and 100 percent is reported once each, even settled concurrently', async () => {
    const t = await team();
    await keys.setTeamBudget(t.team, { micros: 10_000, period: 'day' });
    const now = Date.now();
    const limits = await limitsOf(t.aliceKey);
    const tries = Array.from({ length: 10 }, () => resv(t.team, t.aliceKey, 1000, now));
    for (const r of tries) assert.equal((await reserve(redis, r, limits, now)).ok, true);
    const settled = await Promise.all(
      tries.map((r) =>
        settle(redis, usageEntry(r.requestId, 1000, { account_id: t.team, key_id: t.aliceKey }), policy, now),
      ),
    );
    const crossed = settled
      .flatMap((s) => s.alerts)
      .map((a) => a.percent)
      .sort((a, b) => a - b);
    assert.deepEqual(crossed, [50, 80, 100]);
  });
});
