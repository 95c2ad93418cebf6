import type { CatalogModel } from './catalog.js';
import type { Config } from './config.js';
import { realtimeLaneQueueName, shardOfJob, shardQueueName } from './queues.js';
import { mockAnswers, resolveChannels, vendorDefinition, type VendorConfig } from './vendors.js';

/**
 * Where a Realtime session waits for its worker, read alike by the api that queues it and the workers that take it.
 *
 * A session holds one of its vendor's concurrent-session slots for its whole life (`REALTIME_VENDOR_SESSIONS_<VENDOR>`,
 * 100 by default, none for the mock unless set). A vendor with such a cap has a Realtime lane of its own
 * (`{realtime-lane@<vendor>}`), a BullMQ queue capped at the cap (its global concurrency): a running session is an
 * active job, so it holds its slot until it ends, and a worker that dies frees it when its lock runs out (BullMQ's
 * lease, renewed while the session runs). Starts past the cap wait in the lane in their fair order (the api's fair
 * claim: `placeJob`), never taken out of turn, and a capped vendor's backlog never holds a start of another vendor's.
 * Sessions of a vendor without a cap share the `realtime` queue (its shards).
 *
 * The vendor is the model's first route's (the api cannot know better), or the mock when the mock answers for it.
 */

export type RealtimeQueueConfig = VendorConfig & Pick<Config, 'realtimeWorker' | 'queueShards'>;

/** Concurrent sessions of a vendor when REALTIME_VENDOR_SESSIONS_<VENDOR> is not set. */
export const defaultRealtimeVendorSessions = 100;

/** A vendor's concurrent-session cap across every worker (0: none). */
export function realtimeSessionCap(config: Pick<Config, 'realtimeWorker' | 'channelsFile'>, vendor: string): number {
  const definition = vendorDefinition(vendor, config);
  const set = config.realtimeWorker.vendorSessions[definition?.envPrefix ?? vendor.toUpperCase()];
  if (set !== undefined) return set;
  return definition?.protocol === 'mock' ? 0 : defaultRealtimeVendorSessions;
}

/**
 * The vendor whose session slot a model's sessions take: its first route's, or the mock's when the mock answers for it.
 */
export function realtimeVendorOf(config: VendorConfig, model: Pick<CatalogModel, 'routes'>): string {
  const first = model.routes[0]?.vendor;
  return first === undefined || mockAnswers(config, first) ? 'mock' : first;
}

/** The vendors with a Realtime lane: every vendor with a channel here and a session cap. */
export function realtimeLaneVendors(config: RealtimeQueueConfig): string[] {
  const vendors = new Set<string>();
  for (const [vendor, channels] of resolveChannels(config))
    vendors.add(channels.every((channel) => channel.protocol === 'mock') ? 'mock' : vendor);
  return [...vendors].filter((vendor) => realtimeSessionCap(config, vendor) > 0).sort();
}

/** The BullMQ queue a session is added to: its vendor's Realtime lane, or its shard of the `realtime` queue. */
export function realtimeQueueName(
  config: RealtimeQueueConfig,
  model: Pick<CatalogModel, 'routes'>,
  sessionId: string,
): string {
  const vendor = realtimeVendorOf(config, model);
  if (realtimeSessionCap(config, vendor) > 0 && realtimeLaneVendors(config).includes(vendor))
    return realtimeLaneQueueName(vendor);
  const shards = Math.max(1, config.queueShards.realtime ?? 1);
  return shardQueueName('realtime', shardOfJob(sessionId, shards), shards);
}
