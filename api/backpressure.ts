import type { Queue } from 'bullmq';
import type { Logger } from '../shared/logger.js';
import { overloaded } from '../shared/errors.js';
import type { QueueName } from '../shared/queues.js';

/**
 * Bounds the waiting jobs of each queue without a Redis round trip per request:
 * counts are refreshed in the background, and jobs this process added since
 * the last refresh are counted on top so a burst into one instance is caught.
 */
export class Backpressure {
  private readonly waiting = new Map<QueueName, number>();
  private readonly addedSinceRefresh = new Map<QueueName, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly queues: Map<QueueName, Queue>,
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
  admit(queue: QueueName): void {
    const added = this.addedSinceRefresh.get(queue) ?? 0;
    if ((this.waiting.get(queue) ?? 0) + added >= this.limits[queue]) {
      throw overloaded(1, `The ${queue} queue is full (${this.limits[queue]} waiting requests). Retry shortly.`);
    }
    this.addedSinceRefresh.set(queue, added + 1);
  }

  private async refresh(): Promise<void> {
    try {
      await Promise.all(
        [...this.queues].map(async ([name, queue]) => {
          this.waiting.set(name, await queue.getWaitingCount());
          this.addedSinceRefresh.set(name, 0);
        }),
      );
    } catch (error) {
      this.log.warn({ err: error }, 'could not refresh queue depths');
    }
  }
}
