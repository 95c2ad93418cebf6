/**
 * The measuring instruments: autocannon runs with sub-millisecond latency
 * percentiles, a sequential time-to-first-token client, RSS sampling from
 * /proc, and Redis memory.
 */
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import { cpus, release, totalmem, type as osType } from 'node:os';
import { cpuTimeMs, cpuWindow, rssBytes, systemBusyMs } from './procs.js';

/** Nearest-rank percentile of a sorted sample, in the sample's unit. */
export function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** A growable list of numbers, cheap enough to feed from every response of a load run. */
export class Samples {
  private data = new Float64Array(1 << 16);
  private size = 0;
  push(value: number): void {
    if (this.size === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.size++] = value;
  }
  sorted(): Float64Array {
    return this.data.slice(0, this.size).sort();
  }
}

export interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarise(samples: Samples): LatencySummary {
  return summariseSorted(samples.sorted());
}

/** The percentiles, maximum and mean of a sample sorted in ascending order. */
export function summariseSorted(sorted: Float64Array): LatencySummary {
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    count: sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p95: percentile(sorted, 0.95),
    p99: percentile(sorted, 0.99),
    max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
    mean: sorted.length ? sum / sorted.length : Number.NaN,
  };
}

// ---------------------------------------------------------------- RSS

export interface RssStats {
  /** Bytes, before the load started. */
  before: number | null;
  /** Highest sample while the load ran. */
  peak: number | null;
  /** Bytes, after the load stopped and a short settle. */
  after: number | null;
}

/** Samples the RSS of some processes every `everyMs` between `start()` and `stop()`. */
export class RssSampler {
  private readonly peaks = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly pids: Record<string, number>,
    private readonly everyMs = 500,
  ) {}

  snapshot(): Record<string, number | null> {
    const out: Record<string, number | null> = {};
    for (const [name, pid] of Object.entries(this.pids)) out[name] = rssBytes(pid) ?? null;
    return out;
  }

  start(): void {
    this.peaks.clear();
    const sample = () => {
      for (const [name, pid] of Object.entries(this.pids)) {
        const rss = rssBytes(pid);
        if (rss !== undefined && rss > (this.peaks.get(name) ?? 0)) this.peaks.set(name, rss);
      }
    };
    sample();
    this.timer = setInterval(sample, this.everyMs);
  }

  stop(): Record<string, number | null> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    const out: Record<string, number | null> = {};
    for (const name of Object.keys(this.pids)) out[name] = this.peaks.get(name) ?? null;
    return out;
  }
}

// ---------------------------------------------------------------- Redis

export async function redisUsedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  const match = /^used_memory:(\d+)/m.exec(info);
  return match ? Number(match[1]) : Number.NaN;
}

/**
 * Bytes held by the keys of this connection's database (sum of MEMORY USAGE
 * over a SCAN): unlike used_memory, other tenants of a shared Redis do not
 * count. Bounded: stops after 100,000 keys.
 */
export async function redisDbBytes(redis: Redis): Promise<number> {
  let cursor = '0';
  let total = 0;
  let seen = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) {
      const pipeline = redis.pipeline();
      for (const key of keys) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
      for (const [error, bytes] of (await pipeline.exec()) ?? [])
        if (!error && typeof bytes === 'number') total += bytes;
    }
    seen += keys.length;
  } while (cursor !== '0' && seen < 100_000);
  return total;
}

export async function redisProcessId(redis: Redis): Promise<number | undefined> {
  const info = await redis.info('server');
  const pid = Number(/^process_id:(\d+)/m.exec(info)?.[1]);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

export type CommandStats = Map<string, { calls: number; usec: number }>;

export async function commandStats(redis: Redis): Promise<CommandStats> {
  const info = await redis.info('commandstats');
  const stats: CommandStats = new Map();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    stats.set(match[1]!, { calls: Number(match[2]), usec: Number(match[3]) });
  }
  return stats;
}

export interface CommandDelta {
  command: string;
  calls: number;
  usec: number;
}

/** What Redis executed between two snapshots, busiest first (whole server: other clients are included). */
export function diffCommandStats(before: CommandStats, after: CommandStats): CommandDelta[] {
  const out: CommandDelta[] = [];
  for (const [command, a] of after) {
    const b = before.get(command) ?? { calls: 0, usec: 0 };
    if (a.calls > b.calls) out.push({ command, calls: a.calls - b.calls, usec: a.usec - b.usec });
  }
  return out.sort((x, y) => y.usec - x.usec);
}

