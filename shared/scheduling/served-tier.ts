import type { Endpoint } from '../endpoints.js';
import { tiersBilledFor } from '../money/pricing.js';
import { servingTier } from './service-tier.js';
import { type ServiceTier } from './vocabulary.js';
import type { Job } from 'bullmq';
import type { Config } from '../config.js';
import { isFirstRun, type GatewayJobData } from '../jobs.js';
import { isMockChannel, type ChannelConfig } from '../vendors.js';

/*
 * The tier a request was served in: the one its answer says (`service_tier`
 * of a chat completion and of each of its chunks, of a Responses object), the
 * one settlement bills it at (`actualCost`) and the one its usage entry, its
 * request-log row and `/v1/generation` record. Not the tier it asked for.
 *
 * - A vendor that sells tiers itself (SERVICE_TIER_NATIVE_VENDORS, by the
 *   channel's vendor name: OpenAI, not every vendor of its wire protocol) is
 *   sent the job's band (`priority`, `default` or `flex`; never `auto`,
 *   `scale` or `fast`), and serves in the tier its answer says: the body's
 *   `service_tier`, or a stream's first chunk's. `scale`, `auto` or a word
 *   unknown read as `default` (`fast` as `priority`), none at all as the band
 *   sent. It is never billed above its band, or `default` (a vendor saying
 *   `priority` to a flex request is billed `default`): the reservation covers
 *   no more (`tiersBilledFor`).
 * - Any other vendor never sees `service_tier` (the mock standing in for a
 *   vendor included, unless `mock` is listed: then it serves every tier as
 *   sent, to try tiers offline), and the gateway's queue decides:
 *   `priority` only when the job was queued where other work waited
 *   (`data.contended`: its place ahead of it was worth something), `flex` only
 *   when it waited in the queue at least SERVICE_TIER_FLEX_MIN_WAIT_MS before
 *   its first run; else `default`.
 *
 * - A Message Batch's request is served as `flex`, always: it waited for
 *   idle capacity by its nature (its job's band is flex too, so a run that
 *   fails before any channel is billed the same).
 *
 * The rule is `servedTier`, pure; shared/scheduling/served-tier.ts gathers what it
 * reads from a job and its channel (`tierFacts`), and a cache hit answers by it
 * as a job served at once (api/cache/answer-echo.ts).
 */

/** What decides the tier a job is served in, known once its channel is. */
export interface TierFacts {
  /** The band it was queued in (`data.serviceTier`; absent, or an endpoint without tiers: `default`). */
  band: ServiceTier;
  /** Its vendor sells tiers itself: it is sent the band, and its answer says the tier served. */
  native: boolean;
  /** Queued where other work waited (`data.contended`). */
  contended: boolean;
  /** How long it waited in the queue before its first run, in ms (0 when not known). */
  waitedMs: number;
  /** SERVICE_TIER_FLEX_MIN_WAIT_MS: the wait that earns flex where the vendor does not sell it. */
  flexMinWaitMs: number;
  /**
   * A Message Batch's request (`data.batch`): deferred work by its nature, served (and billed) as flex whatever its
   * wait or its vendor's word.
   */
  batch?: true;
}

/**
 * The tier a job was served in. `answered`: what a native vendor's answer
 * says as `service_tier` (its body's, or its first chunk's); undefined or
 * null when it says none, or before it answered. Ignored for other vendors.
 */
export function servedTier(facts: TierFacts, answered?: unknown): ServiceTier {
  const { band } = facts;
  if (facts.batch) return 'flex';
  if (facts.native) {
    const said = answered == null ? band : servingTier(typeof answered === 'string' ? answered : undefined);
    return tiersBilledFor(band).includes(said) ? said : 'default';
  }
  if (band === 'priority') return facts.contended ? 'priority' : 'default';
  if (band === 'flex') return facts.waitedMs >= facts.flexMinWaitMs ? 'flex' : 'default';
  return 'default';
}

/**
 * Whether a vendor sells tiers itself (SERVICE_TIER_NATIVE_VENDORS): by its name, not its wire protocol; the mock (its
 * own models, or standing in for every vendor) only where `mock` is listed, to try tiers offline.
 */
export function sellsTiers(vendor: string | undefined, mock: boolean, nativeTierVendors: readonly string[]): boolean {
  return mock ? nativeTierVendors.includes('mock') : vendor !== undefined && nativeTierVendors.includes(vendor);
}

/** Endpoints whose API has a `service_tier` (legacy completions has none: always `default`). */
export const tieredEndpoints: ReadonlySet<Endpoint> = new Set<Endpoint>(['chat.completions', 'responses']);

// ---- how a worker applies the rule to one run of a job on its channel ----

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
