import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { janitorLockKey, payloadKey } from '../shared/redis-keys.js';
import { jobIdOf, type GatewayJobData } from '../shared/jobs.js';
import { endpointNames, endpoints } from '../shared/endpoints.js';
import type { BlobStore } from '../storage/blob-store.js';
import { uploadKeys } from '../storage/upload-keys.js';
import { AccountFileStore } from '../storage/account-files.js';

export type JanitorConfig = Pick<
  Config,
  'blobSweepIntervalSeconds' | 'blobUrlTtlSeconds' | 'asyncResultTtlSeconds' | 'deadlineMs' | 'responseTtlSeconds'
> & { batches: Pick<Config['batches'], 'deadlineMs'> };

/** Kept past the end of a blob's advertised life (clock skew between processes, a link signed just after the write). */
const graceMs = 10 * 60_000;

export interface RetentionRule {
  prefix: string;
  /** Blobs written longer ago than this are deleted. */
  maxAgeMs: number;
}

/** How long each kind of blob is kept, from when it was written. */
export function retentionRules(config: JanitorConfig): RetentionRule[] {
  const asyncTtlMs = config.asyncResultTtlSeconds * 1000;
  // The queues of endpoints, which may hold uploads (a Realtime session's queue stores none: its deadline, a session's
  // longest life, does not keep them).
  const longestDeadlineMs = Math.max(...endpointNames.map((name) => config.deadlineMs[endpoints[name].queue]));
  return [
    // A backstop: a job's uploads are deleted when it ends. Never while a job could still read them.
    { prefix: 'uploads/', maxAgeMs: Math.max(asyncTtlMs, longestDeadlineMs + graceMs) },
    // Signed image links expire after BLOB_URL_TTL_S.
    { prefix: 'images/', maxAgeMs: config.blobUrlTtlSeconds * 1000 + graceMs },
    // Videos expire ASYNC_RESULT_TTL_S after their job finished; large async results with their job.
    { prefix: 'videos/', maxAgeMs: asyncTtlMs + graceMs },
    { prefix: 'results/', maxAgeMs: asyncTtlMs + graceMs },
    // The input items of large stored responses live as long as the response (RESPONSE_TTL_S).
    { prefix: 'responses/', maxAgeMs: config.responseTtlSeconds * 1000 + graceMs },
    // A backstop: an OpenAI batch's parts are deleted once its files are written, which is by its deadline (and the
    // sweep after it).
    { prefix: 'batch-parts/', maxAgeMs: config.batches.deadlineMs + 3_600_000 + graceMs },
  ];
}

export interface SweepReport {
  /** Blobs deleted, per prefix. */
  deleted: Record<string, number>;
  /** Blobs (or whole prefixes) that could not be listed or deleted; logged. */
  failed: number;
  /** Empty directories removed (local store). */
  directories: number;
  /** The accounts' files (`/v1/files`) deleted at their `expires_at`, and the bytes of uploads abandoned mid-way. */
  files: { expired: number; abandoned: number };
  ms: number;
}

export interface JanitorDeps {
  redis: Redis;
  blobs: BlobStore;
  log: Logger;
  config: JanitorConfig;
}

/**
 * Deletes blobs past their retention, every `BLOB_SWEEP_INTERVAL_S`. Every
 * worker process runs one; a Redis lock held for the interval lets only one
 * of them sweep per interval.
 */
