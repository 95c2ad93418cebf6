import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { queueNames, shardOfJob, shardQueueName, type QueueName } from './queues.js';

/**
 * The api's BullMQ queues: each capability is one queue, or several shards
 * (`QUEUE_SHARDS_<QUEUE>`), each under its own hash tag. A job's shard follows
 * from its id (`shardOfJob`), so jobs spread evenly and a cancel, a resume or a
 * poll finds the job without asking Redis where it went.
 */
export class QueueShards {
  private readonly byName = new Map<QueueName, Queue[]>();

  constructor(connection: Redis, shards: Readonly<Record<QueueName, number>>, names: readonly QueueName[] = queueNames) {
    for (const name of names) {
      const count = Math.max(1, shards[name] ?? 1);
      this.byName.set(
        name,
        Array.from({ length: count }, (_, shard) => new Queue(shardQueueName(name, shard, count), { connection })),
      );
    }
  }

  /** Whether this capability is served here. */
  has(name: QueueName): boolean {
    return this.byName.has(name);
  }

  /** The queue (shard) that holds, or will hold, this job. */
  forJob(name: QueueName, jobId: string): Queue | undefined {
    const shards = this.byName.get(name);
    return shards?.[shardOfJob(jobId, shards.length)];
  }

  /** Every shard of one capability. */
  shardsOf(name: QueueName): readonly Queue[] {
    return this.byName.get(name) ?? [];
  }

  /** Every capability with its shards. */
  entries(): IterableIterator<[QueueName, Queue[]]> {
    return this.byName.entries();
  }

  /** Every BullMQ queue, all shards of all capabilities. */
  all(): Queue[] {
    return [...this.byName.values()].flat();
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.all().map((queue) => queue.close()));
  }
}
