/**
 * Samples, every `intervalMs` (250), the resident set size of each watched
 * process (from /proc), Redis `used_memory`, and the gateway's own count of
 * OpenAI slots held (`ZCARD sy:limit:{openai}:inflight`), each sample tagged
 * with the phase the benchmark is in.
 */
import type { Redis } from 'ioredis';
import { performance } from 'node:perf_hooks';
import { vendorInflightKey } from '../shared/redis-keys.js';
import { rssBytes } from './procs.js';

export const MiB = 1024 * 1024;
export const slotsKey = vendorInflightKey('openai');

export interface Sample {
  /** ms since the sampler started. */
  t: number;
  phase: string;
  rss: Record<string, number | null>;
  /** Last known value (the INFO call is skipped while one is pending). */
  redisUsed: number | null;
  slots: number | null;
}

export async function redisUsedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  const match = /^used_memory:(\d+)/m.exec(info);
  return match ? Number(match[1]) : NaN;
}

export class Sampler {
  readonly samples: Sample[] = [];
  private phase = 'start';
  private timer: NodeJS.Timeout | undefined;
  private readonly started = performance.now();
  private redisUsed: number | null = null;
  private slots: number | null = null;
  private pending = false;

  constructor(
    private readonly pids: Record<string, number>,
    private readonly redis: Redis,
    private readonly intervalMs = 250,
  ) {}

  start(): void {
    this.tick();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  mark(phase: string): void {
    this.phase = phase;
    this.tick();
  }

  private tick(): void {
    const rss: Record<string, number | null> = {};
    for (const [name, pid] of Object.entries(this.pids)) rss[name] = rssBytes(pid) ?? null;
    this.samples.push({
      t: Math.round(performance.now() - this.started),
      phase: this.phase,
      rss,
      redisUsed: this.redisUsed,
      slots: this.slots,
    });
    if (!this.pending) {
      this.pending = true;
      Promise.all([redisUsedMemory(this.redis), this.redis.zcard(slotsKey)])
        .then(([used, slots]) => {
          this.redisUsed = used;
          this.slots = slots;
        })
        .catch(() => undefined)
        .finally(() => {
          this.pending = false;
        });
    }
  }

  /** Samples of these phases. */
  of(...phases: string[]): Sample[] {
    return this.samples.filter((s) => phases.includes(s.phase));
  }

  /** Highest RSS of `name` over the samples of these phases. */
  peakRss(name: string, ...phases: string[]): number | null {
    const values = this.of(...phases)
      .map((s) => s.rss[name])
      .filter((v): v is number => typeof v === 'number');
    return values.length ? Math.max(...values) : null;
  }

  peakRedis(...phases: string[]): number | null {
    const values = this.of(...phases)
      .map((s) => s.redisUsed)
      .filter((v): v is number => typeof v === 'number');
    return values.length ? Math.max(...values) : null;
  }

  peakSlots(...phases: string[]): number | null {
    const values = this.of(...phases)
      .map((s) => s.slots)
      .filter((v): v is number => typeof v === 'number');
    return values.length ? Math.max(...values) : null;
  }
}
