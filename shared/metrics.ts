import { AggregatorRegistry, collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/**
 * The Prometheus metrics of one gateway process: one registry, every metric
 * the api and the workers record (a process that runs only one half leaves
 * the other half's metrics empty), plus Node's own process metrics, every
 * name prefixed `switchyard_`. `initMetrics` builds it once per process (the
 * api and the workers both call it; with both in one process they share it);
 * until then every recording hook is a no-op, so modules used on their own
 * (unit tests, benchmarks) record nothing.
 *
 * Labels are bounded by construction: routes are route templates, models are
 * catalog ids the gateway resolved, vendors and channels come from the
 * configuration (channel ids are hashes, never keys), key ids appear only
 * with `METRICS_PER_KEY=on`, and account ids only with `METRICS_PER_ACCOUNT=on`,
 * the busiest `METRICS_TOP_ACCOUNTS` of them, the rest under `account="other"`
 * (`TopAccounts`). Nothing a client sends becomes a label value.
 */

export const metricsPrefix = 'switchyard_';

/** 1 ms to 10 min: from a cached embedding to the longest held request. */
export const durationBuckets = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
];

export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

export interface MetricsOptions {
  /** `METRICS_PER_KEY`: a `key_id` label on request, token, cost and refusal metrics. */
  perKey: boolean;
  /** `METRICS_PER_ACCOUNT`: an `account` label on the queue wait and backlog metrics (off when not given). */
  perAccount?: boolean;
  /**
   * `METRICS_TOP_ACCOUNTS`: how many accounts that label names, the busiest; the rest are `other` (20 when not given).
   */
  topAccounts?: number;
}

/** The `account` label value of every account outside the busiest. */
export const otherAccount = 'other';

/**
 * The `size` largest of `counts`, largest first; a tie goes to the one met first.
 * `favoured` (the current top) counts `stickiness` times its own, so a place
 * changes hands only to an account clearly busier, not back and forth.
 */
export function busiest(
  counts: Iterable<[string, number]>,
  size: number,
  favoured?: ReadonlySet<string>,
  stickiness = 1,
): string[] {
  const score = ([account, count]: [string, number]) => (favoured?.has(account) ? count * stickiness : count);
  return [...counts]
    .sort((a, b) => score(b) - score(a))
    .slice(0, size)
    .map(([account]) => account);
}

/**
 * The busiest accounts of a stream of jobs (a worker process's), for the
 * `account` label of the queue waits: a job counts 1, halving every minute
 * (`halfLifeMs`). `label` counts a job and answers its account while that
 * account is among the `size` busiest, `other` otherwise. The top is worked
 * out again at most once a second (`refreshMs`), lazily on a job; until then a
 * new account takes a free place at once, and only an account busier than
 * twice a holder's count takes its place. An account that loses its place is
 * handed to `onDrop` (to remove its series). At most `capacity` accounts are
 * counted: each refresh (an early one when full) keeps the busiest half.
 */
export class TopAccounts {
  static readonly halfLifeMs = 60_000;
  static readonly refreshMs = 1000;
  static readonly stickiness = 2;

  readonly capacity: number;
  private readonly counts = new Map<string, number>();
  private top = new Set<string>();
  private refreshedAt: number;

  constructor(
    readonly size: number,
    private readonly onDrop: (account: string) => void = () => {},
    private readonly now: () => number = () => performance.now(),
  ) {
    this.capacity = Math.max(64, 4 * size);
    this.refreshedAt = now();
  }

  /** Counts a job of `account`; the label value its series go under. */
  label(account: string): string {
    const now = this.now();
    if (
      now - this.refreshedAt >= TopAccounts.refreshMs ||
      (this.counts.size >= this.capacity && !this.counts.has(account))
    )
      this.refresh(now);
    this.counts.set(account, (this.counts.get(account) ?? 0) + 1);
    if (this.top.has(account)) return account;
    if (this.top.size < this.size) {
      this.top.add(account);
      return account;
    }
    return otherAccount;
  }

  /** The accounts with series of their own now. */
  named(): ReadonlySet<string> {
    return this.top;
  }

