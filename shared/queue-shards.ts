import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { laneQueueName, queueNames, shardOfJob, shardQueueName, type QueueName } from './queues.js';

/**
 * The api's BullMQ queues: each capability is one queue, or several shards
 * (`QUEUE_SHARDS_<QUEUE>`), each under its own hash tag, and one more queue per
 * capped vendor (its lane, `shared/scheduling`). A job's shard follows from
 * its id (`shardOfJob`), so jobs spread evenly and a cancel, a resume or a poll
 * finds the job without asking Redis where it went; its lane is kept with what
 * finds it (an async job's record) or tried in turn.
 */
export class QueueShards {
  private readonly byName = new Map<QueueName, Queue[]>();
  private readonly lanes = new Map<QueueName, Map<string, Queue>>();
  /** Each lane's queue name, with its vendor. */
  private readonly laneByQueue = new Map<string, string>();

  constructor(
    connection: Redis,
    shards: Readonly<Record<QueueName, number>>,
    names: readonly QueueName[] = queueNames,
    /** The capped vendors, each with a lane of its own in every capability. */
    readonly laneNames: readonly string[] = [],
  ) {
    for (const name of names) {
      const count = Math.max(1, shards[name] ?? 1);
      this.byName.set(
        name,
        Array.from({ length: count }, (_, shard) => new Queue(shardQueueName(name, shard, count), { connection })),
      );
      this.lanes.set(name, new Map(laneNames.map((lane) => [lane, new Queue(laneQueueName(name, lane), { connection })])));
      for (const lane of laneNames) this.laneByQueue.set(laneQueueName(name, lane), lane);
    }
  }

  /** Whether this capability is served here. */
  has(name: QueueName): boolean {
    return this.byName.has(name);
  }

  /** The queue that holds, or will hold, this job: its vendor's lane, or its shard of the capability's shared lane. */
  forJob(name: QueueName, jobId: string, lane?: string): Queue | undefined {
    if (lane !== undefined) {
      const queue = this.lanes.get(name)?.get(lane);
      if (queue) return queue;
    }
    const shards = this.byName.get(name);
    return shards?.[shardOfJob(jobId, shards.length)];
  }

  /** This api's queue of a lane, by its queue name. */
  laneQueue(queueName: string): Queue | undefined {
    const lane = this.laneByQueue.get(queueName);
    if (lane === undefined) return undefined;
    for (const lanes of this.lanes.values()) {
      const queue = lanes.get(lane);
      if (queue?.name === queueName) return queue;
    }
    return undefined;
  }

  /** Every lane's queue name here. */
  laneQueueNames(): string[] {
    return [...this.laneByQueue.keys()];
  }

  /** The capped vendor whose lane a BullMQ queue is; undefined for a shard of a shared lane. */
  laneOfQueue(queueName: string): string | undefined {
    return this.laneByQueue.get(queueName);
  }

  /** Every queue a job of this capability may be in, its shard first, then the lanes. */
  candidates(name: QueueName, jobId: string): Queue[] {
    const first = this.forJob(name, jobId);
    return first ? [first, ...(this.lanes.get(name)?.values() ?? [])] : [];
  }

  /** The job under this id in whichever of the capability's queues holds it (its shard first, then each lane). */
  async locate(name: QueueName, jobId: string): Promise<{ queue: Queue; job: Job } | undefined> {
    for (const queue of this.candidates(name, jobId)) {
      const job = await queue.getJob(jobId);
      if (job) return { queue, job };
    }
    return undefined;
  }

  /** Every queue of one capability: its shards, then its lanes. */
  shardsOf(name: QueueName): readonly Queue[] {
    return [...(this.byName.get(name) ?? []), ...(this.lanes.get(name)?.values() ?? [])];
  }

  /** Every capability with its queues (shards and lanes). */
  entries(): IterableIterator<[QueueName, Queue[]]> {
    return [...this.byName.keys()].map((name): [QueueName, Queue[]] => [name, [...this.shardsOf(name)]]).values();
  }

  /** Every BullMQ queue, all shards and lanes of all capabilities. */
  all(): Queue[] {
    return [...this.byName.keys()].flatMap((name) => this.shardsOf(name));
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.all().map((queue) => queue.close()));
  }
}