export async function redisVersion(redis: Redis): Promise<string> {
  const info = await redis.info('server');
  return /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
}

// ---------------------------------------------------------------- load

export interface LoadTarget {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export interface LoadResult {
  connections: number;
  durationS: number;
  /** 2xx responses. */
  ok: number;
  /** 2xx responses per second. */
  rps: number;
  /** Milliseconds, 2xx responses only, measured per response (not autocannon's whole-ms histogram). */
  latency: LatencySummary;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  redisUsedMemoryBefore: number;
  redisUsedMemoryAfter: number;
  /** Bytes of the bench database's keys (see redisDbBytes). */
  redisDbBytesBefore: number;
  redisDbBytesAfter: number;
  rss: Record<string, RssStats>;
  /**
   * CPU ms (user + system) each process used during the measured run; `loadgen` is this process (autocannon),
   * `others` is every other process on the machine (system busy time minus the named ones).
   */
  cpuMs: Record<string, number | null>;
  /**
   * Redis commands executed during the measured run (INFO commandstats delta,
   * whole server). Commands run inside Lua scripts are counted under their own
   * names too, and their time is also inside the script's `evalsha` time.
   */
  redisCommands: CommandDelta[];
}

function runAutocannon(
  target: LoadTarget,
  connections: number,
  durationS: number,
  onLatency?: (ms: number) => void,
): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: target.url,
        method: 'POST',
        headers: { 'content-type': 'application/json', ...target.headers },
        body: target.body,
        connections,
        pipelining: 1,
        duration: durationS,
        timeout: 10,
      },
      (error: unknown, result: autocannon.Result) => (error ? reject(error) : resolve(result)),
    );
    if (onLatency) {
      instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
        if (statusCode >= 200 && statusCode < 300) onLatency(responseTime);
      });
    }
  });
}

/**
 * A short warm-up at the same concurrency, then the measured run, with RSS of
 * `pids` sampled every 500 ms and Redis memory read before and after.
 */
export async function measureLoad(options: {
  target: LoadTarget;
  connections: number;
  durationS: number;
  warmupS: number;
  redis: Redis;
  pids: Record<string, number>;
  settleMs?: number;
  /** Also receives every measured 2xx latency (to pool several runs). */
  latencies?: Samples;
}): Promise<LoadResult> {
  const { target, connections, durationS, warmupS, redis, pids } = options;
  if (warmupS > 0) await runAutocannon(target, connections, warmupS);
  // Let the warm-up's tail drain so "before" is idle.
  await new Promise((r) => setTimeout(r, 1000));
  const sampler = new RssSampler(pids);
  const before = sampler.snapshot();
  const redisBefore = await redisUsedMemory(redis);
  const dbBefore = await redisDbBytes(redis);
  const cpuPids: Record<string, number> = { ...pids };
  const redisPid = await redisProcessId(redis);
  if (redisPid !== undefined) cpuPids.redis = redisPid;
  cpuPids.loadgen = process.pid;
  const statsBefore = await commandStats(redis);
  const cpuSpent = cpuWindow(cpuPids);
  const samples = new Samples();
  sampler.start();
  const pool = options.latencies;
  const result = await runAutocannon(target, connections, durationS, (ms) => {
    samples.push(ms);
    pool?.push(ms);
  });
  const peaks = sampler.stop();
  const cpuMs = cpuSpent();
  const redisCommands = diffCommandStats(statsBefore, await commandStats(redis));
  await new Promise((r) => setTimeout(r, options.settleMs ?? 2000));
  const after = sampler.snapshot();
  const redisAfter = await redisUsedMemory(redis);
  const dbAfter = await redisDbBytes(redis);
  const rss: Record<string, RssStats> = {};
  for (const name of Object.keys(pids))
    rss[name] = { before: before[name] ?? null, peak: peaks[name] ?? null, after: after[name] ?? null };
  const statusCodes: Record<string, number> = {};
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stat.count ?? 0;
  return {
    connections,
    durationS: result.duration,
    ok: result['2xx'],
    rps: result['2xx'] / result.duration,
    latency: summarise(samples),
    errors: result.errors,
    timeouts: result.timeouts,
    non2xx: result.non2xx,
    statusCodes,
    redisUsedMemoryBefore: redisBefore,
    redisUsedMemoryAfter: redisAfter,
    redisDbBytesBefore: dbBefore,
    redisDbBytesAfter: dbAfter,
    rss,
    cpuMs,
    redisCommands,
  };
}

// ---------------------------------------------------------------- soak