export class BlobJanitor {
  private readonly log: Logger;
  private readonly token = randomUUID();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly deps: JanitorDeps) {
    this.log = deps.log.child({ component: 'blob-janitor' });
  }

  get enabled(): boolean {
    return this.deps.config.blobSweepIntervalSeconds > 0;
  }

  /** Sweeps now (if this process wins the lock), then every interval. Does nothing when disabled. */
  start(): void {
    if (!this.enabled || this.timer || this.stopped) return;
    const tick = () => {
      if (this.running || this.stopped) return;
      this.running = this.sweep()
        .then(
          () => undefined,
          (error: unknown) => this.log.error({ err: error }, 'blob sweep failed'),
        )
        .finally(() => {
          this.running = undefined;
        });
    };
    // Node timers take at most 2^31-1 ms (about 24 days).
    this.timer = setInterval(tick, Math.min(this.deps.config.blobSweepIntervalSeconds * 1000, 2 ** 31 - 1));
    this.timer.unref();
    tick();
  }

  /**
   * One sweep, when this process takes the interval's lock. Undefined when
   * disabled, closed, or another process holds the lock.
   */
  async sweep(): Promise<SweepReport | undefined> {
    if (!this.enabled || this.stopped) return undefined;
    const intervalMs = this.deps.config.blobSweepIntervalSeconds * 1000;
    // Expires a little before the next tick, so the holder's own next tick is not locked out by timer drift.
    const lockMs = Math.max(1, intervalMs - Math.min(5000, Math.floor(intervalMs / 10)));
    const taken = await this.deps.redis.set(janitorLockKey, this.token, 'PX', lockMs, 'NX');
    if (taken !== 'OK') return undefined;

    const started = Date.now();
    const report: SweepReport = { deleted: {}, failed: 0, directories: 0, files: { expired: 0, abandoned: 0 }, ms: 0 };
    for (const rule of retentionRules(this.deps.config)) {
      if (this.stopped) break;
      const cutoff = started - rule.maxAgeMs;
      let deleted = 0;
      try {
        for await (const blob of this.deps.blobs.list(rule.prefix)) {
          if (this.stopped) break;
          if (blob.modified.getTime() >= cutoff) continue;
          try {
            await this.deps.blobs.delete(blob.key);
            deleted += 1;
          } catch (error) {
            report.failed += 1;
            this.log.warn({ err: error, key: blob.key }, 'could not delete an expired blob');
          }
        }
        if (this.deps.blobs.removeEmptyDirectories && !this.stopped) {
          report.directories += await this.deps.blobs.removeEmptyDirectories(rule.prefix, new Date(started - graceMs));
        }
      } catch (error) {
        report.failed += 1;
        this.log.error({ err: error, prefix: rule.prefix }, 'could not sweep blobs');
      }
      report.deleted[rule.prefix] = deleted;
    }
    // Files are kept by their own record, not by age: an expired one goes whole (object and bytes), a batch's output
    // with its retention.
    if (!this.stopped) {
      try {
        const files = new AccountFileStore(this.deps.redis, this.deps.blobs);
        const expired = await files.sweepExpired(started);
        const abandoned = await files.sweepAbandonedUploads();
        report.files = { expired: expired.deleted, abandoned: abandoned.deleted };
        report.failed += expired.failed + abandoned.failed;
      } catch (error) {
        report.failed += 1;
        this.log.error({ err: error }, 'could not sweep expired files');
      }
    }
    report.ms = Date.now() - started;
    this.log.info(report, 'blob sweep');
    return report;
  }

  /** Stops the timer and waits for a sweep in progress (which stops early). */
  async close(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}

/** Endpoints whose payloads reference uploads. */

/**
 * Deletes the uploads of a job in its final state (completed, or failed with
 * no retry left); the caller decides finality. Returns how many were deleted.
 */
export async function deleteJobUploads(
  job: Job<GatewayJobData>,
  redis: Redis,
  blobs: BlobStore,
  log: Logger,
): Promise<number> {
  const data = job.data;
  if (!endpoints[data.endpoint].uploads) return 0;
  const stored = data.payload ? undefined : await redis.get(payloadKey(jobIdOf(data)));
  const payload = data.payload ?? (stored ? (JSON.parse(stored) as Record<string, unknown>) : undefined);
  let keys: string[];
  if (payload) keys = uploadKeys(payload);
  else {
    // The stored body expired: the request's uploads sit under its request id (a video's too: its job
    // id is the video's; jobs queued before the two ids were named apart carry only the job id, and are left to the
    // sweep).
    keys = [];
    for await (const blob of blobs.list(`uploads/${data.requestId}/`)) keys.push(blob.key);
  }
  const results = await Promise.allSettled(keys.map((key) => blobs.delete(key)));
  let deleted = 0;
  results.forEach((result, index) => {
    if (result.status === 'fulfilled') deleted += 1;
    else log.warn({ err: result.reason, key: keys[index], reqId: data.requestId }, 'could not delete an upload');
  });
  return deleted;
}
