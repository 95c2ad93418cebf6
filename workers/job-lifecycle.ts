import type { Job, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { defaultAccountId } from '../shared/accounts.js';
import { settledKey } from '../shared/redis-keys.js';
import { AsyncJobFailure } from '../shared/async-job-failure.js';
import { endpoints } from '../shared/endpoints.js';
import { GatewayError } from '../shared/errors.js';
import { jobIdOf, movedStub, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import type { Logger } from '../shared/logger.js';
import type { BlobStore } from '../storage/blob-store.js';
import { AnsweredFailure } from './answered-failure.js';
import { deleteJobUploads } from './blob-janitor.js';
import { ClientGoneError } from './client-gone-error.js';
import { isFinalFailure, runsNoMore } from './failure-policy.js';
import { publishJobEvent } from './media-processor.js';
import { countStalls } from './metrics.js';
import { ReplyPublisher } from './reply-publisher.js';

const settledAfterCompletionMs = 60_000;

export interface LifecycleDeps {
  /** Also where replies are published (ReplyPublisher), so a lost job's error follows its chunks in order. */
  redis: Redis;
  blobs: BlobStore;
  log: Logger;
}

/**
 * What happens once BullMQ has recorded a job's end (or one failed attempt),
 * heard on its worker's events: an async job's watchers are told, a client
 * nobody answered gets an error, the settled mark is shortened, and the job's
 * uploads are deleted once it will not run again.
 */
export class JobLifecycle {
  /** Upload deletions under way, waited for on close. */
  private readonly releasing = new Set<Promise<void>>();

  constructor(private readonly deps: LifecycleDeps) {}

  /** Listens to one BullMQ worker (one fetch loop of `queue`). */
  watch(worker: Worker<GatewayJobData, GatewayJobResult>, queue: string): void {
    const { redis, log } = this.deps;
    worker.on('completed', (job) => {
      // The stub a move to another vendor's lane left: the job lives on there, its uploads and settlement with it.
      if (movedStub(job.returnvalue)) {
        void job
          .remove()
          .catch((error: unknown) =>
            log.warn(
              { err: error, reqId: job.data.requestId },
              "could not remove the stub of a job moved to another lane (it expires with its queue's completed jobs)",
            ),
          );
        return;
      }
      this.forgetSettled(job);
      this.releaseUploads(job, async () => true);
      // An async job's watchers hear of its end once BullMQ has recorded it: what they read then is final.
      if (job.data.async)
        void publishJobEvent(redis, jobIdOf(job.data), { type: 'completed', status: 'completed' }).catch(
          () => undefined,
        );
    });
    worker.on('failed', (job, error) => {
      void this.answerFinalFailure(job, error);
      if (job) this.releaseUploads(job, () => runsNoMore(job, error));
    });
    worker.on('error', (error) => log.error({ err: error, queue }, 'worker error'));
    countStalls(worker);
  }

  /** Waits for the upload deletions under way. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.releasing]);
  }

  // BullMQ has recorded a failed attempt. When it was the last, whoever sees it tells who waits: an async
  // job's watchers (always from here, once the failure is recorded, so what they read then is final), and a
  // held request's api when the run could not answer it (e.g. the job stalled: its worker died twice),
  // so no client waits for its deadline.
  private async answerFinalFailure(job: Job<GatewayJobData> | undefined, error: Error): Promise<void> {
    if (!job) return;
    const { redis } = this.deps;
    const jobId = jobIdOf(job.data);
    // A job dropped because its client left answers nobody.
    if (!isFinalFailure(job, error) || error instanceof ClientGoneError) return;
    const lost = () =>
      new GatewayError(502, 'The request could not be completed: its worker was lost. Retry the request.', {
        code: 'worker_lost',
      }).toWire();
    if (job.data.async) {
      const wire = error instanceof AsyncJobFailure ? error.wire : lost();
      await publishJobEvent(redis, jobId, { type: 'failed', status: 'failed', error: wire.error }).catch(
        () => undefined,
      );
    } else if (!(error instanceof AnsweredFailure)) {
      await new ReplyPublisher(this.deps.redis, job.data.replyTo, jobId, { stream: job.data.stream })
        .error(lost())
        .catch(() => undefined);
    }
  }

  // A completed job never runs again, so its settled mark (which stops a second attempt from billing twice)
  // has nearly done its work: kept one more minute rather than until its deadline, one key per request. Not
  // dropped at once: a Redis failover that loses the job's completion (asynchronous replication) brings the
  // job back within seconds, and the mark must still be there to stop it billing again.
  private forgetSettled(job: Job<GatewayJobData>): void {
    this.deps.redis
      .pexpire(settledKey(job.data.accountId ?? defaultAccountId, job.data.requestId), settledAfterCompletionMs)
      .catch(() => undefined);
  }

  // A job's uploads are deleted once it reaches its final state; never while it may still be retried.
  private releaseUploads(job: Job<GatewayJobData>, final: () => Promise<boolean>): void {
    if (!endpoints[job.data.endpoint].uploads) return;
    const { redis, blobs, log } = this.deps;
    const release = (async () => {
      if (!(await final())) return;
      const deleted = await deleteJobUploads(job, redis, blobs, log);
      if (deleted > 0) log.debug({ reqId: job.data.requestId, deleted }, 'uploads deleted');
    })()
      .catch((error: unknown) => log.warn({ err: error, reqId: job.data.requestId }, 'could not delete uploads'))
      .finally(() => this.releasing.delete(release));
    this.releasing.add(release);
  }
}
