/**
 * Issue 4's benchmark: 200 concurrent image generations through the gateway
 * against a vendor capped at 8.
 *
 *   npm run build && node --import tsx bench/images.ts
 *
 * A fake OpenAI image vendor in its own process (bench/fake-images-process.ts:
 * every generation takes a fixed latency and carries a ~1.5 MiB PNG as
 * b64_json; more than the cap in flight is answered 429 and counted), and the
 * compiled gateway started as an operator would, in two configurations: one
 * process (`node dist/bin/start.js`), then `--role=api` + one `--role=worker`,
 * with OPENAI_MAX_CONCURRENCY=8. In each, 200 POST /v1/images/generations
 * are fired at once with undici, first with `response_format=b64_json` (the
 * bytes flow through the api's answers), then with `url` (the bytes go to the
 * blob store; all 200 signed links are then downloaded). Every answer is
 * compared with the vendor's PNG.
 *
 * Measured: completed / failed / non-2xx, the vendor's max in flight and 429s,
 * wall time against the ideal (200 / 8 × latency), p50/p99 latency, RSS of
 * every gateway process sampled every 250 ms from /proc (idle before, peak
 * during, after a 5 s pause), Redis used_memory before/after and the db's keys.
 *
 * Env (defaults): BENCH_IMAGE_REQUESTS (200), BENCH_IMAGE_CAP (8),
 * BENCH_IMAGE_LATENCY_MS (200), BENCH_IMAGE_BYTES (1572864),
 * BENCH_IMAGE_RSS_BOUND_MIB (600), BENCH_IMAGE_CONFIGS (all,split),
 * BENCH_IMAGE_REDIS_URL (FLUSHDB'd at start, between configurations and at the
 * end; default: database 13 of a private redis-server this run starts and stops).
 *
 * Writes bench/results/images.json, bench/results/images.md (a section for
 * BENCHMARKS.md) and bench/results/logs/images-*.log (every process's output).
 * Exits 1 when a check fails, 2 when the run itself broke.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, release, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { createAgent, fetchAll, fireImages, summarise, type ImageFormat } from './images-load.js';
import {
  checksOf,
  checksTable,
  detailsTable,
  resultsTable,
  type Machine,
  type RssFigures,
  type RunResult,
  type Settings,
} from './images-report.js';
import { MiB, redisUsedMemory, Sampler, slotsKey } from './images-sampler.js';
import {
  fakeImage,
  fakeStats,
  log,
  logDir,
  startFakeImages,
  startGateway,
  stopGateway,
  type ConfigName,
  type FakeImages,
  type Gateway,
} from './images-stack.js';
import { cpuTimeMs, root, rssBytes, sleep, waitForQuiet, type Child } from './procs.js';
import { testRecord } from '../test/support/record.js';

function intEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return value;
}

const settings: Settings = {
  requests: intEnv('BENCH_IMAGE_REQUESTS', 200),
  cap: intEnv('BENCH_IMAGE_CAP', 8),
  latencyMs: intEnv('BENCH_IMAGE_LATENCY_MS', 200),
  imageBytes: intEnv('BENCH_IMAGE_BYTES', 1536 * 1024),
  rssBoundMiB: intEnv('BENCH_IMAGE_RSS_BOUND_MIB', 600),
  pauseMs: 5000,
  sampleMs: 250,
  // Set in main(): BENCH_IMAGE_REDIS_URL, else database 13 of a private redis-server.
  redisUrl: process.env.BENCH_IMAGE_REDIS_URL || '',
};
const configs = (process.env.BENCH_IMAGE_CONFIGS || 'all,split').split(',').map((c) => c.trim()) as ConfigName[];
for (const config of configs)
  if (config !== 'all' && config !== 'split') throw new Error(`BENCH_IMAGE_CONFIGS: unknown configuration "${config}"`);
const formats: ImageFormat[] = ['b64_json', 'url'];
const redisDb = settings.redisUrl ? Number(/\/(\d+)$/.exec(settings.redisUrl)?.[1] ?? 0) : 13;
const resultsDir = join(root, 'bench', 'results');
const command = 'npm run build && node --import tsx bench/images.ts';
/** The whole run is bounded: past this, everything is stopped. */
const overallTimeoutMs = 170_000;

