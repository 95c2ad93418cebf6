import type { CatalogModel } from '../catalog.js';
import type { Config } from '../config.js';
import { vendorDefinitions } from '../vendor-definitions.js';
import { extraVendors, vendorDefinition } from '../vendors.js';

/**
 * Lanes: no capped vendor's backlog blocks another. Each vendor with a cap (`<VENDOR>_MAX_CONCURRENCY` or
 * `<VENDOR>_RPM`) has a lane of its own in every capability, a BullMQ queue its jobs wait in, so that its backlog
 * holds no worker slot another vendor's request needs; every other model's jobs share the capability's lane (its
 * shards). A lane with a concurrency cap is capped in BullMQ too (global concurrency): the jobs past the cap wait in
 * the queue, in their fair order, not in workers.
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

/** The lane a model's requests wait in: its first route's vendor when that vendor is capped, else the capability's shared lane. */
export function laneOf(lanes: readonly string[], model: Pick<CatalogModel, 'routes'>): string | undefined {
  const vendor = model.routes[0]?.vendor;
  return vendor !== undefined && lanes.includes(vendor) ? vendor : undefined;
}

/**
 * The jobs of a lane BullMQ lets run at once: the vendor's cap and a tenth more (at least one). A job holds its
 * place in BullMQ from its take to its end, settlement and answer included, while the vendor's slot (the limiter's
 * lease, exactly the cap) is held only for the call: the few jobs past the cap wait for a slot in a worker, taken
 * the moment a call ends, so the vendor is not left idle while a finished job writes its bill. Measured: a flood of
 * 1,200 at a cap of 20 drained in 1.13× the vendor's capacity time with the cap alone.
 */
export const laneWidth = (cap: number) => (cap > 0 ? cap + Math.max(1, Math.ceil(cap / 10)) : 0);
