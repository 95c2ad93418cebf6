import { decodeAsyncJobFailure } from '../../shared/async-job-failure.js';
import type { ServerResponse } from 'node:http';
import { setTimeout as pause } from 'node:timers/promises';
import type { GatewayContext } from '../http/context.js';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import type { Config } from '../../shared/config.js';
import { GatewayError, timeoutError } from '../../shared/errors.js';
import { cancelChannel, resultKey, streamWatchKey } from '../../shared/redis-keys.js';
import { movedStub, type GatewayJobResult } from '../../shared/jobs.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { sseDone } from '../../shared/sse.js';
import type { ExpectedReply, ReplyHub, ReplyTarget } from './reply-hub.js';
import { clientDisconnected } from '../http/metrics.js';
import type { QueueShards } from '../../shared/queue-shards.js';

/** What an reply uses of the relay's dependencies. */
export interface HeldReplyDeps {
  config: Config;
  redis: Redis;
  hub: ReplyHub;
  /** The vendors' lanes, where a job moved by a fallback is followed (shared/scheduling/lane-move.ts). */
  queues: QueueShards;
}

/**
 * A job that finished is removed from Redis moments after its reply was
 * published: a job found missing gets this long for that reply to arrive
 * before it is declared lost.
 */
const lostGraceMs = 1000;
/** How often a followed stream whose client left checks that someone still follows it (followers mark it every 2 s). */
const followCheckMs = 3000;
/** How long a forced shutdown waits for each aborted request's answer to be written. */
const abortFlushMs = 2000;

/** The job is gone from Redis (e.g. Redis restarted without persistence): nothing will ever answer it. */
export const jobLostError = () =>
  new GatewayError(
    503,
    'The request was lost by the gateway (its queue lost the job, e.g. a Redis restart); retry the request.',
    {
      type: 'server_error',
      code: 'job_lost',
      headers: { 'retry-after': '1' },
    },
  );

/**
 * One enqueued request waiting for its job's answer: what the reply hub
 * routes to the job's expected reply is handed on here. It ends with the
 * answer, at the deadline, when the client leaves, or on a forced shutdown;
 * after messages may have been lost, it reconciles from Redis. Subclasses
 * write the answer.
 */
export abstract class HeldReply implements ReplyTarget {
  protected ended = false;
  private reconciling = false;
  private finish!: () => void;
  private fail!: (error: unknown) => void;
  protected readonly finished = new Promise<void>((resolve, reject) => {
    this.finish = resolve;
    this.fail = reject;
  });
  protected readonly res: ServerResponse;
  protected readonly jobId: string;
  /** The job's Redis key: the job is queued by the time its reply is held (in another lane once it moved there). */
  jobKey: string;
  /** The queue that holds the job: the one it was added to, or the lane a worker moved it to. */
  protected queue: Queue;

  constructor(
    protected readonly ctx: GatewayContext,
    protected readonly deps: HeldReplyDeps,
    /** The hub's entry for the job: what a replay from the job's log is delivered through. */
    private readonly expected: ExpectedReply,
    queue: Queue,
    protected readonly log: Logger,
  ) {
    this.res = ctx.res;
    this.jobId = expected.jobId;
    this.queue = queue;
    this.jobKey = queue.toKey(expected.jobId);
  }

  abstract readonly stream: boolean;
  /**
   * How a stream ends when the api answers for a job it could not hear end: OpenAI's `[DONE]` unless the stream's
   * dialect says.
   */
  protected get trailer(): string {
    return sseDone;
  }
  /** What the request asked for with `x-stream-resume-grace-ms` (already capped); undefined: the configured default. */
  resumeGraceMs: number | undefined;
  /** Identical requests may follow this stream's log: its client leaving cancels it only once nobody does. */
  followed = false;
  abstract deliver(message: ReplyMessage): void;