// ---- cleanup on every way out -----------------------------------------------------------

const mine = new Set<Child>();
let blobRoot: string | undefined;
let redisForCleanup: Redis | undefined;

function killChildren(): void {
  for (const child of mine) if (!child.exited) child.proc.kill('SIGKILL');
}
process.on('exit', () => {
  killChildren();
  if (blobRoot) rmSync(blobRoot, { recursive: true, force: true });
});
let aborting = false;
async function abort(reason: string, code: number): Promise<never> {
  // The run's own failure, once its children are gone, would only repeat the reason.
  if (aborting) return new Promise<never>(() => undefined);
  aborting = true;
  process.stderr.write(`\nbench/images: ${reason}; stopping child processes\n`);
  killChildren();
  // The killed gateway's Redis connections take a moment to close: wait for them, not for longer.
  if (redisForCleanup) await Promise.race([flushOwnDb(redisForCleanup, reason, 2500).catch(() => false), sleep(3000)]);
  process.exit(code);
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(signal, () => void abort(signal, 130));

function track<T extends { child: Child } | Gateway>(value: T): T {
  if ('child' in value) mine.add(value.child);
  else for (const child of Object.values(value.children)) mine.add(child);
  return value;
}

// ---- helpers ----------------------------------------------------------------------------

/** Connections to our database other than this process's own (another tenant using the same db number). */
async function otherClients(redis: Redis): Promise<string[]> {
  const own = String(await redis.client('ID'));
  const list = (await redis.client('LIST')) as string;
  return list.split('\n').filter((line) => line.includes(` db=${redisDb} `) && !line.startsWith(`id=${own} `));
}

/**
 * FLUSHDB, but only when no one else is connected to the database: the test
 * suite uses the same numbers (1–14), and a flush would break a test running
 * there (as its flush would break this run). Waits up to `waitMs` for them to leave.
 */
async function flushOwnDb(redis: Redis, when: string, waitMs: number): Promise<boolean> {
  const until = Date.now() + waitMs;
  let others = await otherClients(redis);
  while (others.length > 0 && Date.now() < until) {
    await sleep(500);
    others = await otherClients(redis);
  }
  if (others.length > 0) {
    log(
      `${when}: ${others.length} other client(s) on db ${redisDb}, not flushing it:\n  ${others
        .slice(0, 5)
        .map((l) => l.slice(0, 200))
        .join('\n  ')}`,
    );
    return false;
  }
  await redis.flushdb();
  return true;
}

function dirBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += dirBytes(path);
    else if (entry.isFile()) total += statSync(path).size;
  }
  return total;
}

/** `sy:result:req_…` → `sy:result:*`, `bull:{image}:req_…` → `bull:{image}:<job>`. */
function family(key: string): string {
  const parts = key.split(':');
  if (parts[0] === 'bull' && parts.length >= 3) {
    const isJob = /^\d+$/.test(parts[2]!) || parts[2]!.length > 16;
    return isJob ? `bull:${parts[1]}:<job>${parts.length > 3 ? `:${parts.slice(3).join(':')}` : ''}` : key;
  }
  if (parts.length > 2) return `${parts[0]}:${parts[1]}:*`;
  return key;
}

async function keysByFamily(redis: Redis): Promise<Record<string, { keys: number; bytes: number }>> {
  const out: Record<string, { keys: number; bytes: number }> = {};
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'COUNT', 1000);
    cursor = next;
    if (keys.length === 0) continue;
    const pipeline = redis.pipeline();
    for (const key of keys) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
    const sizes = (await pipeline.exec()) ?? [];
    keys.forEach((key, i) => {
      const entry = (out[family(key)] ??= { keys: 0, bytes: 0 });
      entry.keys += 1;
      entry.bytes += Number(sizes[i]?.[1] ?? 0);
    });
  } while (cursor !== '0');
  return out;
}

async function queueCounts(redis: Redis) {
  const [waiting, active, delayed, prioritized, completed, failed] = await Promise.all([
    redis.llen('bull:{image}:wait'),
    redis.llen('bull:{image}:active'),
    redis.zcard('bull:{image}:delayed'),
    redis.zcard('bull:{image}:prioritized'),
    redis.zcard('bull:{image}:completed'),
    redis.zcard('bull:{image}:failed'),
  ]);
  return { waiting: waiting + prioritized, active, delayed, completed, failed };
}

