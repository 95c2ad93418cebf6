import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { batchRequestJobId, dialectOf, recordInBatch, releaseBatchRequests, type ReleasedRequest } from './batches.js';
import type { GatewayJobData } from './jobs.js';
import type { QueueShards } from './queue-shards.js';
import { placeJob } from './scheduling/index.js';
import { batchRefillChannel } from './redis-keys.js';

/**
 * A batch's requests (of either dialect) go to the queue a window at a time: only `window` of a batch are jobs at once, the rest
 * wait as entries in the batch's pending hash. The api fills the window at intake as the entries are stored; then,
 * each time an eighth of it is free, the worker that recorded the last result asks the apis (`batchRefillChannel`)
 * and one of them fills it again (api/batches/refill.ts), off the workers' path; the periodic sweep fills any whose
 * asking was lost. So each job gets its account's fair tag when it is queued, not all at intake: two batches of one
 * account share its turns as two accounts share a lane's, and a batch of 10,000 holds a window of BullMQ jobs, not
 * 10,000. A request let in whose job never arrived (its api died between the two) is queued again from its entry by
 * the sweep (api/batches/sweep.ts).
 *
 * A request refused when its batch came in (an OpenAI batch's line whose body or model is refused: a failure of that
 * request, not of its batch, as OpenAI has it) waits as a refused entry, its result already written: let in, it is
 * recorded at once instead of queued, and takes no room in the window.
 */

/** A request of a batch as it waits to be queued: its queue, its attempts, and its job's data. */
export interface BatchEntry {
  queue: string;
  attempts: number;
  data: GatewayJobData & { claim: NonNullable<GatewayJobData['claim']> };
}

/** A request refused at intake: its custom_id, and its result (`errored`) as its batch records it. */
export interface RefusedEntry {
  refused: { customId: string; result: string };
}

export const encodeBatchEntry = (entry: BatchEntry | RefusedEntry): string => JSON.stringify(entry);

/** An entry's parts, undefined for text that is no entry ('' included). */
function parseEntry(text: string): Partial<BatchEntry & RefusedEntry> | undefined {
  if (!text) return undefined;
  try {
    const entry = JSON.parse(text) as Partial<BatchEntry & RefusedEntry> | null;
    return entry !== null && typeof entry === 'object' ? entry : undefined;
  } catch {
    return undefined;
  }
}

const asJobEntry = (entry: Partial<BatchEntry & RefusedEntry> | undefined): BatchEntry | undefined => (typeof entry?.queue === 'string' && entry.data?.claim ? (entry as BatchEntry) : undefined);
const asRefused = (entry: Partial<BatchEntry & RefusedEntry> | undefined): RefusedEntry['refused'] | undefined => {
  const refused = entry?.refused;
  return typeof refused?.customId === 'string' && typeof refused.result === 'string' ? refused : undefined;
};

/** The entry of a request to queue (undefined for a refused one, or text that is no entry). */
export function decodeBatchEntry(text: string): BatchEntry | undefined {
  return asJobEntry(parseEntry(text));
}

/** The custom_id an entry carries (`#<index>` when it has none to say). */
export function entryCustomId(text: string, index: number): string {
  const entry = parseEntry(text);
  const customId = entry?.data?.batch?.customId ?? entry?.refused?.customId;
  return typeof customId === 'string' ? customId : `#${index}`;
}

/** Where a batch's requests are queued: the queue its entry names (shared/queue-shards.ts `named`). */
export type BatchQueues = Pick<QueueShards, 'named'>;

/** What queuing a batch's released requests did: the indices it could not queue, and how many refused ones it recorded. */
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
export async function queueReleased(redis: Redis, queues: BatchQueues, batchId: string, released: readonly ReleasedRequest[], keepMs: number): Promise<QueuedRequests> {
  const out: QueuedRequests = { missed: [], recorded: 0, ended: false };
  const byQueue = new Map<Queue, Array<{ name: string; data: GatewayJobData; opts: JobsOptions }>>();
  await Promise.all(
    released.map(async ({ index, entry: text }) => {
      const parsed = parseEntry(text);
      const refused = asRefused(parsed);
      if (refused) {
        const recorded = await recordInBatch(redis, batchId, index, refused.customId, { type: 'errored', json: refused.result }, keepMs);
        if (recorded.state === 'recorded') out.recorded++;
        if (recorded.ended) out.ended = true;
        return;
      }
      const entry = asJobEntry(parsed);
      if (!entry) {
        out.missed.push(index);
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
  // The last result of an OpenAI batch written here: the apis are told, and one writes its files.
  if (out.ended && dialectOf(batchId) === 'openai') await redis.publish(batchRefillChannel, batchId);
  return out;
}

/** As `queueReleased`; returns the indices it could not queue. */
export async function queueBatchRequests(redis: Redis, queues: BatchQueues, batchId: string, released: readonly ReleasedRequest[], keepMs: number): Promise<number[]> {
  return (await queueReleased(redis, queues, batchId, released, keepMs)).missed;
}

/**
 * Fills a batch's window (none once it is canceled, expired or all in) and queues what came in; returns the indices
 * it could not queue. Refused requests recorded on the way leave room: the window is filled again until none was.
 */
export async function fillBatchWindow(redis: Redis, queues: BatchQueues, batchId: string, keepMs: number): Promise<number[]> {
  const missed: number[] = [];
  for (;;) {
    const released = await releaseBatchRequests(redis, batchId);
    if (released.length === 0) return missed;
    const queued = await queueReleased(redis, queues, batchId, released, keepMs);
    missed.push(...queued.missed);
    if (queued.recorded === 0) return missed;
  }
}
