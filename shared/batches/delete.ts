import type { Redis } from 'ioredis';
import { inOneWrite } from '../redis.js';
import {
  accountBatchesKey,
  batchDoneKey,
  batchIntakeKey,
  batchKey,
  batchPendingKey,
  batchQueuedKey,
  batchResultsKey,
  openBatchesKey,
} from '../redis-keys.js';

/**
 * A batch's keys gone (its DELETE): every trace but its id in its account's list, which the list drops when it reads
 * it.
 */
export async function deleteBatch(redis: Redis, batchId: string, accountId: string): Promise<void> {
  await redis.del(
    batchKey(batchId),
    batchDoneKey(batchId),
    batchResultsKey(batchId),
    batchPendingKey(batchId),
    batchQueuedKey(batchId),
    batchIntakeKey(batchId),
  );
  await inOneWrite(redis).zrem(accountBatchesKey(accountId), batchId).zrem(openBatchesKey, batchId).exec();
}