function warnLines(file: string, max = 15): string[] {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => {
        const level = /"level":(\d+)/.exec(line);
        // pino lines at warn or above, and anything that is not a pino line (a crash, a stack trace).
        return level ? Number(level[1]) >= 40 : line.trim() !== '';
      })
      .slice(0, max)
      .map((line) => (line.length > 600 ? `${line.slice(0, 600)}…` : line));
  } catch {
    return [];
  }
}

async function machineFacts(redis: Redis): Promise<Machine> {
  const cpuInfo = readFileSync('/proc/cpuinfo', 'utf8');
  const model = /^model name\s*:\s*(.+)$/m.exec(cpuInfo)?.[1]?.trim() ?? cpus()[0]?.model ?? 'unknown';
  const server = await redis.info('server');
  return {
    cpu: model,
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3),
    node: process.version,
    redis: /^redis_version:(.+)$/m.exec(server)?.[1]?.trim() ?? 'unknown',
    kernel: `Linux ${release()}`,
    date: new Date().toISOString().slice(0, 16).replace('T', ' ') + ' UTC',
  };
}

// ---- one run: 200 at once, one response format ------------------------------------------

interface RunContext {
  config: ConfigName;
  gateway: Gateway;
  fake: FakeImages;
  redis: Redis;
  apiKey: string;
  png: Buffer;
  pngB64: Buffer;
  blobDir: string;
}

