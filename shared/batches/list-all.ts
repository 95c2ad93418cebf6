import type { Redis } from 'ioredis';
import { inOneWrite } from '../redis.js';
import { accountBatchesKey, batchKey } from '../redis-keys.js';
import { batchFromHash } from './hash.js';
import type { BatchRecord } from './types.js';

/**
 * Every account's batches as one list, newest first (the console's "All accounts"): each account's list
 * (`accountBatchesKey`, scored by when its batch was made) read from the cursor on and merged. A page's cursor is
 * where its last batch sits in that order, when it was made and its id (batches made in the same millisecond are
 * ordered by id, as Redis orders equal scores), so a page never depends on a batch still being there.
 */

/** Where a page of every account's batches ends: its last batch's creation (epoch ms) and id. */
export interface AllBatchesCursor {
  created: number;
  id: string;
}

/** A cursor as text (`<created>:<id>`), and back (undefined for text that is no cursor). */
export const cursorText = (cursor: AllBatchesCursor): string => `${cursor.created}:${cursor.id}`;
export function parseCursor(text: string): AllBatchesCursor | undefined {
  const match = /^(\d{1,16}):([A-Za-z0-9_]{1,128})$/.exec(text);
  return match ? { created: Number(match[1]), id: match[2]! } : undefined;
}

/** Whether a listed batch (`created`, `id`) comes after the cursor, newest first. */
const isAfter = (created: number, id: string, cursor: AllBatchesCursor | undefined) =>
  !cursor || created < cursor.created || (created === cursor.created && id < cursor.id);

/**
 * The most rounds one page reads while batches gone from Redis (deleted, or past their results' time) leave it short.
 */
const roundsMost = 20;

/**
 * A page of `limit` of the named accounts' batches, newest first, after `cursor`; `next` is the cursor of the page
 * after it (undefined when there is none). Gone batches are dropped from their account's list as they are met, as
 * `listBatches` drops them.
 */
export async function listEveryBatch(
  redis: Redis,
  accountIds: readonly string[],
  page: { limit: number; cursor?: AllBatchesCursor },
): Promise<{ batches: BatchRecord[]; next: AllBatchesCursor | undefined }> {
  const found: BatchRecord[] = [];
  let cursor = page.cursor;
  let exhausted = false;
  for (
    let round = 0;
    round < roundsMost && found.length <= page.limit && !exhausted && accountIds.length > 0;
    round++
  ) {
    const want = page.limit + 1 - found.length;
    // Batches made in the cursor's very millisecond may sit before it in an account's list: read past them too.
    let ties: number[] = accountIds.map(() => 0);
    if (cursor) {
      const counting = inOneWrite(redis);
      for (const account of accountIds) counting.zcount(accountBatchesKey(account), cursor.created, cursor.created);
      ties = ((await counting.exec()) ?? []).map(([error, n]) => {
        if (error) throw error;
        return Number(n) || 0;
      });
    }
    const reading = inOneWrite(redis);
    accountIds.forEach((account, i) =>
      reading.zrevrangebyscore(
        accountBatchesKey(account),
        cursor ? cursor.created : '+inf',
        '-inf',
        'WITHSCORES',
        'LIMIT',
        0,
        want + ties[i]!,
      ),
    );
    const lists = ((await reading.exec()) ?? []).map(([error, flat]) => {
      if (error) throw error;
      return flat as string[];
    });
    const candidates: Array<{ account: string; id: string; created: number }> = [];
    lists.forEach((flat, i) => {
      for (let j = 0; j + 1 < flat.length; j += 2) {
        const id = flat[j]!;
        const created = Number(flat[j + 1]);
        if (isAfter(created, id, cursor)) candidates.push({ account: accountIds[i]!, id, created });
      }
    });
    // Newest first; equal times by id, higher first (as ZREVRANGE orders equal scores).
    candidates.sort((a, b) => b.created - a.created || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
    const taken = candidates.slice(0, want);
    // Each account gave up to `want` of its own past the cursor: fewer than `want` in all is the end of every list.
    exhausted = candidates.length < want;
    if (taken.length === 0) break;
    const read = inOneWrite(redis);
    for (const { id } of taken) read.hgetall(batchKey(id));
    const records = ((await read.exec()) ?? []).map(([error, row]) => {
      // A read that failed is not a batch gone: it must not be dropped from the list.
      if (error) throw error;
      return batchFromHash(row as Record<string, string>);
    });
    const gone = inOneWrite(redis);
    let anyGone = false;
    taken.forEach((entry, i) => {
      const record = records[i];
      if (record) found.push(record);
      else {
        gone.zrem(accountBatchesKey(entry.account), entry.id);
        anyGone = true;
      }
    });
    if (anyGone) await gone.exec();
    const last = taken.at(-1)!;
    cursor = { created: last.created, id: last.id };
  }
  const batches = found.slice(0, page.limit);
  if (found.length > page.limit) {
    const last = batches.at(-1)!;
    return { batches, next: { created: last.created, id: last.id } };
  }
  // Short of a page: the lists read through, or the rounds ran out among gone batches (the next page reads on from
  // there).
  return { batches, next: exhausted ? undefined : cursor };
}