  async run(deadline: number): Promise<void> {
    const onClose = () => {
      if (this.ended || this.res.writableFinished) return;
      clientDisconnected(this.stream ? 'stream' : 'held');
      const grace = this.resumeGraceMs ?? this.deps.config.streamResumeGraceMs;
      if (this.stream && grace > 0) this.awaitResume(grace);
      // Followed (or soon to be): checked now and every few seconds, as the followers mark it every 2 s.
      else if (this.stream && this.followed) this.awaitResume(0, followCheckMs);
      else void this.cancel();
    };
    this.res.once('close', onClose);
    // The client may have left while the job was being enqueued: its 'close' has already fired.
    if (this.res.destroyed || this.res.closed) onClose();
    const timer = setTimeout(() => void this.deadlineReached(), Math.max(0, deadline - Date.now()));
    try {
      await this.finished;
    } finally {
      clearTimeout(timer);
      clearTimeout(this.graceTimer);
      clearTimeout(this.resumeTimer);
      this.res.off('close', onClose);
    }
  }

  private graceTimer: NodeJS.Timeout | undefined;

  /**
   * The deadline: a job still waiting in its queue will not run in time, so it is taken out and answered 504 now
   * (a flex request's short deadline included); a job running is given a second more to answer itself, with what
   * its worker knows, before the api answers for it.
   */
  private async deadlineReached(): Promise<void> {
    if (this.ended) return;
    const removed = await this.queue.remove(this.jobId).then(
      (count) => count === 1,
      () => false,
    );
    if (removed) {
      this.cancelled ??= Promise.resolve(true);
      this.log.warn('request deadline passed while its job waited in the queue');
      this.failWith(timeoutError('The request waited in the queue past its deadline.'));
      return;
    }
    if (!this.ended) this.graceTimer = setTimeout(() => this.timeout(), 1000);
  }

  private resumeTimer: NodeJS.Timeout | undefined;

  /**
   * A stream whose client left keeps running for a while: the client may
   * reconnect (to any api instance) and resume it from its event log. It is
   * cancelled once the grace has passed with nobody following the log.
   */
  private awaitResume(graceMs: number, againMs = graceMs): void {
    const check = async () => {
      if (this.ended) return;
      const followed = await this.deps.redis.exists(streamWatchKey(this.jobId)).catch(() => 0);
      if (this.ended) return;
      if (followed === 1) this.resumeTimer = setTimeout(() => void check(), againMs);
      else void this.cancel('client left and did not resume');
    };
    this.resumeTimer = setTimeout(() => void check(), graceMs);
  }

