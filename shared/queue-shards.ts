import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { laneQueueName, laneVendor, queueNames, shardOfJob, shardQueueName, type QueueName } from './queues.js';

/**
 * The api's BullMQ queues: each capability is one queue, or several shards
 * (`QUEUE_SHARDS_<QUEUE>`), each under its own hash tag, and one more queue per
 * capped vendor (its lane, shared by every capability: `shared/scheduling`). A job's shard follows from
 * its id (`shardOfJob`), so jobs spread evenly and a cancel, a resume or a poll
 * finds the job without asking Redis where it went; its lane is kept with what
 * finds it (an async job's record) or tried in turn.
 */
export class QueueShards {
  private readonly byName = new Map<QueueName, Queue[]>();
  /** Each capped vendor's lane, by vendor. */
  private readonly lanes = new Map<string, Queue>();
  /** Every queue above by its name, and any other asked for by name (`queueNamed`). */
  private readonly byQueueName = new Map<string, Queue>();

  constructor(
    private readonly connection: Redis,
    shards: Readonly<Record<QueueName, number>>,
    names: readonly QueueName[] = queueNames,
    /** The capped vendors, each with a lane of its own, shared by every capability. */
    readonly laneNames: readonly string[] = [],
  ) {
    for (const name of names) {
      const count = Math.max(1, shards[name] ?? 1);
      this.byName.set(
        name,
        Array.from({ length: count }, (_, shard) => new Queue(shardQueueName(name, shard, count), { connection })),
      );
    }
    for (const lane of laneNames) this.lanes.set(lane, new Queue(laneQueueName(lane), { connection }));
    for (const queue of this.all()) this.byQueueName.set(queue.name, queue);
  }

  /** Whether this capability is served here. */
  has(name: QueueName): boolean {
    return this.byName.has(name);
  }

  /** The queue that holds, or will hold, this job: its vendor's lane, or its shard of the capability's shared lane. */
  forJob(name: QueueName, jobId: string, lane?: string): Queue | undefined {
    const shards = this.byName.get(name);
    if (!shards) return undefined;
    if (lane !== undefined) {
      const queue = this.lanes.get(lane);
      if (queue) return queue;
    }
    return shards[shardOfJob(jobId, shards.length)];
  }

  /** This api's queue of a lane, by its queue name. */
  laneQueue(queueName: string): Queue | undefined {
    const vendor = laneVendor(queueName);
    return vendor === undefined ? undefined : this.lanes.get(vendor);
  }

  /** Every lane here, by vendor. */
  laneQueues(): Array<[vendor: string, queue: Queue]> {
    return [...this.lanes.entries()];
  }

  /** Every queue a job of this capability may be in, its shard first, then the lanes. */
  candidates(name: QueueName, jobId: string): Queue[] {
    const first = this.forJob(name, jobId);
    return first ? [first, ...this.lanes.values()] : [];
  }

  /** The job under this id in whichever of the capability's queues holds it (its shard first, then each lane). */
  async locate(name: QueueName, jobId: string): Promise<{ queue: Queue; job: Job } | undefined> {
    for (const queue of this.candidates(name, jobId)) {
      const job = await queue.getJob(jobId);
      if (job) return { queue, job };
    }
    return undefined;
  }

  /** The shards of one capability's shared lane. */
  shardsOf(name: QueueName): readonly Queue[] {
    return this.byName.get(name) ?? [];
  }

  /** Every capability with its shards (the lanes are apart: `laneQueues`). */
  entries(): IterableIterator<[QueueName, Queue[]]> {
    return [...this.byName.keys()].map((name): [QueueName, Queue[]] => [name, [...this.shardsOf(name)]]).values();
  }

  /** Every BullMQ queue: all shards of all capabilities, then the lanes. */
  all(): Queue[] {
    return [...[...this.byName.keys()].flatMap((name) => this.shardsOf(name)), ...this.lanes.values()];
  }

  /**
   * A queue by its name, as a job's record kept it (a Message Batch's pending request): this api's own, or, for a
   * lane another process's configuration has and this one does not, one made for it once and kept.
   */
  queueNamed(queueName: string): Queue {
    let queue = this.byQueueName.get(queueName);
    if (!queue) this.byQueueName.set(queueName, (queue = new Queue(queueName, { connection: this.connection })));
    return queue;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.byQueueName.values()].map((queue) => queue.close()));
  }
}