  /** How many accounts are counted (at most `capacity`). */
  get tracked(): number {
    return this.counts.size;
  }

  /** Decays the counts, keeps the busiest half of `capacity`, and works out the top again. */
  refresh(now = this.now()): void {
    const decay = 2 ** (-(now - this.refreshedAt) / TopAccounts.halfLifeMs);
    this.refreshedAt = now;
    for (const [account, count] of this.counts) this.counts.set(account, count * decay);
    const ranked = busiest(this.counts, this.capacity / 2, this.top, TopAccounts.stickiness);
    const kept = new Set(ranked);
    for (const account of this.counts.keys()) if (!kept.has(account)) this.counts.delete(account);
    const top = new Set(ranked.slice(0, this.size));
    for (const account of this.top) if (!top.has(account)) this.onDrop(account);
    this.top = top;
  }
}

/** Label children by their values, made once: the hot path does a map lookup, not prom-client's label checks. */
export class Children<T> {
  private readonly made = new Map<string, T>();

  constructor(
    private readonly make: (values: string[]) => T,
    private readonly unmake?: (values: string[]) => void,
  ) {}

  get(...values: string[]): T {
    const key = values.length === 1 ? values[0]! : values.join('\u0001');
    let child = this.made.get(key);
    if (child === undefined) {
      child = this.make(values);
      this.made.set(key, child);
    }
    return child;
  }

  /** Removes the children whose label values `test` picks, here and from their metric (their series leave /metrics). */
  remove(test: (values: string[]) => boolean): void {
    for (const key of this.made.keys()) {
      const values = key.split('\u0001');
      if (!test(values)) continue;
      this.made.delete(key);
      this.unmake?.(values);
    }
  }
}

export class GatewayMetrics {
  readonly registry = new Registry();
  readonly perKey: boolean;
  readonly perAccount: boolean;

  // The api: HTTP requests.
  readonly httpRequests: Children<Counter.Internal>;
  readonly httpDuration: Children<Histogram.Internal<string>>;
  readonly httpFirstByte: Children<Histogram.Internal<string>>;
  // The api: queue depths, as the backpressure last read them.
  readonly queueJobs: Gauge<'queue' | 'state'>;
  // The api: admission and streams.
  readonly quotaRefusals: Children<Counter.Internal>;
  readonly rateLimitRefusals: Children<Counter.Internal>;
  readonly streamChunks: Counter;
  readonly streamResumes: Children<Counter.Internal>;
  readonly clientDisconnects: Children<Counter.Internal>;
  // The workers: jobs.
  readonly jobWait: Children<Histogram.Internal<string>>;
  readonly queueWait: Children<Histogram.Internal<string>>;
  /**
   * The accounts `queueWait` names (METRICS_PER_ACCOUNT=on): this process's busiest; an account dropped loses its
   * series.
   */
  readonly waitAccounts: TopAccounts;
  // The api: what waits, by account and tier.
  readonly queueBacklog: Gauge<'queue' | 'tier' | 'account'>;
  readonly laneStranded: Gauge<'lane'>;
  readonly jobRun: Children<Histogram.Internal<string>>;
  readonly jobsRetried: Children<Counter.Internal>;
  readonly jobsStalled: Children<Counter.Internal>;
  readonly jobsRecovered: Children<Counter.Internal>;
  // The workers: vendors and channels.
  readonly vendorCalls: Children<Counter.Internal>;
  readonly vendorErrors: Children<Counter.Internal>;
  readonly vendorDuration: Children<Histogram.Internal<string>>;
  readonly channelCooldowns: Children<Counter.Internal>;
  readonly channelCoolingDown: Gauge<'vendor' | 'channel'>;
  readonly vendorSlotsInUse: Children<Gauge.Internal<string>>;
  readonly vendorSlotWaiters: Children<Gauge.Internal<string>>;
  // The workers: what was billed.
  readonly tokens: Children<Counter.Internal>;
  readonly costMicros: Children<Counter.Internal>;
  readonly overruns: Children<Counter.Internal>;
  readonly overrunMicros: Children<Counter.Internal>;
  /** What the vendors' prompt caches saved (workers), apart from the gateway's response cache (`cacheSavedMicros`). */
  readonly promptCacheSavedMicros: Children<Counter.Internal>;
  // The response cache: requests by how the cache served them (api), what hits saved (api), answers kept (workers).
  readonly cacheRequests: Children<Counter.Internal>;
  readonly cacheSavedMicros: Children<Counter.Internal>;
  readonly cacheStored: Children<Counter.Internal>;
  readonly cacheStoredBytes: Children<Counter.Internal>;
  // Batches of both dialects: batches by what became of them (api), their requests by outcome (whoever recorded it).
  readonly batches: Children<Counter.Internal>;
  readonly batchRequests: Children<Counter.Internal>;
  // The workers: usage on its way to the record.
  readonly usageBuffered: Gauge;
  readonly usageWritten: Counter;
  readonly usageWriteFailures: Counter;
  readonly usageDeadLetters: Counter;

