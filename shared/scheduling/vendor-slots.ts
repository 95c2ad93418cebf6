import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import { slotFreedChannel, vendorInflightKey, vendorPaceKey, vendorRpmKey } from '../redis-keys.js';
import { GatewayError, timeoutError } from '../errors.js';
import { vendorLimits, type VendorLimits } from './lanes.js';
import { activeMetrics } from '../metrics.js';
import { vendorAcquireScript, vendorReleaseScript, vendorRenewScript } from './scripts.js';

/**
 * Vendor limits that hold across every worker process: at most
 * `<VENDOR>_MAX_CONCURRENCY` calls in flight and `<VENDOR>_RPM` calls started
 * per rolling minute. In-flight calls are leases in a sorted set scored by
 * their expiry, renewed while the call runs: a worker that dies stops
 * renewing, and its slot frees itself once the lease runs out.
 *
 * Pace: while every slot is taken (taking the last slot, or being refused one,
 * marks the vendor busy for one average call), calls start at least `VENDOR_PACE_PERCENT` of (average call ÷
 * cap) apart. Slots that would otherwise free in step (a burst started together
 * stays together, call after call) end up spread over the call time, so a
 * request arriving then waits for the next of many slots, not for a whole
 * call. Nothing is paced while a slot is free or nothing runs.
 *
 * A priority request is not paced: a free slot is its at once (its start still counts for the pace of the rest).
 *
 * The scripts are lua/vendor-acquire.lua, vendor-release.lua and vendor-renew.lua (scripts.ts declares them).
 */

export interface Lease {
  release(): Promise<void>;
}

const noLease: Lease = { release: async () => undefined };

const pastDeadline = (vendor: string) =>
  timeoutError(`The request waited for a free ${vendor} slot past its deadline (vendor limits are configured).`);

/** A job of this process waiting for a vendor slot. */
interface Waiter {
  rank: number;
  /** Not held back by the pace (a priority request). */
  unpaced: boolean;
  deadline: number;
  leaseId: string;
  resolve(lease: Lease): void;
  reject(error: unknown): void;
  /** Takes the waiter out (its deadline timer and abort listener too). */
  leave(): void;
}

/** This process's waiters for one vendor, best rank first, and the one loop that asks Redis for them. */
interface VendorLine {
  waiters: Waiter[];
  pumping: boolean;
  /** Cuts the loop's sleep short (a slot was announced free). */
  kick?: () => void;
}

export class VendorSlots {
  private readonly limits = new Map<string, VendorLimits>();
  private readonly lines = new Map<string, VendorLine>();
  /** Without freed-slot messages (no subscriber wired), waiters fall back to short polls. */
  private hearsReleases = false;

  constructor(
    private readonly redis: Redis,
    private readonly config: Pick<Config, 'vendors' | 'channelsFile' | 'vendorLeaseMs'> &
      Partial<Pick<Config, 'vendorPace'>>,
    private readonly leaseMs = config.vendorLeaseMs,
  ) {}

  /**
   * Called for each message on `slotFreedChannel` (the worker's subscriber forwards them): this process's line asks
   * again at once.
   */
  slotFreed(vendor: string): void {
    this.hearsReleases = true;
    this.lines.get(vendor)?.kick?.();
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
   * bounded by the request's deadline and its abort signal. This process's
   * waiters for a vendor form one line ordered by `rank` (the job's queue
   * priority: lower first, as BullMQ serves them; arrival among equals), and one
   * loop asks Redis for the head's slot: the jobs taken past the cap wait in the
   * order the queue would serve them, tiers and fair tags included. `unpaced`
   * (a priority request): a free slot is taken at once, whatever the pace.
   */
  acquire(vendor: string, deadline: number, signal: AbortSignal, rank = 0, unpaced = false): Promise<Lease> {
    const { maxConcurrency, rpm } = this.limitsOf(vendor);
    if (maxConcurrency <= 0 && rpm <= 0) return Promise.resolve(noLease);
    signal.throwIfAborted();
    const line = this.lines.get(vendor) ?? { waiters: [], pumping: false };
    this.lines.set(vendor, line);
    return new Promise<Lease>((resolve, reject) => {
      const waiter: Waiter = {
        rank,
        unpaced,
        deadline,
        leaseId: randomUUID(),
        resolve,
        reject,
        leave: () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          const at = line.waiters.indexOf(waiter);
          if (at < 0) return;
          line.waiters.splice(at, 1);
          slotWaiter(vendor, -1);
        },
      };
      const onAbort = () => {
        waiter.leave();
        reject(signal.reason ?? new GatewayError(499, 'aborted'));
      };
      // Its deadline holds wherever it stands in the line.
      const timer = setTimeout(
        () => {
          waiter.leave();
          reject(pastDeadline(vendor));
        },
        Math.max(0, deadline - Date.now() - 5),
      );
      signal.addEventListener('abort', onAbort, { once: true });
      let at = line.waiters.length;
      while (at > 0 && line.waiters[at - 1]!.rank > rank) at -= 1;
      line.waiters.splice(at, 0, waiter);
      slotWaiter(vendor, 1);
      if (!line.pumping) void this.pump(vendor, line);
    });
  }

