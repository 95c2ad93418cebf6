import type { Redis } from 'ioredis';
import { defaultAccountId, type KeyAccess } from '../../shared/accounts.js';
import {
  announceOutcome,
  cachedEndpoints,
  claimLead,
  collapsedStatus,
  forwardedStatus,
  hashable,
  hitStatus,
  leadHolder,
  readCacheControl,
  readEntry,
  readLeadHolder,
  requestHash,
  type CacheEntry,
  type JobCachePlan,
  type LeadOutcome,
} from '../../shared/cache/index.js';
import type { Config } from '../../shared/config.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { LogEntry } from '../../shared/reply.js';
import { activeMetrics } from '../../shared/metrics.js';
import { settle } from '../../shared/money/billing.js';
import { noAmounts, type UsageEntry } from '../../shared/money/usage.js';
import { chargeSpend } from '../accounts/spend.js';
import { cacheOutcomesChannel } from '../../shared/redis-keys.js';
import { EventStream } from '../http/event-stream.js';
import { sseFrame } from '../../shared/sse.js';
import { arrayEnd, framingOf, lateErrorFrame, type StreamDialect } from '../relay/stream-dialects.js';
import type { GatewayContext } from '../http/context.js';
import type { EventLogs, FollowOutcome } from '../relay/event-log.js';
import { echoFor, type EchoSource } from './answer-echo.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import type { ReplyHub } from '../relay/reply-hub.js';

/**
 * The api's half of the response cache (shared/cache/): whether a request opted in, its answer read from the cache (a
 * hit never enters the queue), and coalescing: a request claims the lead of its identical requests, or follows the
 * job that holds it (its stream as it comes, or its stored answer once it ends). Answers not asked of the vendor are
 * echoed as a miss would answer the request (answer-echo.ts) and billed at CACHE_HIT_PRICE of the answer's price.
 */

/** What a request that opted in may do with the cache. */
export interface CachePlan {
  accountId: string;
  hash: string;
  /** Read: an answer at most this many seconds old will do (undefined: do not read, `no-cache`). */
  maxAgeS: number | undefined;
  /** What its job carries: the hash, how long its answer is kept, whether it leads. */
  job: JobCachePlan;
  /** May follow an identical request's leader (not for `no-cache`, which asks the vendor itself). */
  mayFollow: boolean;
}

/**
 * How many times a request contends for the lead when the leader it waited on (or set out to follow) never ran: then
 * it runs its own call.
 */
export const claimRounds = 3;

/** How long a follower of a leader's stream waits for that stream's end after hearing its job failed. */
const followerGraceMs = 2000;

/** How a follower is answered: the leader's stored answer, or the leader's stream as it comes. */
export type Following = { entry: CacheEntry } | { follow: { jobId: string; owner: string } };

/** What a follower of a leader's stream needs to be answered and billed. */
export interface FollowerOptions {
  access: KeyAccess;
  keyId: string;
  modelId: string;
  deadline: number;
  keepAliveMs: number;
  dialect: StreamDialect;
  /** The request it answers: the frames followed echo it, not the leader's (answer-echo.ts). */
  echo?: EchoSource;
}

/** How following a leader's stream ended: billed (its answer came whole), unbilled, or unstarted (nothing written). */
export type FollowedCall = 'billed' | 'unbilled' | 'unstarted';

/** How a request was served, as `Cache-Status` says it (RFC 9211). */
export type CacheResult = 'hit' | 'coalesced' | 'miss' | 'bypass';

export class ResponseCache {
  /** The followers waiting for a leading job's outcome, by `account hash`. */
  private readonly followers = new Map<string, Set<(outcome: LeadOutcome) => void>>();

  constructor(
    private readonly redis: Redis,
    private readonly config: Pick<
      Config,
      'cache' | 'usageBufferRecords' | 'defaultKeyRpm' | 'defaultKeyTpm' | 'alerts'
    >,
    private readonly log: Logger,
  ) {}

  /**
   * Hears the workers announce how leading jobs ended (every api hears every outcome) and passes each to its followers.
   */
  listen(hub: ReplyHub): void {
    hub.on(cacheOutcomesChannel, (message) => {
      let outcome: LeadOutcome;
      try {
        outcome = JSON.parse(message) as LeadOutcome;
      } catch {
        return;
      }
      const waiting = this.followers.get(`${outcome.account} ${outcome.hash}`);
      if (!waiting) return;
      for (const wake of [...waiting]) wake(outcome);
    });
  }

