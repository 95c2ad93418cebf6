import { Counter, Gauge, Histogram } from 'prom-client';
import { activeMetrics, metricsPrefix } from '../../shared/metrics.js';

/**
 * The api's Realtime metrics, in the process's one registry (shared/metrics.ts) beside the api's others: the client
 * sessions this api holds open by vendor, the client events relayed each way, and the latency the relay added to each
 * server event, from the worker's stamp (when the vendor's frame reached it) to the moment this api hands the frame
 * to the client's socket. Made on the first session (the registry exists once the api started); until then, and in a
 * process without metrics, every hook is a no-op.
 */

/** 50 µs to 1 s: the relay adds a millisecond or two; the tail shows a stalled loop or Redis. */
const latencyBuckets = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

interface RealtimeApiMetrics {
  sessions: Gauge<'vendor'>;
  frames: Counter<'direction'>;
  addedLatency: Histogram;
  refusals: Counter<'status'>;
}

let made: { registry: object; metrics: RealtimeApiMetrics } | undefined;

function metrics(): RealtimeApiMetrics | undefined {
  const active = activeMetrics();
  if (!active) return undefined;
  if (made?.registry === active.registry) return made.metrics;
  const registers = [active.registry];
  const built: RealtimeApiMetrics = {
    sessions: new Gauge({
      name: `${metricsPrefix}realtime_client_sessions`,
      help: 'Realtime sessions whose client socket this api holds open, by vendor.',
      labelNames: ['vendor'],
      registers,
    }),
    frames: new Counter({
      name: `${metricsPrefix}realtime_client_frames_total`,
      help:
        'Realtime events relayed by this api: `up` client events sent on to the worker, `down` server events ' +
        'handed to the client.',
      labelNames: ['direction'],
      registers,
    }),
    addedLatency: new Histogram({
      name: `${metricsPrefix}realtime_relay_down_latency_seconds`,
      help:
        "Latency the relay added to a server event: from the worker's receipt of the vendor's frame to this api " +
        "handing it to the client's socket.",
      buckets: latencyBuckets,
      registers,
    }),
    refusals: new Counter({
      name: `${metricsPrefix}realtime_upgrades_refused_total`,
      help: 'Realtime upgrades answered with an HTTP error status instead of a session, by status.',
      labelNames: ['status'],
      registers,
    }),
  };
  made = { registry: active.registry, metrics: built };
  return built;
}

export function sessionOpened(vendor: string): void {
  metrics()?.sessions.inc({ vendor });
}

export function sessionClosed(vendor: string): void {
  metrics()?.sessions.dec({ vendor });
}

export function framesRelayed(direction: 'up' | 'down', count = 1): void {
  metrics()?.frames.inc({ direction }, count);
}

/** A server event stamped `stampMs` (realtimeClockMs of the worker) was handed to the client's socket at `nowMs`. */
export function downLatency(stampMs: number, nowMs: number): void {
  const seconds = (nowMs - stampMs) / 1000;
  // A clock stepped backwards, or another host's clock behind ours: no sample rather than a false one.
  if (seconds >= 0) metrics()?.addedLatency.observe(seconds);
}

export function upgradeRefused(status: number): void {
  metrics()?.refusals.inc({ status: String(status) });
}
