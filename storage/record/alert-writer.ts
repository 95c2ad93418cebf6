import type { Redis } from 'ioredis';
import type { Queue } from 'bullmq';
import { readAlertEntry, type Alert } from '../../shared/alerts.js';
import type { AlertJobData } from '../../shared/queues.js';
import { alertStreamKeys } from '../../shared/redis-keys.js';
import { isCluster } from '../../shared/redis.js';
import type { Logger } from '../../shared/logger.js';
import type { RecordDb } from './database.js';
import { writeAlerts } from './alerts.js';
import {
  claimIdle,
  ensureGroup,
  isMissingGroup,
  Pause,
  readGroup,
  type GroupReader,
  type StreamEntry,
  type StreamReply,
} from './stream-group.js';

/**
 * Moves budget alerts from Redis to the record and queues their delivery. A settlement that crosses a threshold
 * appends the crossing to its bucket's alerts stream in the same script that marks it sent (shared/money/lua), so
 * what was decided is in Redis before anyone answers; this consumer (a Redis Streams consumer group, one consumer per
 * worker process, as the usage writer) writes each entry to the `alerts` table by its id (team, budget, period,
 * threshold: written twice it is one row), queues a job of the `{alerts}` queue for each still pending (the job's id
 * is the alert's: queued twice it is one job), and only then acknowledges and deletes the entries. Delivery is at
 * least once and each step is idempotent: a batch whose write or queueing failed stays pending and is done again;
 * one a dead consumer held is claimed by another after `claimIdleMs`. With no webhook set the rows are written
 * `no_webhook` and nothing is queued.
 */

export const alertGroup = 'record';

export interface AlertWriterOptions {
  /** A connection of its own: the consumer blocks on it between batches. */
  redis: Redis;
  record: RecordDb;
  log: Logger;
  /** This process's consumer name in the group. */
  consumer: string;
  /** The `{alerts}` queue the deliveries are added to. */
  queue: Queue<AlertJobData>;
  delivery: {
    /** Whether a webhook is set: else alerts are recorded `no_webhook` and not queued. */
    webhook: boolean;
    attempts: number;
    backoffMs: number;
  };
  batch?: number;
  blockMs?: number;
  claimIdleMs?: number;
}

const maxBackoffMs = 10_000;
/** Delivered or given-up jobs are kept a week for the queue dashboard; the row is the lasting account of them. */
const keepJobsS = 7 * 86_400;

/** Creates each alerts stream's consumer group if it is missing (a new or flushed Redis), from the stream's start. */
export const ensureAlertGroup = (redis: Redis): Promise<void> => ensureGroup(redis, alertStreamKeys, alertGroup);

export class AlertWriter {
  private running = false;
  private loop: Promise<void> | undefined;
  private lastClaim = 0;
  private readonly pause = new Pause();
  private readonly reader: GroupReader;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;

  constructor(private readonly options: AlertWriterOptions) {
    this.reader = { redis: options.redis, group: alertGroup, consumer: options.consumer, count: options.batch ?? 200 };
    this.blockMs = options.blockMs ?? 1000;
    this.claimIdleMs = options.claimIdleMs ?? 30_000;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async close(): Promise<void> {
    this.running = false;
    this.pause.cut();
    await this.loop;
  }

  private async run(): Promise<void> {
    const { redis, log } = this.options;
    const oneServer = !isCluster(redis);
    // Own pending entries first (read before a crash or a failed write), then new ones.
    let history = true;
    let backoff = 0;
    while (this.running) {
      try {
        if (backoff > 0) await this.pause.for(backoff);
        await this.claimAbandoned();
        let read = 0;
        const replies: StreamReply[] = [];
        if (oneServer)
          replies.push(
            await readGroup(
              this.reader,
              alertStreamKeys,
              alertStreamKeys.map(() => (history ? '0' : '>')),
              history ? undefined : this.blockMs,
            ),
          );
        else
          for (const stream of alertStreamKeys)
            replies.push(await readGroup(this.reader, [stream], [history ? '0' : '>']));
        for (const reply of replies) {
          for (const [stream, entries] of reply ?? []) {
            if (entries.length > 0) await this.write(stream, entries);
            read += entries.length;
          }
        }
        if (history && read === 0) history = false;
        if (!oneServer && read === 0 && this.running) await this.pause.for(this.blockMs);
        backoff = 0;
      } catch (error) {
        history = true;
        if (isMissingGroup(error)) {
          await ensureAlertGroup(redis).catch(() => undefined);
          continue;
        }
        backoff = Math.min(maxBackoffMs, Math.max(250, backoff * 2));
        log.warn(
          { err: error, retryMs: backoff },
          'could not record budget alerts; they wait in Redis and are recorded again',
        );
      }
    }
  }

  /** Takes over the entries a consumer that died held unacknowledged. */
  private async claimAbandoned(): Promise<void> {
    const now = Date.now();
    if (now - this.lastClaim < this.claimIdleMs / 2) return;
    this.lastClaim = now;
    for (const stream of alertStreamKeys) {
      const entries = await claimIdle(this.reader, stream, this.claimIdleMs);
      if (entries.length > 0) await this.write(stream, entries);
    }
  }

  /** Records a batch, queues what is pending, and only then acknowledges and deletes the entries. */
  private async write(stream: string, entries: StreamEntry[]): Promise<void> {
    const { record, queue, delivery, log, redis } = this.options;
    const alerts: Alert[] = [];
    for (const [id, fields] of entries) {
      const alert = readAlertEntry(id, fields);
      if (alert) alerts.push(alert);
      // Only the money scripts write here: an entry that is not an alert is not one to keep waiting for.
      else log.error({ stream, entry: id, fields }, 'an entry of an alerts stream is not an alert; dropped');
    }
    const pending = await writeAlerts(record, alerts, delivery.webhook ? 'pending' : 'no_webhook');
    for (const alertId of pending) {
      await queue.add(
        'deliver',
        { alertId },
        {
          jobId: alertId,
          attempts: delivery.attempts,
          backoff: { type: 'exponential', delay: delivery.backoffMs },
          removeOnComplete: { age: keepJobsS },
          removeOnFail: { age: keepJobsS },
        },
      );
    }
    const ids = entries.map(([id]) => id);
    await redis
      .multi()
      .xack(stream, alertGroup, ...ids)
      .xdel(stream, ...ids)
      .exec();
    for (const alert of alerts)
      log.info(
        { alert: alert.id, spentMicros: alert.spentMicros, limitMicros: alert.limitMicros },
        'budget alert recorded',
      );
  }
}
