import type { Job } from 'bullmq';
import type { GatewayError } from '../shared/errors.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { ResolvedRoute } from './channel-router.js';
import { startVendorAttempt } from './job-tracing.js';
import type { BilledUsage } from './settlement.js';
import { startVendorCall } from './metrics.js';

/** What watches one vendor call: its span (tracing on), its outcome and time (metrics on). */
interface CallWatcher {
  vendorDone(): void;
  failed(error: GatewayError): void;
  end(billed?: BilledUsage): void;
}

/**
 * One call to a vendor channel as a job run tells it: `started` once its
 * vendor slot is held, `vendorDone` when the vendor's part is over (its slot
 * freed), `failed` when the failure policy saw it fail, `end` once the
 * outcome is known. Each is passed on to tracing and metrics, whichever this
 * process keeps; before `started` (no call was made) they do nothing.
 */
export class CallObserver {
  private watchers: CallWatcher[] = [];

  started(job: Job<GatewayJobData>, route: ResolvedRoute, signal: AbortSignal): void {
    const attempt = startVendorAttempt(job, route, signal);
    const call = startVendorCall(route.channel, signal);
    this.watchers = [attempt, call].filter((watcher) => watcher !== undefined);
  }

  vendorDone(): void {
    for (const watcher of this.watchers) watcher.vendorDone();
  }

  failed(error: GatewayError): void {
    for (const watcher of this.watchers) watcher.failed(error);
  }

  /** `billed`: what the settlement billed, when it did (tracing tells it on the call's span). */
  end(billed?: BilledUsage): void {
    for (const watcher of this.watchers) watcher.end(billed);
  }
}