async function runOnce(ctx: RunContext, format: ImageFormat): Promise<{ run: RunResult; samples: Sampler['samples'] }> {
  const { gateway, fake, redis } = ctx;
  const pids: Record<string, number> = {};
  for (const [name, child] of Object.entries(gateway.children)) pids[name] = child.pid;
  pids.fake = fake.child.pid;
  pids.bench = process.pid;
  const sampler = new Sampler(pids, redis, settings.sampleMs);
  const warningsBefore = Object.fromEntries(
    Object.entries(gateway.children).map(([name, child]) => [name, child.warnings]),
  );

  const quiet = await waitForQuiet({ thresholdPct: 40, maxWaitMs: 5000 });
  if (!quiet.quiet)
    log(
      `${ctx.config} / ${format}: the machine is busy (${Math.round(quiet.busyPct ?? 0)}% of one core in the ` +
        `last second): figures will be noisier`,
    );
  await fakeStats(fake, 'POST');
  sampler.start();
  sampler.mark('idle');
  await sleep(1000);
  const redisBefore = await redisUsedMemory(redis);
  sampler.mark('idle');
  const cpuBefore = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid)]));

  const agent = createAgent();
  log(`${ctx.config} / ${format}: ${settings.requests} generations at once`);
  sampler.mark('burst');
  const fired = await fireImages({
    gatewayUrl: gateway.url,
    apiKey: ctx.apiKey,
    count: settings.requests,
    format,
    agent,
    expectedB64: ctx.pngB64,
    tag: `${ctx.config}-${format}`,
  });
  sampler.mark('burst');
  const vendor = await fakeStats(fake);

  let fetched = null;
  if (format === 'url') {
    const urls = fired.outcomes.map((o) => o.url).filter((u): u is string => typeof u === 'string');
    log(`${ctx.config} / ${format}: downloading ${urls.length} signed links at once`);
    sampler.mark('fetch');
    fetched = await fetchAll(urls, agent, ctx.png);
    sampler.mark('fetch');
  }
  const cpuAfter = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid)]));
  await agent.close();

  sampler.mark('pause');
  await sleep(settings.pauseMs);
  sampler.mark('pause');
  sampler.stop();
  const rssAfter = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, rssBytes(pid) ?? null]));
  const redisAfter = await redisUsedMemory(redis);
  const dbKeysAfter = await redis.dbsize();
  const byFamily = await keysByFamily(redis);
  const slotsLeft = await redis.zcard(slotsKey);
  const queue = await queueCounts(redis);

  const idle = sampler.of('idle');
  const rss: Record<string, RssFigures> = {};
  for (const name of Object.keys(pids)) {
    const peakBurst = sampler.peakRss(name, 'burst');
    const peakFetch = format === 'url' ? sampler.peakRss(name, 'fetch') : null;
    rss[name] = {
      idleBefore: idle.at(-1)?.rss[name] ?? null,
      peakBurst,
      peakFetch,
      peak: Math.max(peakBurst ?? 0, peakFetch ?? 0) || null,
      after: rssAfter[name] ?? null,
    };
  }

  const outcomes = fired.outcomes;
  const statusCodes: Record<string, number> = {};
  for (const o of outcomes) statusCodes[o.status] = (statusCodes[o.status] ?? 0) + 1;
  const errorSamples = outcomes
    .filter((o) => !o.valid)
    .slice(0, 5)
    .map((o) =>
      o.status === 0
        ? `#${o.index} no answer after ${Math.round(o.ms)} ms: ${o.error}`
        : `#${o.index} ${o.status}: ${o.sample ?? ''}`,
    );
  const run: RunResult = {
    config: ctx.config,
    format,
    requests: settings.requests,
    completed: outcomes.filter((o) => o.valid).length,
    invalid2xx: outcomes.filter((o) => !o.valid && o.status >= 200 && o.status < 300).length,
    failed: outcomes.filter((o) => o.status === 0).length,
    non2xx: outcomes.filter((o) => o.status !== 0 && (o.status < 200 || o.status >= 300)).length,
    statusCodes,
    errorSamples,
    wallMs: Math.round(fired.wallMs),
    idealMs: Math.ceil(settings.requests / settings.cap) * settings.latencyMs,
    latency: summarise(outcomes.filter((o) => o.status !== 0).map((o) => o.ms)),
    responseBytes: outcomes.reduce((sum, o) => sum + o.bytes, 0),
    vendor: {
      requests: vendor.requests,
      served: vendor.served,
      status429: vendor.status429,
      maxInFlight: vendor.maxInFlight,
      aborted: vendor.aborted,
      otherRequests: vendor.otherRequests,
      connections: vendor.connections,
      slotUse: vendor.slotUse,
    },
    gatewaySlotsPeak: sampler.peakSlots('burst', 'fetch'),
    slotsLeft,
    fetch: fetched,
    blobDirBytes: dirBytes(ctx.blobDir),
    rss,
    cpuMs: Object.fromEntries(
      Object.keys(pids).map((name) => [
        name,
        cpuBefore[name] != null && cpuAfter[name] != null ? cpuAfter[name]! - cpuBefore[name]! : null,
      ]),
    ),
    redis: {
      usedBefore: redisBefore,
      usedPeak: sampler.peakRedis('burst', 'fetch', 'pause'),
      usedAfter: redisAfter,
      dbKeysAfter,
      byFamily,
    },
    queue,
    warnings: Object.fromEntries(
      Object.entries(gateway.children).map(([name, child]) => [name, child.warnings - (warningsBefore[name] ?? 0)]),
    ),
    pauseMs: settings.pauseMs,
    before: { quiet: quiet.quiet, busyPct: quiet.busyPct === null ? null : Math.round(quiet.busyPct) },
  };
  const checks = checksOf(run, settings);
  log(
    `${ctx.config} / ${format}: ${run.completed}/${run.failed}/${run.non2xx} completed/failed/non-2xx in ` +
      `${run.wallMs} ms (ideal ${run.idealMs}); ` +
      `vendor max in flight ${run.vendor.maxInFlight}, 429s ${run.vendor.status429}; ` +
      checks.map((c) => `${c.name}: ${c.pass ? 'PASS' : 'FAIL'}`).join('; '),
  );
  return { run, samples: sampler.samples };
}

