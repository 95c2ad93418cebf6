import type { Job, Worker } from 'bullmq';
import type { Config } from '../shared/config.js';
import { endpoints } from '../shared/endpoints.js';
import type { GatewayError } from '../shared/errors.js';
import { activeMetrics, initMetrics, type GatewayMetrics } from '../shared/metrics.js';
import { shardQueueName, type QueueName } from '../shared/queues.js';
import { isFirstRun, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import { resolveChannels, type ChannelConfig } from '../shared/vendors.js';
import type { UsageEntry } from '../shared/money/usage.js';
import { defaultAccountId } from '../shared/accounts.js';
import { isChannelFault, isFinalFailure, queueSignal } from './failure-policy.js';

/**
 * The workers' metrics: each job's wait and runs, retries, stalls and
 * recoveries; each vendor call's outcome, error kind and time; channel
 * cooldowns and vendor slots; what was billed. Recorded in memory as things
 * happen (no Redis command of their own), read by a scrape.
 */

type Processor = (job: Job<GatewayJobData, GatewayJobResult>, token?: string) => Promise<GatewayJobResult>;

/** The capability each BullMQ queue (shard) this process serves belongs to. */
const capabilityOfQueue = new Map<string, QueueName>();

/** Builds this process's metrics (once; the api may have already) and watches the channel router's rests. */
export function startWorkerMetrics(
  config: Pick<Config, 'metrics' | 'workerQueues' | 'queueShards'> & Parameters<typeof resolveChannels>[0],
  router: { restsByChannel(): ReadonlyMap<string, number> },
): void {
  const metrics = initMetrics(config.metrics);
  for (const name of config.workerQueues) {
    for (let shard = 0; shard < Math.max(1, config.queueShards[name] ?? 1); shard++)
      capabilityOfQueue.set(shardQueueName(name, shard), name);
  }
  // Every configured channel is listed, resting or not (0), so a rest ending shows as a drop, not a vanished series.
  const channels = [...resolveChannels(config).values()].flat();
  metrics.channelRests = function* () {
    const rests = router.restsByChannel();
    for (const channel of channels) yield [channel.vendor, channel.id, rests.get(channel.id) ?? 0];
  };
}

const queueOf = (job: Job<GatewayJobData>): string => endpoints[job.data.endpoint]?.queue ?? 'unknown';

/**
 * The processor with its runs measured: the job's wait before its first run,
 * each run's time, and what a run's end leads to (another run after a
 * backoff or a rate-limit wait; a completion after earlier failures).
 */
export function countJobs(processor: Processor): Processor {
  return async (job, token) => {
    const metrics = activeMetrics();
    if (!metrics) return processor(job, token);
    const queue = queueOf(job);
    if (isFirstRun(job)) {
      // Both stamps are BullMQ's: the enqueue (api clock) and the move to active (worker clock).
      const waited = (job.processedOn ?? Date.now()) - job.timestamp;
      metrics.jobWait.get(queue).observe(Math.max(0, waited) / 1000);
      const tier = job.data.serviceTier ?? 'default';
      // Per account, only the busiest few by name: the rest under account="other" (bounded series).
      const byTier = metrics.perAccount
        ? metrics.queueWait.get(queue, tier, metrics.waitAccounts.label(job.data.accountId ?? defaultAccountId))
        : metrics.queueWait.get(queue, tier);
      byTier.observe(Math.max(0, waited) / 1000);
    }
    const started = performance.now();
    try {
      const result = await processor(job, token);
      if (job.attemptsMade > 0 || (job.stalledCounter ?? 0) > 0) metrics.jobsRecovered.get(queue).inc();
      return result;
    } catch (error) {
      if (queueSignal(error) === 'put-back') metrics.jobsRetried.get(queue, 'rate_limited').inc();
      // BullMQ runs a failed job again unless the failure is final (this attempt not yet counted in the job).
      else if (!isFinalFailure(job, error, job.attemptsMade + 1)) metrics.jobsRetried.get(queue, 'error').inc();
      throw error;
    } finally {
      metrics.jobRun.get(queue).observe((performance.now() - started) / 1000);
    }
  };
}

/** Counts the stalled jobs this BullMQ worker's stalled check hands back to its queue. */
export function countStalls(worker: Worker): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  const stalled = metrics.jobsStalled.get(capabilityOfQueue.get(worker.name) ?? worker.name);
  worker.on('stalled', () => stalled.inc());
}

