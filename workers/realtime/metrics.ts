import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { activeMetrics, metricsPrefix } from '../../shared/metrics.js';

/**
 * The worker's Realtime metrics, in the process's registry (created with it, the first time a session needs them):
 * sessions open by vendor, frames relayed by direction, and the latency the relay added to each client event on its
 * way up (from the api's stamp, when the frame reached the api, to its hand-over to the vendor's socket). Named
 * `…realtime_worker_…` so that an api and a worker in one process (one registry) keep theirs apart.
 */

/** Buckets for the relay's added latency: from a tenth of a millisecond to a second. */
const latencyBuckets = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

interface RealtimeWorkerMetrics {
  sessions: Gauge<'vendor'>;
  frames: Counter<'direction'>;
  addedLatency: Histogram<'direction'>;
  ended: Counter<'reason'>;
}

const byRegistry = new WeakMap<Registry, RealtimeWorkerMetrics>();

function metrics(): RealtimeWorkerMetrics | undefined {
  const active = activeMetrics();
  if (!active) return undefined;
  let found = byRegistry.get(active.registry);
  if (!found) {
    const registers = [active.registry];
    found = {
      sessions: new Gauge({
        name: `${metricsPrefix}realtime_worker_sessions_open`,
        help: 'Realtime sessions this worker holds open with a vendor, by vendor.',
        labelNames: ['vendor'],
        registers,
      }),
      frames: new Counter({
        name: `${metricsPrefix}realtime_worker_frames_total`,
        help: 'Realtime events this worker relayed: up (client to vendor) and down (vendor to client).',
        labelNames: ['direction'],
        registers,
      }),
      addedLatency: new Histogram({
        name: `${metricsPrefix}realtime_worker_added_latency_seconds`,
        help:
          'Latency the relay added to a client event on its way up: from its arrival at the api to its hand-over ' +
          'to the vendor socket.',
        labelNames: ['direction'],
        buckets: latencyBuckets,
        registers,
      }),
      ended: new Counter({
        name: `${metricsPrefix}realtime_worker_sessions_ended_total`,
        help: 'Realtime sessions this worker ended, by why.',
        labelNames: ['reason'],
        registers,
      }),
    };
    byRegistry.set(active.registry, found);
  }
  return found;
}

export function sessionOpened(vendor: string): void {
  metrics()?.sessions.labels(vendor).inc();
}

export function sessionClosed(vendor: string, reason: string): void {
  const m = metrics();
  m?.sessions.labels(vendor).dec();
  m?.ended.labels(reason).inc();
}

/**
 * A frame relayed; `stampMs` (the other side's clock when the frame reached it) measures the relay's added latency up.
 */
export function frameRelayed(direction: 'up' | 'down', addedMs?: number): void {
  const m = metrics();
  if (!m) return;
  m.frames.labels(direction).inc();
  if (addedMs !== undefined && addedMs >= 0) m.addedLatency.labels(direction).observe(addedMs / 1000);
}