/** A few generations of each format end to end: the pipeline works (and the worker is there) before measuring. */
async function warmUp(ctx: RunContext): Promise<void> {
  const agent = createAgent();
  try {
    for (const format of formats) {
      const fired = await fireImages({
        gatewayUrl: ctx.gateway.url,
        apiKey: ctx.apiKey,
        count: settings.cap,
        format,
        agent,
        expectedB64: ctx.pngB64,
        tag: 'warm-up',
      });
      const bad = fired.outcomes.filter((o) => !o.valid);
      if (bad.length > 0) {
        const tails = Object.values(ctx.gateway.children)
          .map((c) => `--- ${c.name} ---\n${c.tail.slice(-15).join('\n')}`)
          .join('\n');
        throw new Error(
          `warm-up (${format}) failed for ${bad.length}/${fired.outcomes.length}: ${bad
            .slice(0, 3)
            .map((o) => `${o.status} ${o.error ?? o.sample}`)
            .join(' | ')}\n${tails}`,
        );
      }
      if (format === 'url') {
        const fetched = await fetchAll(
          fired.outcomes.map((o) => o.url!),
          agent,
          ctx.png,
        );
        if (fetched.ok !== fired.outcomes.length)
          throw new Error(`warm-up: signed links failed: ${fetched.samples.join(' | ')}`);
      }
    }
  } finally {
    await agent.close();
  }
}

interface ConfigResult {
  config: ConfigName;
  description: string;
  processes: Record<string, number>;
  /** RSS of each gateway process once ready, before any request (bytes). */
  rssAtStart: Record<string, number | null>;
  logFiles: Record<string, string>;
  runs: RunResult[];
  logExcerpts: Record<string, string[]>;
  samples: Record<string, Sampler['samples']>;
}

async function runConfig(config: ConfigName, fake: FakeImages, redis: Redis, png: Buffer): Promise<ConfigResult> {
  if (!(await flushOwnDb(redis, `before ${config}`, 15_000)))
    throw new Error(`db ${redisDb} is in use by another client; stopping`);
  const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-images');
  const blobDir = mkdtempSync(join(blobRoot!, `${config}-`));
  log(`starting the gateway (${config}), blobs in ${blobDir}`);
  const gateway = track(await startGateway(config, fake.url, settings.redisUrl, blobDir, settings.cap));
  // Let a freshly started process settle (the split worker may still be connecting) before its RSS at start is read.
  await sleep(1000);
  const ctx: RunContext = {
    config,
    gateway,
    fake,
    redis,
    apiKey: key,
    png,
    pngB64: Buffer.from(png.toString('base64')),
    blobDir,
  };
  const result: ConfigResult = {
    config,
    description:
      config === 'all'
        ? 'one process: node dist/bin/start.js'
        : 'node dist/bin/start.js --role=api + one --role=worker',
    processes: Object.fromEntries(Object.entries(gateway.children).map(([name, child]) => [name, child.pid])),
    rssAtStart: Object.fromEntries(
      Object.entries(gateway.children).map(([name, child]) => [name, rssBytes(child.pid) ?? null]),
    ),
    logFiles: Object.fromEntries(
      Object.entries(gateway.logFiles).map(([name, file]) => [name, file.slice(root.length)]),
    ),
    runs: [],
    logExcerpts: {},
    samples: {},
  };
  try {
    await warmUp(ctx);
    await sleep(1000);
    for (const format of formats) {
      const { run, samples } = await runOnce(ctx, format);
      result.runs.push(run);
      result.samples[format] = samples;
    }
  } finally {
    log(`stopping the gateway (${config})`);
    await stopGateway(gateway);
    for (const [name, file] of Object.entries(gateway.logFiles)) {
      const lines = warnLines(file);
      if (lines.length > 0) result.logExcerpts[name] = lines;
    }
    rmSync(blobDir, { recursive: true, force: true });
  }
  return result;
}

// ---- the markdown section ---------------------------------------------------------------

