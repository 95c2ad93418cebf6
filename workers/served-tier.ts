import type { Job } from 'bullmq';
import type { Config } from '../shared/config.js';
import { isFirstRun, type GatewayJobData } from '../shared/jobs.js';
import { sellsTiers, servedTier, tieredEndpoints, type TierFacts } from '../shared/served-tier.js';
import type { ServiceTier } from '../shared/service-tier.js';
import { isMockChannel, type ChannelConfig } from '../shared/vendors.js';

// The rule is shared/served-tier.ts (a cache hit's answer says a tier by it too); here, how a worker applies it to a
// run of a job on its channel.
export { servedTier, type TierFacts };

/** The `service_tier` a vendor is sent: the band, to a vendor that sells tiers; none to any other. */
export function sentTier(facts: TierFacts): ServiceTier | undefined {
  return facts.native ? facts.band : undefined;
}

/**
 * The facts of one run of a job on a channel. The wait is BullMQ's, as
 * workers/metrics.ts reads it: from the enqueue (`timestamp`) to the move to
 * active (`processedOn`), on the job's first run only; a later run (a retry,
 * a rate-limit wait, a stall) cannot tell its first run's start, and earns no
 * flex for waiting.
 */
export function tierFacts(
  job: Pick<Job<GatewayJobData>, 'data' | 'timestamp' | 'processedOn' | 'attemptsMade' | 'attemptsStarted'>,
  channel: Pick<ChannelConfig, 'vendor' | 'protocol'>,
  scheduling: Pick<Config['scheduling'], 'nativeTierVendors' | 'flexMinWaitMs'>,
  now = Date.now(),
): TierFacts {
  const { data } = job;
  return {
    band: tieredEndpoints.has(data.endpoint) ? (data.serviceTier ?? 'default') : 'default',
    native: sellsTiers(channel.vendor, isMockChannel(channel), scheduling.nativeTierVendors),
    contended: data.contended === true,
    waitedMs: isFirstRun(job) ? Math.max(0, (job.processedOn ?? now) - job.timestamp) : 0,
    flexMinWaitMs: scheduling.flexMinWaitMs,
    ...(data.batch ? { batch: true as const } : {}),
  };
}

/** The rule of one run, as the pipelines and encoders use it. */
export interface TierRule {
  /** What the vendor is sent as `service_tier` (none: it never sees the field). */
  readonly sent: ServiceTier | undefined;
  /** The tier served before (or without) the answer's word: the gateway's decision, or a native vendor's band. */
  readonly before: ServiceTier;
  /** The tier served, given what the answer says as `service_tier` (a native vendor's first word decides). */
  answered(said: string | undefined): ServiceTier;
}

export function tierRule(facts: TierFacts): TierRule {
  return { sent: sentTier(facts), before: servedTier(facts), answered: (said) => servedTier(facts, said) };
}
