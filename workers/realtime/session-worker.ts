import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../../shared/config.js';
import { isFirstRun } from '../../shared/jobs.js';
import { realtimeLaneQueueName, shardQueueName } from '../../shared/queues.js';
import { realtimeLaneVendors, realtimeSessionCap } from '../../shared/realtime-queue.js';
import type { RealtimeJobData } from '../../shared/realtime.js';
import { createRedis } from '../../shared/redis.js';
import { leaveBacklog, recount } from '../../shared/scheduling/index.js';
import { settledBy } from '../../shared/stop-deadline.js';
import { StartingWorker } from '../starting-worker.js';
import { SessionBus } from './session-bus.js';
import { SessionRun, type RealtimeJobResult, type SessionRunDeps } from './session-run.js';

/**
 * The worker process's Realtime sessions: a BullMQ worker on each queue sessions wait in (shared/realtime-queue.ts):
 * the `realtime` queue's shards, and each capped vendor's Realtime lane, capped in BullMQ at the vendor's session
 * cap (its global concurrency, set by every worker at start), so a start past the cap waits in the lane in its fair
 * order and a running session holds its slot until its job ends; each fetch loop as wide as
 * REALTIME_SESSIONS_PER_WORKER (a lane: no wider than its cap). A job is one session, run once: its lock is renewed by
 * BullMQ while it runs, and a stalled one (its worker died) is failed, not run again (`maxStalledCount: 0`), its slot
 * freed with its lock.
 *
 * Stopping: every session here is ended at once with `close` 1012 (the api tells its client to reconnect), and the
 * loops wait for their jobs to finish, which they do in moments (a response under way cancelled at the vendor and
 * billed, within the stop's deadline; the vendor sockets closed, the last responses billed).
 */

export interface RealtimeWorkers {
  /** The queues served here (for the recount and logs). */
  queues: readonly string[];
  close(until: number): Promise<void>;
}

export interface RealtimeWorkerDeps extends Omit<SessionRunDeps, 'bus'> {
  config: SessionRunDeps['config'] & Config;
  /** The worker's command connection (BullMQ's loops share it). */
  redis: Redis;
}

/** The close code a session gets when its worker stops: 1012, service restart (connect again). */
const shutdownCode = 1012;

export async function startRealtimeWorkers(deps: RealtimeWorkerDeps): Promise<RealtimeWorkers> {
  const { config, redis, log } = deps;
  const subscriber = createRedis(config.redis, { connectionName: 'worker-realtime-up' });
  const publisher = createRedis(config.redis, { connectionName: 'worker-realtime-down' });
  const bus = new SessionBus(subscriber, publisher, log);
  const running = new Set<SessionRun>();
  let stopping = false;

  const processor = async (job: Job<RealtimeJobData, RealtimeJobResult>): Promise<RealtimeJobResult> => {
    // Taken in the fair order: it leaves its queue's backlog, and its band's virtual time moves to its tag.
    if (isFirstRun(job))
      void leaveBacklog(redis, job.queueName, job.id!, `${job.queueQualifiedName}:${job.id}`).catch(() => undefined);
    const run = new SessionRun({ ...deps, bus }, job);
    running.add(run);
    if (stopping) run.stop(shutdownCode, 'worker shutting down');
    try {
      return await run.run();
    } finally {
      running.delete(run);
    }
  };

  const perWorker = config.concurrency.realtime;
  const shards = Math.max(1, config.queueShards.realtime ?? 1);
  const lanes = realtimeLaneVendors(config).map((vendor) => ({
    vendor,
    cap: realtimeSessionCap(config, vendor),
    queue: realtimeLaneQueueName(vendor),
  }));
  await Promise.all(
    lanes.map(async ({ queue: name, cap }) => {
      const queue = new Queue(name, { connection: redis });
      try {
        await queue.setGlobalConcurrency(cap);
      } finally {
        await queue.close();
      }
    }),
  );
  const loops = [
    ...Array.from({ length: shards }, (_, shard) => ({
      queue: shardQueueName('realtime', shard, shards),
      concurrency: perWorker,
    })),
    ...lanes.map(({ queue, cap }) => ({ queue, concurrency: Math.min(cap, perWorker) })),
  ];
  const workers = loops.map(
    ({ queue, concurrency }) =>
      new StartingWorker<RealtimeJobData, RealtimeJobResult>(queue, processor, {
        connection: redis,
        concurrency,
        lockDuration: config.workerLockMs,
        stalledInterval: Math.max(500, Math.floor(config.workerLockMs / 2)),
        // A session is never run twice: a second run would open a second vendor session.
        maxStalledCount: 0,
        removeOnComplete: { age: 3600, count: 1000 },
        removeOnFail: { age: 86_400, count: 5000 },
      }),
  );
  for (const worker of workers)
    worker.on('error', (error) => log.warn({ err: error, queue: worker.name }, 'realtime worker error'));
  await Promise.all(workers.map((worker) => worker.waitUntilReady()));

  // Each queue's backlog count is repaired from the sessions that wait, by one worker per interval.
  const counted = loops.map(({ queue }) => new Queue(queue, { connection: redis }));
  const recountSweep = setInterval(() => {
    for (const queue of counted) {
      recount(redis, queue, config.scheduling.recountMs).catch((error: unknown) =>
        log.warn({ err: error, queue: queue.name }, 'could not recount the realtime backlog'),
      );
    }
  }, config.scheduling.recountMs);
  recountSweep.unref();

  log.info(
    {
      queues: loops.map((loop) => loop.queue),
      sessionsPerWorker: perWorker,
      ...(lanes.length > 0 ? { sessionCaps: Object.fromEntries(lanes.map(({ vendor, cap }) => [vendor, cap])) } : {}),
    },
    'realtime sessions served',
  );
  return {
    queues: loops.map((loop) => loop.queue),
    async close(until: number) {
      stopping = true;
      clearInterval(recountSweep);
      for (const run of running) run.stop(shutdownCode, 'worker shutting down', until);
      if (!(await settledBy(Promise.allSettled(workers.map((worker) => worker.close())), until))) {
        log.warn({ running: running.size }, 'realtime sessions did not end by the stop deadline; given up');
        for (const worker of workers) void worker.close(true).catch(() => undefined);
      }
      await Promise.allSettled(counted.map((queue) => queue.close()));
      subscriber.disconnect();
      publisher.disconnect();
    },
  };
}