function reading(results: ConfigResult[]): string[] {
  const lines: string[] = [];
  const runs = results.flatMap((r) => r.runs);
  const all = runs.flatMap((run) => checksOf(run, settings));
  lines.push(
    all.every((c) => c.pass)
      ? `Every check passed in every run: ${settings.requests} of ${settings.requests} generations completed with ` +
          `the vendor's exact bytes, none failed or came back non-2xx, and the vendor never saw more than ` +
          `${settings.cap} at once (no 429).`
      : `Failed checks: ${runs
          .flatMap((run) =>
            checksOf(run, settings)
              .filter((c) => !c.pass)
              .map((c) => `${run.config}/${run.format} "${c.name}" (${c.detail})`),
          )
          .join('; ')}.`,
  );
  const reached = runs.filter((run) => run.vendor.maxInFlight >= settings.cap).length;
  lines.push(
    `The vendor reached its cap of ${settings.cap} in ${reached} of ${runs.length} runs (max in flight per run: ${runs.map((r) => r.vendor.maxInFlight).join(', ')}).`,
  );
  for (const run of runs) {
    const use = Math.round((run.idealMs / run.wallMs) * 100);
    lines.push(
      `${run.config === 'all' ? 'One process' : 'Split'}, ${run.format}: ${(run.wallMs / 1000).toFixed(2)} s against an ideal ${(run.idealMs / 1000).toFixed(2)} s ` +
        (`(ideal / wall ${use}%); p50 ${Math.round(run.latency?.p50 ?? 0)} ms, p99 ` +
          `${Math.round(run.latency?.p99 ?? 0)} ms`) +
        (run.fetch
          ? `; the ${run.fetch.requested} signed links (${(run.fetch.bytes / MiB).toFixed(0)} MiB) downloaded in ` +
            `${(run.fetch.wallMs / 1000).toFixed(2)} s`
          : '') +
        '.',
    );
  }
  const gatewayPeaks = runs.flatMap((run) =>
    Object.entries(run.rss)
      .filter(([name]) => name !== 'fake' && name !== 'bench')
      .map(([name, r]) => ({
        where: `${run.config}/${run.format} ${name}`,
        peak: r.peak ?? 0,
        idle: r.idleBefore ?? 0,
        after: r.after ?? 0,
      })),
  );
  const top = gatewayPeaks.sort((a, b) => b.peak - a.peak)[0];
  const b64Bytes = runs.find((r) => r.format === 'b64_json')?.responseBytes ?? 0;
  if (top) {
    const atStart = results
      .flatMap((r) =>
        Object.entries(r.rssAtStart).map(
          ([name, bytes]) => `${r.config === 'all' ? 'one process' : name} ${Math.round((bytes ?? 0) / MiB)} MiB`,
        ),
      )
      .join(', ');
    lines.push(
      `Memory: the highest gateway RSS sampled was ${Math.round(top.peak / MiB)} MiB (${top.where}; ` +
        `${Math.round(top.idle / MiB)} MiB before the run, ${Math.round(top.after / MiB)} MiB 5 s after), ` +
        (`under the ${settings.rssBoundMiB} MiB bound used here; once ready and before any request the processes ` +
          `held ${atStart}. `) +
        (`With b64_json the ${settings.requests} answers carry ${(b64Bytes / MiB).toFixed(0)} MiB of base64 ` +
          `through the process that holds the client connections, yet its RSS rose by ` +
          `${Math.round((top.peak - top.idle) / MiB)} MiB at most: the answers are not all held at once. `) +
        (`RSS after the pause is what V8 kept, not necessarily live data; a ${settings.sampleMs} ms sample can ` +
          `miss a shorter spike.`),
    );
  }
  const slot = runs.filter((r) => r.vendor.slotUse);
  if (slot.length > 0) {
    lines.push(
      `Why the wall time exceeds the ideal: between the vendor sending an answer and the next request reaching ` +
        `it, a slot sat idle ` +
        slot
          .map(
            (r) =>
              `${Math.round(r.vendor.slotUse!.gapMs.p50)} ms (p50; p90 ` +
              `${Math.round(r.vendor.slotUse!.gapMs.p90)}) in ${r.config}/${r.format}`,
          )
          .join(', ') +
        (`. The vendor slot is freed as soon as the vendor's answer is in (rendering and storing happen after), ` +
          `and the release is announced so a waiting job tries at once; `) +
        (`what remains is the answer's trip back to the worker, the lease release and the next job's acquire and ` +
          `request, more so when several answers land together on the worker's one event loop. `) +
        `The gateway never let a 9th call through, so the cost is idle vendor capacity (the slots were busy ${slot.map((r) => `${Math.round(r.vendor.slotUse!.utilisation * 100)}%`).join(' / ')} of the time), not errors.`,
    );
  }
  const b64 = runs.filter((r) => r.format === 'b64_json');
  for (const run of b64) {
    const results = run.redis.byFamily['sy:result:*'];
    if (results) {
      lines.push(
        `Redis (${run.config}, b64_json): answers over 512 KiB travel from the worker to the api as ` +
          `\`sy:result:*\` keys that expire after 300 s; ` +
          (`5 s after the run ${results.keys} such keys (the run's ${settings.requests} and the warm-up's ` +
            `${settings.cap}) still held ${(results.bytes / MiB).toFixed(0)} MiB, about ` +
            `${(results.bytes / results.keys / MiB).toFixed(1)} MiB per ` +
            `${(run.responseBytes / run.requests / MiB).toFixed(1)} MiB answer (used_memory ` +
            `${Math.round(run.redis.usedBefore / MiB)} → ${Math.round(run.redis.usedAfter / MiB)} MiB). `) +
          `A burst of large b64 answers therefore costs Redis memory for five minutes after it is served.`,
      );
    }
  }
  for (const run of runs.filter((r) => r.format === 'url')) {
    lines.push(
      `Redis (${run.config}, url): used_memory ${Math.round(run.redis.usedBefore / MiB)} → ` +
        `${Math.round(run.redis.usedAfter / MiB)} MiB (the \`sy:result:*\` keys left are the b64_json run's); the ` +
        `images went to the blob directory (${(run.blobDirBytes / MiB).toFixed(0)} MiB after the run), and the db ` +
        `held ${run.redis.dbKeysAfter} keys: both runs' finished jobs, kept 60 s as designed.`,
    );
  }
  const busy = runs.filter((r) => !r.before.quiet);
  if (busy.length > 0) {
    lines.push(
      `The machine was not quiet before ${busy.length} of ${runs.length} runs (busy share of one core in the second before: ${runs.map((r) => `${r.config}/${r.format} ${r.before.busyPct ?? '?'}%`).join(', ')}): other tenants were running, so wall times and latencies are noisier than on an idle machine.`,
    );
  }
  lines.push(
    `Caveats: one 2-core machine runs the load generator, the fake vendor, the gateway and Redis (shared with ` +
      `other tenants, so used_memory is the whole server's; the per-key figures are this database's); ` +
      (`the fake answers after a fixed ${settings.latencyMs} ms, where real image generation takes seconds, which ` +
        `makes this a test of the gateway's hand-off overhead and memory, not of throughput.`),
  );
  return lines;
}