/** Which kind of failure a vendor call ended with, as the failure policy saw it. */
export function vendorErrorKind(error: GatewayError): string {
  if (error.status === 429) return '429';
  if (isChannelFault(error)) return 'auth';
  switch (error.code) {
    case 'vendor_timeout':
    case 'timeout':
      return 'timeout';
    case 'vendor_unreachable':
      return 'network';
    case 'vendor_error':
      return '5xx';
    case 'vendor_bad_response':
      return 'bad_response';
    default:
      return error.status >= 400 && error.status < 500 ? '4xx' : 'other';
  }
}

/**
 * One call to a vendor channel, from the moment its vendor slot is held:
 * `vendorDone` when the vendor's part is over (its slot freed), `failed` when
 * the failure policy saw it fail, `end` once its outcome is known.
 */
export class VendorCall {
  private readonly started = performance.now();
  private doneAt = 0;
  private error: GatewayError | undefined;
  private ended = false;

  constructor(
    private readonly metrics: GatewayMetrics,
    private readonly channel: Pick<ChannelConfig, 'vendor' | 'id'>,
    private readonly signal: AbortSignal,
  ) {}

  vendorDone(): void {
    if (this.doneAt === 0) this.doneAt = performance.now();
  }

  failed(error: GatewayError): void {
    this.error ??= error;
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    const { vendor, id } = this.channel;
    const { metrics, error } = this;
    // A call aborted because the client left is no vendor's fault (a deadline is: it comes as a timeout error).
    const outcome = error ? 'error' : this.signal.aborted ? 'cancelled' : 'ok';
    metrics.vendorCalls.get(vendor, id, outcome).inc();
    if (error) metrics.vendorErrors.get(vendor, id, vendorErrorKind(error)).inc();
    metrics.vendorDuration.get(vendor, id).observe(((this.doneAt || performance.now()) - this.started) / 1000);
  }
}

/** A call to this channel starts now (its vendor slot is held); undefined when this process keeps no metrics. */
export function startVendorCall(
  channel: Pick<ChannelConfig, 'vendor' | 'id'>,
  signal: AbortSignal,
): VendorCall | undefined {
  const metrics = activeMetrics();
  return metrics ? new VendorCall(metrics, channel, signal) : undefined;
}

/** The router put a channel (or a model on it) to rest. */
export function channelRested(
  channel: Pick<ChannelConfig, 'vendor' | 'id'>,
  reason: 'auth' | 'rate' | 'failures',
): void {
  activeMetrics()?.channelCooldowns.get(channel.vendor, channel.id, reason).inc();
}

/** An answer was kept in the response cache: how many, and their bytes as stored, by model. */
export function answerCached(model: string, bytes: number): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  metrics.cacheStored.get(model).inc();
  metrics.cacheStoredBytes.get(model).inc(bytes);
}

/**
 * A settlement was applied (once per request): its tokens and cost, by the catalog model the api resolved, and what
 * the vendor's prompt cache saved it, when that is above 0 (a counter cannot go down: a request whose cache writes
 * cost more than plain input would have adds nothing; the record keeps the signed saving).
 */
export function usageSettled(
  record: Pick<
    UsageEntry,
    | 'model'
    | 'key_id'
    | 'input_tokens'
    | 'cached_tokens'
    | 'output_tokens'
    | 'cost_micros'
    | 'prompt_cache_saved_micros'
  >,
): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  const { model, key_id: keyId } = record;
  const promptCacheSaved = record.prompt_cache_saved_micros ?? 0;
  if (promptCacheSaved > 0) metrics.promptCacheSavedMicros.get(model).inc(promptCacheSaved);
  if (metrics.perKey) {
    metrics.tokens.get(model, 'in', keyId).inc(record.input_tokens);
    metrics.tokens.get(model, 'out', keyId).inc(record.output_tokens);
    if (record.cached_tokens > 0) metrics.tokens.get(model, 'cached', keyId).inc(record.cached_tokens);
    metrics.costMicros.get(model, keyId).inc(record.cost_micros);
  } else {
    metrics.tokens.get(model, 'in').inc(record.input_tokens);
    metrics.tokens.get(model, 'out').inc(record.output_tokens);
    if (record.cached_tokens > 0) metrics.tokens.get(model, 'cached').inc(record.cached_tokens);
    metrics.costMicros.get(model).inc(record.cost_micros);
  }
}

/** An answer cost more than its reservation held: by how much, for the catalog model and the vendor that served it. */
export function settlementOverran(model: string, vendor: string, overMicros: number): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  metrics.overruns.get(model, vendor).inc();
  metrics.overrunMicros.get(model, vendor).inc(overMicros);
}
