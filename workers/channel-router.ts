import type { Redis } from 'ioredis';
import type { Catalog, CatalogModel } from '../shared/catalog.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { GatewayError } from '../shared/errors.js';
import { recordChannelFailure } from '../shared/channel-health.js';
import { channelCooldownsKey as cooldownsKey } from '../shared/redis-keys.js';
import {
  formatCooldown,
  parseCooldown,
  resolveChannels,
  vendorDefinition,
  type ChannelConfig,
  type VendorConfig,
} from '../shared/vendors.js';
import { type Protocol } from '../shared/vendor-definitions.js';
import { isChannelFault } from './failure-policy.js';
import { rendezvousPick } from '../shared/prompt-affinity.js';
import { channelRested } from './metrics.js';
import { saturatedForMs } from './vendors/rate-headers.js';

export interface ResolvedRoute {
  protocol: Protocol;
  channel: ChannelConfig;
  upstreamModel: string;
  /** The catalog model actually served (differs from the requested one after a fallback). */
  model: CatalogModel;
}

export interface CooldownPolicy {
  /** Vendor auth or quota failures: our configuration is wrong; long. */
  authMs: number;
  /** Repeated 5xx/network failures. */
  failureMs: number;
  /** How many retryable failures within `windowMs` start a cooldown. */
  failureThreshold: number;
  windowMs: number;
  /** A 429 without retry-after. */
  rateLimitMs: number;
}

/** What the router reads of the configuration: the channels, and how long they rest. */
export type RouterConfig = VendorConfig & Pick<Config, 'channelCooldowns'> & Partial<Pick<Config, 'promptAffinityOff'>>;

export function cooldownPolicy(config: Pick<Config, 'channelCooldowns'>): CooldownPolicy {
  return { ...config.channelCooldowns, windowMs: 30_000, rateLimitMs: 5_000 };
}

/**
 * Picks a channel for each call: the model's routes in order, among a route's healthy channels the one a prompt's
 * cached prefix picks (shared/prompt-affinity.ts) or else one at random by weight, the catalog's fallbacks when every
 * channel is cooling down. Failures reported back cool a channel down for
 * every worker (a Redis hash read once a second), so traffic moves to the others.
 */