export interface SoakSample {
  /** Seconds since the soak started. */
  t: number;
  phase: 'idle' | 'load' | 'pause';
  redisUsedMemory: number;
  redisKeys: number;
  /** Bytes of the bench database's keys. */
  redisDbBytes: number;
  rss: Record<string, number | null>;
  /** 2xx responses since the previous sample. */
  okSincePrevious: number;
  /** CPU each named process used since the previous sample, as % of one core. */
  cpuPct: Record<string, number | null>;
  /** CPU every other process on the machine used since the previous sample, as % of one core. */
  othersCpuPct: number | null;
}

export interface SoakResult {
  durationS: number;
  connections: number;
  ok: number;
  rps: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  latency: LatencySummary;
  samples: SoakSample[];
}

/** Load for `durationS`, sampling memory every `everyS`, then a pause and a last sample. */
export async function soak(options: {
  target: LoadTarget;
  connections: number;
  durationS: number;
  everyS: number;
  pauseS: number;
  redis: Redis;
  /** RSS is sampled for these; CPU too. */
  pids: Record<string, number>;
  /** CPU only (e.g. the fake upstream). */
  cpuOnlyPids?: Record<string, number>;
  onSample?: (sample: SoakSample) => void;
}): Promise<SoakResult> {
  const { redis, pids } = options;
  const sampler = new RssSampler(pids);
  const latencies = new Samples();
  let okCount = 0;
  let okAtLastSample = 0;
  const started = performance.now();
  const samples: SoakSample[] = [];
  const cpuPids: Record<string, number> = { ...pids, ...options.cpuOnlyPids };
  const redisPid = await redisProcessId(redis);
  if (redisPid !== undefined) cpuPids.redis = redisPid;
  cpuPids.loadgen = process.pid;
  const readCpu = () => ({
    at: performance.now(),
    busy: systemBusyMs(),
    procs: Object.fromEntries(Object.entries(cpuPids).map(([n, pid]) => [n, cpuTimeMs(pid)])),
  });
  let lastCpu = readCpu();
  const take = async (phase: SoakSample['phase']) => {
    const cpu = readCpu();
    const elapsed = Math.max(1, cpu.at - lastCpu.at);
    const cpuPct: Record<string, number | null> = {};
    let ours = 0;
    for (const name of Object.keys(cpuPids)) {
      const a = lastCpu.procs[name];
      const b = cpu.procs[name];
      cpuPct[name] = a === undefined || b === undefined ? null : Math.round(((b - a) / elapsed) * 100);
      ours += a === undefined || b === undefined ? 0 : b - a;
    }
    const othersCpuPct =
      lastCpu.busy === undefined || cpu.busy === undefined
        ? null
        : Math.max(0, Math.round(((cpu.busy - lastCpu.busy - ours) / elapsed) * 100));
    lastCpu = cpu;
    const sample: SoakSample = {
      cpuPct,
      othersCpuPct,
      t: Math.round((performance.now() - started) / 100) / 10,
      phase,
      redisUsedMemory: await redisUsedMemory(redis),
      redisKeys: await redis.dbsize(),
      redisDbBytes: await redisDbBytes(redis),
      rss: sampler.snapshot(),
      okSincePrevious: okCount - okAtLastSample,
    };
    okAtLastSample = okCount;
    samples.push(sample);
    options.onSample?.(sample);
  };
  await take('idle');
  const run = runAutocannon(options.target, options.connections, options.durationS, (ms) => {
    okCount += 1;
    latencies.push(ms);
  });
  let ticks = 0;
  const ticker = setInterval(() => {
    ticks += 1;
    if (ticks * options.everyS < options.durationS) void take('load');
  }, options.everyS * 1000);
  let result: autocannon.Result;
  try {
    result = await run;
  } finally {
    clearInterval(ticker);
  }
  await take('load');
  await new Promise((r) => setTimeout(r, options.pauseS * 1000));
  await take('pause');
  return {
    durationS: result.duration,
    connections: options.connections,
    ok: result['2xx'],
    rps: result['2xx'] / result.duration,
    errors: result.errors,
    timeouts: result.timeouts,
    non2xx: result.non2xx,
    latency: summarise(latencies),
    samples,
  };
}

// ---------------------------------------------------------------- time to first token

export interface TtftResult {
  requests: number;
  failures: number;
  /** Milliseconds from sending the request to the first `data:` line carrying content. */
  ttft: LatencySummary;
  /** Milliseconds from sending the request to the end of the stream. */
  total: LatencySummary;
}

