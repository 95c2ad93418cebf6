import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { AsyncJobRecord, GatewayJobData } from '../jobs.js';
import { jobIdOf } from '../jobs.js';
import { laneVendor } from '../queues.js';
import { asyncJobKey } from '../redis-keys.js';
import { placeJob } from './fair-queue.js';

/**
 * A job waits in the lane of the vendor its model's first route names (the api cannot know better). When the
 * worker that takes it routes it elsewhere (a fallback: the first channel resting or failing) and that other
 * vendor is capped too, the job does not hold its first lane's slot while waiting for the other vendor's: it is
 * queued again in that vendor's lane, at its account's fair place there (its claim travels with it), under the
 * same id, data and options, and its run here ends with `{ movedTo }`, a stub removed once BullMQ has recorded it.
 * A job moves once: a second fallback waits where it is. A fallback to a vendor without a cap runs where it is.
 */
export class LaneMoves {
  constructor(
    private readonly redis: Redis,
    /** This worker's queue of each capped vendor's lane, by vendor (its owner closes them). */
    private readonly lanes: ReadonlyMap<string, Queue>,
  ) {}

  /** Whether a job about to call `vendor` belongs in that vendor's lane instead of where it is. */
  wanted(job: Job<GatewayJobData>, vendor: string): boolean {
    return (
      this.lanes.has(vendor) &&
      laneVendor(job.queueName) !== vendor &&
      (job.data.laneMoves ?? 0) === 0 &&
      job.data.claim !== undefined
    );
  }

  /** Queues the job in `vendor`'s lane (counted in its backlog, at its fair place); resolves to that queue's name. */
  async move(job: Job<GatewayJobData>, vendor: string): Promise<string> {
    const queue = this.lanes.get(vendor)!;
    const id = jobIdOf(job.data);
    // A lane is where jobs wait: the job takes its fair place there, whatever its first queue was.
    const { priority } = await placeJob(this.redis, queue, id, { ...job.data.claim!, contended: true });
    const { attempts, backoff, removeOnComplete, removeOnFail } = job.opts;
    // An async job's record says which lane holds it (`GET /v1/jobs`, cancels): it now names the new one, before
    // the job is there (a reader in between finds the job still active where it was, or waiting here).
    if (job.data.async) await this.relabel(id, vendor);
    await queue.add(
      job.name,
      { ...job.data, laneMoves: (job.data.laneMoves ?? 0) + 1 },
      { jobId: id, priority, attempts, backoff, removeOnComplete, removeOnFail },
    );
    return queue.name;
  }

  private async relabel(id: string, vendor: string): Promise<void> {
    const text = await this.redis.get(asyncJobKey(id));
    if (text === null) return;
    const record = JSON.parse(text) as AsyncJobRecord;
    await this.redis.set(asyncJobKey(id), JSON.stringify({ ...record, lane: vendor }), 'KEEPTTL');
  }
}

/** The run that moved a job to another lane: it answered nothing, billed nothing. */
export class MovedToLane extends Error {
  constructor(readonly queue: string) {
    super(`moved to ${queue}`);
    this.name = 'MovedToLane';
  }
}