  /** Asks Redis for the head waiter's slot until the line is empty, sleeping as the answer says between refusals. */
  private async pump(vendor: string, line: VendorLine): Promise<void> {
    line.pumping = true;
    const { maxConcurrency, rpm } = this.limitsOf(vendor);
    const concurrencyKey = vendorInflightKey(vendor);
    const rpmKey = vendorRpmKey(vendor);
    const paceKey = vendorPaceKey(vendor);
    const pace = this.config.vendorPace ?? 0;
    try {
      while (line.waiters.length > 0) {
        const head = line.waiters[0]!;
        let answer: [number, number, number, number];
        try {
          answer = await vendorAcquireScript(this.redis, {
            inflight: concurrencyKey,
            rpmWindow: rpmKey,
            pace: paceKey,
            leaseId: head.leaseId,
            leaseMs: this.leaseMs,
            cap: maxConcurrency,
            rpm,
            paceFraction: pace,
            unpaced: head.unpaced ? 1 : 0,
          });
        } catch (error) {
          if (line.waiters.includes(head)) {
            head.leave();
            head.reject(error);
          }
          continue;
        }
        const [ok, rpmWait, slotWait, paced] = answer;
        if (ok === 1) {
          const lease = this.lease(vendor, head.leaseId, maxConcurrency, concurrencyKey, paceKey);
          if (line.waiters.includes(head)) {
            head.leave();
            head.resolve(lease);
          } else {
            await lease.release(); // it left (deadline, abort) while the slot was being taken
          }
          continue;
        }
        const left = head.deadline - Date.now();
        if (rpmWait > 0 && rpmWait >= left) {
          // A full minute that frees past the head's deadline: no point waiting for it.
          head.leave();
          head.reject(pastDeadline(vendor));
          continue;
        }
        // A full minute: wait for its oldest call to age out. Paced: a slot is free but not yet to be taken; only
        // time changes either. Full concurrency: wait for a release (announced to every worker), checking again
        // anyway by the soonest lease expiry (a dead holder) or, without announcements, after a short jittered poll.
        // The window between a refused acquire and listening can miss a release: 250 ms bounds that.
        const timeOnly = rpmWait > 0 || paced === 1;
        const fallback = this.hearsReleases ? 250 : 15 + Math.random() * 20;
        const wait = timeOnly ? Math.max(rpmWait, slotWait, 1) : Math.min(Math.max(slotWait, 5), fallback);
        await this.nap(line, Math.max(1, Math.min(wait, left - 1)), timeOnly);
      }
    } finally {
      line.pumping = false;
      line.kick = undefined;
    }
  }

  /** Sleeps `ms`, or less when a slot is announced free (not when only time frees it). */
  private nap(line: VendorLine, ms: number, timeOnly: boolean): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        line.kick = undefined;
        resolve();
      }
      line.kick = timeOnly ? undefined : done;
    });
  }

  /**
   * A held slot: renewed while the call runs, released once (idempotent: media jobs release as soon as the vendor is
   * done, and the processor again at the end).
   */
  private lease(
    vendor: string,
    leaseId: string,
    maxConcurrency: number,
    concurrencyKey: string,
    paceKey: string,
  ): Lease {
    if (maxConcurrency > 0) vendorSlotHeld(vendor, 1);
    const startedAt = Date.now();
    const renew = setInterval(
      () => {
        vendorRenewScript(this.redis, { inflight: concurrencyKey, leaseId, leaseMs: this.leaseMs }).catch(
          () => undefined,
        );
      },
      Math.max(100, Math.floor(this.leaseMs / 3)),
    );
    renew.unref();
    let released = false;
    return {
      release: async () => {
        if (released) return;
        released = true;
        clearInterval(renew);
        if (maxConcurrency <= 0) return;
        vendorSlotHeld(vendor, -1);
        // Issued in one turn: one write, the release before the announcement (a failed one is left to the lease's
        // expiry).
        const giveBack = vendorReleaseScript(this.redis, {
          inflight: concurrencyKey,
          pace: paceKey,
          leaseId,
          callMs: Date.now() - startedAt,
        });
        await Promise.all([giveBack.catch(() => 0), this.redis.publish(slotFreedChannel, vendor).catch(() => 0)]);
      },
    };
  }
}

/** A vendor slot taken (+1) or given back (-1) by this process. */
function vendorSlotHeld(vendor: string, change: 1 | -1): void {
  activeMetrics()?.vendorSlotsInUse.get(vendor).inc(change);
}

/** A job joins (+1) or leaves (-1) this process's line of waiters for a vendor slot. */
function slotWaiter(vendor: string, change: 1 | -1): void {
  activeMetrics()?.vendorSlotWaiters.get(vendor).inc(change);
}
