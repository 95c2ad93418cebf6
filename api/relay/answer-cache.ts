import type { Redis } from 'ioredis';
import { defaultAccountId, type KeyAccess } from '../../shared/accounts.js';
import { cachedEndpoints, landFlight, readCacheControl, readEntry, requestHash, takeFlight, type CacheEntry, type CacheEvent, type JobCachePlan } from '../../shared/cache.js';
import type { Config } from '../../shared/config.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import { settle } from '../../shared/money/billing.js';
import { cacheEventsChannel } from '../../shared/redis-keys.js';
import { EventStream } from '../http/event-stream.js';
import type { GatewayContext } from '../http/context.js';
import type { ReplyHub } from './reply-hub.js';

/**
 * The api's half of the response cache (shared/cache.ts): whether a request opted in, its answer read from the
 * cache (a hit never enters the queue), and the waiting of a request whose identical twin's job is running.
 */

/** What a request that opted in may do with the cache. */
export interface CachePlan {
  accountId: string;
  hash: string;
  /** Read: an answer at most this many seconds old will do (undefined: do not read, `no-cache`). */
  maxAgeS: number | undefined;
  /** What its job carries: the hash, how long its answer is kept, whether it holds the flight mark. */
  job: JobCachePlan;
  /** May share an identical request's vendor call in flight (not for `no-cache`, which asks the vendor itself). */
  share: boolean;
}

/** How a request was served, as `Cache-Status` says it (RFC 9211). */
export type CacheResult = 'hit' | 'coalesced' | 'miss' | 'bypass';

export class AnswerCache {
  /** The requests waiting on another's job, by `account hash`. */
  private readonly waiting = new Map<string, Set<(status: CacheEvent['status']) => void>>();

  constructor(
    private readonly redis: Redis,
    private readonly config: Pick<Config, 'cache' | 'usageBufferRecords'>,
    private readonly log: Logger,
  ) {}

  /** Hears the workers say a cached request's job ended (every api hears every such end). */
  listen(hub: ReplyHub): void {
    hub.on(cacheEventsChannel, (message) => {
      let event: CacheEvent;
      try {
        event = JSON.parse(message) as CacheEvent;
      } catch {
        return;
      }
      const waiters = this.waiting.get(`${event.account} ${event.hash}`);
      if (!waiters) return;
      for (const wake of [...waiters]) wake(event.status);
    });
  }

