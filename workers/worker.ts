import { DelayedError, Queue, type WorkerOptions } from 'bullmq';
import { StartingWorker } from './starting-worker.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { createRedis } from '../shared/redis.js';
import type { Redis } from 'ioredis';
import { loadCatalog } from '../shared/catalog.js';
import { GatewayError } from '../shared/errors.js';
import { accessChangedChannel, cancelChannel, mcpCheckChannel, slotFreedChannel } from '../shared/redis-keys.js';
import { CurrentAccess } from '../shared/access/index.js';
import { laneQueueName, shardQueueName, type QueueName } from '../shared/queues.js';
import {
  backToBandHead,
  cappedVendors,
  leaveBacklog,
  ratePace,
  recount,
  vendorLimits,
  LaneKeeper,
  LaneMoves,
  VendorSlots,
} from '../shared/scheduling/index.js';
import { isFirstRun, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import { CancelRegistry } from './cancel-registry.js';
import { createProcessor } from './job-run.js';
import { JobLifecycle } from './job-lifecycle.js';
import { traceJobs } from './job-tracing.js';
import { retryDelay } from './failure-policy.js';
import { ChannelRouter } from './channel-router.js';
import { createBlobStore } from '../storage/create-blob-store.js';
import { resolveUrlSecret } from '../storage/blob-urls.js';
import { createVendorHttp } from './vendors/vendor-http.js';
import { BlobJanitor } from './blob-janitor.js';
import { releaseExpiredReservations } from '../shared/money/billing.js';
import { openHotRecord } from '../storage/record/hot-state.js';
import { openMcpRegistry } from '../storage/record/mcp-servers.js';
import { ensureUsageGroup, UsageWriter } from '../storage/record/usage-writer.js';
import { AlertWriter, ensureAlertGroup } from '../storage/record/alert-writer.js';
import { startAlertDelivery } from './alert-delivery.js';
import { alertsQueueName, type AlertJobData } from '../shared/queues.js';
import { randomBytes } from 'node:crypto';
import { PriceList } from '../shared/money/pricing.js';
import { countJobs, startWorkerMetrics } from './metrics.js';
import { OverrunReport } from './overrun-report.js';
import { closeMarginMs, closeRedisBy, settledBy } from '../shared/stop-deadline.js';
import { startRealtimeWorkers, type RealtimeWorkers } from './realtime/session-worker.js';
import { McpServerChecks } from './mcp/server-checks.js';
import { McpToolWorkers } from './mcp/tool-calls.js';
import { McpLoopCalls } from './mcp/loop-calls.js';
import { PromptWarming } from './prompt-warming.js';
import { McpQueues } from '../shared/mcp/queues.js';

const reservationSweepMs = 10_000;
const reservationGraceMs = 60_000;

/**
 * Jobs in flight per fetch loop: past this, one loop's round trips, not the vendor, would limit a queue's throughput.
 */
const jobsPerFetchLoop = 64;
const maxFetchLoops = 4;

/** `total` split into `parts` nearly equal whole shares. */
const split = (total: number, parts: number) =>
  Array.from({ length: parts }, (_, i) => Math.floor(total / parts) + (i < total % parts ? 1 : 0));

/** A queue's concurrency spread over its fetch loops (one loop per 64 jobs in flight, at most four). */
export function fetchLoops(concurrency: number): number[] {
  return split(concurrency, Math.min(maxFetchLoops, Math.max(1, Math.ceil(concurrency / jobsPerFetchLoop))));
}

/**
 * The fetch loops of a capability: its concurrency shared by its queue shards (each at least one job), then by each
 * shard's loops.
 */
export function capabilityLoops(
  name: QueueName,
  concurrency: number,
  shards: number,
): Array<{ queue: string; concurrency: number; loop: number }> {
  return split(Math.max(concurrency, shards), shards).flatMap((share, shard) =>
    fetchLoops(share).map((loopConcurrency, loop) => ({
      queue: shardQueueName(name, shard, shards),
      concurrency: loopConcurrency,
      loop,
    })),
  );
}

/**
 * A fetch loop's BullMQ settings. Every loop runs on the process's one
 * connection, which BullMQ shares for its commands (only its blocking wait for
 * a job gets a connection of its own), so their writes are batched with the
 * rest. Only the first loop of a queue checks for stalled jobs: the check is
 * per queue, and one per process is enough.
 */
export function fetchLoopOptions(config: Config, concurrency: number, loop: number) {
  return {
    concurrency,
    lockDuration: config.workerLockMs,
    stalledInterval: Math.max(500, Math.floor(config.workerLockMs / 2)),
    maxStalledCount: 1,
    skipStalledCheck: loop > 0,
    settings: {
      backoffStrategy: (attemptsMade: number, _type?: string, error?: Error) =>
        retryDelay(
          config,
          Math.max(0, attemptsMade - 1),
          error instanceof GatewayError ? error : new GatewayError(500, 'retry'),
        ),
    },
  } satisfies Omit<WorkerOptions, 'connection'>;
}

/** A capped vendor's lane: its name and how many of its jobs run at once. */
export interface Lane {
  vendor: string;
  /**
   * Jobs of the lane in flight across every worker (its vendor's concurrency cap, the one number the limiter holds
   * too); 0: no cap in BullMQ (an RPM cap only).
   */
  cap: number;
  /** The vendor's caps as configured: calls in flight and per minute (0: none). */
  maxConcurrency: number;
  rpm: number;
}

/**
 * The lanes of the capped vendors (`shared/scheduling`), one per vendor, shared
 * by every capability that calls it. A lane with a
 * concurrency cap is capped in BullMQ too (its global concurrency, set by every
 * worker at start: the setting is the same everywhere), so the jobs past the cap
 * wait in the queue in their fair order, not in a worker; a lane with an RPM cap
 * is paced by BullMQ (its global rate limit, `ratePace`), likewise. A cap the
 * configuration no longer has is removed.
 */
async function openLanes(config: Config, redis: ReturnType<typeof createRedis>): Promise<Lane[]> {
  const lanes = cappedVendors(config).map((vendor) => {
    const limits = vendorLimits(config, vendor);
    return { vendor, cap: limits.maxConcurrency, ...limits };
  });
  await Promise.all(
    lanes.map(async ({ vendor, cap, rpm }) => {
      const queue = new Queue(laneQueueName(vendor), { connection: redis });
      try {
        if (cap > 0) await queue.setGlobalConcurrency(cap);
        else await queue.removeGlobalConcurrency();
        if (rpm > 0) {
          const { max, duration } = ratePace(rpm);
          await queue.setGlobalRateLimit(max, duration);
        } else await queue.removeGlobalRateLimit();
      } finally {
        await queue.close();
      }
    }),
  );
  return lanes;
}

/**
 * One fetch loop per lane, whatever capabilities this process serves (a lane holds every capability's jobs for its
 * vendor): as wide as the vendor's cap (the jobs past it wait in the queue), or, with an RPM cap only,
 * as the widest capability here.
 */
export function laneLoops(
  concurrency: Readonly<Record<QueueName, number>>,
  queues: readonly QueueName[],
  lanes: readonly Lane[],
): Array<{ queue: string; concurrency: number; loop: number }> {
  const widest = Math.max(1, ...queues.map((name) => concurrency[name]));
  return lanes.map(({ vendor, cap }) => ({
    queue: laneQueueName(vendor),
    concurrency: cap > 0 ? Math.min(cap, widest) : widest,
    loop: 0,
  }));
}

/**
 * The processor in the fair order (`shared/scheduling`): a job's first run reports its take (it leaves its queue's
 * backlog and moves its band's virtual time to its tag). A job BullMQ found stalled comes back through the plain
 * wait list, which BullMQ serves before every prioritized job, so before every band: it is put back, at its own
 * band's head, before it runs again.
 */
function inFairOrder(
  redis: ReturnType<typeof createRedis>,
  processor: ReturnType<typeof countJobs>,
): ReturnType<typeof countJobs> {
  return async (job, token) => {
    if (isFirstRun(job)) {
      void leaveBacklog(redis, job.queueName, job.id!, job.queueQualifiedName + ':' + job.id).catch(() => undefined);
    } else if (job.stalledCounter > 0 && token !== undefined && (await backToBandHead(job))) {
      await job.moveToDelayed(Date.now(), token);
      throw new DelayedError();
    }
    return processor(job, token);
  };
}

export interface WorkerPool {
  /**
   * Stop taking jobs, finish the running ones, close connections. `until`
   * (epoch ms, default SHUTDOWN_GRACE_MS from now) is a hard deadline: jobs
   * still running then are given up (their locks expire and another worker
   * runs them again), and what is left closes within `closeMarginMs`, Redis
   * there or not.
   */
  close(until?: number): Promise<void>;
}

/**
 * The worker's one subscription: cancels (a client gone) abort their job's vendor call, a freed vendor slot wakes the
 * calls waiting for one at once, and a change to a key or an account (`accessChangedChannel`) reaches the work of it
 * already admitted here (`CurrentAccess`: a running batch's next request, an open Realtime session). A subscription
 * lost and made again may have missed changes: every key is then read again.
 */
export async function listenForSignals(
  subscriber: Redis,
  cancels: CancelRegistry,
  limiter: VendorSlots,
  access?: CurrentAccess,
): Promise<void> {
  subscriber.on('message', (channel: string, message: string) => {
    if (channel === slotFreedChannel) limiter.slotFreed(message);
    else if (channel === accessChangedChannel) access?.changed(message);
    else if (channel === cancelChannel) cancels.cancel(message);
  });
  if (access) subscriber.on('ready', () => access.clear());
  await subscriber.subscribe(cancelChannel, slotFreedChannel, ...(access ? [accessChangedChannel] : []));
  limiter.listening();
}

/** One BullMQ worker per queue this process serves, sharing one cancel subscription. */
export async function startWorkers(config: Config, log: Logger): Promise<WorkerPool> {
  const vendorHttp = createVendorHttp(config);
  if (config.fetchAllowPrivate)
    log.warn('FETCH_ALLOW_PRIVATE is on: URLs from vendors may reach private and loopback addresses');
  const redis = createRedis(config.redis, { connectionName: 'worker' });
  const subscriber = createRedis(config.redis, { connectionName: 'worker-cancel' });
  const cancels = new CancelRegistry();
  const limiter = new VendorSlots(redis, config);
  const access = new CurrentAccess(redis);
  await listenForSignals(subscriber, cancels, limiter, access);

  // The record: Redis's hot state is loaded from it if Redis lost it, and settled usage is written to it from here.
  const { record, close: closeRecord } = await openHotRecord(config.databaseUrl, redis, log, 'the workers');
  await ensureUsageGroup(redis);
  const usageConnection = createRedis(config.redis, { connectionName: 'worker-usage' });
  const usageWriter = new UsageWriter({
    redis: usageConnection,
    record,
    log,
    consumer: `worker-${randomBytes(6).toString('hex')}`,
    retentionDays: config.usageRetentionDays,
    auditRetentionDays: config.auditRetentionDays,
  });
  usageWriter.start();
  // Budget alerts the settlements decided: recorded and queued from their streams here, delivered by the worker below.
  await ensureAlertGroup(redis);
  const alertConnection = createRedis(config.redis, { connectionName: 'worker-alerts' });
  const alertsQueue = new Queue<AlertJobData>(alertsQueueName, { connection: redis });
  const alertWriter = new AlertWriter({
    redis: alertConnection,
    record,
    log,
    consumer: `worker-${randomBytes(6).toString('hex')}`,
    queue: alertsQueue,
    delivery: {
      webhook: config.alerts.webhookUrl !== undefined,
      attempts: config.alerts.attempts,
      backoffMs: config.alerts.backoffMs,
    },
  });
  alertWriter.start();
  const alertDelivery = startAlertDelivery({ redis, record, log, config: config.alerts });

  const catalog = loadCatalog(config.catalogFile);
  const prices = PriceList.load(catalog, config);
  // The upstream MCP servers: a worker checks each one every interval (one worker per interval, by a lock).
  // The servers are the file's and those an admin added, followed live (shared/mcp/registry.ts).
  const mcpServers = openMcpRegistry({ config, redis, record, log });
  await mcpServers.start();
  const mcpChecks = new McpServerChecks({
    redis,
    log,
    servers: () => mcpServers.list(),
    intervalMs: config.mcp.checkIntervalMs,
    owner: `worker-${randomBytes(6).toString('hex')}`,
  });
  // The calls of the gateway's own tool loop (a Responses or Messages request that names MCP servers), made through the
  // servers' queues. One handle per server's queue in this process: the loop's calls are queued on it, the cap of each
  // server served set.
  const mcpQueues = new McpQueues(redis, mcpServers);
  const loopCalls = new McpLoopCalls({ config, redis, queues: mcpQueues, log });
  const router = new ChannelRouter(redis, catalog, log, config);
  await router.start();
  startWorkerMetrics(config, router);
  const blobs = createBlobStore(config);
  // Each capped vendor has a lane of its own, shared by every capability, capped in BullMQ itself at the vendor's
  // concurrency.
  const lanes = await openLanes(config, redis);
  // One BullMQ Queue per lane in this process: jobs moved there (fallbacks) are added through it, and it is recounted.
  const laneQueues = new Map(
    lanes.map(({ vendor }) => [vendor, new Queue(laneQueueName(vendor), { connection: redis })]),
  );
  const laneMoves = new LaneMoves(redis, laneQueues);
  // Tracing on: each run of a job gets its spans (the processor unchanged when off).
  const processor = traceJobs(
    createProcessor({
      config,
      redis,
      catalog,
      router,
      limiter,
      cancels,
      log,
      vendorHttp,
      laneMoves,
      access,
      tools: { redis, registry: mcpServers, access, calls: loopCalls, config, prices },
      warming: new PromptWarming(redis, { waitMs: config.promptWarmWaitMs, lifetimeMs: config.promptCacheLifetimeMs }),
      media: { config, redis, blobs, urlSecret: await resolveUrlSecret(redis, config.blobUrlSecret) },
      settlement: {
        config,
        redis,
        prices,
        policy: { bufferRecords: config.usageBufferRecords, alertThresholds: config.alerts.thresholds },
        log,
        overruns: new OverrunReport(log),
      },
    }),
  );

  const lifecycle = new JobLifecycle({ redis, blobs, log });
  // BullMQ's worker fetches one job per Redis round trip; a busy queue gets several fetch loops, which share its
  // concurrency. Realtime sessions are jobs of their own kind (workers/realtime/): their queues have loops of their
  // own.
  const jobQueues = config.workerQueues.filter((name) => name !== 'realtime');
  const loops = [
    ...jobQueues.flatMap((name) => capabilityLoops(name, config.concurrency[name], config.queueShards[name])),
    ...laneLoops(config.concurrency, jobQueues, lanes),
  ];
  const fetchLoop = (name: string, concurrency: number, loop: number) => {
    const worker = new StartingWorker<GatewayJobData, GatewayJobResult>(
      name,
      inFairOrder(redis, countJobs(processor)),
      { connection: redis, ...fetchLoopOptions(config, concurrency, loop) },
    );
    lifecycle.watch(worker, name);
    return worker;
  };
  const bullWorkers = loops.map(({ queue: name, concurrency, loop }) => fetchLoop(name, concurrency, loop));
  // The lanes served here are registered; a lane nobody serves any more is drained at a default.
  const laneKeeper = new LaneKeeper({
    redis,
    config,
    log,
    lanes: lanes.map(({ vendor, maxConcurrency, rpm }) => ({
      queue: laneQueueName(vendor),
      vendor,
      cap: maxConcurrency,
      rpm,
    })),
    drain: (name, concurrency) => {
      const worker = fetchLoop(name, concurrency, 0);
      bullWorkers.push(worker);
      return {
        close: async () => {
          bullWorkers.splice(bullWorkers.indexOf(worker), 1);
          await worker.close();
        },
      };
    },
  });

  const janitor = new BlobJanitor({ redis, blobs, log, config });
  janitor.start();
  mcpChecks.start();
  // An admin's "check it now" reaches every worker; the one that takes the server's lock checks it.
  const checkNow = (name: string) =>
    void mcpChecks
      .checkNow(name)
      .catch((error: unknown) => log.warn({ err: error, server: name }, 'could not check an MCP server'));
  subscriber.on('message', (channel: string, name: string) => {
    if (channel === mcpCheckChannel) checkNow(name);
  });
  await subscriber.subscribe(mcpCheckChannel);
  // A server added or changed by an admin is checked at once (by one worker: the server's lock), not at the next round.
  mcpServers.onChange(({ added, changed }) => {
    for (const server of [...added, ...changed]) checkNow(server.name);
  });
  // Tool calls run on the workers that serve `mcp` (WORKER_QUEUES), a capability of its own that scales alone.
  const mcpTools = config.workerMcp
    ? new McpToolWorkers({
        config,
        redis,
        log,
        registry: mcpServers,
        queues: mcpQueues,
        cancels,
        access,
        policy: { bufferRecords: config.usageBufferRecords, alertThresholds: config.alerts.thresholds },
      })
    : undefined;
  await mcpTools?.start();
  // Reservations of jobs lost with their api and worker are given back a minute after their deadline.
  const reservationSweep = setInterval(() => {
    releaseExpiredReservations(redis, reservationGraceMs).then(
      (released) => released > 0 && log.info({ released }, 'released the reservations of lost jobs'),
      (error: unknown) => log.warn({ err: error }, 'could not release expired reservations'),
    );
  }, reservationSweepMs);
  reservationSweep.unref();
  // Each queue's backlog count is repaired from the jobs that wait, by one worker per interval.
  const laneByName = new Map([...laneQueues.values()].map((queue) => [queue.name, queue]));
  const counted = [...new Set(loops.map((loop) => loop.queue))].map(
    (name) => laneByName.get(name) ?? new Queue(name, { connection: redis }),
  );
  const recountSweep = setInterval(() => {
    for (const queue of counted) {
      recount(redis, queue, config.scheduling.recountMs).then(
        (healed) => healed && log.warn({ queue: queue.name, healed }, 'the backlog count had drifted: repaired'),
        (error: unknown) => log.warn({ err: error, queue: queue.name }, 'could not recount the backlog'),
      );
    }
  }, config.scheduling.recountMs);
  recountSweep.unref();

  const realtime: RealtimeWorkers | undefined = config.workerQueues.includes('realtime')
    ? await startRealtimeWorkers({
        config,
        redis,
        catalog,
        router,
        cancels,
        vendorHttp,
        log,
        access,
        billing: { redis, prices, log },
        workerName: `worker-${process.pid}`,
      })
    : undefined;
  // Started means taking jobs: every fetch loop has its connection (the api reports ready once this is logged).
  await Promise.all(bullWorkers.map((worker) => worker.waitUntilReady()));
  await laneKeeper.start();
  log.info(
    {
      queues: config.workerQueues,
      concurrency: config.concurrency,
      ...(lanes.length > 0
        ? {
            lanes: Object.fromEntries(
              lanes.map(({ vendor, maxConcurrency, rpm }) => [vendor, { max_concurrency: maxConcurrency, rpm }]),
            ),
          }
        : {}),
      ...(laneKeeper.drained().length > 0 ? { drainingStrandedLanes: laneKeeper.drained() } : {}),
    },
    'workers started',
  );
  return {
    async close(until = Date.now() + config.shutdownGraceMs) {
      mcpServers.stop();
      clearInterval(reservationSweep);
      clearInterval(recountSweep);
      // Realtime sessions end at once (1012, their clients reconnect), beside the other jobs finishing.
      const realtimeClosed = realtime?.close(until);
      await settledBy(laneKeeper.close(), until);
      const toolsClosed = mcpTools?.close(until);
      void Promise.allSettled(counted.map((queue) => queue.close()));
      const givenUp: string[] = [];
      if (!(await settledBy(Promise.allSettled(bullWorkers.map((w) => w.close())), until))) {
        const running = cancels.size;
        log.warn(
          { running, graceMs: config.shutdownGraceMs },
          `grace period over: giving up ${running} running job${running === 1 ? '' : 's'} (another worker runs ${running === 1 ? 'it' : 'them'} again once ${running === 1 ? 'its lock expires' : 'their locks expire'})`,
        );
        // Nothing waits for the running jobs any more; BullMQ stops its loops without them.
        for (const worker of bullWorkers) void worker.close(true).catch(() => undefined);
      }
      // Then what is left gets the margin past the deadline (a little, when stopped after it): each step below waits on
      // Redis (or the record), which may be gone.
      const closeBy = Math.max(until + closeMarginMs, Date.now() + closeMarginMs / 4);
      const step = async (what: string, work: Promise<unknown>) => {
        if (!(await settledBy(work, closeBy))) givenUp.push(what);
      };
      if (realtimeClosed) await step('ending the realtime sessions', realtimeClosed);
      if (toolsClosed) await step('the tool calls', toolsClosed);
      await step(
        'the upload cleanup',
        janitor.close().then(() => lifecycle.close()),
      );
      await step('the MCP server checks', mcpChecks.close());
      await step(
        "the tool loop's calls and the servers' queues",
        loopCalls.close().then(() => mcpQueues.close()),
      );
      // What settled until now is written before the process goes (else another worker's writer claims it later).
      await step(
        'writing the settled usage to the record (it stays in Redis for the next writer)',
        usageWriter.close(),
      );
      await step(
        'recording budget alerts and ending their deliveries (what is left stays in Redis and the queue)',
        Promise.all([alertWriter.close(), alertDelivery.close(), alertsQueue.close()]),
      );
      await step('closing the record', closeRecord());
      router.stop();
      await Promise.allSettled([
        ...[usageConnection, alertConnection, subscriber, redis].map((connection) => closeRedisBy(connection, closeBy)),
        settledBy(vendorHttp.close(), closeBy),
      ]);
      if (givenUp.length > 0)
        log.warn({ givenUp }, `the workers did not finish closing in time; given up: ${givenUp.join('; ')}`);
    },
  };
}
