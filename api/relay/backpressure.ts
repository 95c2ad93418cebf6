import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { readBacklog } from '../../shared/scheduler.js';
import { overloaded } from '../../shared/errors.js';
import type { QueueName } from '../../shared/queues.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import { depthStates, sumDepths, type QueueDepth } from '../http/metrics.js';

/**
 * Bounds the waiting jobs of each queue without a Redis round trip per request:
 * counts are refreshed in the background, and jobs this process added since
 * the last refresh are counted on top so a burst into one instance is caught.
 */
export class Backpressure {
  private readonly waitingCount = new Map<QueueName, number>();
  /** Every state's count as last read, for the metrics (read at scrape time: no Redis command of its own). */
  private readonly depth = new Map<QueueName, QueueDepth>();
  private readonly addedSinceRefresh = new Map<QueueName, number>();
  /** Waiting jobs by tier and account, for the metrics. */
  private readonly backlog = new Map<QueueName, Array<[tier: string, account: string, waiting: number]>>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly queues: QueueShards,
    private readonly limits: Record<QueueName, number>,
    private readonly log: Logger,
    private readonly refreshMs = 200,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Throws 503 when the queue is full; counts the job as added otherwise. */
  claimRoom(queue: QueueName): void {
    const added = this.addedSinceRefresh.get(queue) ?? 0;
    if ((this.waitingCount.get(queue) ?? 0) + added >= this.limits[queue]) {
      throw overloaded(1, `The ${queue} queue is full (${this.limits[queue]} waiting requests). Retry shortly.`);
    }
    this.addedSinceRefresh.set(queue, added + 1);
  }

  /** A capability's waiting jobs (all its shards and lanes) at the last refresh. */
  waiting(queue: QueueName): number {
    return this.waitingCount.get(queue) ?? 0;
  }

  /** Each queue's waiting jobs by tier and account, as last refreshed. */
  *backlogs(): Iterable<[queue: string, tier: string, account: string, waiting: number]> {
    for (const [queue, rows] of this.backlog) for (const [tier, account, waiting] of rows) yield [queue, tier, account, waiting];
  }

  /** Each queue's jobs by state, as last refreshed. */
  depths(): Iterable<[QueueName, QueueDepth]> {
    return this.depth.entries();
  }

  private async refresh(): Promise<void> {
    try {
      await Promise.all(
        [...this.queues.entries()].map(async ([name, shards]) => {
          // The bound is the capability's: its shards' waiting jobs together.
          // One script call per shard, as for the waiting count alone, reads the other states the metrics show.
          const [counts, backlogs] = await Promise.all([
            Promise.all(shards.map((queue) => queue.getJobCounts(...depthStates, 'prioritized'))),
            Promise.all(shards.map((queue) => readBacklog(this.redis, queue.name))),
          ]);
          const depth = sumDepths(counts);
          const byTierAndAccount = new Map<string, [string, string, number]>();
          for (const [tier, account, waiting] of backlogs.flat()) {
            const key = `${tier}|${account}`;
            const sum = byTierAndAccount.get(key);
            if (sum) sum[2] += waiting;
            else byTierAndAccount.set(key, [tier, account, waiting]);
          }
          this.backlog.set(name, [...byTierAndAccount.values()]);
          this.depth.set(name, depth);
          this.waitingCount.set(name, depth.waiting);
          this.addedSinceRefresh.set(name, 0);
        }),
      );
    } catch (error) {
      this.log.warn({ err: error }, 'could not refresh queue depths');
    }
  }
}
