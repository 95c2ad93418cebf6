import type { Redis } from 'ioredis';
import type { Catalog, CatalogModel } from '../shared/catalog.js';
import type { Logger } from '../shared/logger.js';
import { GatewayError } from '../shared/errors.js';
import { keyPrefix } from '../shared/queues.js';
import { resolveChannels, vendorDefinition, type ChannelConfig, type Protocol } from './vendors/vendor-config.js';

export interface ResolvedRoute {
  protocol: Protocol;
  channel: ChannelConfig;
  upstreamModel: string;
  /** The catalog model actually served (differs from the requested one after a fallback). */
  model: CatalogModel;
}

/** Shared by every worker: channel id → epoch ms until which it is cooling down. */
const cooldownsKey = `${keyPrefix}cooldowns`;

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

export function cooldownPolicy(env: Record<string, string | undefined>): CooldownPolicy {
  const num = (name: string, fallback: number) => (env[name] ? Number(env[name]) : fallback);
  return {
    authMs: num('CHANNEL_AUTH_COOLDOWN_MS', 300_000),
    failureMs: num('CHANNEL_COOLDOWN_MS', 30_000),
    failureThreshold: num('CHANNEL_FAILURE_THRESHOLD', 3),
    windowMs: 30_000,
    rateLimitMs: 5_000,
  };
}

/**
 * Picks a channel for each call: the model's routes in order, weighted
 * random among a route's healthy channels, the catalog's fallbacks when every
 * channel is cooling down. Failures reported back cool a channel down for
 * every worker (a Redis hash read once a second), so traffic moves to the others.
 */
export class ChannelRouter {
  private readonly channels: Map<string, ChannelConfig[]>;
  private readonly coolingUntil = new Map<string, number>();
  private readonly failures = new Map<string, number[]>();
  private readonly recentlySet = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly catalog: Catalog,
    private readonly log: Logger,
    private readonly env: Record<string, string | undefined> = process.env,
    private readonly policy: CooldownPolicy = cooldownPolicy(env),
  ) {
    this.channels = resolveChannels(env);
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), 1000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  route(model: CatalogModel): ResolvedRoute {
    const now = Date.now();
    const tried = new Set<string>();
    let soonest = Infinity;
    for (const candidate of [model.id, ...(model.fallbacks ?? [])]) {
      const served = candidate === model.id ? model : this.catalog.get(candidate);
      if (!served || tried.has(served.id) || served.capability !== model.capability) continue;
      tried.add(served.id);
      for (const route of served.routes) {
        const protocol = vendorDefinition(route.vendor, this.env)?.protocol;
        const all = this.channels.get(route.vendor);
        if (!protocol || !all?.length) continue;
        const upstreamModel = route.model ?? served.id;
        const restingUntil = (c: ChannelConfig) =>
          Math.max(this.coolingUntil.get(c.id) ?? 0, this.coolingUntil.get(modelCooldownKey(c.id, upstreamModel)) ?? 0);
        const healthy = all.filter((c) => restingUntil(c) <= now);
        for (const c of all) soonest = Math.min(soonest, restingUntil(c) || Infinity);
        if (healthy.length === 0) continue;
        if (served !== model) this.log.warn({ model: model.id, fallback: served.id }, 'every channel of the model is cooling down; using its fallback');
        return { protocol, channel: pickWeighted(healthy), upstreamModel, model: served };
      }
    }
    if (soonest === Infinity) {
      throw new GatewayError(503, `No configured vendor serves the model \`${model.id}\` on this worker.`, { type: 'server_error', code: 'no_route' });
    }
    // Every channel is resting: the job waits (without spending an attempt) and looks again within a
    // second, since cooldowns can end early (cleared by an operator, or shared state changing).
    const retryAfterMs = Math.min(1000, Math.max(100, soonest - now));
    throw new GatewayError(503, `Every upstream channel of \`${model.id}\` is cooling down after failures; retry shortly.`, {
      type: 'server_error',
      code: 'channels_cooling_down',
      retryable: true,
      retryAfterMs,
      headers: { 'retry-after': String(Math.ceil(retryAfterMs / 1000)) },
    });
  }

  /** Whether some channel (or fallback) could serve the model right now. */
  canRoute(model: CatalogModel): boolean {
    try {
      this.route(model);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Tells the router how a call failed; may cool down, for every worker, the
   * whole channel (auth or quota: the credential is bad) or just this model on
   * it (rate limits and server errors are often per model, so a fallback to a
   * sibling model on the same channel can still serve).
   */
  reportFailure(route: Pick<ResolvedRoute, 'channel' | 'upstreamModel'>, error: GatewayError): void {
    const channelWide = error.code === 'vendor_auth_failed' || error.code === 'vendor_quota_exhausted';
    const id = channelWide ? route.channel.id : modelCooldownKey(route.channel.id, route.upstreamModel);
    const now = Date.now();
    let coolMs = 0;
    if (channelWide) coolMs = this.policy.authMs;
    else if (error.status === 429) coolMs = error.retryAfterMs ?? this.policy.rateLimitMs;
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
    const until = now + coolMs;
    if ((this.coolingUntil.get(id) ?? 0) >= until) return;
    this.coolingUntil.set(id, until);
    this.recentlySet.set(id, now);
    this.log.warn({ channel: id, coolMs, status: error.status, code: error.code }, 'channel cooling down');
    this.redis.hset(cooldownsKey, id, String(until)).catch((e) => this.log.warn({ err: e }, 'could not share cooldown'));
  }

  /** Mirrors the shared cooldowns (Redis is the truth: clearing it there clears it everywhere). */
  private async refresh(): Promise<void> {
    try {
      const shared = await this.redis.hgetall(cooldownsKey);
      const now = Date.now();
      const expired: string[] = [];
      const next = new Map<string, number>();
      for (const [id, until] of Object.entries(shared)) {
        const value = Number(until);
        if (value <= now) expired.push(id);
        else next.set(id, value);
      }
      // Keep what this process set a moment ago: its write may not have reached Redis yet.
      for (const [id, setAt] of this.recentlySet) {
        if (setAt < now - 2000) this.recentlySet.delete(id);
        else if (!next.has(id) && (this.coolingUntil.get(id) ?? 0) > now) next.set(id, this.coolingUntil.get(id)!);
      }
      this.coolingUntil.clear();
      for (const [id, until] of next) this.coolingUntil.set(id, until);
      if (expired.length > 0) await this.redis.hdel(cooldownsKey, ...expired);
    } catch (error) {
      this.log.warn({ err: error }, 'could not refresh channel cooldowns');
    }
  }
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