  /** Read at each scrape by `queueJobs` (set by the api's backpressure). */
  queueDepths: (() => Iterable<[queue: string, counts: Readonly<Record<string, number>>]>) | undefined;
  /** Read at each scrape by `queueBacklog` (set by the api's backpressure). */
  backlogs: (() => Iterable<[queue: string, tier: string, account: string, waiting: number]>) | undefined;
  /** Read at each scrape by `laneStranded` (set by the api's backpressure). */
  strandedLanes: (() => Iterable<[lane: string, waiting: number]>) | undefined;
  /** Read at each scrape by `channelCoolingDown` (set by the workers' channel router). */
  channelRests: (() => Iterable<[vendor: string, channel: string, rests: number]>) | undefined;

  constructor(options: MetricsOptions) {
    this.perKey = options.perKey;
    this.perAccount = options.perAccount ?? false;
    const topAccounts = options.topAccounts ?? 20;
    const registers = [this.registry];
    const keyed = (labels: string[]) => (this.perKey ? [...labels, 'key_id'] : labels);
    // Account ids name who sends what: a label only when the operator asks for it (METRICS_PER_ACCOUNT).
    const byAccount = (labels: string[]) => (this.perAccount ? [...labels, 'account'] : labels);
    const counter = (name: string, help: string, labelNames: string[]) =>
      new Counter({ name: `${metricsPrefix}${name}`, help, labelNames, registers });
    const histogram = (name: string, help: string, labelNames: string[]) =>
      new Histogram({ name: `${metricsPrefix}${name}`, help, labelNames, buckets: durationBuckets, registers });
    const counterChildren = (name: string, help: string, labelNames: string[]) => {
      const metric = counter(name, help, labelNames);
      return new Children((values) => metric.labels(...values));
    };
    const histogramChildren = (name: string, help: string, labelNames: string[]) => {
      const metric = histogram(name, help, labelNames);
      return new Children(
        (values) => metric.labels(...values),
        (values) => metric.remove(...values),
      );
    };
    const gaugeChildren = (name: string, help: string, labelNames: string[]) => {
      const metric = new Gauge({ name: `${metricsPrefix}${name}`, help, labelNames, registers });
      return new Children((values) => metric.labels(...values));
    };

    this.httpRequests = counterChildren(
      'http_requests_total',
      'HTTP requests answered by the api, by route template, resolved catalog model (empty when none) and status ' +
        'class.',
      keyed(['route', 'model', 'status_class']),
    );
    this.httpDuration = histogramChildren(
      'http_request_duration_seconds',
      'Time from a request’s arrival to the end of its answer (a stream: its last chunk), by route template and ' +
        'status class.',
      ['route', 'status_class'],
    );
    this.httpFirstByte = histogramChildren(
      'http_time_to_first_byte_seconds',
      'Time from a request’s arrival to the first byte of its answer (a stream: its first chunk, keep-alive ' +
        'comments aside), by route template and resolved model.',
      ['route', 'model'],
    );

    const self = this;
    this.queueJobs = new Gauge({
      name: `${metricsPrefix}queue_jobs`,
      help:
        'Jobs of each capability\'s shared lane (queue="chat": all its shards) and each capped vendor\'s lane ' +
        '(queue="lane@openai": every capability\'s jobs for it) by state (waiting, active, delayed, failed), as ' +
        'the api last read them (every 200 ms, for its backpressure); no Redis command per scrape.',
      labelNames: ['queue', 'state'],
      registers,
      collect() {
        const depths = self.queueDepths?.();
        if (!depths) return;
        for (const [queue, counts] of depths)
          for (const [state, count] of Object.entries(counts)) this.labels(queue, state).set(count);
      },
    });
    this.quotaRefusals = counterChildren(
      'quota_refusals_total',
      'Requests refused 429 insufficient_quota at admission, by reason: key_limit (the key’s limit_usd) or ' +
        'account_balance.',
      keyed(['reason']),
    );
    this.rateLimitRefusals = counterChildren(
      'rate_limit_refusals_total',
      'Requests refused 429 rate_limit_exceeded at admission, by reason: rpm or tpm.',
      keyed(['reason']),
    );
    this.streamChunks = counter(
      'stream_chunks_relayed_total',
      'Server-sent events relayed live from workers to streaming clients (the closing [DONE] aside).',
      [],
    );
    this.streamResumes = counterChildren(
      'stream_resumes_total',
      'Stream resumes and replays served (a 2xx), by route template.',
      ['route'],
    );
    this.clientDisconnects = counterChildren(
      'client_disconnects_total',
      'Clients that left before their answer was complete, by kind: held (a plain request), stream, follow (a ' +
        'resumed or followed stream).',
      ['kind'],
    );

    this.jobWait = histogramChildren(
      'job_wait_seconds',
      'Time a job waited in its queue, from its enqueue to the start of its first run.',
      ['queue'],
    );
    this.queueWait = histogramChildren(
      'queue_wait_seconds',
      'Time a job waited in its queue before its first run, by capability, service tier (priority, default, ' +
        'flex) and (METRICS_PER_ACCOUNT=on) paying account: the fair share and the tiers as each account sees ' +
        'them. Only the METRICS_TOP_ACCOUNTS accounts with the most jobs of this worker process lately (a ' +
        'minute\'s half-life) are named, every other under account="other"; an account that drops out loses its ' +
        'series.',
      byAccount(['queue', 'tier']),
    );
    this.waitAccounts = new TopAccounts(topAccounts, (account) =>
      this.queueWait.remove((values) => values[2] === account),
    );
    this.queueBacklog = new Gauge({
      name: `${metricsPrefix}queue_backlog`,
      help:
        "Jobs waiting in each capability's shared lane and each vendor lane (queue as in switchyard_queue_jobs), " +
        'by service tier and (METRICS_PER_ACCOUNT=on) paying account, as the api last read them (with the queue ' +
        'depths); no Redis command per scrape. Only the METRICS_TOP_ACCOUNTS accounts with the most waiting jobs ' +
        'are named, every other added up under account="other".',
      labelNames: byAccount(['queue', 'tier']),
      registers,
      collect() {
        const backlogs = self.backlogs?.();
        if (!backlogs) return;
        this.reset();
        if (self.perAccount) {
          // The busiest accounts over the whole metric (all queues and tiers) by name, the rest added up.
          const rows = [...backlogs];
          const totals = new Map<string, number>();
          for (const [, , account, waiting] of rows) totals.set(account, (totals.get(account) ?? 0) + waiting);
          const named = new Set(busiest(totals, topAccounts));
          for (const [queue, tier, account, waiting] of rows)
            this.labels(queue, tier, named.has(account) ? account : otherAccount).inc(waiting);
          return;
        }
        // Without the account label, a tier's accounts added up.
        for (const [queue, tier, , waiting] of backlogs) this.labels(queue, tier).inc(waiting);
      },
    });
    this.laneStranded = new Gauge({
      name: `${metricsPrefix}lane_stranded`,
      help:
        'Jobs waiting in a lane that no worker serves with a configured cap (the cap was removed, or is set on the ' +
        'api and not on the workers): the workers drain it at a default; a series only while it has jobs. As the ' +
        'api last read it, every few seconds.',
      labelNames: ['lane'],
      registers,
      collect() {
        const stranded = self.strandedLanes?.();
        if (!stranded) return;
        this.reset();
        for (const [lane, waiting] of stranded) this.labels(lane).set(waiting);
      },
    });
    this.jobRun = histogramChildren(
      'job_run_seconds',
      'Time of each run of a job in a worker (each attempt, and each resumption after a rate-limit wait).',
      ['queue'],
    );
    this.jobsRetried = counterChildren(
      'jobs_retried_total',
      'Job runs that ended to run again: reason error (a failed attempt, retried after a backoff) or ' +
        'rate_limited (put back to wait without spending an attempt).',
      ['queue', 'reason'],
    );
    this.jobsStalled = counterChildren(
      'jobs_stalled_total',
      'Jobs found stalled (their worker stopped renewing the lock) and handed back to the queue.',
      ['queue'],
    );
    this.jobsRecovered = counterChildren(
      'jobs_recovered_total',
      'Jobs that completed after an earlier failed attempt or a stall.',
      ['queue'],
    );

    this.vendorCalls = counterChildren(
      'vendor_calls_total',
      'Calls to a vendor channel (one per job run that held a vendor slot), by outcome: ok, error, cancelled ' +
        '(the client left).',
      ['vendor', 'channel', 'outcome'],
    );
    this.vendorErrors = counterChildren(
      'vendor_errors_total',
      'Failed vendor calls by kind: 429, 5xx, timeout, network, auth (credentials or quota refused), 4xx, ' +
        'bad_response, other.',
      ['vendor', 'channel', 'kind'],
    );
    this.vendorDuration = histogramChildren(
      'vendor_call_duration_seconds',
      'Time of a vendor call, from its vendor slot being held until the vendor’s part is done (a stream: its end).',
      ['vendor', 'channel'],
    );
    this.channelCooldowns = counterChildren(
      'channel_cooldowns_total',
      'Rests this worker put a channel under, by reason: auth (the whole channel), rate (a 429), failures ' +
        '(repeated 5xx or network errors).',
      ['vendor', 'channel', 'reason'],
    );
    this.channelCoolingDown = new Gauge({
      name: `${metricsPrefix}channel_cooling_down`,
      help:
        'Rests a channel is under now (channel-wide, or one per upstream model), as this worker last read the ' +
        'shared cooldowns (once a second).',
      labelNames: ['vendor', 'channel'],
      registers,
      collect() {
        const rests = self.channelRests?.();
        if (!rests) return;
        for (const [vendor, channel, count] of rests) this.labels(vendor, channel).set(count);
      },
    });
    this.vendorSlotsInUse = gaugeChildren(
      'vendor_slots_in_use',
      'Slots of a vendor’s global concurrency cap (<VENDOR>_MAX_CONCURRENCY) this process holds; summed over ' +
        'worker processes, the slots in use.',
      ['vendor'],
    );
    this.vendorSlotWaiters = gaugeChildren(
      'vendor_slot_waiters',
      'Jobs of this process waiting for a vendor slot (its concurrency cap or its rpm).',
      ['vendor'],
    );

    this.tokens = counterChildren(
      'tokens_total',
      'Tokens billed, by catalog model and direction: in (prompt), out (completion), cached (the part of in the ' +
        'vendor read from its prompt cache, billed at its cached price).',
      keyed(['model', 'direction']),
    );
    this.costMicros = counterChildren(
      'cost_micros_total',
      'Cost billed, in micro-dollars (1e-6 USD), by catalog model.',
      keyed(['model']),
    );
    this.overruns = counterChildren(
      'settlement_overruns_total',
      'Requests whose answer cost more than their reservation (a vendor past max_tokens, an estimate too low): a ' +
        'key limit or balance can be passed by the difference.',
      ['model', 'vendor'],
    );
    this.overrunMicros = counterChildren(
      'settlement_overrun_micros_total',
      'What answers cost past their reservations, in micro-dollars.',
      ['model', 'vendor'],
    );
    // A counter only goes up: a request whose cache writes cost more than its cache reads saved adds nothing here, and
    // the record's `prompt_cache_saved_micros` keeps the signed sum.
    this.promptCacheSavedMicros = counterChildren(
      'prompt_cache_saved_micros_total',
      "What the vendors' prompt caches saved, in micro-dollars, by catalog model: the prompt at the plain input " +
        'price less what it was billed ' +
        '(cached and cache-write tokens at their own prices), for each request where that is above 0. ' +
        "Not the gateway's response cache (cache_saved_micros_total).",
      ['model'],
    );
    this.cacheRequests = counterChildren(
      'cache_requests_total',
      'Requests that opted into the response cache, by catalog model and result: hit (answered from the cache), ' +
        "coalesced (shared an identical request's vendor call), miss (asked the vendor).",
      ['model', 'result'],
    );
    this.cacheSavedMicros = counterChildren(
      'cache_saved_micros_total',
      "What hits and coalesced requests saved their accounts, in micro-dollars: the stored answer's price less " +
        'what they were billed.',
      ['model'],
    );
    this.cacheStored = counterChildren(
      'cache_entries_stored_total',
      'Answers kept in the response cache, by catalog model.',
      ['model'],
    );
    this.cacheStoredBytes = counterChildren(
      'cache_stored_bytes_total',
      'Bytes of answers kept in the response cache (as stored: gzipped past 2 KiB), by catalog model.',
      ['model'],
    );
    this.batches = counterChildren(
      'batches_total',
      'Batches by event and dialect (anthropic: Message Batches, openai: the Batch API): created, canceled (a ' +
        'cancel asked), ended (every request has its result), failed (an OpenAI batch whose file could not run).',
      ['event', 'dialect'],
    );
    this.batchRequests = counterChildren(
      'batch_requests_total',
      'Requests of batches by outcome as recorded in their batch, and dialect: succeeded, errored, canceled, expired.',
      ['outcome', 'dialect'],
    );
    this.usageBuffered = new Gauge({
      name: `${metricsPrefix}usage_buffer_records`,
      help:
        'Settled usage entries waiting in Redis to be written to the record (PostgreSQL); grows while the database ' +
        'is away.',
      registers,
    });
    this.usageWritten = counter(
      'usage_records_written_total',
      'Usage entries written to the record (PostgreSQL) by this process.',
      [],
    );
    this.usageWriteFailures = counter(
      'usage_write_failures_total',
      'Batches of usage entries the record (PostgreSQL) refused or did not answer; they are written again later.',
      [],
    );
    this.usageDeadLetters = counter(
      'usage_dead_letters_total',
      "Usage entries the record (PostgreSQL) refused every time they were written alone, moved to their bucket's " +
        'dead-letter stream for the operator.',
      [],
    );

    collectDefaultMetrics({ register: this.registry, prefix: metricsPrefix });
  }
}