  /**
   * The plan of a request that opted in, or undefined. A request opts in with `Cache-Control` (`max-age`,
   * `no-cache`), or by its key's default (`cache_ttl_s`, as if it sent `max-age` of it) when it sends no
   * `Cache-Control`; `no-store` opts out whatever the key says. Never for an endpoint or form the cache does not
   * keep (an async job, a background or stored response), a body past CACHE_MAX_REQUEST_BYTES, an account an admin
   * forbade it (`cache_max_ttl_s: 0`) or the cache turned off (CACHE_MAX_TTL_S=0). The account's cap bounds both
   * the age read and the time kept, as CACHE_MAX_TTL_S does.
   */
  plan(
    headers: { get(name: string): string },
    request: EndpointRequest,
    modelId: string,
    access: KeyAccess,
    options: { async: boolean; bodyBytes: number },
  ): CachePlan | undefined {
    if (options.async || !cachedEndpoints.has(request.endpoint)) return undefined;
    if (request.endpoint === 'responses' && (request.payload.shell.store || request.payload.shell.background))
      return undefined;
    if (!hashable(request)) return undefined;
    const { maxTtlS, defaultTtlS, maxRequestBytes } = this.config.cache;
    const capS = Math.min(maxTtlS, access.cacheMaxTtlS ?? maxTtlS);
    if (capS <= 0 || !(options.bodyBytes <= maxRequestBytes)) return undefined;
    const header = headers.get('cache-control');
    const directive =
      header === '' ? { maxAgeS: access.cacheTtlS, noCache: false, noStore: false } : readCacheControl(header);
    if (directive.noStore || (directive.maxAgeS === undefined && !directive.noCache)) return undefined;
    const askedS = directive.maxAgeS ?? access.cacheTtlS ?? defaultTtlS;
    return {
      accountId: access.accountId ?? defaultAccountId,
      hash: requestHash(request, modelId),
      maxAgeS: directive.noCache ? undefined : Math.min(capS, directive.maxAgeS!),
      job: { hash: '', ttlMs: Math.min(capS, askedS) * 1000, flight: false },
      mayFollow: !directive.noCache,
    };
  }

  /** The stored answer the plan may be served, if one is fresh enough. */
  async read(plan: CachePlan): Promise<CacheEntry | undefined> {
    if (plan.maxAgeS === undefined) return undefined;
    const entry = await readEntry(this.redis, plan.accountId, plan.hash).catch((error: unknown) => {
      // A cache that cannot be read is a miss: the request goes to the vendor.
      this.log.warn({ err: error }, 'could not read the response cache');
      return undefined;
    });
    if (!entry || Date.now() - entry.created > plan.maxAgeS * 1000 || entry.expires <= Date.now()) return undefined;
    return entry;
  }

  /**
   * Claims the lead for this request's job, or, when an identical request's job holds it, follows that leader: a
   * request streaming the same form as the leader's client follows its stream as it comes (`follow`, from the job's
   * event log); any other waits for the job's end and is served the stored answer (`entry`). Resolves to undefined
   * when this request runs its own call: it claimed the lead, the leader's call failed or its answer could not be
   * kept, or the cache could not be reached. `admit` runs before it follows (each round it contends again: it is the
   * caller's to admit once).
   */
  async claimLeadOrFollow(
    plan: CachePlan,
    self: { jobId: string; form: string | undefined; keyId: string },
    deadline: number,
    admit: () => Promise<void>,
    watch: LeadWatch,
  ): Promise<Following | undefined> {
    if (!plan.mayFollow) return undefined;
    let late = false;
    let heardOne: (() => void) | undefined;
    const stopHearing = watch.on(() => heardOne?.());
    const timer = setTimeout(
      () => {
        late = true;
        heardOne?.();
      },
      Math.max(0, deadline - Date.now()),
    );
    timer.unref();
    try {
      // A leader that never ran (refused, or taken out of its queue) frees the mark: its followers contend for it
      // again, one claiming it and the others following it. A few rounds at most: then each runs its own.
      for (let round = 0; round < claimRounds; round++) {
        const value = await claimLead(
          this.redis,
          plan.accountId,
          plan.hash,
          leadHolder(self.jobId, self.form, self.keyId),
          deadline - Date.now(),
        );
        if (value === '') {
          plan.job.flight = true;
          return undefined;
        }
        const leader = readLeadHolder(value);
        // Following a leader is a request like any other: admitted (its key's rate, its price held) before it waits.
        await admit();
        const endOf = () => watch.endOf(leader.jobId);
        if (self.form !== undefined && leader.form === self.form && !endOf())
          return { follow: { jobId: leader.jobId, owner: leader.keyId } };
        while (!endOf() && !late) await new Promise<void>((resolve) => (heardOne = resolve));
        const end = endOf();
        if (!end || end.status === 'failed') return undefined;
        if (end.status === 'gone') continue;
        const entry = await readEntry(this.redis, plan.accountId, end.entry ?? plan.hash);
        return entry && { entry };
      }
      return undefined;
    } catch (error) {
      if (error instanceof GatewayError) throw error;
      this.log.warn({ err: error }, 'could not follow an identical request’s call: running its own');
      return undefined;
    } finally {
      clearTimeout(timer);
      stopHearing();
    }
  }