export class ChannelRouter {
  private readonly channels: Map<string, ChannelConfig[]>;
  private readonly coolingUntil = new Map<string, Cooldown>();
  private readonly failures = new Map<string, number[]>();
  private readonly recentlySet = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly catalog: Catalog,
    private readonly log: Logger,
    private readonly config: RouterConfig,
    private readonly policy: CooldownPolicy = cooldownPolicy(config),
  ) {
    this.channels = resolveChannels(config);
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), 1000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * A healthy channel of the model (or of a fallback). When every one is resting:
   * if some rest only for a rate limit, the job waits (a 503 `channels_cooling_down`
   * the processor turns into a delay); if a resting channel is merely suspected
   * (auth, quota, repeated 5xx) and nothing else can serve, it is tried anyway, so
   * the client gets the vendor's real answer instead of waiting out a cooldown
   * that moves traffic nowhere.
   */
  route(model: CatalogModel, affinity?: string): ResolvedRoute {
    const found = this.find(model, affinity);
    if (found.route) return found.route;
    if (found.lastResort) {
      this.log.debug(
        { model: model.id, channel: found.lastResort.channel.id },
        'every channel is cooling down; trying the suspect one, as nothing else can serve',
      );
      return found.lastResort;
    }
    if (found.soonest === Infinity) {
      throw new GatewayError(503, `No configured vendor serves the model \`${model.id}\` on this worker.`, {
        type: 'server_error',
        code: 'no_route',
      });
    }
    // Every channel is rate limited: the job waits (without spending an attempt) and looks again within
    // a second, since cooldowns can end early (cleared by an operator, or shared state changing).
    const retryAfterMs = Math.min(1000, Math.max(100, found.soonest - Date.now()));
    throw new GatewayError(503, `Every upstream channel of \`${model.id}\` is rate limited; retry shortly.`, {
      type: 'server_error',
      code: 'channels_cooling_down',
      retryable: true,
      retryAfterMs,
      headers: { 'retry-after': String(Math.ceil(retryAfterMs / 1000)) },
    });
  }

  /**
   * Whether a healthy channel (or fallback) could serve the model right now: worth switching to after a channel fault.
   */
  canRoute(model: CatalogModel): boolean {
    return this.find(model).route !== undefined;
  }

  private find(
    model: CatalogModel,
    affinity?: string,
  ): { route?: ResolvedRoute; lastResort?: ResolvedRoute; soonest: number } {
    const now = Date.now();
    const tried = new Set<string>();
    let soonest = Infinity;
    let lastResort: ResolvedRoute | undefined;
    for (const candidate of [model.id, ...(model.fallbacks ?? [])]) {
      const served = candidate === model.id ? model : this.catalog.get(candidate);
      if (!served || tried.has(served.id) || served.capability !== model.capability) continue;
      tried.add(served.id);
      for (const route of served.routes) {
        const protocol = vendorDefinition(route.vendor, this.config)?.protocol;
        const all = this.channels.get(route.vendor);
        if (!protocol || !all?.length) continue;
        const upstreamModel = route.model ?? served.id;
        const healthy: ChannelConfig[] = [];
        for (const channel of all) {
          const rest = combine(
            this.coolingUntil.get(channel.id),
            this.coolingUntil.get(modelCooldownKey(channel.id, upstreamModel)),
            now,
          );
          if (!rest) {
            healthy.push(channel);
            continue;
          }
          soonest = Math.min(soonest, rest.until);
          if (!rest.rateLimited && !lastResort)
            lastResort = { protocol: channel.protocol ?? protocol, channel, upstreamModel, model: served };
        }
        if (healthy.length === 0) continue;
        if (served !== model)
          this.log.warn(
            { model: model.id, fallback: served.id },
            'every channel of the model is cooling down; using its fallback',
          );
        // A prompt whose prefix a vendor caches goes where its cache lives: the first healthy channel of its key's
        // order.
        const channel =
          affinity !== undefined && healthy.length > 1 && !this.config.promptAffinityOff?.includes(route.vendor)
            ? rendezvousPick(affinity, healthy)
            : pickWeighted(healthy);
        return { route: { protocol: channel.protocol ?? protocol, channel, upstreamModel, model: served }, soonest };
      }
    }
    return { lastResort, soonest };
  }

  /**
   * Tells the router how a call failed; may cool down, for every worker, the
   * whole channel (auth or quota: the credential is bad) or just this model on
   * it (rate limits and server errors are often per model, so a fallback to a
   * sibling model on the same channel can still serve).
   */
  reportFailure(route: Pick<ResolvedRoute, 'channel' | 'upstreamModel'>, error: GatewayError): void {
    const channelWide = isChannelFault(error);
    const id = channelWide ? route.channel.id : modelCooldownKey(route.channel.id, route.upstreamModel);
    const now = Date.now();
    let coolMs = 0;
    const rateLimited = !channelWide && error.status === 429;
    // A fault of the vendor's side (not a request it rightly refused) counts toward the channel's health, as every
    // worker sees it.
    if (channelWide || rateLimited || error.retryable) {
      recordChannelFailure(this.redis, route.channel.id, route.upstreamModel, now).catch((e) =>
        this.log.warn({ err: e }, 'could not record a channel failure'),
      );
    }
    if (channelWide) coolMs = this.policy.authMs;
    else if (rateLimited) coolMs = error.retryAfterMs ?? this.policy.rateLimitMs;
    else if (error.retryable) {
      const recent = (this.failures.get(id) ?? []).filter((t) => t > now - this.policy.windowMs);
      recent.push(now);
      this.failures.set(id, recent);
      if (recent.length >= this.policy.failureThreshold) {
        coolMs = this.policy.failureMs;
        this.failures.delete(id);
      }
    }
    if (coolMs <= 0) return;
    if (
      !this.rest(
        id,
        now + coolMs,
        rateLimited,
        channelWide ? 'auth' : rateLimited ? 'rate' : 'failures',
        error.status,
        route.channel,
      )
    )
      return;
    this.log.warn({ channel: id, coolMs, status: error.status, code: error.code }, 'channel cooling down');
  }

  /**
   * Reads an answer's rate-limit headers (workers/vendors/rate-headers.ts): when the key has no requests or tokens
   * left until its window resets, the model rests on the channel until then, as after a 429, for every worker. The
   * next prompt goes to the next channel of its own order (the prompt-cache affinity's), not to a refusal.
   */
  observeLimits(
    route: Pick<ResolvedRoute, 'channel' | 'upstreamModel'>,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    const restMs = saturatedForMs(headers);
    if (restMs === undefined) return;
    const id = modelCooldownKey(route.channel.id, route.upstreamModel);
    if (this.rest(id, Date.now() + restMs, true, 'rate', 200, route.channel)) {
      this.log.info(
        { channel: id, restMs },
        'channel saturated: the vendor says its key has nothing left until the window resets',
      );
    }
  }

  /**
   * Rests a channel (or a model on it) until `until`, here at once and for every worker through Redis; false when it
   * already rested as long.
   */
  private rest(
    id: string,
    until: number,
    rateLimited: boolean,
    reason: 'auth' | 'rate' | 'failures',
    status: number,
    channel: ChannelConfig,
  ): boolean {
    const current = this.coolingUntil.get(id);
    if (current && current.until >= until && current.rateLimited === rateLimited) return false;
    this.coolingUntil.set(id, { until, rateLimited });
    this.recentlySet.set(id, Date.now());
    channelRested(channel, reason);
    this.redis
      .hset(cooldownsKey, id, formatCooldown({ until, reason, status }))
      .catch((e) => this.log.warn({ err: e }, 'could not share cooldown'));
    return true;
  }

  /**
   * Rests in force now by channel id (the channel's own and one per resting upstream model), from the mirror: no Redis
   * read.
   */
  restsByChannel(now = Date.now()): Map<string, number> {
    const rests = new Map<string, number>();
    for (const [id, { until }] of this.coolingUntil) {
      if (until <= now) continue;
      const channel = id.split('|', 1)[0]!;
      rests.set(channel, (rests.get(channel) ?? 0) + 1);
    }
    return rests;
  }

  /** Mirrors the shared cooldowns (Redis is the truth: clearing it there clears it everywhere). */
  private async refresh(): Promise<void> {
    try {
      const shared = await this.redis.hgetall(cooldownsKey);
      const now = Date.now();
      const expired: string[] = [];
      const next = new Map<string, Cooldown>();
      for (const [id, raw] of Object.entries(shared)) {
        const { until, reason } = parseCooldown(raw);
        if (!(until > now)) expired.push(id);
        else next.set(id, { until, rateLimited: reason === 'rate' });
      }
      // Keep what this process set a moment ago: its write may not have reached Redis yet.
      for (const [id, setAt] of this.recentlySet) {
        const mine = this.coolingUntil.get(id);
        if (setAt < now - 2000) this.recentlySet.delete(id);
        else if (!next.has(id) && mine && mine.until > now) next.set(id, mine);
      }
      this.coolingUntil.clear();
      for (const [id, cooldown] of next) this.coolingUntil.set(id, cooldown);
      if (expired.length > 0) await this.redis.hdel(cooldownsKey, ...expired);
    } catch (error) {
      this.log.warn({ err: error }, 'could not refresh channel cooldowns');
    }
  }
}

interface Cooldown {
  until: number;
  /** Resting for a 429 only: waiting is the cure, so the channel is not tried before its time. */
  rateLimited: boolean;
}

/** The rest a channel is under for one model: the later of its channel-wide and per-model cooldowns. */
function combine(a: Cooldown | undefined, b: Cooldown | undefined, now: number): Cooldown | undefined {
  const active = [a, b].filter((c): c is Cooldown => c !== undefined && c.until > now);
  if (active.length === 0) return undefined;
  return { until: Math.max(...active.map((c) => c.until)), rateLimited: active.every((c) => c.rateLimited) };
}

function modelCooldownKey(channelId: string, upstreamModel: string): string {
  return `${channelId}|${upstreamModel}`;
}

function pickWeighted(channels: ChannelConfig[]): ChannelConfig {
  if (channels.length === 1) return channels[0]!;
  const total = channels.reduce((sum, c) => sum + c.weight, 0);
  let point = Math.random() * total;
  for (const channel of channels) {
    point -= channel.weight;
    if (point < 0) return channel;
  }
  return channels[channels.length - 1]!;
}
