import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.js';
import { slotFreedChannel, vendorInflightKey, vendorRpmKey } from '../shared/redis-keys.js';
import { GatewayError, timeoutError } from '../shared/errors.js';
import { vendorLimits, type VendorLimits } from '../shared/scheduling/index.js';
import { vendorSlotHeld, waitingForSlot } from './metrics.js';

/**
 * Vendor limits that hold across every worker process: at most
 * `<VENDOR>_MAX_CONCURRENCY` calls in flight and `<VENDOR>_RPM` calls started
 * per rolling minute. In-flight calls are leases in a sorted set scored by
 * their expiry, renewed while the call runs: a worker that dies stops
 * renewing, and its slot frees itself once the lease runs out.
 */
const acquireScript = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local leaseMs = tonumber(ARGV[2])
local maxConcurrency = tonumber(ARGV[3])
local rpm = tonumber(ARGV[4])
if maxConcurrency > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= maxConcurrency then
    local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, 0, tonumber(soonest[2]) - now}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {0, tonumber(oldest[2]) + 60000 - now, 0}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 61000)
end
if maxConcurrency > 0 then
  redis.call('ZADD', KEYS[1], now + leaseMs, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], leaseMs * 2)
end
return {1, 0, 0}
`;

const renewScript = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
`;

export interface Lease {
  release(): Promise<void>;
}

const noLease: Lease = { release: async () => undefined };

type LimiterRedis = Redis & {
  vendorAcquire(concurrencyKey: string, rpmKey: string, leaseId: string, leaseMs: number, max: number, rpm: number): Promise<[number, number, number]>;
  vendorRenew(concurrencyKey: string, leaseId: string, leaseMs: number): Promise<number>;
};

export class VendorLimiter {
  private readonly redis: LimiterRedis;
  private readonly limits = new Map<string, VendorLimits>();
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Without freed-slot messages (no subscriber wired), waiters fall back to short polls. */
  private hearsReleases = false;

  constructor(
    redis: Redis,
    private readonly config: Pick<Config, 'vendors' | 'channelsFile' | 'vendorLeaseMs'>,
    private readonly leaseMs = config.vendorLeaseMs,
  ) {
    this.redis = redis as LimiterRedis;
    if (typeof this.redis.vendorAcquire !== 'function') {
      redis.defineCommand('vendorAcquire', { numberOfKeys: 2, lua: acquireScript });
      redis.defineCommand('vendorRenew', { numberOfKeys: 1, lua: renewScript });
    }
  }

  /** Called for each message on `slotFreedChannel` (the worker's subscriber forwards them). */
  slotFreed(vendor: string): void {
    this.hearsReleases = true;
    // One slot freed: wake this process's longest waiter only (FIFO), not all of them, so a
    // release costs each worker one acquire attempt rather than one per waiter.
    const first = this.waiters.get(vendor)?.values().next();
    if (first && !first.done) first.value();
  }

  /** Marks that released slots are announced (the subscriber is listening). */
  listening(): void {
    this.hearsReleases = true;
  }

  limitsOf(vendor: string): VendorLimits {
    let limits = this.limits.get(vendor);
    if (!limits) {
      limits = vendorLimits(this.config, vendor);
      this.limits.set(vendor, limits);
    }
    return limits;
  }

  /**
   * Waits for a slot of `vendor` (no Redis round trip when it has no limits),
   * bounded by the request's deadline and its abort signal.
   */
  async acquire(vendor: string, deadline: number, signal: AbortSignal): Promise<Lease> {
    const { maxConcurrency, rpm } = this.limitsOf(vendor);
    if (maxConcurrency <= 0 && rpm <= 0) return noLease;
    const concurrencyKey = vendorInflightKey(vendor);
    const rpmKey = vendorRpmKey(vendor);
    const leaseId = randomUUID();
    for (;;) {
      signal.throwIfAborted();
      const [ok, rpmWait, slotWait] = await this.redis.vendorAcquire(concurrencyKey, rpmKey, leaseId, this.leaseMs, maxConcurrency, rpm);
      if (ok === 1) break;
      // A full minute: wait for its oldest call to age out. Full concurrency: wait for a release
      // (announced to every worker), checking again anyway by the soonest lease expiry (a dead
      // holder) or, without announcements, after a short jittered poll.
      // The window between a refused acquire and listening can miss a release: 250 ms bounds that.
      const fallback = this.hearsReleases ? 250 : 15 + Math.random() * 20;
      const wait = rpmWait > 0 ? rpmWait : Math.min(Math.max(slotWait, 5), fallback);
      const left = deadline - Date.now();
      if ((rpmWait > 0 && rpmWait >= left) || left <= 5) {
        throw timeoutError(`The request waited for a free ${vendor} slot past its deadline (vendor limits are configured).`);
      }
      await waitingForSlot(vendor, this.waitForSlot(vendor, Math.min(wait, left - 1), signal, rpmWait > 0));
    }
    if (maxConcurrency > 0) vendorSlotHeld(vendor, 1);
    const renew = setInterval(() => {
      this.redis.vendorRenew(concurrencyKey, leaseId, this.leaseMs).catch(() => undefined);
    }, Math.max(100, Math.floor(this.leaseMs / 3)));
    renew.unref();
    let released = false;
    return {
      // Idempotent: media jobs release as soon as the vendor is done, and the processor again at the end.
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(renew);
        if (maxConcurrency > 0) vendorSlotHeld(vendor, -1);
        if (maxConcurrency > 0) await this.redis.pipeline().zrem(concurrencyKey, leaseId).publish(slotFreedChannel, vendor).exec();
      },
    };
  }

  /** Sleeps `ms`, or less when a slot of `vendor` is announced free (not for RPM waits: time is what frees those). */
  private waitForSlot(vendor: string, ms: number, signal: AbortSignal, timeOnly: boolean): Promise<void> {
    if (timeOnly) return sleep(ms, signal);
    return new Promise((resolve, reject) => {
      const set = this.waiters.get(vendor) ?? new Set<() => void>();
      this.waiters.set(vendor, set);
      const done = () => {
        set.delete(wake);
        resolve();
      };
      const wake = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        done();
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        done();
      }, ms);
      const onAbort = () => {
        clearTimeout(timer);
        set.delete(wake);
        reject(signal.reason ?? new GatewayError(499, 'aborted'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      set.add(wake);
    });
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason ?? new GatewayError(499, 'aborted'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