  /**
   * Hears every outcome announced of this request's hash from now until the watch is stopped, kept by job. A request
   * that may follow an identical one watches from before it first reads the lead mark until it is answered: an outcome
   * announced at any moment in between (while it is admitted, while its key is read again) is not missed (one
   * announced before the watch began dropped the mark, which this request then claims).
   */
  watch(plan: CachePlan): LeadWatch {
    const watch = new LeadWatch();
    watch.stop = this.onOutcome(`${plan.accountId} ${plan.hash}`, (outcome) => watch.hear(outcome));
    return watch;
  }

  /** Calls `listener` with each outcome a worker announces of this `account hash` until the returned stop is called. */
  private onOutcome(key: string, listener: (outcome: LeadOutcome) => void): () => void {
    let listeners = this.followers.get(key);
    if (!listeners) this.followers.set(key, (listeners = new Set()));
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0 && this.followers.get(key) === listeners) this.followers.delete(key);
    };
  }

  /**
   * Answers a streamed request with its leader's stream as the leading job writes it (from its event log, from the
   * first frame): its end, or its failure as an error event, included. Billed as a coalesced request at the answer's
   * price the worker announces when the job ends (nothing when it failed): resolves to whether it was billed (when
   * not, its reservation is the caller's to give back), or `unstarted` when the call ended before its first frame
   * (never ran, or its deadline passed first): nothing was written, and the request is the caller's to run.
   */
  async followLeaderStream(
    ctx: GatewayContext,
    logs: EventLogs,
    leader: { jobId: string; owner: string },
    plan: CachePlan,
    request: EndpointRequest,
    options: FollowerOptions,
    watch: LeadWatch,
  ): Promise<FollowedCall> {
    ctx.set('cache-status', collapsedStatus);
    ctx.set('age', '0');
    let cost: number | undefined;
    // A job that ends in failure writes its error to the log just after it says so; one whose client left and
    // was cancelled writes nothing more: its followers stop a moment after hearing that it failed. One that never
    // ran writes nothing at all: they stop at once, before anything was written to their clients.
    const gone = new AbortController();
    let giveUp: NodeJS.Timeout | undefined;
    // Its leader's end may have been heard already (the watch began before the lead mark was read).
    const stop = watch.on((outcome) => {
      if (outcome.job !== undefined && outcome.job !== leader.jobId) return;
      if (outcome.status === 'stored' && outcome.cost !== undefined) cost = outcome.cost;
      if (outcome.status === 'gone') gone.abort();
      else if (outcome.status === 'failed') giveUp ??= setTimeout(() => gone.abort(), followerGraceMs);
    }, leader.jobId);
    // Whether any of the leader's frames went out: a Google array's late error or end closes the array they opened.
    let wrote = false;
    const errorFrame = (error: GatewayError) => lateErrorFrame(options.dialect, error, ctx.state.requestId, wrote);
    let last: LogEntry | undefined;
    // The leader's frames as a miss would have answered this request (its ids, its tier, its model name).
    const echo = echoFor(request, ctx.state.requestId, options.echo);
    const array = options.dialect === 'google-array';
    const rewrite = (text: string) => {
      wrote = true;
      return array ? echo.array(text) : echo.sse(text);
    };
    let outcome: FollowOutcome;
    try {
      outcome = await logs.follow(ctx, {
        jobId: leader.jobId,
        named: leader.jobId,
        owner: leader.owner,
        after: -1,
        afterParam: 'after',
        whenMissing: 'wait',
        until: options.deadline,
        keepAliveMs: options.keepAliveMs,
        framing: framingOf(options.dialect),
        rewrite,
        onEnd: (entry) => {
          last = entry;
          if (entry.end !== 'error')
            return array ? arrayEnd(entry.payload ?? '', wrote) : echo.sse(entry.payload ?? '');
          const error = GatewayError.fromWire(JSON.parse(entry.payload ?? '{}') as WireError);
          return errorFrame(error);
        },
        stop: {
          signal: gone.signal,
          onStop: () =>
            errorFrame(
              new GatewayError(
                502,
                'The identical request whose call this one shared ended before its answer did; send it again.',
                { type: 'api_error', code: 'shared_call_failed' },
              ),
            ),
        },
        // Its client hears nothing until the leader's first frame: a call that never starts leaves it free to run
        // its own.
        openOnFirst: true,
      });
    } finally {
      clearTimeout(giveUp);
      stop();
    }
    if (outcome === 'unstarted') {
      ctx.remove('cache-status');
      ctx.remove('age');
      return 'unstarted';
    }
    if (last?.end !== 'done') return 'unbilled';
    // The outcome was announced before the stream's last entry; an answer too large to keep is billed from its entry if
    // any.
    cost ??= (await readEntry(this.redis, plan.accountId, plan.hash).catch(() => undefined))?.costMicros ?? 0;
    const price = this.priced(cost);
    activeMetrics()?.cacheRequests.get(options.modelId, 'coalesced').inc();
    activeMetrics()?.cacheSavedMicros.get(options.modelId).inc(price.saved);
    await this.settle(ctx, request, price, { ...options, result: 'coalesced' }, echo.tier);
    return 'billed';
  }

  /**
   * A job that claimed the lead never ran (refused, or taken out of its queue): its followers contend for the lead
   * again.
   */
  async releaseLead(plan: CachePlan, jobId: string): Promise<void> {
    if (!plan.job.flight) return;
    await announceOutcome(this.redis, plan.accountId, plan.hash, jobId, 'gone').catch((error: unknown) =>
      this.log.warn({ err: error }, 'could not release a refused request’s lead'),
    );
  }

  /**
   * Answers a request from a stored entry: the body, or the stream replayed (numbered frames, OpenAI's usage chunk
   * when the request asked for it, and its trailer), with `Cache-Status` and `Age`, as a miss would answer this
   * request (answer-echo.ts). It costs CACHE_HIT_PRICE of the stored answer's price, no tokens (no vendor, no token
   * rate): a hit is admitted and billed in one step before it is answered (429 where its key's rate, its key's limit
   * or the balance refuse it); a follower settles the price it held.
   */
  async answer(
    ctx: GatewayContext,
    entry: CacheEntry,
    request: EndpointRequest,
    options: {
      stream: boolean;
      result: 'hit' | 'coalesced';
      access: KeyAccess;
      keyId: string;
      modelId: string;
      contentType?: string;
      echo?: EchoSource;
      dialect?: StreamDialect;
    },
  ): Promise<void> {
    const price = this.priced(entry.costMicros);
    // A hit is admitted and billed in one step before it is answered (its price is known): refused, the client gets
    // the 429 any request of its key would. A follower was admitted before it waited.
    const now = Date.now();
    // Answered as a miss would answer this request (its ids, its tier, its model name): answer-echo.ts.
    const echo = echoFor(request, ctx.state.requestId, options.echo, now);
    if (options.result === 'hit')
      ctx.set(
        await chargeSpend(
          this.redis,
          this.config,
          options.access,
          this.usage(ctx, request, price, options, echo.tier),
          { bufferRecords: this.config.usageBufferRecords, alertThresholds: this.config.alerts.thresholds },
        ),
      );
    const age = Math.max(0, Math.floor((now - entry.created) / 1000));
    const ttl = Math.max(0, Math.floor((entry.expires - now) / 1000));
    ctx.set('cache-status', options.result === 'hit' ? hitStatus(ttl) : collapsedStatus);
    ctx.set('age', String(age));
    activeMetrics()?.cacheRequests.get(options.modelId, options.result).inc();
    activeMetrics()?.cacheSavedMicros.get(options.modelId).inc(price.saved);
    const google = options.dialect === 'google-sse' || options.dialect === 'google-array';
    if (options.stream && google) {
      // Google's chunks, in the request's form (both forms of a request share one entry: only the framing differs);
      // an answer kept only as a body is one chunk, which a GenerateContentResponse is.
      const events = entry.events ?? [{ d: entry.body }];
      const chunks = events.map((event) => echo.event(event.d));
      const stream = new EventStream(ctx, framingOf(options.dialect!));
      stream.open();
      stream.end(
        options.dialect === 'google-array'
          ? `[${chunks.join(',\r\n')}]`
          : chunks.map((chunk) => sseFrame(chunk)).join(''),
      );
    } else if (options.stream && entry.events) {
      const includeUsage =
        (request.payload as { stream_options?: { include_usage?: boolean | null } | null }).stream_options
          ?.include_usage === true;
      let frames = '';
      let id = 0;
      for (const event of entry.events) frames += sseFrame(echo.event(event.d, event.e), event.e, id++);
      if (includeUsage && entry.usage !== undefined) frames += sseFrame(echo.usage(entry.usage), undefined, id++);
      const events = new EventStream(ctx);
      events.open();
      events.end(frames + (entry.trailer ?? ''));
    } else {
      ctx.status = 200;
      // A transcription's text forms (`response_format` is in the hash, so the entry is of the form asked).
      ctx.type = options.contentType ?? 'application/json';
      // Speech's audio is kept as its bytes in base64 (an entry is text), and answered as those bytes.
      ctx.body = request.endpoint === 'audio.speech' ? Buffer.from(entry.body, 'base64') : echo.body(entry.body);
    }
    if (options.result === 'coalesced') await this.settle(ctx, request, price, options, echo.tier);
  }

  /**
   * What a follower holds while it waits: CACHE_HIT_PRICE of the worst case its own call would have cost (its leader's
   * is the same request), and no tokens.
   */
  followerEstimate(estimate: { micros: number }): { micros: number; tokens: number } {
    return { micros: Math.ceil(estimate.micros * this.config.cache.hitPrice), tokens: 0 };
  }

  /** What a request served another's answer costs: CACHE_HIT_PRICE of that answer's price; and what it saved. */
  private priced(answerMicros: number): { costMicros: number; saved: number } {
    const costMicros = Math.ceil(answerMicros * this.config.cache.hitPrice);
    return { costMicros, saved: Math.max(0, answerMicros - costMicros) };
  }

  /** The usage entry of a request served another's answer: no tokens (no vendor, no token rate). */
  private usage(
    ctx: GatewayContext,
    request: EndpointRequest,
    price: { costMicros: number; saved: number },
    options: { result: 'hit' | 'coalesced'; access: KeyAccess; keyId: string; modelId: string },
    tier: ServiceTier,
  ): UsageEntry {
    return {
      request_id: ctx.state.requestId,
      account_id: options.access.accountId ?? defaultAccountId,
      key_id: options.keyId,
      model: options.modelId,
      vendor: 'cache',
      ...noAmounts,
      cost_micros: price.costMicros,
      // The tier its answer says; its price is the hit's whatever the tier (a hit takes no place in any band).
      service_tier: tier,
      status: 'completed',
      created: Math.floor(Date.now() / 1000),
      duration_ms: 0,
      endpoint: request.endpoint,
      cache: options.result,
      saved_micros: price.saved,
    };
  }

  /** Settles a follower: its reservation (made before it waited) becomes its price. */
  private async settle(
    ctx: GatewayContext,
    request: EndpointRequest,
    price: { costMicros: number; saved: number },
    options: { result: 'hit' | 'coalesced'; access: KeyAccess; keyId: string; modelId: string },
    tier: ServiceTier,
  ): Promise<void> {
    await settle(this.redis, this.usage(ctx, request, price, options, tier), {
      bufferRecords: this.config.usageBufferRecords,
      alertThresholds: this.config.alerts.thresholds,
    }).catch((error: unknown) =>
      // Unsettled, its reservation is released at its deadline.
      this.log.warn({ err: error }, 'could not bill a request that followed another’s call'),
    );
  }
}