  protected end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    if (error === undefined) this.finish();
    else this.fail(error);
  }

  protected timeout(): void {
    this.log.warn('request deadline passed without an answer');
    this.failWith(timeoutError());
    void this.cancel();
  }

  protected abstract failWith(error: GatewayError): void;

  /** Set once the request is cancelled: true when the job was removed before any worker took it. */
  cancelled: Promise<boolean> | undefined;

  /** Nobody waits any more: drop the job if nobody took it yet, else tell the worker holding it to stop. */
  private cancel(reason = 'client left', lost = false): Promise<boolean> {
    this.end();
    this.cancelled ??= (async () => {
      try {
        const removed = await this.queue.remove(this.jobId);
        // Removing a job that no longer exists "succeeds", yet a worker may still be running it.
        if (removed !== 1 || lost) await this.deps.redis.publish(cancelChannel, this.jobId);
        this.log.info({ removed: removed === 1 }, `${reason}; request cancelled`);
        return removed === 1;
      } catch (error) {
        this.log.warn({ err: error }, 'could not cancel request');
        return false;
      }
    })();
    return this.cancelled;
  }

  /** Forced shutdown: the client gets `error` now, and the job is cancelled so no worker runs it for nobody. */
  async abort(error: GatewayError): Promise<void> {
    if (this.ended) return;
    const answered =
      this.res.writableFinished || this.res.destroyed
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            this.res.once('finish', resolve);
            this.res.once('close', resolve);
          });
    this.failWith(error);
    const cancelled = this.cancel('server shutting down');
    await Promise.race([Promise.all([answered, cancelled]), pause(abortFlushMs)]);
  }

  /**
   * After a subscriber reconnect, or when the liveness sweep saw the job gone
   * or finished: answers from the job what pub/sub may have lost. A failed
   * read concludes nothing (the next sweep tries again); only a job Redis
   * says does not exist is declared lost.
   */
  reconcile(): void {
    if (this.ended || this.reconciling) return;
    this.reconciling = true;
    this.check()
      .catch((error) => this.log.warn({ err: error }, 'reconcile failed; the liveness sweep retries'))
      .finally(() => {
        this.reconciling = false;
      });
  }

  private async check(moves = 0): Promise<void> {
    const job = await this.queue.getJob(this.jobId);
    if (this.ended) return;
    // Moved to another vendor's lane by a worker (a fallback): the job lives on there, under the same id.
    const result = job?.returnvalue as GatewayJobResult | undefined;
    const movedTo = movedStub(result) ? result.movedTo : undefined;
    if (movedTo !== undefined || (!job && moves === 0)) {
      const lane = movedTo !== undefined ? this.deps.queues.laneQueue(movedTo) : await this.movedCopy();
      if (lane && lane !== this.queue && moves < 2) {
        this.queue = lane;
        this.jobKey = lane.toKey(this.jobId);
        return this.check(moves + 1);
      }
    }
    if (job) {
      const state = await job.getState();
      // Read after the state: every chunk of a finished stream is in its log by now.
      if (this.stream) await this.deps.hub.replay(this.jobId, this.expected);
      if (state === 'completed') this.finishFrom(result);
      else if (state === 'failed') {
        // The worker published its own error before failing the job; it says more, so it gets to arrive first.
        await pause(lostGraceMs);
        // Missed (published while this api's subscriber reconnected): answered with what BullMQ kept of it, the
        // error itself where the job carries it whole (an async job's), else its message.
        const reason = job.failedReason;
        const wire = decodeAsyncJobFailure(reason);
        this.failWith(
          wire
            ? GatewayError.fromWire(wire)
            : new GatewayError(502, `The request failed${reason ? `: ${reason.slice(0, 300)}` : ''}.`, {
                code: 'job_failed',
              }),
        );
      }
      return;
    }
    await pause(lostGraceMs);
    if (this.ended || (await this.deps.redis.exists(this.jobKey)) === 1) return;
    if (this.stream) {
      // A log from the first chunk on without a gap outlives only a job that finished (and was removed):
      // data lost with Redis takes the log too, and chunks written after that start past 1.
      const replayed = await this.deps.hub.replay(this.jobId, this.expected);
      if (replayed && replayed.first === 1 && replayed.count === replayed.last) return this.finishFrom(undefined);
    } else if ((await this.deps.redis.exists(resultKey(this.jobId))) === 1) {
      return this.finishFrom({ bodyRef: resultKey(this.jobId) });
    }
    if (this.ended) return;
    this.log.warn('the job is gone from Redis; answering 503 job_lost');
    this.failWith(jobLostError());
    void this.cancel('job lost', true);
  }

  /** The lane that holds the job when it is not where it was added (its stub there already removed). */
  private async movedCopy(): Promise<Queue | undefined> {
    for (const [, lane] of this.deps.queues.laneQueues()) {
      if (lane === this.queue) continue;
      if (await lane.getJob(this.jobId)) return lane;
    }
    return undefined;
  }

  /** Answers as the job's `done` would have. */
  private finishFrom(result: GatewayJobResult | undefined): void {
    const reply = { jobId: this.jobId, seq: 0 };
    if (this.stream) this.deliver({ kind: 'done', ...reply, payload: this.trailer });
    else if (result?.body !== undefined) this.deliver({ kind: 'done', ...reply, payload: result.body });
    else if (result?.bodyRef) this.deliver({ kind: 'done-ref', ...reply, payload: result.bodyRef });
    else
      this.failWith(
        new GatewayError(502, 'The request finished, but its result was lost with Redis; it ran (and was billed).', {
          code: 'result_lost',
        }),
      );
  }
}
