import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import {
  createBatch,
  cursorText,
  deleteBatch,
  listEveryBatch,
  newBatchId,
  parseCursor,
  type AllBatchesCursor,
} from '../../shared/batches/index.js';
import { accountBatchesKey, batchKey } from '../../shared/redis-keys.js';
import { freshRedis } from '../support/gateway.js';

// Against a real Redis: every account's batches as one list (the console's "All accounts"), newest first.
describe('every account’s batches, newest first', () => {
  let redis: Redis;
  const day = 86_400_000;
  /** Each batch made: its account, id and creation time, in the order made. */
  const made: Array<{ account: string; id: string; created: number }> = [];

  before(async () => {
    redis = (await freshRedis(12)).redis;
    const t0 = Date.now() - 60_000;
    // Three accounts, interleaved in time, with three batches made in the very same millisecond (two in one account).
    const plan: Array<[string, number]> = [
      ['acct_a', t0],
      ['acct_b', t0 + 1],
      ['acct_a', t0 + 2],
      ['acct_c', t0 + 3],
      ['acct_a', t0 + 5],
      ['acct_a', t0 + 5],
      ['acct_b', t0 + 5],
      ['acct_c', t0 + 9],
      ['acct_b', t0 + 10],
    ];
    for (const [account, created] of plan) {
      const id = newBatchId();
      await createBatch(
        redis,
        { id, accountId: account, keyId: 'key_1', created, expires: Date.now() + day, total: 1 },
        day,
      );
      made.push({ account, id, created });
    }
  });

  after(() => {
    redis?.disconnect();
  });

  /** The order the list must give: newest first, equal times by id, higher first. */
  const expected = (gone: ReadonlySet<string> = new Set()) =>
    made
      .filter((batch) => !gone.has(batch.id))
      .sort((a, b) => b.created - a.created || (a.id < b.id ? 1 : -1))
      .map((batch) => batch.id);

  /** Every page of `limit` read through by its cursor (as text, as the console sends it). */
  async function walk(accounts: readonly string[], limit: number): Promise<string[]> {
    const ids: string[] = [];
    let cursor: AllBatchesCursor | undefined;
    for (let pages = 0; pages < 100; pages++) {
      const page = await listEveryBatch(redis, accounts, { limit, ...(cursor ? { cursor } : {}) });
      assert.ok(page.batches.length <= limit);
      ids.push(...page.batches.map((batch) => batch.id));
      if (!page.next) return ids;
      cursor = parseCursor(cursorText(page.next));
      assert.deepEqual(cursor, page.next, 'a cursor reads back as written');
    }
    throw new Error('the pages never ended');
  }

  it('lists them all once, newest first, whatever the page size, ties in the same millisecond included', async () => {
    for (const limit of [1, 2, 3, 4, 20])
      assert.deepEqual(await walk(['acct_a', 'acct_b', 'acct_c'], limit), expected(), `pages of ${limit}`);
    const first = await listEveryBatch(redis, ['acct_a', 'acct_b', 'acct_c'], { limit: 20 });
    assert.equal(first.next, undefined, 'one page holds them all: no next');
  });

  it('lists only the accounts named, and nothing for none', async () => {
    const ofB = made.filter((batch) => batch.account === 'acct_b').map((batch) => batch.id);
    assert.deepEqual(new Set(await walk(['acct_b'], 2)), new Set(ofB));
    assert.deepEqual(await listEveryBatch(redis, [], { limit: 5 }), { batches: [], next: undefined });
  });

  it('passes over batches gone from Redis (a page stays full) and drops them from their account’s list', async () => {
    // One deleted, one whose record ran out (its hash gone, its id still listed).
    const deleted = made[4]!;
    const expired = made[7]!;
    await deleteBatch(redis, deleted.id, deleted.account);
    await redis.del(batchKey(expired.id));
    const gone = new Set([deleted.id, expired.id]);
    for (const limit of [1, 2, 5])
      assert.deepEqual(await walk(['acct_a', 'acct_b', 'acct_c'], limit), expected(gone), `pages of ${limit}`);
    assert.equal(
      await redis.zscore(accountBatchesKey(expired.account), expired.id),
      null,
      'the expired one dropped from its list',
    );
  });

  it('reads no cursor from text that is not one', () => {
    assert.equal(parseCursor('nonsense'), undefined);
    assert.equal(parseCursor('12:'), undefined);
    assert.equal(parseCursor('12:a b'), undefined);
    assert.deepEqual(parseCursor('1700000000000:msgbatch_abc'), { created: 1_700_000_000_000, id: 'msgbatch_abc' });
  });
});
