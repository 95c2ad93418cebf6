import type Router from '@koa/router';
import type { Middleware } from 'koa';
import { sql } from 'kysely';
import type { RecordDb } from '../../storage/record/database.js';
import { GatewayError } from '../../shared/errors.js';
import { settledBy } from '../../shared/stop-deadline.js';
import { createRouter } from './canonical-path.js';
import type { LoopStallMonitor } from './loop-stall.js';

/** How long a readiness probe waits for the record's answer, and how long one answer serves the probes after it. */
const recordProbeTimeoutMs = 1000;
const recordProbeReuseMs = 1500;

/**
 * Whether the record answers a `select 1` within a second: the api cannot
 * make keys, accounts or credits without it. One check serves every probe for
 * a second and a half, so a balancer's probes do not load the record.
 */
export function recordProbe(record: RecordDb): () => Promise<boolean> {
  let last: { at: number; reachable: Promise<boolean> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at > recordProbeReuseMs)
      last = { at: now, reachable: answersWithin(record, recordProbeTimeoutMs) };
    return last.reachable;
  };
}

async function answersWithin(record: RecordDb, timeoutMs: number): Promise<boolean> {
  let answered = false;
  await settledBy(
    sql`select 1`.execute(record).then(() => (answered = true)),
    Date.now() + timeoutMs,
  );
  return answered;
}

/** What `/readyz` asks of the api before it says ready. */
export interface ReadinessChecks {
  redisReachable(): Promise<boolean>;
  recordReachable(): Promise<boolean>;
  /** Its own workers take jobs (`npm start`'s); always true where the workers are elsewhere. */
  workersReady(): boolean;
  /** The reply subscriber is connected: answers can reach the requests held here. */
  subscriberConnected(): boolean;
  draining(): boolean;
  /** A vendor to call (a key, or the mock asked for): without one there is nothing to serve. */
  vendors: boolean;
  /** The worst event-loop stall since the previous probe: one slow request holds every other one. */
  loopStalls: LoopStallMonitor;
  /** Lanes with jobs waiting and no server with a configured cap (reported; the workers drain them at a default). */
  strandedLanes(): ReadonlyArray<{ queue: string; waiting: number; draining: boolean }>;
}

/**
 * The probes, answered outside `/v1` without a key (and while draining): the root's way to the console, `/healthz`,
 * `/readyz`.
 */
export function probeRoutes(checks: ReadinessChecks): Router {
  const probes = createRouter();
  // The root is where a person lands first: the console (which has the sign-in and the docs links).
  probes.get('/', (ctx) => {
    ctx.status = 302;
    ctx.redirect('/console/');
  });
  probes.get('/healthz', (ctx) => {
    ctx.body = { status: 'ok' };
  });
  probes.get('/readyz', async (ctx) => {
    const redis = await checks.redisReachable();
    const record = await checks.recordReachable();
    const workers = checks.workersReady();
    const subscriber = checks.subscriberConnected();
    const draining = checks.draining();
    const ready = redis && record && workers && subscriber && !draining && checks.vendors;
    ctx.status = ready ? 200 : 503;
    const eventLoopMaxMs = checks.loopStalls.takeWorst();
    const stranded = checks.strandedLanes();
    ctx.body = {
      status: ready ? 'ready' : 'not_ready',
      redis,
      record,
      workers,
      subscriber,
      draining,
      vendors: checks.vendors,
      event_loop_max_ms: eventLoopMaxMs,
      // Not a reason to take this api out of a balancer (it serves every other lane), but an operator's to fix.
      ...(stranded.length > 0
        ? {
            stranded_lanes: stranded.map(({ queue, waiting, draining: drained }) => ({
              lane: queue,
              waiting,
              drained_by_workers: drained,
            })),
          }
        : {}),
    };
  });
  return probes;
}

/** While draining, every request but the probes is refused with a 503 and `connection: close`. */
export function refuseWhileDraining(draining: () => boolean): Middleware {
  return async (ctx, next) => {
    if (draining()) {
      ctx.set('connection', 'close');
      throw new GatewayError(503, 'The server is shutting down; retry the request.', {
        code: 'overloaded',
        headers: { 'retry-after': '1' },
      });
    }
    await next();
  };
}