function markdown(machine: Machine, results: ConfigResult[]): string {
  const runs = results.flatMap((r) => r.runs);
  const out: string[] = [];
  out.push(`## Images: ${settings.requests} concurrent generations against a vendor capped at ${settings.cap}`);
  out.push('');
  out.push(
    `A fake OpenAI image vendor in its own process answers each \`POST /v1/images/generations\` after ` +
      `${settings.latencyMs} ms with a ` +
      (`${(settings.imageBytes / MiB).toFixed(1)} MiB PNG (1024x1024, valid) as \`b64_json\`, and answers 429 to ` +
        `any request beyond ${settings.cap} in flight. `) +
      (`The gateway (\`node dist/bin/start.js\`, \`OPENAI_MAX_CONCURRENCY=${settings.cap}\`, local blob store) ` +
        `runs as one process, then as \`--role=api\` + one \`--role=worker\`. `) +
      (`${settings.requests} generations (\`dall-e-2\`, \`1024x1024\`) are fired at once with undici, once with ` +
        `\`response_format=b64_json\` and once with \`url\` `) +
      (`(then all ${settings.requests} signed links are downloaded). Every answer is compared byte for byte with ` +
        `the vendor's PNG. `) +
      (`RSS is read from /proc every ${settings.sampleMs} ms; "after" is ${settings.pauseMs / 1000} s after the ` +
        `last answer.`),
  );
  out.push('');
  out.push(
    `Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB; Node ${machine.node}; Redis ` +
      `${machine.redis}; ${machine.kernel}; ${machine.date}.`,
  );
  out.push('');
  out.push('```sh');
  out.push(command);
  out.push('```');
  out.push('');
  out.push(resultsTable(runs));
  out.push('');
  out.push(checksTable(runs, settings));
  out.push('');
  out.push(detailsTable(runs));
  out.push('');
  out.push(
    `Ideal wall time: ceil(${settings.requests} / ${settings.cap}) × ${settings.latencyMs} ms. Latency: from ` +
      `sending a request to the end of its answer, at the client. RSS "idle" is read just before the burst: after ` +
      `a warm-up of ${settings.cap} generations in each format and, for url, after the b64_json run; "peak" covers ` +
      `the generations and the link downloads. RSS bound used for PASS/FAIL: ${settings.rssBoundMiB} MiB per ` +
      `gateway process. Full figures: \`bench/results/images.json\`; process output: ` +
      `\`bench/results/logs/images-*.log\`.`,
  );
  out.push('');
  for (const line of reading(results)) out.push(`- ${line}`);
  const excerpts = results.flatMap((r) =>
    Object.entries(r.logExcerpts).map(([name, lines]) => ({ where: `${r.config}/${name}`, lines })),
  );
  if (excerpts.length > 0) {
    out.push('');
    out.push('Gateway log lines at warn or above (first few per process):');
    out.push('');
    out.push('```');
    for (const { where, lines } of excerpts) for (const line of lines.slice(0, 5)) out.push(`[${where}] ${line}`);
    out.push('```');
  }
  out.push('');
  return out.join('\n');
}