let current: GatewayMetrics | undefined;

/** The process's metrics, built on first call (later calls return the same, whatever their options). */
export function initMetrics(options: MetricsOptions): GatewayMetrics {
  current ??= new GatewayMetrics(options);
  return current;
}

/** The process's metrics, or undefined when this process keeps none (then nothing is recorded). */
export function activeMetrics(): GatewayMetrics | undefined {
  return current;
}

/**
 * Where a process finds metrics kept by another (the worker process `npm start` forks): undefined when it does not
 * answer.
 */
export type MetricsPeer = () => Promise<MetricsJson | undefined>;
let peer: MetricsPeer | undefined;

export function setMetricsPeer(source: MetricsPeer | undefined): void {
  peer = source;
}

export const metricsContentType = Registry.PROMETHEUS_CONTENT_TYPE;

/**
 * The text a scrape gets: this process's registry, merged with its peer's
 * (the worker process of `npm start`) when it has one and it answered.
 * Merging sums equal series (each half records its own metrics, so they do
 * not overlap); Node's process metrics follow prom-client's own rules
 * (CPU and memory summed, the start time left out).
 */
export async function renderMetrics(): Promise<string> {
  const metrics = current;
  if (!metrics) return '';
  const other = peer ? await peer() : undefined;
  if (!other) return metrics.registry.metrics();
  const own = await metrics.registry.getMetricsAsJSON();
  return AggregatorRegistry.aggregate([own, other]).metrics();
}
