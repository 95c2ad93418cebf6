import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { lanesKnownKey } from '../redis-keys.js';
import { legacyLaneQueueName, laneVendor, queueNames, type QueueName } from '../queues.js';
import { announceLanes, knowLanes, laneHeartbeatMs, readLanes, type LaneServer } from './lanes.js';
import { vendorDefinitions } from '../vendor-definitions.js';

/** A lane this worker serves as configured. */
export interface ServedLane extends Omit<LaneServer, 'until' | 'stranded'> {
  queue: string;
}

/** A fetch loop the keeper opened on a stranded lane, to close once the lane is empty. */
export interface DrainLoop {
  close(): Promise<void>;
}

/** The capability of a lane's queue from before lanes were shared (`{chat@openai}`), when it is one. */
export function legacyLaneCapability(queueName: string): QueueName | undefined {
  const match = /^\{([a-z]+)@[^}]+\}$/.exec(queueName);
  const name = match?.[1];
  return name !== undefined && (queueNames as readonly string[]).includes(name) ? (name as QueueName) : undefined;
}

/** Jobs a stranded lane is drained with per worker process, at most (its cap is gone: none is known). */
const drainConcurrency = 16;

/**
 * Keeps the lane registry (`shared/scheduling/lanes.ts`) true for this worker: every `laneHeartbeatMs` it renews
 * the lanes it serves, and looks for stranded ones: a known lane with jobs waiting that nobody serves with a
 * configured cap (its cap removed, or set on an api and not on the workers). It serves such a lane of a capability
 * it serves at a default, with no cap (`drainConcurrency` jobs at once here), saying so in its log and in the
 * registry, until the lane is empty; then it stops and forgets the lane (an api routing to it records it again).
 * No job waits for a lane nobody serves. At its start it also looks once for lanes of the per-capability layout
 * lanes had before they were shared (`{chat@openai}`) that still hold jobs, and drains them likewise.
 */
export class LaneKeeper {
  private timer: NodeJS.Timeout | undefined;
  private readonly draining = new Map<string, { loop: DrainLoop; idleSweeps: number }>();
  private readonly counters = new Map<string, Queue>();
  private sweeping: Promise<void> | undefined;

  constructor(
    private readonly deps: {
      redis: Redis;
      config: Pick<Config, 'workerQueues' | 'concurrency'>;
      log: Logger;
      lanes: readonly ServedLane[];
      /** Opens a fetch loop on a lane's queue, with this many jobs at once. */
      drain: (queueName: string, concurrency: number) => DrainLoop;
    },
  ) {}

  async start(): Promise<void> {
    await this.findLegacyLanes().catch((error: unknown) =>
      this.deps.log.warn({ err: error }, 'could not look for lanes of the per-capability layout'),
    );
    await this.sweep();
    this.timer = setInterval(
      () => void (this.sweeping ??= this.sweep().finally(() => (this.sweeping = undefined))),
      laneHeartbeatMs,
    );
    this.timer.unref();
  }

  /** The stranded lanes this worker drains now. */
  drained(): string[] {
    return [...this.draining.keys()];
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping?.catch(() => undefined);
    await Promise.allSettled([...this.draining.values()].map(({ loop }) => loop.close()));
    this.draining.clear();
    await Promise.allSettled([...this.counters.values()].map((queue) => queue.close()));
  }

  /** Renews this worker's lanes, then drains what is stranded and stops draining what is empty. */
  async sweep(): Promise<void> {
    const { redis, log } = this.deps;
    try {
      const stranded = [...this.draining.keys()].map((queue) => ({
        queue,
        vendor: queue.slice(queue.indexOf('@') + 1, -1),
        cap: 0,
        rpm: 0,
        stranded: true,
      }));
      await announceLanes(redis, [...this.deps.lanes, ...stranded]);
      const own = new Set(this.deps.lanes.map((lane) => lane.queue));
      for (const [name, server] of await readLanes(redis)) {
        if (own.has(name) || (server && !server.stranded)) {
          await this.stopDraining(name, 'it is served again');
          continue;
        }
        // A shared lane holds every capability's jobs; a legacy one, its capability's only.
        const legacy = laneVendor(name) === undefined ? legacyLaneCapability(name) : undefined;
        if (laneVendor(name) === undefined && (!legacy || !this.deps.config.workerQueues.includes(legacy))) continue;
        const counts = await this.counter(name).getJobCounts('wait', 'prioritized', 'delayed', 'active');
        const waiting = (counts.wait ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
        const drain = this.draining.get(name);
        if (drain) {
          drain.idleSweeps = waiting + (counts.active ?? 0) === 0 ? drain.idleSweeps + 1 : 0;
          if (drain.idleSweeps >= 2) await this.stopDraining(name, 'it is empty');
          continue;
        }
        if (waiting === 0) continue;
        // Its cap is in nobody's configuration any more: the lane is served with none.
        const queue = this.counter(name);
        await queue.removeGlobalConcurrency();
        await queue.removeGlobalRateLimit();
        const concurrency = legacy
          ? Math.min(drainConcurrency, this.deps.config.concurrency[legacy])
          : drainConcurrency;
        this.draining.set(name, { loop: this.deps.drain(name, concurrency), idleSweeps: 0 });
        log.warn(
          { lane: name, waiting, concurrency },
          "a lane with jobs waiting has no server (its vendor's cap was removed, or is set on an api and not on " +
            'the workers): draining it with no cap',
        );
      }
    } catch (error) {
      log.warn({ err: error }, 'could not keep the lane registry');
    }
  }

  private counter(name: string): Queue {
    let queue = this.counters.get(name);
    if (!queue) this.counters.set(name, (queue = new Queue(name, { connection: this.deps.redis })));
    return queue;
  }

  private async stopDraining(name: string, why: string): Promise<void> {
    const drain = this.draining.get(name);
    if (!drain) return;
    this.draining.delete(name);
    await drain.loop.close().catch(() => undefined);
    // Empty, it is forgotten: an api that still routes to it records it again.
    if (why === 'it is empty') await this.deps.redis.srem(lanesKnownKey, name).catch(() => 0);
    this.deps.log.info({ lane: name }, `stopped draining a stranded lane: ${why}`);
  }

  /** The lanes of the per-capability layout that still hold jobs, made known so the sweep drains them. */
  private async findLegacyLanes(): Promise<void> {
    const names = this.deps.config.workerQueues.flatMap((queue) =>
      vendorDefinitions.map((vendor) => legacyLaneQueueName(queue, vendor.name)),
    );
    const holding: string[] = [];
    for (const name of names) {
      const queue = new Queue(name, { connection: this.deps.redis });
      try {
        const counts = await queue.getJobCounts('wait', 'prioritized', 'delayed');
        if (Object.values(counts).some((n) => n > 0)) holding.push(name);
      } finally {
        await queue.close();
      }
    }
    await knowLanes(this.deps.redis, holding);
  }
}