function hasContentDelta(line: string): boolean {
  if (!line.startsWith('data:')) return false;
  const data = line.slice(5).trim();
  if (data === '[DONE]' || data === '') return false;
  try {
    const event = JSON.parse(data) as { choices?: Array<{ delta?: { content?: unknown } }> };
    const content = event.choices?.[0]?.delta?.content;
    return typeof content === 'string' && content.length > 0;
  } catch {
    return false;
  }
}

interface StreamTiming {
  status: number;
  ttftMs: number | undefined;
  totalMs: number;
}

function streamOnce(url: URL, headers: Record<string, string>, body: string, agent: Agent): Promise<StreamTiming> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(body);
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          ...headers,
          'content-type': 'application/json',
          'content-length': String(payload.length),
          accept: 'text/event-stream',
        },
      },
      (res) => {
        let buffer = '';
        let ttftMs: number | undefined;
        res.setEncoding('utf8');
        res.on('data', (text: string) => {
          if (ttftMs !== undefined) return;
          buffer += text;
          let newline: number;
          while ((newline = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, newline).replace(/\r$/, '');
            buffer = buffer.slice(newline + 1);
            if (hasContentDelta(line)) {
              ttftMs = performance.now() - t0;
              buffer = '';
              break;
            }
          }
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, ttftMs, totalMs: performance.now() - t0 }));
        res.on('error', reject);
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error('stream request timed out')));
    req.on('error', reject);
    const t0 = performance.now();
    req.end(payload);
  });
}

/** Sequential stream requests over one keep-alive connection: `warmup` unmeasured, then `count` measured. */
export async function measureTtft(options: {
  url: string;
  headers: Record<string, string>;
  body: string;
  warmup: number;
  count: number;
  /** Also receive every measured request's timings (to pool several runs). */
  pool?: { ttft: Samples; total: Samples };
}): Promise<TtftResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const url = new URL(options.url);
  const ttft = new Samples();
  const total = new Samples();
  let failures = 0;
  try {
    for (let i = 0; i < options.warmup + options.count; i += 1) {
      let timing: StreamTiming | undefined;
      try {
        timing = await streamOnce(url, options.headers, options.body, agent);
      } catch {
        timing = undefined;
      }
      if (i < options.warmup) continue;
      if (!timing || timing.status !== 200 || timing.ttftMs === undefined) {
        failures += 1;
        continue;
      }
      ttft.push(timing.ttftMs);
      total.push(timing.totalMs);
      options.pool?.ttft.push(timing.ttftMs);
      options.pool?.total.push(timing.totalMs);
    }
  } finally {
    agent.destroy();
  }
  return { requests: options.count, failures, ttft: summarise(ttft), total: summarise(total) };
}

/** An integer setting of a benchmark from the environment (`fallback` when unset); anything else is refused. */
export function envInt(name: string, fallback: number, min = 0): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}

/** What every benchmark report says of the machine it ran on. */
export function machineFacts(redisVersionText: string) {
  const cpuList = cpus();
  return {
    cpu: cpuList[0]?.model.trim() ?? 'unknown',
    cores: cpuList.length,
    memoryGiB: totalmem() / 1024 ** 3,
    os: `${osType()} ${release()}`,
    node: process.version,
    redis: redisVersionText,
  };
}

/**
 * What became of a set of requests: how many were sent, answered and failed, by status and by echoed tier, and the
 * first failure.
 */
export interface Outcomes {
  sent: number;
  ok: number;
  failed: number;
  statusCodes: Record<string, number>;
  firstFailure?: string;
  tiers: Record<string, number>;
}

/** Counts requests' outcomes (`status` 0: no answer at all). */
export function outcomes(
  done: ReadonlyArray<{ status: number; ok: boolean; tier?: string; failure?: string }>,
): Outcomes {
  const statusCodes: Record<string, number> = {};
  const tiers: Record<string, number> = {};
  let ok = 0;
  for (const d of done) {
    const code = d.status === 0 ? 'error' : String(d.status);
    statusCodes[code] = (statusCodes[code] ?? 0) + 1;
    if (!d.ok) continue;
    ok++;
    tiers[d.tier ?? '(none)'] = (tiers[d.tier ?? '(none)'] ?? 0) + 1;
  }
  const firstFailure = done.find((d) => !d.ok)?.failure;
  return {
    sent: done.length,
    ok,
    failed: done.length - ok,
    statusCodes,
    ...(firstFailure ? { firstFailure } : {}),
    tiers,
  };
}
