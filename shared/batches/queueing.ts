import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { GatewayJobData } from '../jobs.js';
import type { QueueShards } from '../queue-shards.js';
import { batchRefillChannel } from '../redis-keys.js';
import { placeJob } from '../scheduling/index.js';
import { decodeEntry } from './entries.js';
import { batchRequestJobId, dialectOf } from './ids.js';
import { recordInBatch } from './record.js';
import { releaseBatchRequests, type ReleasedRequest } from './window.js';

/**
 * A batch's requests (of either dialect) go to the queue a window at a time: only `window` of a batch are jobs at once,
 * the rest wait as entries in the batch's pending hash. The api fills the window at intake as the entries are stored;
 * then, each time an eighth of it is free, the worker that recorded the last result asks the apis
 * (`batchRefillChannel`) and one of them fills it again (api/batches/refill.ts), off the workers' path; the periodic
 * sweep fills any whose asking was lost. So each job gets its account's fair tag when it is queued, not all at intake:
 * two batches of one account share its turns as two accounts share a lane's, and a batch of 10,000 holds a window of
 * BullMQ jobs, not 10,000. A request let in whose job never arrived (its api died between the two) is queued again from
 * its entry by the sweep (api/batches/sweep.ts).
 *
 * A request refused when its batch came in waits as a refused entry (entries.ts), its result already written: let
 * in, it is recorded at once instead of queued, and takes no room in the window.
 */

/** Where a batch's requests are queued: the queue its entry names (shared/queue-shards.ts `named`). */
export type BatchQueues = Pick<QueueShards, 'queueNamed'>;

/**
 * What queuing a batch's released requests did: the indices it could not queue, and how many refused ones it recorded.
 */
export interface QueuedRequests {
  /** No entry to queue them from: the sweep finds them as queued without a job. */
  missed: number[];
  /** Refused at intake, recorded now (they took no room in the window). */
  recorded: number;
  /** A refused one recorded now was the batch's last: it has ended. */
  ended: boolean;
}

/**
 * Queues released requests: each placed at its account's fair place in its lane, then added (by queue, in one
 * round trip each); a refused one is recorded instead (kept `keepMs` once its batch ends).
 */
export async function queueReleased(
  redis: Redis,
  queues: BatchQueues,
  batchId: string,
  released: readonly ReleasedRequest[],
  keepMs: number,
): Promise<QueuedRequests> {
  const out: QueuedRequests = { missed: [], recorded: 0, ended: false };
  const byQueue = new Map<Queue, Array<{ name: string; data: GatewayJobData; opts: JobsOptions }>>();
  await Promise.all(
    released.map(async ({ index, entry: text }) => {
      const { job: entry, refused } = decodeEntry(text);
      if (refused) {
        const recorded = await recordInBatch(
          redis,
          batchId,
          index,
          refused.customId,
          { type: 'errored', json: refused.result },
          keepMs,
        );
        if (recorded.state === 'recorded') out.recorded++;
        if (recorded.ended) out.ended = true;
        return;
      }
      if (!entry) {
        out.missed.push(index);
        return;
      }
      const queue = queues.queueNamed(entry.queue);
      const jobId = batchRequestJobId(batchId, index);
      const { priority } = await placeJob(redis, queue, jobId, entry.data.claim);
      let list = byQueue.get(queue);
      if (!list) byQueue.set(queue, (list = []));
      // Removed as it ends: its result is in its batch. A retry finds its payload (kept as long as the batch runs).
      list.push({
        name: entry.data.endpoint,
        data: entry.data,
        opts: {
          attempts: entry.attempts,
          backoff: { type: 'gateway' },
          removeOnComplete: true,
          removeOnFail: true,
          jobId,
          priority,
        },
      });
    }),
  );
  await Promise.all([...byQueue].map(([queue, jobs]) => queue.addBulk(jobs)));
  // The last result of an OpenAI batch written here: the apis are told, and one writes its files.
  if (out.ended && dialectOf(batchId) === 'openai') await redis.publish(batchRefillChannel, batchId);
  return out;
}

/** As `queueReleased`; returns the indices it could not queue. */
export async function queueBatchRequests(
  redis: Redis,
  queues: BatchQueues,
  batchId: string,
  released: readonly ReleasedRequest[],
  keepMs: number,
): Promise<number[]> {
  return (await queueReleased(redis, queues, batchId, released, keepMs)).missed;
}

/**
 * Fills a batch's window (none once it is canceled, expired or all in) and queues what came in; returns the indices
 * it could not queue. Refused requests recorded on the way leave room: the window is filled again until none was.
 */
export async function fillBatchWindow(
  redis: Redis,
  queues: BatchQueues,
  batchId: string,
  keepMs: number,
): Promise<number[]> {
  const missed: number[] = [];
  for (;;) {
    const released = await releaseBatchRequests(redis, batchId);
    if (released.length === 0) return missed;
    const queued = await queueReleased(redis, queues, batchId, released, keepMs);
    missed.push(...queued.missed);
    if (queued.recorded === 0) return missed;
  }
}
