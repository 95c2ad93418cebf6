import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { batchRequestJobId, releaseBatchRequests, type ReleasedRequest } from './batches.js';
import type { GatewayJobData } from './jobs.js';
import type { QueueShards } from './queue-shards.js';
import { placeJob } from './scheduling/index.js';

/**
 * A Message Batch's requests go to the queue a window at a time: only `window` of a batch are jobs at once, the rest
 * wait as entries in the batch's pending hash. The api fills the window at intake as the entries are stored; then,
 * each time an eighth of it is free, the worker that recorded the last result asks the apis (`batchRefillChannel`)
 * and one of them fills it again (api/batches/refill.ts), off the workers' path; the periodic sweep fills any whose
 * asking was lost. So each job gets its account's fair tag when it is queued, not all at intake: two batches of one
 * account share its turns as two accounts share a lane's, and a batch of 10,000 holds a window of BullMQ jobs, not
 * 10,000. A request let in whose job never arrived (its api died between the two) is queued again from its entry by
 * the sweep (api/batches/sweep.ts).
 */

/** A request of a batch as it waits to be queued: its queue, its attempts, and its job's data. */
export interface BatchEntry {
  queue: string;
  attempts: number;
  data: GatewayJobData & { claim: NonNullable<GatewayJobData['claim']> };
}

export const encodeBatchEntry = (entry: BatchEntry): string => JSON.stringify(entry);

export function decodeBatchEntry(text: string): BatchEntry | undefined {
  if (!text) return undefined;
  try {
    const entry = JSON.parse(text) as BatchEntry;
    return typeof entry.queue === 'string' && entry.data?.claim ? entry : undefined;
  } catch {
    return undefined;
  }
}

/** The custom_id an entry carries (`#<index>` when it has none to say). */
export function entryCustomId(text: string, index: number): string {
  return decodeBatchEntry(text)?.data.batch?.customId ?? `#${index}`;
}

/** Where a batch's requests are queued: the queue its entry names (shared/queue-shards.ts `named`). */
export type BatchQueues = Pick<QueueShards, 'named'>;

/**
 * Queues released requests: each placed at its account's fair place in its lane, then added (by queue, in one
 * round trip each). Returns the indices it could not queue (no entry to queue them from): the
 * sweep finds them as queued without a job.
 */
export async function queueBatchRequests(redis: Redis, queues: BatchQueues, batchId: string, released: readonly ReleasedRequest[]): Promise<number[]> {
  const missed: number[] = [];
  const byQueue = new Map<Queue, Array<{ name: string; data: GatewayJobData; opts: JobsOptions }>>();
  await Promise.all(
    released.map(async ({ index, entry: text }) => {
      const entry = decodeBatchEntry(text);
      if (!entry) {
        missed.push(index);
        return;
      }
      const queue = queues.named(entry.queue);
      const jobId = batchRequestJobId(batchId, index);
      const { priority } = await placeJob(redis, queue, jobId, entry.data.claim);
      let list = byQueue.get(queue);
      if (!list) byQueue.set(queue, (list = []));
      // Removed as it ends: its result is in its batch. A retry finds its payload (kept as long as the batch runs).
      list.push({ name: entry.data.endpoint, data: entry.data, opts: { attempts: entry.attempts, backoff: { type: 'gateway' }, removeOnComplete: true, removeOnFail: true, jobId, priority } });
    }),
  );
  await Promise.all([...byQueue].map(([queue, jobs]) => queue.addBulk(jobs)));
  return missed;
}

/** Fills a batch's window (none once it is canceled, expired or all in) and queues what came in; returns the indices it could not queue. */
export async function fillBatchWindow(redis: Redis, queues: BatchQueues, batchId: string): Promise<number[]> {
  const released = await releaseBatchRequests(redis, batchId);
  return released.length > 0 ? queueBatchRequests(redis, queues, batchId, released) : [];
}