  /**
   * The plan of a request that opted in with `Cache-Control` (`max-age`, `no-cache`), or undefined: not opted in,
   * `no-store`, an endpoint or form the cache does not keep (an async job, a background or stored response), a
   * body past CACHE_MAX_REQUEST_BYTES, or the cache turned off (CACHE_MAX_TTL_S=0).
   */
  plan(headers: { get(name: string): string }, request: EndpointRequest, modelId: string, access: KeyAccess, options: { async: boolean; bodyBytes: number }): CachePlan | undefined {
    const header = headers.get('cache-control');
    if (header === '' || options.async || !cachedEndpoints.has(request.endpoint)) return undefined;
    const { maxTtlS, defaultTtlS, maxRequestBytes } = this.config.cache;
    if (maxTtlS === 0 || !(options.bodyBytes <= maxRequestBytes)) return undefined;
    const directive = readCacheControl(header);
    if (directive.noStore || (directive.maxAgeS === undefined && !directive.noCache)) return undefined;
    const keptS = Math.min(maxTtlS, directive.maxAgeS ?? defaultTtlS);
    return {
      accountId: access.accountId ?? defaultAccountId,
      hash: requestHash(request, modelId),
      maxAgeS: directive.noCache ? undefined : directive.maxAgeS,
      job: { hash: '', ttlMs: keptS * 1000, flight: false },
      share: !directive.noCache,
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
   * Takes the flight mark for this request's job, or, when an identical request's job holds it, waits for that
   * job's end: resolves to the stored answer (the request is served it, `coalesced`), or undefined when this
   * request runs its own call (it took the mark, the other's call failed, or its answer could not be kept).
   */
  async share(plan: CachePlan, jobId: string, stream: boolean, deadline: number): Promise<CacheEntry | undefined> {
    if (!plan.share) return undefined;
    const key = `${plan.accountId} ${plan.hash}`;
    let heard: CacheEvent['status'] | undefined;
    let wake: ((status: CacheEvent['status'] | 'timeout') => void) | undefined;
    const ended = new Promise<CacheEvent['status'] | 'timeout'>((resolve) => {
      wake = resolve;
    });
    const waiter = (status: CacheEvent['status']) => {
      heard = status;
      wake!(status);
    };
    // Listening before the mark is read: an end published in between is not missed.
    let waiters = this.waiting.get(key);
    if (!waiters) this.waiting.set(key, (waiters = new Set()));
    waiters.add(waiter);
    const timer = setTimeout(() => wake!('timeout'), Math.max(0, deadline - Date.now()));
    timer.unref();
    try {
      const holder = await takeFlight(this.redis, plan.accountId, plan.hash, `${jobId} ${stream ? 1 : 0}`, deadline - Date.now());
      if (holder === '') {
        plan.job.flight = true;
        return undefined;
      }
      // Another job holds the mark: its end is heard (the listener was in place before the mark was read; an end
      // published before that dropped the mark, which this request would then have taken).
      const status = heard ?? (await ended);
      if (status !== 'stored') return undefined;
      return await readEntry(this.redis, plan.accountId, plan.hash);
    } catch (error) {
      this.log.warn({ err: error }, 'could not share an identical request’s call: running its own');
      return undefined;
    } finally {
      clearTimeout(timer);
      waiters.delete(waiter);
      if (waiters.size === 0) this.waiting.delete(key);
    }
  }

  /** A job that took the flight mark was never queued (refused): the requests waiting on it run their own. */
  async abandon(plan: CachePlan, jobId: string): Promise<void> {
    if (!plan.job.flight) return;
    await landFlight(this.redis, plan.accountId, plan.hash, jobId, 'failed').catch((error: unknown) => this.log.warn({ err: error }, 'could not release a refused request’s flight mark'));
  }

  /**
   * Answers a request from a stored entry: the body, or the stream replayed (numbered frames, OpenAI's usage chunk
   * when the request asked for it, and its trailer), with `Cache-Status` and `Age`; then bills it (CACHE_HIT_PRICE
   * of the stored answer's price, no tokens: a hit uses no vendor and no token rate) and records it.
   */
  async answer(ctx: GatewayContext, entry: CacheEntry, request: EndpointRequest, options: { stream: boolean; result: 'hit' | 'coalesced'; access: KeyAccess; keyId: string; modelId: string }): Promise<void> {
    const now = Date.now();
    const age = Math.max(0, Math.floor((now - entry.created) / 1000));
    const ttl = Math.max(0, Math.floor((entry.expires - now) / 1000));
    ctx.set('cache-status', options.result === 'hit' ? `Switchyard; hit; ttl=${ttl}` : 'Switchyard; fwd=miss; collapsed');
    ctx.set('age', String(age));
    const costMicros = Math.ceil(entry.costMicros * this.config.cache.hitPrice);
    const saved = Math.max(0, entry.costMicros - costMicros);
    const metrics = activeMetrics();
    metrics?.cacheRequests.get(options.modelId, options.result).inc();
    metrics?.cacheSavedMicros.get(options.modelId).inc(saved);
    if (options.stream && entry.events) {
      const includeUsage = (request.payload as { stream_options?: { include_usage?: boolean | null } | null }).stream_options?.include_usage === true;
      let frames = '';
      let id = 0;
      for (const event of entry.events) frames += `id: ${id++}\n${event.e === undefined ? '' : `event: ${event.e}\n`}data: ${event.d}\n\n`;
      if (includeUsage && entry.usage !== undefined) frames += `id: ${id++}\ndata: ${entry.usage}\n\n`;
      const events = new EventStream(ctx);
      events.open();
      events.end(frames + (entry.trailer ?? ''));
    } else {
      ctx.status = 200;
      ctx.type = 'application/json';
      ctx.body = entry.body;
    }
    const accountId = options.access.accountId ?? defaultAccountId;
    await settle(this.redis, {
      request_id: ctx.state.requestId,
      account_id: accountId,
      key_id: options.keyId,
      model: options.modelId,
      vendor: 'cache',
      input_tokens: 0,
      cached_tokens: 0,
      output_tokens: 0,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: costMicros,
      service_tier: 'default',
      status: 'completed',
      created: Math.floor(now / 1000),
      duration_ms: 0,
      endpoint: request.endpoint,
      cache: options.result,
      saved_micros: saved,
    }, { bufferRecords: this.config.usageBufferRecords }).catch((error: unknown) => this.log.warn({ err: error }, 'could not bill a cache hit'));
  }
}

/** `Cache-Status` of a request that went to the vendor: its answer is stored (when it ends well) unless it only shares calls in flight. */
export function missStatus(plan: CachePlan): string {
  return plan.maxAgeS === undefined ? 'Switchyard; fwd=request; stored' : plan.job.ttlMs > 0 ? 'Switchyard; fwd=miss; stored' : 'Switchyard; fwd=miss';
}