/**
 * `Cache-Status` of a request that went to the vendor: asked to (`no-cache`) or not, and its answer stored (when it
 * ends well) unless it is kept only for its followers (`max-age=0`).
 */
export function missStatus(plan: CachePlan): string {
  return plan.maxAgeS === undefined ? forwardedStatus('request', true) : forwardedStatus('miss', plan.job.ttlMs > 0);
}

/** The outcomes heard of one request's hash while a request waits on identical ones (`ResponseCache.watch`). */
export class LeadWatch {
  private readonly ends = new Map<string, LeadOutcome>();
  private readonly listeners = new Set<(outcome: LeadOutcome) => void>();
  /** Stops hearing (set by `ResponseCache.watch`). */
  stop: () => void = () => undefined;

  hear(outcome: LeadOutcome): void {
    this.ends.set(outcome.job ?? '', outcome);
    for (const listener of [...this.listeners]) listener(outcome);
  }

  /** How a job ended, if that was heard (an outcome without a job, from a worker of an older version, ends any). */
  endOf(jobId: string): LeadOutcome | undefined {
    return this.ends.get(jobId) ?? this.ends.get('');
  }

  /** Calls `listener` with each outcome heard from now on (and first with `jobId`'s end, when it was heard already). */
  on(listener: (outcome: LeadOutcome) => void, jobId?: string): () => void {
    this.listeners.add(listener);
    const heard = jobId === undefined ? undefined : this.endOf(jobId);
    if (heard) listener(heard);
    return () => this.listeners.delete(listener);
  }
}
