import type { Redis } from 'ioredis';
import type { CatalogModel } from '../catalog.js';
import { lanesKnownKey, lanesServedKey } from '../redis-keys.js';
import { inOneWrite } from '../redis.js';
import type { Config } from '../config.js';
import { vendorDefinitions } from '../vendor-definitions.js';
import { extraVendors, vendorDefinition } from '../vendors.js';

/**
 * Lanes: no capped vendor's backlog blocks another. Each vendor with a cap (`<VENDOR>_MAX_CONCURRENCY` or
 * `<VENDOR>_RPM`) has a lane of its own in every capability, a BullMQ queue its jobs wait in, so that its backlog
 * holds no worker slot another vendor's request needs; every other model's jobs share the capability's lane (its
 * shards). A lane with a concurrency cap is capped in BullMQ too (global concurrency): the jobs past the cap wait in
 * the queue, in their fair order, not in workers; a lane with an RPM cap is paced by BullMQ (`ratePace`).
 *
 * Lanes come from each process's configuration, so the processes say what they serve: each worker renews, every
 * 10 s, an entry per lane it serves (`announceLanes`), and each api records the lanes it routes to (`knowLanes`). A
 * known lane with jobs waiting and no server (a cap removed, or set on the api and not on the workers) is stranded:
 * every worker that finds one serves it at a default, with no cap, until it is empty, and says so in its log; the
 * api reports it in `/readyz` and `/metrics` (`switchyard_lane_stranded`). No job waits for a lane nobody serves.
 */

/** A vendor's caps, across every worker: calls in flight and calls started per minute (0: none). */
export interface VendorLimits {
  maxConcurrency: number;
  rpm: number;
}

export function vendorLimits(config: Pick<Config, 'vendors' | 'channelsFile'>, vendor: string): VendorLimits {
  const prefix = vendorDefinition(vendor, config)?.envPrefix ?? vendor.toUpperCase();
  const settings = config.vendors[prefix];
  return { maxConcurrency: settings?.maxConcurrency ?? 0, rpm: settings?.rpm ?? 0 };
}

/** The vendors with a cap: each has a lane of its own in every capability. */
export function cappedVendors(config: Pick<Config, 'vendors' | 'channelsFile'>): string[] {
  return [...vendorDefinitions, ...extraVendors(config)]
    .map((definition) => definition.name)
    .filter((name) => {
      const limits = vendorLimits(config, name);
      return limits.maxConcurrency > 0 || limits.rpm > 0;
    });
}

/**
 * The lane a model's requests wait in: its first route's vendor when that vendor is capped, else the capability's
 * shared lane.
 */
export function laneOf(lanes: readonly string[], model: Pick<CatalogModel, 'routes'>): string | undefined {
  const vendor = model.routes[0]?.vendor;
  return vendor !== undefined && lanes.includes(vendor) ? vendor : undefined;
}

/**
 * BullMQ's pace for a lane with an RPM cap: at most `max` jobs out of the queue per `duration` ms, `rpm` a minute
 * exactly, in windows of about a second or more. The jobs past it wait in the queue in their fair order (not in
 * workers, in arrival order); the limiter's rolling minute still counts every call to the vendor.
 */
export function ratePace(rpm: number): { max: number; duration: number } {
  const max = Math.max(1, Math.ceil(rpm / 60));
  return { max, duration: Math.round((60_000 * max) / rpm) };
}

// ---- the registry: which lanes are served, and by what caps ----

/** What a worker says of a lane it serves (`lanesServedKey`). */
export interface LaneServer {
  vendor: string;
  /** Its concurrency cap and RPM cap as configured where it is served (0: none). */
  cap: number;
  rpm: number;
  /** Served only because nobody's configuration has it any more: its waiting jobs drained at a default. */
  stranded?: boolean;
  /** Epoch ms until which the entry holds (renewed by its servers). */
  until: number;
}

/** How often a worker renews the lanes it serves, and how long an entry holds without renewal. */
export const laneHeartbeatMs = 10_000;
export const laneEntryMs = 3 * laneHeartbeatMs;

/** A worker's word that it serves these lanes, for the next `laneEntryMs`. */
export async function announceLanes(
  redis: Redis,
  lanes: ReadonlyArray<{ queue: string } & Omit<LaneServer, 'until'>>,
): Promise<void> {
  if (lanes.length === 0) return;
  const until = Date.now() + laneEntryMs;
  await inOneWrite(redis)
    .hset(
      lanesServedKey,
      Object.fromEntries(lanes.map(({ queue, ...server }) => [queue, JSON.stringify({ ...server, until })])),
    )
    .sadd(lanesKnownKey, ...lanes.map((lane) => lane.queue))
    .exec();
}

/** An api's word that it routes requests to these lanes: they are known, so a lane nobody serves is found. */
export async function knowLanes(redis: Redis, queues: readonly string[]): Promise<void> {
  if (queues.length > 0) await redis.sadd(lanesKnownKey, ...queues);
}

/** Every known lane with its server's entry (undefined: nobody serves it, or its entry ran out). */
export async function readLanes(redis: Redis, now = Date.now()): Promise<Map<string, LaneServer | undefined>> {
  const [[, known], [, served]] = (await inOneWrite(redis).smembers(lanesKnownKey).hgetall(lanesServedKey).exec()) as [
    [unknown, string[]],
    [unknown, Record<string, string>],
  ];
  const lanes = new Map<string, LaneServer | undefined>();
  for (const queue of known ?? []) {
    let entry: LaneServer | undefined;
    try {
      entry = served?.[queue] ? (JSON.parse(served[queue]) as LaneServer) : undefined;
    } catch {
      entry = undefined;
    }
    lanes.set(queue, entry && entry.until > now ? entry : undefined);
  }
  return lanes;
}

/**
 * A lane nobody serves, or served only to drain it, that still has jobs waiting: what `/readyz` and `/metrics` report.
 */
export interface StrandedLane {
  queue: string;
  waiting: number;
  /** Drained at a default by the workers (true), or waiting for anyone (false: no worker is running). */
  draining: boolean;
}
