import type { Redis } from 'ioredis';
import { inOneWrite } from '../redis.js';
import { accountBatchesKey, batchKey } from '../redis-keys.js';
import { batchField, batchFromHash } from './hash.js';
import type { BatchDialect, BatchRecord } from './types.js';

/**
 * Batches read back: one by its id, an account's as a page of its list (newest first), how many of an account's are
 * open, and which of them a key may see. A batch is its account's, not its key's; a key limited to models sees only
 * those whose every model it may use.
 */

/** A batch's record, or undefined when there is none (never made, deleted, or its results' time is over). */
export async function readBatch(redis: Redis, batchId: string): Promise<BatchRecord | undefined> {
  return batchFromHash(await redis.hgetall(batchKey(batchId)));
}

/**
 * Whether a key may see a batch: one with no model limit (`allowedModels` undefined) sees every batch of its
 * account; one limited to models sees a batch only when it may use every model the batch uses, so a key kept off a
 * model reads neither the prompts nor the answers of that model's batches.
 */
export function seesBatch(allowedModels: readonly string[] | undefined, batch: Pick<BatchRecord, 'models'>): boolean {
  if (allowedModels === undefined) return true;
  // A batch made before its models were recorded may have used any: only a key without a model limit sees it.
  if (batch.models === undefined) return false;
  return batch.models.every((model) => allowedModels.includes(model));
}

/**
 * The most of an account's listed batches one page reads past those its key may not see: a page that meets that many
 * in a row ends there, short, with `has_more` (no id it could page on is the key's to be told).
 */
export const listScanMost = 10_000;
/** The most batches read in one round trip while a page is filled. */
const listChunkMost = 1_000;

/**
 * An account's batches a key sees (`seesBatch`), newest first: a page of `limit` after `afterId` / before `beforeId`
 * (Anthropic's cursors), gone ones dropped. Reads from the cursor's rank on, not the account's whole list, and
 * further while batches the key may not see (or gone ones) leave the page short, so a page is full and `hasMore` true
 * exactly when the key sees another batch beyond it, as if the others were not there (bounded by `listScanMost`).
 */
export async function listBatches(
  redis: Redis,
  accountId: string,
  page: { limit: number; afterId?: string; beforeId?: string; dialect?: BatchDialect },
  allowedModels?: readonly string[] | ((batch: BatchRecord) => boolean),
): Promise<{ batches: BatchRecord[]; hasMore: boolean }> {
  // The key's models (`seesBatch`), or a rule of the caller's (api/files/key-scope.ts: whose batches a key sees).
  const sees =
    typeof allowedModels === 'function' ? allowedModels : (batch: BatchRecord) => seesBatch(allowedModels, batch);
  const key = accountBatchesKey(accountId);
  // Newest first, as Anthropic lists them: `after_id` pages toward older batches, `before_id` toward newer ones.
  const [[, total], [, after], [, before]] = (await inOneWrite(redis)
    .zcard(key)
    .zrevrank(key, page.afterId ?? '')
    .zrevrank(key, page.beforeId ?? '')
    .exec()) as [[unknown, number], [unknown, number | null], [unknown, number | null]];
  const backward = page.beforeId !== undefined;
  // The ranks still to read, nearest the cursor first; a cursor that is not (or no longer) listed has nothing beyond
  // it.
  let next = backward ? (before ?? 0) - 1 : page.afterId === undefined ? 0 : after === null ? total : after + 1;
  const left = () => (backward ? next + 1 : total - next);
  const found: BatchRecord[] = [];
  const gone: string[] = [];
  let scanned = 0;
  // One more than the page, to know whether the key sees anything beyond it.
  let chunk = page.limit + 1;
  while (found.length <= page.limit && left() > 0 && scanned < listScanMost) {
    const size = Math.min(chunk, left(), listScanMost - scanned);
    const ids = backward
      ? (await redis.zrevrange(key, next - size + 1, next)).reverse()
      : await redis.zrevrange(key, next, next + size - 1);
    next += backward ? -size : size;
    scanned += size;
    // A list that shrank under the read (a batch deleted meanwhile) has nothing more in this direction to trust.
    if (ids.length === 0) break;
    const read = inOneWrite(redis);
    for (const id of ids) read.hgetall(batchKey(id));
    const records = ((await read.exec()) ?? []).map(([error, row]) => {
      // A read that failed is not a batch gone: it must not be dropped from the list.
      if (error) throw error;
      return batchFromHash(row as Record<string, string>);
    });
    gone.push(...ids.filter((_, i) => !records[i]));
    // A dialect's list holds its own batches only (the console's, both): the others are passed as unseen ones are.
    for (const record of records)
      if (
        record &&
        found.length <= page.limit &&
        sees(record) &&
        (page.dialect === undefined || record.dialect === page.dialect)
      )
        found.push(record);
    // Many the key may not see: read further in larger steps.
    chunk = Math.min(listChunkMost, chunk * 2);
  }
  // Dropped once read through: dropped as met, they would move the ranks still to read.
  if (gone.length > 0) await redis.zrem(key, ...gone);
  const hasMore = found.length > page.limit || (left() > 0 && scanned >= listScanMost);
  const batches = found.slice(0, page.limit);
  return { batches: backward ? batches.reverse() : batches, hasMore };
}

/** How many of an account's batches made since `since` (epoch ms: one older is past its deadline) have not ended. */
export async function openBatchCount(redis: Redis, accountId: string, since = 0): Promise<number> {
  const ids = await redis.zrangebyscore(accountBatchesKey(accountId), since, '+inf');
  if (ids.length === 0) return 0;
  const read = inOneWrite(redis);
  for (const id of ids) read.hget(batchKey(id), batchField.status);
  const statuses = ((await read.exec()) ?? []).map(([, status]) => status as string | null);
  return statuses.filter((status) => status === 'validating' || status === 'in_progress' || status === 'canceling')
    .length;
}