// ---- main -------------------------------------------------------------------------------

async function main(): Promise<void> {
  const timeout = setTimeout(() => void abort(`still running after ${overallTimeoutMs / 1000} s`, 2), overallTimeoutMs);
  settings.redisUrl = await benchRedisUrl('BENCH_IMAGE_REDIS_URL', redisDb);
  const redis = new Redis(settings.redisUrl, { maxRetriesPerRequest: 3 });
  // A private redis-server dies with this process: nothing to flush on the way out.
  if (process.env.BENCH_IMAGE_REDIS_URL) redisForCleanup = redis;
  mkdirSync(logDir, { recursive: true });
  blobRoot = mkdtempSync(join(tmpdir(), 'switchyard-bench-images-'));
  let failed = false;
  try {
    if (!(await flushOwnDb(redis, 'start', 30_000))) {
      throw new Error(
        `db ${redisDb} of ${settings.redisUrl} is in use by another client (a test run?); set ` +
          `BENCH_IMAGE_REDIS_URL to a free database or wait`,
      );
    }
    const machine = await machineFacts(redis);
    log(
      `machine: ${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, Redis ${machine.redis}; db ` +
        `${redisDb} flushed`,
    );
    const fake = track(
      await startFakeImages({ latencyMs: settings.latencyMs, cap: settings.cap, imageBytes: settings.imageBytes }),
    );
    const png = await fakeImage(fake);
    settings.imageBytes = png.length;
    log(
      `fake vendor at ${fake.url}: ${settings.latencyMs} ms per image, ${(png.length / MiB).toFixed(2)} MiB PNG, ` +
        `429 beyond ${settings.cap} in flight`,
    );

    const results: ConfigResult[] = [];
    for (const config of configs) results.push(await runConfig(config, fake, redis, png));
    await fake.child.stop('SIGTERM', 5000);

    const runs = results.flatMap((r) => r.runs);
    failed = runs.some((run) => checksOf(run, settings).some((c) => !c.pass));
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(
      join(resultsDir, 'images.json'),
      `${JSON.stringify({ settings, machine, command, configs: results, checks: runs.map((run) => ({ config: run.config, format: run.format, checks: checksOf(run, settings) })) }, null, 2)}\n`,
    );
    const md = markdown(machine, results);
    writeFileSync(join(root, 'bench', 'results', 'images.md'), md);
    process.stdout.write(`\n${resultsTable(runs)}\n\n${checksTable(runs, settings)}\n\n${detailsTable(runs)}\n\n`);
    for (const line of reading(results)) process.stdout.write(`- ${line}\n`);
    process.stdout.write(
      `\n${failed ? 'FAIL' : 'PASS'}: wrote bench/results/images.json and bench/results/images.md\n`,
    );
  } finally {
    clearTimeout(timeout);
    killChildren();
    await flushOwnDb(redis, 'end', 10_000).catch(() => false);
    redis.disconnect();
    if (blobRoot) rmSync(blobRoot, { recursive: true, force: true });
    blobRoot = undefined;
  }
  process.exitCode = failed ? 1 : 0;
}

main().catch(async (error: Error) => {
  if (aborting) return;
  process.stderr.write(`bench/images: ${error.stack ?? error.message}\n`);
  await abort('the run failed', 2);
});
