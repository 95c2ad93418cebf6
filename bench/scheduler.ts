/**
 * The scheduler section of `npm run bench` (`BENCH_ONLY=scheduler`): the queue as a scheduler, with fake
 * vendors that take real time, each scenario against a freshly started gateway (`node dist/bin/start.js`
 * as `npm start` runs it: no worker settings, the point is the defaults) on an emptied Redis database and
 * an empty record. Accounts, keys, credits and weights go through the admin API.
 *
 *   latency  a fake OpenAI answering after 1 s, no cap: direct (the fake), the gateway and Portkey's
 *            gateway (`@portkey-ai/gateway`, pointed at the fake with `x-portkey-provider` and
 *            `x-portkey-custom-host`), each at 500 and 2,000 connections (closed loop: every connection
 *            sends its next request when the last one answers) for a fixed time after a warm-up:
 *            req/s, p50/p99, errors, ratios, the gateway's RSS (api + worker) at peak and per 1,000
 *            calls in flight, Redis commands per request
 *   noisy    a fake OpenAI capped at 20 in flight (429 above; `OPENAI_MAX_CONCURRENCY=20`) answering in
 *            200 ms and a fake Anthropic answering in 200 ms with no cap. Account A floods 1,200 at once
 *            over 4 keys; B (OpenAI model) and C (Anthropic model) send 4 requests a second during the
 *            flood, and alone before it: their p50/p95 both ways, A's drain time against the vendor's
 *            capacity time (1,200 × 0.2 s / 20)
 *   shares   the capped OpenAI; two accounts flood 500 each at once, X over 6 keys (its requests sent
 *            first, in the same tick), Y over 1: each one's share of the first half of completions; then
 *            Y at weight 3 (`PATCH /admin/accounts/:id {weight: 3}`): the shares while both are backlogged
 *   tiers    the capped OpenAI; a flex flood and a default flood (500 each, flex sent first) started
 *            together: median completion time of each; a third account sends `priority` requests 4 a
 *            second during both floods, and alone before them
 *   room     the waiting-room attack: the capped OpenAI (20, 200 ms) and the uncapped Anthropic, as in
 *            noisy, with a small QUEUE_MAX_WAITING_CHAT (200). F sends 5,000 plain requests (50 s of the
 *            vendor's capacity) in paced bursts (100 every 200 ms); Q (OpenAI) and R (Anthropic) send 4 a
 *            second alone, then during the flood: status codes per account (no 429 nor 503 to Q and R;
 *            F refused 429), Q's and R's p50/p95/p99 both ways, Q's added wait (p99 during − p50 alone),
 *            F's drain against the vendor's capacity time for the requests it got admitted, and this
 *            process's own event-loop delay (it sends F's bursts and times Q and R)
 *   priority the priority attack: OpenAI capped at 4 (200 ms). P, granted priority (`PATCH
 *            /admin/accounts/:id {service_tiers}`; a build without the field answers 400: priority is then
 *            open to all), keeps 14 priority requests going for 20 s while D sends default 4 a second (and
 *            alone before): D's p95 both ways. Then H keeps 14 default requests going while G (granted
 *            priority) sends one priority request every 500 ms: G's wait behind nothing (its latency − the
 *            vendor's 200 ms)
 *   retry    the retry-against-own-limit attack: OpenAI capped at 4. X's key has rpm 120; 8 loops send
 *            X's requests, each retrying a 429 at once (so X always has requests in flight and hammers
 *            its limit); once X has spent its minute's burst, Y keeps 14 requests going for 20 s. Each
 *            one's share of the completions while both are backlogged, and Jain's fairness index of their
 *            throughput normalised by what each could get (X: its rpm, at most half; Y: the rest)
 *
 * BENCH_SCHED_BASELINE=<dir> (a checkout of an older commit, built: `node bin/build.mjs`) runs every selected
 * scenario against `node <dir>/dist/bin/start.js` too, just before this build's run of it ("before", "after"
 * rows in every table; the older build's bars are informational).
 *
 * Each phase reports the Redis commands per request (INFO commandstats delta, whole server, ÷ requests
 * answered in the phase). Settings: BENCH_SCHED_* (see schedulerSettings and docs/benchmarks.md).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import { resetRecordFor } from '../test/support/record.js';
import {
  commandStats,
  diffCommandStats,
  envInt,
  outcomes,
  RssSampler,
  summariseSorted,
  type CommandDelta,
  type LatencySummary,
} from './measure.js';
import { cpuTimeMs, root, rssBytes, sleep, waitUntil } from './procs.js';
import {
  discoverProcesses,
  fakeControl,
  log,
  model,
  plainBody,
  probe,
  startFake,
  startGateway,
  startPortkey,
  stopGateway,
  upstreamKey,
  type Fake,
  type Gateway,
  type Portkey,
} from './stack.js';
import { table, type Bar } from './table.js';

export type SchedulerScenario = 'latency' | 'noisy' | 'shares' | 'tiers' | 'room' | 'priority' | 'retry';
const allScenarios: SchedulerScenario[] = ['latency', 'noisy', 'shares', 'tiers', 'room', 'priority', 'retry'];
const defaultScenarios: SchedulerScenario[] = ['latency', 'noisy', 'shares', 'tiers'];

export interface SchedulerSettings {
  scenarios: SchedulerScenario[];
  /** latency: the fake's answer time. */
  latencyMs: number;
  /** latency: connections of each cell. */
  connections: number[];
  durationS: number;
  warmupS: number;
  /** noisy, shares, tiers: the OpenAI cap (gateway and fake) and the vendors' answer time. */
  cap: number;
  vendorMs: number;
  /** Requests a second of each trickling account (B, C, the priority one). */
  ratePerS: number;
  /** How long the trickling accounts send alone, before the floods. */
  aloneS: number;
  noisyFlood: number;
  shareFlood: number;
  tierFlood: number;
  /** room: QUEUE_MAX_WAITING_CHAT, F's requests, the bursts they go in and the time between bursts. */
  roomWaiting: number;
  roomFlood: number;
  roomBursts: number;
  roomBurstMs: number;
  /** priority, retry: the OpenAI cap (gateway and fake). */
  smallCap: number;
  /** priority, retry: requests the flooding account (P, H, Y) keeps going, and for how long (P, Y). */
  loops: number;
  floodS: number;
  /** priority: how long H's default flood lasts, G sending a priority request every `priorityGapMs`. */
  leadS: number;
  priorityGapMs: number;
  /** retry: X's key rpm, its retrying loops, and a pause after a 429 (0: at once). */
  retryRpm: number;
  retryLoops: number;
  retryDelayMs: number;
  /** An older build to run every selected scenario against too (a checkout with dist/ built). */
  baseline?: string;
}

function envList(name: string, fallback: string): string[] {
  return (process.env[name] || fallback)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** The section's settings from the environment (read when `npm run bench` starts, so a typo fails at once). */
export function schedulerSettings(): SchedulerSettings {
  // The attacks (room, priority, retry) run when named: the default run stays the four it was.
  const scenarios = envList('BENCH_SCHED_SCENARIOS', defaultScenarios.join(','));
  for (const s of scenarios)
    if (!allScenarios.includes(s as SchedulerScenario))
      throw new Error(`BENCH_SCHED_SCENARIOS: unknown scenario "${s}" (${allScenarios.join(', ')})`);
  const connections = envList('BENCH_SCHED_CONNECTIONS', '500,2000').map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > 20_000)
      throw new Error(`BENCH_SCHED_CONNECTIONS: "${s}" is not an integer in 1..20000`);
    return n;
  });
  return {
    scenarios: allScenarios.filter((s) => scenarios.includes(s)),
    latencyMs: envInt('BENCH_SCHED_LATENCY_MS', 1000, 1),
    connections,
    durationS: envInt('BENCH_SCHED_DURATION_S', 20, 1),
    warmupS: envInt('BENCH_SCHED_WARMUP_S', 5, 0),
    cap: envInt('BENCH_SCHED_CAP', 20, 1),
    vendorMs: envInt('BENCH_SCHED_VENDOR_MS', 200, 1),
    ratePerS: envInt('BENCH_SCHED_RATE', 4, 1),
    aloneS: envInt('BENCH_SCHED_ALONE_S', 10, 1),
    noisyFlood: envInt('BENCH_SCHED_NOISY_FLOOD', 1200, 1),
    shareFlood: envInt('BENCH_SCHED_SHARE_FLOOD', 500, 2),
    tierFlood: envInt('BENCH_SCHED_TIER_FLOOD', 500, 1),
    roomWaiting: envInt('BENCH_SCHED_ROOM_WAITING', 200, 1),
    roomFlood: envInt('BENCH_SCHED_ROOM_FLOOD', 5000, 1),
    roomBursts: envInt('BENCH_SCHED_ROOM_BURSTS', 50, 1),
    roomBurstMs: envInt('BENCH_SCHED_ROOM_BURST_MS', 200, 0),
    smallCap: envInt('BENCH_SCHED_SMALL_CAP', 4, 1),
    loops: envInt('BENCH_SCHED_LOOPS', 14, 1),
    floodS: envInt('BENCH_SCHED_FLOOD_S', 20, 1),
    leadS: envInt('BENCH_SCHED_LEAD_S', 15, 1),
    priorityGapMs: envInt('BENCH_SCHED_PRIORITY_GAP_MS', 500, 1),
    retryRpm: envInt('BENCH_SCHED_RETRY_RPM', 120, 1),
    retryLoops: envInt('BENCH_SCHED_RETRY_LOOPS', 8, 1),
    retryDelayMs: envInt('BENCH_SCHED_RETRY_DELAY_MS', 0, 0),
    ...baselineSetting(),
  };
}

/** BENCH_SCHED_BASELINE: a directory holding an older checkout whose dist/bin/start.js is built. */
function baselineSetting(): { baseline?: string } {
  const raw = process.env.BENCH_SCHED_BASELINE;
  if (!raw) return {};
  const dir = resolve(raw);
  if (!existsSync(join(dir, 'dist', 'bin', 'start.js'))) {
    throw new Error(
      `BENCH_SCHED_BASELINE: ${dir}/dist/bin/start.js does not exist (check the commit out there, \`npm ci\`, ` +
        `then \`node bin/build.mjs\`)`,
    );
  }
  if (!existsSync(join(dir, 'node_modules')))
    throw new Error(`BENCH_SCHED_BASELINE: ${dir} has no node_modules (run \`npm ci\` there)`);
  return { baseline: dir };
}

/**
 * Which build a run measured: its label in the tables, its checkout and commit (`+` when the checkout has uncommitted
 * changes).
 */
export interface BuildInfo {
  label: 'before' | 'after';
  dir: string;
  commit: string;
  /** Tracked files changed in the checkout when the run started (built into dist/ with the rest). */
  changed: string[];
}

function buildInfo(label: BuildInfo['label'], dir: string): BuildInfo {
  let commit = 'unknown';
  let changed: string[] = [];
  // Read only: no index refresh written behind the checkout's owner.
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', dir, ...args], { encoding: 'utf8', env: { ...process.env, GIT_OPTIONAL_LOCKS: '0' } });
  try {
    commit = git('rev-parse', '--short', 'HEAD').trim();
    changed = git('status', '--porcelain', '--untracked-files=no')
      .split('\n')
      .map((line) => line.slice(3).trim())
      .filter(Boolean);
    if (changed.length > 0) commit += '+';
  } catch {
    // not a git checkout: reported as unknown
  }
  return { label, dir, commit, changed };
}

// ---------------------------------------------------------------- results

/** Milliseconds. */
export type Spread = LatencySummary;

/** What one group of requests (an account in a phase) got. */
export interface GroupStats {
  sent: number;
  /** 2xx with a reply from the fake. */
  ok: number;
  failed: number;
  statusCodes: Record<string, number>;
  /** The first failure, to see why. */
  firstFailure?: string;
  /** Send to end of answer, 2xx only. */
  latency: Spread;
  /** From the phase's start (the flood's first request) to each 2xx answer. */
  completion: Spread;
  /** `service_tier` of the answers, as echoed. */
  tiers: Record<string, number>;
}

export interface RedisUse {
  /** Requests answered (any status) in the phase. */
  requests: number;
  commandsPerRequest: number;
  commandsPerSecond: number;
  /** Busiest first (by time), per request. */
  top: Array<{ command: string; perRequest: number }>;
}

export interface LoadCell {
  target: 'direct' | 'gateway' | 'portkey';
  connections: number;
  measuredS: number;
  ok: number;
  rps: number;
  latency: Spread;
  errors: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  /** The load generator's CPU in the measured window, % of one core. */
  loadgenCpuPct: number | null;
  /** Gateway only: RSS by process (bytes) before any load and at peak in the window. */
  rss?: {
    idle: Record<string, number | null>;
    peak: Record<string, number | null>;
    idleSum: number;
    peakSum: number;
    perThousandInFlight: number;
  };
  redis?: RedisUse;
}

export interface LatencyResults {
  cells: LoadCell[];
  processes: Record<string, number>;
  portkeyVersion: string;
  bars: Bar[];
}

export interface NoisyResults {
  alone: { B: GroupStats; C: GroupStats; redis: RedisUse };
  flood: { A: GroupStats; B: GroupStats; C: GroupStats; redis: RedisUse };
  /** From A's first request to its last answer. */
  drainMs: number;
  /** flood × vendor time ÷ cap. */
  capacityMs: number;
  vendor: { openaiMaxInFlight: number; openaiOverCap: number; anthropicMaxInFlight: number | null };
  bars: Bar[];
}

export interface ShareRun {
  weights: { X: number; Y: number };
  /** What PATCH /admin/accounts/:id answered for the weight (absent: no weight set). */
  weightAnswer?: string;
  X: GroupStats;
  Y: GroupStats;
  /** Share (%) of each account among the first half of all completions. */
  firstHalf: { X: number; Y: number };
  /**
   * While both were backlogged: completions up to the moment the account that finished first had at most
   * `cap` requests left (all of them possibly at the vendor, none waiting). Share (%) of each, and the span.
   */
  backlogged: { completions: number; ms: number; X: number; Y: number };
  /** Jain's fairness index of the backlogged completions, each divided by its account's weight (1: exactly fair). */
  jain: number;
  redis: RedisUse;
  vendor: { maxInFlight: number; overCap: number };
}

export interface SharesResults {
  equal: ShareRun;
  weighted: ShareRun;
  bars: Bar[];
}

export interface TiersResults {
  alone: { priority: GroupStats; redis: RedisUse };
  floods: { flex: GroupStats; default: GroupStats; priority: GroupStats; redis: RedisUse };
  /** Median completion of the default flood ÷ the flex flood's. */
  medianRatio: number;
  vendor: { maxInFlight: number; overCap: number };
  bars: Bar[];
}

export interface RoomResults {
  /** QUEUE_MAX_WAITING_CHAT. */
  waiting: number;
  alone: { Q: GroupStats; R: GroupStats; redis: RedisUse };
  flood: { F: GroupStats; Q: GroupStats; R: GroupStats; redis: RedisUse };
  /** p99 during the flood − p50 alone, ms. */
  addedWaitP99: { Q: number; R: number };
  /**
   * Q's wait before its call reached the vendor (`vendorWaits`), alone and during the flood, and p99 during − p50
   * alone.
   */
  qVendorWait: { alone: Spread; flood: Spread; addedP99: number; longest: Array<{ sentMs: number; waitMs: number }> };
  /** From F's first request to its last 2xx answer. */
  drainMs: number;
  /** F's 2xx × the vendor's time ÷ cap: the vendor's capacity time for what F got admitted. */
  capacityMs: number;
  /**
   * The same counting Q's calls (same vendor) answered before F's last: the vendor's capacity time for all it served
   * meanwhile.
   */
  capacityWithQMs: number;
  /**
   * The load generator's own event-loop delay (ms, p99 and max) in each phase: F's bursts are sent and answered on
   * the loop that times Q and R, so part of their latency during the flood is this process's, not the gateway's.
   */
  loadgenLag: { alone: { p99: number; max: number }; flood: { p99: number; max: number } };
  vendor: { openaiMaxInFlight: number; openaiOverCap: number; anthropicMaxInFlight: number | null };
  bars: Bar[];
}

export interface PriorityResults {
  cap: number;
  /** What PATCH /admin/accounts/:id {service_tiers: [priority, default, flex]} answered for P and G. */
  grants: { P: string; G: string };
  /** The build has no grant (the PATCH answered 400): any key may ask for priority. */
  openToAll: boolean;
  alone: { D: GroupStats; redis: RedisUse };
  flood: { P: GroupStats; D: GroupStats; redis: RedisUse };
  lead: { H: GroupStats; G: GroupStats; redis: RedisUse };
  /** G's latency − the vendor's time: its wait, behind nothing but the calls at the vendor. */
  /** G's wait before its call reached the vendor (`vendorWaits`). */
  gWait: Spread;
  /** G's latency − the vendor's time: the same wait plus whatever slowed the call itself. */
  gLatencyWait: Spread;
  vendor: { maxInFlight: number; overCap: number };
  bars: Bar[];
}

export interface RetryResults {
  cap: number;
  rpm: number;
  /** X alone until its first 429 (its minute's burst spent). */
  burst: { ms: number; ok: number };
  /** Both accounts over the whole contended phase. */
  X: GroupStats;
  Y: GroupStats;
  /** X's 429s in the contended phase (each retried). */
  xRefused: number;
  /**
   * While both were backlogged (from a second after Y's start to when both stopped sending): completions of each,
   * their shares (%), rates (/s), what each could get (X: its rpm, at most half of what was served; Y: the rest),
   * the normalised throughputs and Jain's index over them.
   */
  window: {
    ms: number;
    X: number;
    Y: number;
    shareX: number;
    shareY: number;
    rateX: number;
    rateY: number;
    couldX: number;
    couldY: number;
    x: number;
    y: number;
    jain: number;
  };
  redis: RedisUse;
  vendor: { maxInFlight: number; overCap: number };
  bars: Bar[];
}

/** What one build measured, scenario by scenario. */
export interface ScenarioResults {
  latency?: LatencyResults;
  noisy?: NoisyResults;
  shares?: SharesResults;
  tiers?: TiersResults;
  room?: RoomResults;
  priority?: PriorityResults;
  retry?: RetryResults;
}

/** The older build's figures (BENCH_SCHED_BASELINE), and the scenarios it could not run. */
export interface BaselineResults extends ScenarioResults {
  build: BuildInfo;
  errors?: Partial<Record<SchedulerScenario, string>>;
}

/** This build's figures at the top level (as before a baseline existed); the baseline's under `before`. */
export interface SchedulerResults extends ScenarioResults {
  settings: SchedulerSettings;
  build: BuildInfo;
  before?: BaselineResults;
  /** This build's bars, then the baseline's (informational, named `before: …`). */
  bars: Bar[];
}

// ---------------------------------------------------------------- instruments

const adminToken = 'bench-admin-token';
const anthropicModel = 'claude-haiku-4-5';

const spread = (values: number[]): Spread => summariseSorted(Float64Array.from(values).sort());

/** One answered (or failed) request; times in ms from the phase's start. */
interface Done {
  group: string;
  sentMs: number;
  doneMs: number;
  /** Marked requests (`Caller.send`'s `mark`): the id and the wall clock at the send, for `vendorWaits`. */
  mark?: string;
  sentWallMs?: number;
  status: number;
  ok: boolean;
  tier?: string;
  failure?: string;
}

function replyOf(text: string): { content?: string; tier?: string } {
  try {
    const body = JSON.parse(text) as { choices?: Array<{ message?: { content?: unknown } }>; service_tier?: unknown };
    const content = body.choices?.[0]?.message?.content;
    return {
      ...(typeof content === 'string' ? { content } : {}),
      ...(typeof body.service_tier === 'string' ? { tier: body.service_tier } : {}),
    };
  } catch {
    return {};
  }
}

/** Sends chat requests to the gateway, timed from `t0`, over a pool with no limit of connections. */
class Caller {
  readonly agent = new Agent({ keepAliveTimeout: 60_000, headersTimeout: 600_000, bodyTimeout: 600_000 });
  t0 = performance.now();
  private marks = 0;
  constructor(private readonly gatewayUrl: string) {}

  restart(): void {
    this.t0 = performance.now();
  }

  /** `mark`: the request carries `user: bench-mark:<n>`, so the fake notes when it arrives there (`vendorWaits`). */
  async send(group: string, key: string, body: Record<string, unknown>, mark = false): Promise<Done> {
    const marked = mark ? { mark: `${group}-${(this.marks += 1)}`, sentWallMs: Date.now() } : {};
    if (marked.mark) body = { ...body, user: `bench-mark:${marked.mark}` };
    const sentMs = performance.now() - this.t0;
    try {
      const response = await request(`${this.gatewayUrl}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: this.agent,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const text = await response.body.text();
      const doneMs = performance.now() - this.t0;
      const reply = replyOf(text);
      const ok =
        response.statusCode >= 200 &&
        response.statusCode < 300 &&
        typeof reply.content === 'string' &&
        reply.content.length > 0;
      return {
        group,
        sentMs,
        doneMs,
        ...marked,
        status: response.statusCode,
        ok,
        ...(reply.tier ? { tier: reply.tier } : {}),
        ...(ok ? {} : { failure: `${response.statusCode} ${text.slice(0, 300)}` }),
      };
    } catch (error) {
      return {
        group,
        sentMs,
        doneMs: performance.now() - this.t0,
        ...marked,
        status: 0,
        ok: false,
        failure: (error as Error).message,
      };
    }
  }

  close(): Promise<void> {
    return this.agent.close().catch(() => undefined);
  }
}

/**
 * The wait of each marked, answered request before its call reached the vendor (the fake's arrival − the send, on the
 * machine's one wall clock): the queue, the vendor's slot and the gateway's own path, without the call itself, which
 * a machine saturated by the flood also slows.
 */
async function vendorWaits(fake: Fake, done: Done[]): Promise<number[]> {
  return (await vendorWaitsAt(fake, done)).map(({ waitMs }) => waitMs);
}

/** The same, each with when it was sent (ms into its phase). */
async function vendorWaitsAt(fake: Fake, done: Done[]): Promise<Array<{ sentMs: number; waitMs: number }>> {
  const response = await fetch(`${fake.controlUrl}/__marks`, { signal: AbortSignal.timeout(5000) });
  const arrived = (await response.json()) as Record<string, number>;
  return done.flatMap((d) =>
    d.ok && d.mark && arrived[d.mark] !== undefined
      ? [{ sentMs: d.sentMs, waitMs: arrived[d.mark]! - d.sentWallMs! }]
      : [],
  );
}

/** `n` requests fired in one tick, the keys taken in turn. */
function flood(
  caller: Caller,
  group: string,
  keys: string[],
  n: number,
  body: Record<string, unknown>,
): Promise<Done[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => caller.send(group, keys[i % keys.length]!, body)));
}

/** Requests at a steady rate (one every 1/rate s from now, whatever the answers) while `more()` says so. */
function paced(ratePerS: number, more: () => boolean, fire: () => Promise<Done>): Promise<Done[]> {
  const started = performance.now();
  const sent: Array<Promise<Done>> = [];
  return new Promise((resolve) => {
    const tick = () => {
      if (!more()) {
        resolve(Promise.all(sent));
        return;
      }
      sent.push(fire());
      const next = started + (sent.length * 1000) / ratePerS;
      setTimeout(tick, Math.max(0, next - performance.now()));
    };
    tick();
  });
}

/**
 * `n` loops, each sending its next request as soon as its last is answered (a 429 included: retried at once, or
 * after `pauseAfter429Ms`), while `more()` says so. Every answer is pushed to `sink` as it comes.
 */
async function loops(
  n: number,
  more: () => boolean,
  fire: () => Promise<Done>,
  sink: Done[],
  pauseAfter429Ms = 0,
): Promise<Done[]> {
  const loop = async () => {
    while (more()) {
      const done = await fire();
      sink.push(done);
      // A refused connection must not become a busy loop.
      if (done.status === 0) await sleep(50);
      else if (done.status === 429 && pauseAfter429Ms > 0) await sleep(pauseAfter429Ms);
    }
  };
  await Promise.all(Array.from({ length: n }, loop));
  return sink;
}

/** `total` requests in `count` bursts `everyMs` apart (one burst: all at once), the keys taken in turn. */
async function bursts(
  caller: Caller,
  group: string,
  keys: string[],
  total: number,
  count: number,
  everyMs: number,
  body: Record<string, unknown>,
): Promise<Done[]> {
  const per = Math.ceil(total / Math.max(1, count));
  const started = performance.now();
  const sent: Array<Promise<Done>> = [];
  for (let i = 0; sent.length < total; i += 1) {
    const wait = started + i * everyMs - performance.now();
    if (wait > 0) await sleep(wait);
    const k = Math.min(per, total - sent.length);
    for (let j = 0; j < k; j += 1) sent.push(caller.send(group, keys[sent.length % keys.length]!, body));
  }
  return Promise.all(sent);
}

/** Runs `run` while sampling this process's event-loop delay; returns its value and the delay's p99 and max (ms). */
async function withLoopLag<T>(run: () => Promise<T>): Promise<{ value: T; lag: { p99: number; max: number } }> {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  try {
    const value = await run();
    return { value, lag: { p99: histogram.percentile(99) / 1e6, max: histogram.max / 1e6 } };
  } finally {
    histogram.disable();
  }
}

/**
 * Jain's fairness index of some throughputs (each already divided by what its account could get): 1 when all are equal.
 */
export function jainIndex(values: number[]): number {
  const sum = values.reduce((a, b) => a + b, 0);
  const squares = values.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? Number.NaN : (sum * sum) / (values.length * squares);
}

function groupStats(done: Done[], phaseStartMs = 0): GroupStats {
  const ok = done.filter((d) => d.ok);
  return {
    ...outcomes(done),
    latency: spread(ok.map((d) => d.doneMs - d.sentMs)),
    completion: spread(ok.map((d) => d.doneMs - phaseStartMs)),
  };
}

/** Runs `run` and reports what Redis executed meanwhile, per request answered (`requests` of its result). */
async function withRedis<T>(
  redis: Redis,
  run: () => Promise<T>,
  requests: (value: T) => number,
): Promise<{ value: T; redis: RedisUse }> {
  const before = await commandStats(redis);
  const started = performance.now();
  const value = await run();
  const seconds = (performance.now() - started) / 1000;
  return { value, redis: redisUse(diffCommandStats(before, await commandStats(redis)), requests(value), seconds) };
}

function redisUse(delta: CommandDelta[], requests: number, seconds: number): RedisUse {
  const calls = delta.reduce((sum, d) => sum + d.calls, 0);
  const per = Math.max(1, requests);
  return {
    requests,
    commandsPerRequest: calls / per,
    commandsPerSecond: calls / Math.max(0.001, seconds),
    top: delta.slice(0, 8).map((d) => ({ command: d.command, perRequest: d.calls / per })),
  };
}

// ---------------------------------------------------------------- the gateway, its accounts

interface Account {
  id: string;
  keys: string[];
}

async function adminCall(
  gateway: Gateway,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; text: string }> {
  const response = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, text: await response.text() };
}

async function adminOk(
  gateway: Gateway,
  method: string,
  path: string,
  body?: unknown,
): Promise<Record<string, unknown>> {
  const { status, text } = await adminCall(gateway, method, path, body);
  if (status < 200 || status >= 300) throw new Error(`admin ${method} ${path}: ${status} ${text}`);
  return JSON.parse(text) as Record<string, unknown>;
}

/** A member account with credit to spare and `keys` keys, of no limits unless `limits` (e.g. `{rpm: 120}`) says. */
async function makeAccount(
  gateway: Gateway,
  name: string,
  keys: number,
  limits: Record<string, unknown> = {},
): Promise<Account> {
  const account = await adminOk(gateway, 'POST', '/admin/accounts', {
    email: `bench-${name.toLowerCase()}@example.com`,
    name: `bench ${name}`,
  });
  const id = account.id as string;
  await adminOk(gateway, 'POST', `/admin/accounts/${id}/credits`, { amount_usd: 1_000_000, note: 'bench' });
  const made: string[] = [];
  for (let i = 1; i <= keys; i += 1)
    made.push(
      (await adminOk(gateway, 'POST', '/admin/keys', { name: `${name}-${i}`, account_id: id, ...limits }))
        .key as string,
    );
  return { id, keys: made };
}

/**
 * Grants an account every tier (`PATCH /admin/accounts/:id {service_tiers}`) and returns the answer's status
 * (with its text when refused): a build older than the grant answers 400, its priority being open to all.
 */
async function grantPriority(gateway: Gateway, account: Account): Promise<string> {
  const answer = await adminCall(gateway, 'PATCH', `/admin/accounts/${account.id}`, {
    service_tiers: ['priority', 'default', 'flex'],
  });
  return `${answer.status}${answer.status >= 300 ? ` ${answer.text.slice(0, 200)}` : ''}`;
}

/** An empty Redis database and record, then the build's `node dist/bin/start.js` with the admin API on. */
async function freshGateway(options: {
  build: BuildInfo;
  tag: string;
  fake: Fake;
  redis: Redis;
  redisUrl: string;
  env?: Record<string, string>;
}): Promise<Gateway> {
  await options.redis.flushdb();
  await resetRecordFor(options.redisUrl);
  const env = {
    ADMIN_TOKEN: adminToken,
    ...(process.env.BENCH_SCHED_LOG_LEVEL ? { LOG_LEVEL: process.env.BENCH_SCHED_LOG_LEVEL } : {}),
    ...options.env,
  };
  const logTag = `scheduler-${options.tag}${options.build.label === 'before' ? '-before' : ''}`;
  return startGateway('start', options.fake.url, options.redisUrl, undefined, {
    env,
    logTag,
    ...(options.build.label === 'after' ? {} : { buildDir: options.build.dir }),
  });
}

async function ready(gateway: Gateway, key: string): Promise<Record<string, number>> {
  await probe(gateway.url, key, Object.values(gateway.children));
  const pids = discoverProcesses(gateway);
  log(
    `  gateway ready: ${Object.entries(pids)
      .map(([n, pid]) => `${n} ${pid}`)
      .join(', ')}`,
  );
  return pids;
}

async function waitForIdleVendors(fake: Fake): Promise<void> {
  await waitUntil(
    'idle fake vendors',
    async () => {
      const stats = await fakeControl(fake, 'GET', '/__stats');
      return stats.openai!.inFlight === 0 && (stats.anthropic?.inFlight ?? 0) === 0;
    },
    120_000,
  );
  // The gateway's last releases (vendor slots, locks) after its last answers.
  await sleep(500);
}

const chat = (tier?: string, chatModel = model) => ({
  ...plainBody,
  model: chatModel,
  ...(tier ? { service_tier: tier } : {}),
});

/**
 * Unmeasured requests through each path a scenario takes and with every key it uses, so the measured phases
 * pay neither for JIT warm-up nor for a key's first lookup (which would let a warm key's flood arrive first).
 */
async function warmUp(
  caller: Caller,
  accounts: Account[],
  bodies: Array<Record<string, unknown>>,
  cap: number,
): Promise<void> {
  caller.restart();
  const keys = accounts.flatMap((a) => a.keys);
  const n = Math.max(cap * 2, keys.length);
  const done = (await Promise.all(bodies.map((body) => flood(caller, 'warm-up', keys, n, body)))).flat();
  const failed = done.filter((d) => !d.ok);
  if (failed.length > 0)
    throw new Error(`warm-up: ${failed.length} of ${done.length} failed, e.g. ${failed[0]!.failure}`);
}

// ---------------------------------------------------------------- 1. latency

interface LoopResult {
  ok: number;
  errors: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  latencies: number[];
  loadgenCpuPct: number | null;
}

/**
 * `connections` loops, each sending its next request when the last one answers, for `warmupMs + durationMs`;
 * only answers that arrive in the last `durationMs` count. `window` runs at the start and end of that window.
 */
async function closedLoop(o: {
  url: string;
  headers: Record<string, string>;
  body: string;
  connections: number;
  warmupMs: number;
  durationMs: number;
  window?: { start(): Promise<void> | void; end(): Promise<void> | void };
}): Promise<LoopResult> {
  const agent = new Agent({
    connections: o.connections,
    keepAliveTimeout: 60_000,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  const begun = performance.now();
  const windowStart = begun + o.warmupMs;
  const windowEnd = windowStart + o.durationMs;
  const result: LoopResult = { ok: 0, errors: 0, non2xx: 0, statusCodes: {}, latencies: [], loadgenCpuPct: null };
  let cpuAtStart: number | undefined;
  const hooks = (async () => {
    await sleep(o.warmupMs);
    cpuAtStart = cpuTimeMs(process.pid);
    await o.window?.start();
    await sleep(Math.max(0, windowEnd - performance.now()));
    const cpuAtEnd = cpuTimeMs(process.pid);
    if (cpuAtStart !== undefined && cpuAtEnd !== undefined)
      result.loadgenCpuPct = ((cpuAtEnd - cpuAtStart) / o.durationMs) * 100;
    await o.window?.end();
  })();
  const headers = { ...o.headers, 'content-type': 'application/json' };
  const loop = async () => {
    while (performance.now() < windowEnd) {
      const sent = performance.now();
      try {
        const response = await request(o.url, { method: 'POST', dispatcher: agent, headers, body: o.body });
        await response.body.text();
        const done = performance.now();
        if (done < windowStart || done > windowEnd) continue;
        const code = String(response.statusCode);
        result.statusCodes[code] = (result.statusCodes[code] ?? 0) + 1;
        if (response.statusCode >= 200 && response.statusCode < 300) {
          result.ok += 1;
          result.latencies.push(done - sent);
        } else {
          result.non2xx += 1;
        }
      } catch {
        const done = performance.now();
        if (done >= windowStart && done <= windowEnd) {
          result.errors += 1;
          result.statusCodes.error = (result.statusCodes.error ?? 0) + 1;
        }
        // A refused connection must not become a busy loop.
        await sleep(50);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: o.connections }, loop));
    await hooks;
  } finally {
    await agent.close().catch(() => undefined);
  }
  return result;
}

async function runLatency(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<LatencyResults> {
  const fake = await startFake({ latencyMs: settings.latencyMs });
  log(`scheduler/latency: fake OpenAI (pid ${fake.child.pid}) answering after ${settings.latencyMs} ms`);
  let gateway: Gateway | undefined;
  let portkey: Portkey | undefined;
  try {
    gateway = await freshGateway({ build, tag: 'latency', fake, redis, redisUrl });
    const account = await makeAccount(gateway, 'latency', 1);
    const pids = await ready(gateway, account.keys[0]!);
    // The older build of a side-by-side run: its gateway only (direct and Portkey are measured with this build's).
    const gatewayOnly = build.label === 'before';
    const targets: Partial<Record<LoadCell['target'], { url: string; headers: Record<string, string> }>> = {
      direct: { url: `${fake.url}/chat/completions`, headers: { authorization: `Bearer ${upstreamKey}` } },
      gateway: { url: `${gateway.url}/v1/chat/completions`, headers: { authorization: `Bearer ${account.keys[0]!}` } },
    };
    if (!gatewayOnly) {
      portkey = await startPortkey('scheduler-portkey');
      const portkeyHeaders = {
        'x-portkey-provider': 'openai',
        'x-portkey-custom-host': fake.url,
        authorization: `Bearer ${upstreamKey}`,
      };
      const probeDirect = await fetch(`${portkey.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...portkeyHeaders, 'content-type': 'application/json' },
        body: JSON.stringify(plainBody),
        signal: AbortSignal.timeout(settings.latencyMs + 10_000),
      });
      const probeText = await probeDirect.text();
      if (probeDirect.status !== 200 || replyOf(probeText).content !== FAKE_REPLY_TEXT)
        throw new Error(`Portkey probe: ${probeDirect.status} ${probeText.slice(0, 300)}`);
      log(`  Portkey ${portkey.version} (pid ${portkey.child.pid}) answers through the fake`);
      targets.portkey = { url: `${portkey.url}/v1/chat/completions`, headers: portkeyHeaders };
    }
    const idleRss = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, rssBytes(pid) ?? null]));

    const body = JSON.stringify(plainBody);
    const cells: LoadCell[] = [];
    for (const connections of settings.connections) {
      for (const target of gatewayOnly ? (['gateway'] as const) : (['direct', 'gateway', 'portkey'] as const)) {
        log(
          `scheduler/latency: ${target} at ${connections} connections (${settings.warmupS} s warm-up, ` +
            `${settings.durationS} s measured)`,
        );
        const isGateway = target === 'gateway';
        const sampler = new RssSampler(pids);
        let peak: Record<string, number | null> = {};
        let before = new Map() as Awaited<ReturnType<typeof commandStats>>;
        let delta: CommandDelta[] = [];
        const run = await closedLoop({
          ...targets[target]!,
          body,
          connections,
          warmupMs: settings.warmupS * 1000,
          durationMs: settings.durationS * 1000,
          ...(isGateway
            ? {
                window: {
                  start: async () => {
                    sampler.start();
                    before = await commandStats(redis);
                  },
                  end: async () => {
                    peak = sampler.stop();
                    delta = diffCommandStats(before, await commandStats(redis));
                  },
                },
              }
            : {}),
        });
        const cell: LoadCell = {
          target,
          connections,
          measuredS: settings.durationS,
          ok: run.ok,
          rps: run.ok / settings.durationS,
          latency: spread(run.latencies),
          errors: run.errors,
          non2xx: run.non2xx,
          statusCodes: run.statusCodes,
          loadgenCpuPct: run.loadgenCpuPct,
        };
        if (isGateway) {
          const idleSum = Object.values(idleRss).reduce<number>((s, v) => s + (v ?? 0), 0);
          const peakSum = Object.values(peak).reduce<number>((s, v) => s + (v ?? 0), 0);
          cell.rss = {
            idle: idleRss,
            peak,
            idleSum,
            peakSum,
            perThousandInFlight: ((peakSum - idleSum) * 1000) / connections,
          };
          cell.redis = redisUse(delta, run.ok + run.non2xx, settings.durationS);
        }
        log(
          `  ${Math.round(cell.rps)} req/s, p50 ${Math.round(cell.latency.p50)} ms, p99 ` +
            `${Math.round(cell.latency.p99)} ms, ${cell.errors} errors, ${cell.non2xx} non-2xx`,
        );
        cells.push(cell);
        if (isGateway) await waitForIdleVendors(fake);
      }
    }

    const bars: Bar[] = [];
    const at = (target: LoadCell['target'], connections: number) =>
      cells.find((c) => c.target === target && c.connections === connections);
    const first = settings.connections[0]!;
    const last = settings.connections[settings.connections.length - 1]!;
    const gwFirst = at('gateway', first);
    const directFirst = at('direct', first);
    if (gwFirst && directFirst) {
      bars.push({
        name: `latency: gateway ÷ direct at ${first}`,
        target: '≥ 0.90×',
        actual: `${(gwFirst.rps / directFirst.rps).toFixed(2)}×`,
        pass: gwFirst.rps >= 0.9 * directFirst.rps,
      });
    }
    const gwLast = at('gateway', last);
    const portkeyLast = at('portkey', last);
    if (gwLast && portkeyLast) {
      bars.push({
        name: `latency: gateway ÷ Portkey at ${last}`,
        target: '≥ 1.20×',
        actual: `${(gwLast.rps / portkeyLast.rps).toFixed(2)}×`,
        pass: gwLast.rps >= 1.2 * portkeyLast.rps,
      });
    }
    for (const c of cells.filter((x) => x.target === 'gateway')) {
      bars.push({
        name: `latency: gateway at ${c.connections}, no errors`,
        target: '0 errors, 0 non-2xx',
        actual: `${c.errors} errors, ${c.non2xx} non-2xx`,
        pass: c.errors === 0 && c.non2xx === 0,
      });
    }
    for (const c of cells.filter((x) => x.target === 'direct')) {
      const ideal = (c.connections * 1000) / settings.latencyMs;
      bars.push({
        name: `latency: the load generator keeps up (direct at ${c.connections})`,
        target: `≥ 0.90 × ${Math.round(ideal)} req/s`,
        actual: `${Math.round(c.rps)} req/s`,
        pass: c.rps >= 0.9 * ideal,
        informational: true,
      });
    }
    return {
      cells,
      processes: { ...pids, fake: fake.child.pid, ...(portkey ? { portkey: portkey.child.pid } : {}) },
      portkeyVersion: portkey?.version ?? '-',
      bars,
    };
  } finally {
    if (portkey) await portkey.child.stop();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 2. noisy neighbour

const capEnv = (cap: number) => ({ OPENAI_MAX_CONCURRENCY: String(cap) });

async function runNoisy(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<NoisyResults> {
  const { cap, vendorMs, ratePerS } = settings;
  const fake = await startFake({
    latencyMs: vendorMs,
    cap,
    vendors: ['openai', 'anthropic'],
    anthropicLatencyMs: vendorMs,
  });
  log(
    `scheduler/noisy: fake OpenAI (${vendorMs} ms, 429 beyond ${cap}) and Anthropic (${vendorMs} ms, no cap), ` +
      `pid ${fake.child.pid}`,
  );
  let gateway: Gateway | undefined;
  const caller = { current: undefined as Caller | undefined };
  try {
    gateway = await freshGateway({
      build,
      tag: 'noisy',
      fake,
      redis,
      redisUrl,
      env: { ...capEnv(cap), ANTHROPIC_API_KEY: 'sk-ant-bench', ANTHROPIC_BASE_URL: fake.anthropicUrl! },
    });
    const A = await makeAccount(gateway, 'A', 4);
    const B = await makeAccount(gateway, 'B', 1);
    const C = await makeAccount(gateway, 'C', 1);
    await ready(gateway, B.keys[0]!);
    caller.current = new Caller(gateway.url);
    const call = caller.current;
    await warmUp(call, [A, B, C], [chat(), chat(undefined, anthropicModel)], cap);
    await waitForIdleVendors(fake);

    log(`scheduler/noisy: B (OpenAI) and C (Anthropic) alone, ${ratePerS}/s each for ${settings.aloneS} s`);
    call.restart();
    const aloneUntil = performance.now() + settings.aloneS * 1000;
    const alone = await withRedis(
      redis,
      () =>
        Promise.all([
          paced(
            ratePerS,
            () => performance.now() < aloneUntil,
            () => call.send('B', B.keys[0]!, chat()),
          ),
          paced(
            ratePerS,
            () => performance.now() < aloneUntil,
            () => call.send('C', C.keys[0]!, chat(undefined, anthropicModel)),
          ),
        ]),
      ([b, c]) => b.length + c.length,
    );
    await waitForIdleVendors(fake);
    await fakeControl(fake, 'POST', '/__reset');

    log(
      `scheduler/noisy: A floods ${settings.noisyFlood} at once over ${A.keys.length} keys; B and C keep sending ` +
        `${ratePerS}/s`,
    );
    call.restart();
    const during = await withRedis(
      redis,
      async () => {
        let flooding = true;
        const a = flood(call, 'A', A.keys, settings.noisyFlood, chat()).then((done) => {
          flooding = false;
          return done;
        });
        const [b, c] = await Promise.all([
          paced(
            ratePerS,
            () => flooding,
            () => call.send('B', B.keys[0]!, chat()),
          ),
          paced(
            ratePerS,
            () => flooding,
            () => call.send('C', C.keys[0]!, chat(undefined, anthropicModel)),
          ),
        ]);
        return { a: await a, b, c };
      },
      ({ a, b, c }) => a.length + b.length + c.length,
    );
    const stats = await fakeControl(fake, 'GET', '/__stats');
    const { a, b, c } = during.value;
    const drainMs = Math.max(...a.map((d) => d.doneMs));
    const capacityMs = (settings.noisyFlood * vendorMs) / cap;
    const result: NoisyResults = {
      alone: { B: groupStats(alone.value[0]), C: groupStats(alone.value[1]), redis: alone.redis },
      flood: { A: groupStats(a), B: groupStats(b), C: groupStats(c), redis: during.redis },
      drainMs,
      capacityMs,
      vendor: {
        openaiMaxInFlight: stats.openai!.maxInFlight,
        openaiOverCap: stats.openai!.overCap ?? 0,
        anthropicMaxInFlight: stats.anthropic?.maxInFlight ?? null,
      },
      bars: [],
    };
    const f = result.flood;
    for (const name of ['B', 'C'] as const) {
      const aloneP95 = result.alone[name].latency.p95;
      const floodP95 = f[name].latency.p95;
      result.bars.push({
        name: `noisy: ${name} (${name === 'B' ? 'same vendor' : 'other vendor'}) p95 during the flood`,
        target: `≤ alone + 500 ms (${Math.round(aloneP95 + 500)} ms)`,
        actual: `${Math.round(floodP95)} ms`,
        pass: floodP95 <= aloneP95 + 500 && f[name].failed === 0,
      });
    }
    result.bars.push({
      name: `noisy: A's ${settings.noisyFlood} drain`,
      target: `≤ 1.1 × ${(capacityMs / 1000).toFixed(1)} s`,
      actual: `${(drainMs / 1000).toFixed(2)} s (${(drainMs / capacityMs).toFixed(2)}×)`,
      pass: drainMs <= 1.1 * capacityMs,
    });
    result.bars.push({
      name: 'noisy: every request answered, vendor cap kept',
      target: `0 failed, vendor ≤ ${cap}, 0 × 429 at vendor`,
      actual:
        `${f.A.failed + f.B.failed + f.C.failed} failed, vendor max ${result.vendor.openaiMaxInFlight}, ` +
        `${result.vendor.openaiOverCap} × 429`,
      pass: f.A.failed + f.B.failed + f.C.failed === 0 && result.vendor.openaiOverCap === 0,
    });
    log(
      `  drain ${(drainMs / 1000).toFixed(2)} s (capacity ${(capacityMs / 1000).toFixed(1)} s); B p95 ` +
        `${Math.round(f.B.latency.p95)} ms, C p95 ${Math.round(f.C.latency.p95)} ms`,
    );
    return result;
  } finally {
    await caller.current?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 3. shares

const pct = (part: number, whole: number) => (whole === 0 ? Number.NaN : (part / whole) * 100);

function shareRun(
  x: Done[],
  y: Done[],
  cap: number,
  weights: ShareRun['weights'],
  redis: RedisUse,
  vendor: ShareRun['vendor'],
  weightAnswer?: string,
): ShareRun {
  const all = [...x, ...y].filter((d) => d.ok).sort((p, q) => p.doneMs - q.doneMs);
  const half = all.slice(0, Math.floor((x.length + y.length) / 2));
  const countX = (list: Done[]) => list.filter((d) => d.group === 'X').length;
  // The account that finished first stops being backlogged when it has only `cap` requests left.
  const doneTimes = (list: Done[]) =>
    list
      .filter((d) => d.ok)
      .map((d) => d.doneMs)
      .sort((p, q) => p - q);
  const xs = doneTimes(x);
  const ys = doneTimes(y);
  const cutAt = (times: number[]) => times[Math.max(0, times.length - cap - 1)] ?? 0;
  const cut = Math.min(cutAt(xs), cutAt(ys));
  const window = all.filter((d) => d.doneMs <= cut);
  return {
    weights,
    ...(weightAnswer !== undefined ? { weightAnswer } : {}),
    X: groupStats(x),
    Y: groupStats(y),
    firstHalf: { X: pct(countX(half), half.length), Y: pct(half.length - countX(half), half.length) },
    backlogged: {
      completions: window.length,
      ms: cut,
      X: pct(countX(window), window.length),
      Y: pct(window.length - countX(window), window.length),
    },
    jain: jainIndex([countX(window) / weights.X, (window.length - countX(window)) / weights.Y]),
    redis,
    vendor,
  };
}

async function runShares(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<SharesResults> {
  const { cap, vendorMs } = settings;
  const n = settings.shareFlood;
  const fake = await startFake({ latencyMs: vendorMs, cap });
  log(`scheduler/shares: fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
  let gateway: Gateway | undefined;
  let call: Caller | undefined;
  try {
    gateway = await freshGateway({ build, tag: 'shares', fake, redis, redisUrl, env: capEnv(cap) });
    const X = await makeAccount(gateway, 'X', 6);
    const Y = await makeAccount(gateway, 'Y', 1);
    await ready(gateway, Y.keys[0]!);
    call = new Caller(gateway.url);
    await warmUp(call, [X, Y], [chat()], cap);

    const once = async (weights: ShareRun['weights'], weightAnswer?: string): Promise<ShareRun> => {
      await waitForIdleVendors(fake);
      await fakeControl(fake, 'POST', '/__reset');
      log(
        `scheduler/shares: X (${X.keys.length} keys, weight ${weights.X}) and Y (1 key, weight ${weights.Y}) ` +
          `flood ${n} each at once`,
      );
      call!.restart();
      const run = await withRedis(
        redis,
        // X's requests go out first, in the same tick: arrival order alone would serve X first.
        () => Promise.all([flood(call!, 'X', X.keys, n, chat()), flood(call!, 'Y', Y.keys, n, chat())]),
        ([x, y]) => x.length + y.length,
      );
      const stats = (await fakeControl(fake, 'GET', '/__stats')).openai!;
      const result = shareRun(
        run.value[0],
        run.value[1],
        cap,
        weights,
        run.redis,
        { maxInFlight: stats.maxInFlight, overCap: stats.overCap ?? 0 },
        weightAnswer,
      );
      log(
        `  first half X:Y ${result.firstHalf.X.toFixed(1)} : ${result.firstHalf.Y.toFixed(1)}, while both ` +
          `backlogged ${result.backlogged.X.toFixed(1)} : ${result.backlogged.Y.toFixed(1)}`,
      );
      return result;
    };

    const equal = await once({ X: 1, Y: 1 });
    const answer = await adminCall(gateway, 'PATCH', `/admin/accounts/${Y.id}`, { weight: 3 });
    const weightAnswer = `${answer.status}${answer.status >= 300 ? ` ${answer.text.slice(0, 200)}` : ''}`;
    if (answer.status >= 300) log(`  PATCH weight 3 refused: ${weightAnswer} (measuring anyway)`);
    // Key and account changes reach every api within a second.
    await sleep(1500);
    const weighted = await once({ X: 1, Y: 3 }, weightAnswer);

    const bars: Bar[] = [
      {
        name: `shares: ${n} + ${n}, X over 6 keys, Y over 1, equal weights`,
        target: 'first half 50:50 ± 5',
        actual: `${equal.firstHalf.X.toFixed(1)} : ${equal.firstHalf.Y.toFixed(1)}`,
        pass: Math.abs(equal.firstHalf.X - 50) <= 5,
      },
      {
        name: `shares: the same, Y at weight 3`,
        target: 'X:Y 25:75 ± 5 while both backlogged',
        actual: `${weighted.backlogged.X.toFixed(1)} : ${weighted.backlogged.Y.toFixed(1)}`,
        pass: Math.abs(weighted.backlogged.Y - 75) <= 5,
      },
      {
        name: `shares: Jain's index while both backlogged, equal weights (weighted: completions ÷ weight)`,
        target: '≥ 0.99',
        actual: `${equal.jain.toFixed(4)} (weights 1:3: ${weighted.jain.toFixed(4)})`,
        pass: equal.jain >= 0.99,
        informational: true,
      },
      {
        name: 'shares: every request answered, vendor cap kept',
        target: `0 failed, 0 × 429 at vendor`,
        actual:
          `${equal.X.failed + equal.Y.failed + weighted.X.failed + weighted.Y.failed} failed, ` +
          `${equal.vendor.overCap + weighted.vendor.overCap} × 429`,
        pass:
          equal.X.failed + equal.Y.failed + weighted.X.failed + weighted.Y.failed === 0 &&
          equal.vendor.overCap + weighted.vendor.overCap === 0,
      },
    ];
    return { equal, weighted, bars };
  } finally {
    await call?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 4. tiers

async function runTiers(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<TiersResults> {
  const { cap, vendorMs, ratePerS } = settings;
  const n = settings.tierFlood;
  const fake = await startFake({ latencyMs: vendorMs, cap });
  log(`scheduler/tiers: fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
  let gateway: Gateway | undefined;
  let call: Caller | undefined;
  try {
    gateway = await freshGateway({ build, tag: 'tiers', fake, redis, redisUrl, env: capEnv(cap) });
    const F = await makeAccount(gateway, 'F', 1);
    const D = await makeAccount(gateway, 'D', 1);
    const P = await makeAccount(gateway, 'P', 1);
    await ready(gateway, P.keys[0]!);
    call = new Caller(gateway.url);
    await warmUp(call, [F, D, P], [chat('flex'), chat('default'), chat('priority')], cap);
    await waitForIdleVendors(fake);

    log(`scheduler/tiers: priority alone, ${ratePerS}/s for ${settings.aloneS} s`);
    call.restart();
    const until = performance.now() + settings.aloneS * 1000;
    const alone = await withRedis(
      redis,
      () =>
        paced(
          ratePerS,
          () => performance.now() < until,
          () => call!.send('priority', P.keys[0]!, chat('priority')),
        ),
      (p) => p.length,
    );
    await waitForIdleVendors(fake);
    await fakeControl(fake, 'POST', '/__reset');

    log(`scheduler/tiers: flex and default floods of ${n} at once (flex sent first), priority ${ratePerS}/s meanwhile`);
    call.restart();
    const floods = await withRedis(
      redis,
      async () => {
        let flooding = true;
        const both = Promise.all([
          flood(call!, 'flex', F.keys, n, chat('flex')),
          flood(call!, 'default', D.keys, n, chat('default')),
        ]).then((done) => {
          flooding = false;
          return done;
        });
        const priority = await paced(
          ratePerS,
          () => flooding,
          () => call!.send('priority', P.keys[0]!, chat('priority')),
        );
        const [flex, standard] = await both;
        return { flex, standard, priority };
      },
      ({ flex, standard, priority }) => flex.length + standard.length + priority.length,
    );
    const stats = (await fakeControl(fake, 'GET', '/__stats')).openai!;
    const flex = groupStats(floods.value.flex);
    const standard = groupStats(floods.value.standard);
    const priority = groupStats(floods.value.priority);
    const aloneStats = groupStats(alone.value);
    const medianRatio = standard.completion.p50 / flex.completion.p50;
    const failed = flex.failed + standard.failed + priority.failed;
    const bars: Bar[] = [
      {
        name: `tiers: default flood's median completion ÷ flex flood's`,
        target: '< 0.67',
        actual:
          `${medianRatio.toFixed(2)} (${(standard.completion.p50 / 1000).toFixed(2)} s ÷ ` +
          `${(flex.completion.p50 / 1000).toFixed(2)} s)`,
        pass: medianRatio < 0.67,
      },
      {
        name: 'tiers: priority p95 during both floods',
        target: `≤ alone + 500 ms (${Math.round(aloneStats.latency.p95 + 500)} ms)`,
        actual: `${Math.round(priority.latency.p95)} ms`,
        pass: priority.latency.p95 <= aloneStats.latency.p95 + 500 && priority.failed === 0,
      },
      {
        name: 'tiers: every request answered, vendor cap kept',
        target: '0 failed, 0 × 429 at vendor',
        actual: `${failed} failed, ${stats.overCap ?? 0} × 429`,
        pass: failed === 0 && (stats.overCap ?? 0) === 0,
      },
    ];
    log(
      `  median completion default ${Math.round(standard.completion.p50)} ms, flex ` +
        `${Math.round(flex.completion.p50)} ms; priority p95 ${Math.round(priority.latency.p95)} ms`,
    );
    return {
      alone: { priority: aloneStats, redis: alone.redis },
      floods: { flex, default: standard, priority, redis: floods.redis },
      medianRatio,
      vendor: { maxInFlight: stats.maxInFlight, overCap: stats.overCap ?? 0 },
      bars,
    };
  } finally {
    await call?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 5. room (the waiting-room attack)

async function runRoom(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<RoomResults> {
  const { cap, vendorMs, ratePerS } = settings;
  const total = settings.roomFlood;
  const fake = await startFake({
    latencyMs: vendorMs,
    cap,
    vendors: ['openai', 'anthropic'],
    anthropicLatencyMs: vendorMs,
  });
  log(
    `scheduler/room (${build.label}): fake OpenAI (${vendorMs} ms, 429 beyond ${cap}) and Anthropic (${vendorMs} ` +
      `ms, no cap), pid ${fake.child.pid}`,
  );
  let gateway: Gateway | undefined;
  let caller: Caller | undefined;
  try {
    gateway = await freshGateway({
      build,
      tag: 'room',
      fake,
      redis,
      redisUrl,
      env: {
        ...capEnv(cap),
        QUEUE_MAX_WAITING_CHAT: String(settings.roomWaiting),
        ANTHROPIC_API_KEY: 'sk-ant-bench',
        ANTHROPIC_BASE_URL: fake.anthropicUrl!,
      },
    });
    const F = await makeAccount(gateway, 'F', 4);
    const Q = await makeAccount(gateway, 'Q', 1);
    const R = await makeAccount(gateway, 'R', 1);
    await ready(gateway, Q.keys[0]!);
    caller = new Caller(gateway.url);
    const call = caller;
    await warmUp(call, [F, Q, R], [chat(), chat(undefined, anthropicModel)], cap);
    await waitForIdleVendors(fake);

    log(`scheduler/room: Q (OpenAI) and R (Anthropic) alone, ${ratePerS}/s each for ${settings.aloneS} s`);
    call.restart();
    const aloneUntil = performance.now() + settings.aloneS * 1000;
    const { value: alone, lag: aloneLag } = await withLoopLag(() =>
      withRedis(
        redis,
        () =>
          Promise.all([
            paced(
              ratePerS,
              () => performance.now() < aloneUntil,
              () => call.send('Q', Q.keys[0]!, chat(), true),
            ),
            paced(
              ratePerS,
              () => performance.now() < aloneUntil,
              () => call.send('R', R.keys[0]!, chat(undefined, anthropicModel)),
            ),
          ]),
        ([q, r]) => q.length + r.length,
      ),
    );
    await waitForIdleVendors(fake);
    const qAloneWaits = await vendorWaits(fake, alone.value[0]);
    await fakeControl(fake, 'POST', '/__reset');

    log(
      `scheduler/room: F sends ${total} in ${settings.roomBursts} burst(s) ${settings.roomBurstMs} ms apart ` +
        `(QUEUE_MAX_WAITING_CHAT=${settings.roomWaiting}); ` +
        `Q and R keep sending ${ratePerS}/s until F's last answer`,
    );
    call.restart();
    const { value: during, lag: floodLag } = await withLoopLag(() =>
      withRedis(
        redis,
        async () => {
          let flooding = true;
          const f = bursts(call, 'F', F.keys, total, settings.roomBursts, settings.roomBurstMs, chat()).then((done) => {
            flooding = false;
            return done;
          });
          const [q, r] = await Promise.all([
            paced(
              ratePerS,
              () => flooding,
              () => call.send('Q', Q.keys[0]!, chat(), true),
            ),
            paced(
              ratePerS,
              () => flooding,
              () => call.send('R', R.keys[0]!, chat(undefined, anthropicModel)),
            ),
          ]);
          return { f: await f, q, r };
        },
        ({ f, q, r }) => f.length + q.length + r.length,
      ),
    );
    const stats = await fakeControl(fake, 'GET', '/__stats');
    const { f, q, r } = during.value;
    const qAloneWait = spread(qAloneWaits);
    const qFloodWaits = await vendorWaitsAt(fake, q);
    const qFloodWait = spread(qFloodWaits.map(({ waitMs }) => waitMs));
    const qLongest = [...qFloodWaits].sort((a, b) => b.waitMs - a.waitMs).slice(0, 3);
    const fOk = f.filter((d) => d.ok);
    const drainMs =
      fOk.length > 0 ? Math.max(...fOk.map((d) => d.doneMs)) - Math.min(...f.map((d) => d.sentMs)) : Number.NaN;
    const capacityMs = (fOk.length * vendorMs) / cap;
    const qMeanwhile = q.filter((d) => d.ok && d.doneMs <= drainMs).length;
    const result: RoomResults = {
      waiting: settings.roomWaiting,
      alone: { Q: groupStats(alone.value[0]), R: groupStats(alone.value[1]), redis: alone.redis },
      flood: { F: groupStats(f), Q: groupStats(q), R: groupStats(r), redis: during.redis },
      addedWaitP99: { Q: Number.NaN, R: Number.NaN },
      qVendorWait: {
        alone: qAloneWait,
        flood: qFloodWait,
        addedP99: qFloodWait.p99 - qAloneWait.p50,
        longest: qLongest,
      },
      drainMs,
      capacityMs,
      capacityWithQMs: ((fOk.length + qMeanwhile) * vendorMs) / cap,
      loadgenLag: { alone: aloneLag, flood: floodLag },
      vendor: {
        openaiMaxInFlight: stats.openai!.maxInFlight,
        openaiOverCap: stats.openai!.overCap ?? 0,
        anthropicMaxInFlight: stats.anthropic?.maxInFlight ?? null,
      },
      bars: [],
    };
    result.addedWaitP99 = {
      Q: result.flood.Q.latency.p99 - result.alone.Q.latency.p50,
      R: result.flood.R.latency.p99 - result.alone.R.latency.p50,
    };
    const fl = result.flood;
    const refusedQuiet = [result.alone.Q, result.alone.R, fl.Q, fl.R].reduce((sum, g) => sum + g.failed, 0);
    const quietCodes = (['Q', 'R'] as const).map((n) => `${n} ${codes(fl[n]) || 'all 2xx'}`).join(', ');
    const f429 = fl.F.statusCodes['429'] ?? 0;
    const f503 = fl.F.statusCodes['503'] ?? 0;
    result.bars.push(
      {
        name: `room: Q and R (quiet, same vendor / other vendor) during F's flood`,
        target: '0 × 429, 0 × 503, nothing failed',
        actual: `${refusedQuiet} failed (${quietCodes})`,
        pass: refusedQuiet === 0,
      },
      {
        name: `room: F (the flooder) refused 429, never 503`,
        target: '429s > 0, 0 × 503',
        actual: `${f429} × 429, ${f503} × 503, ${fl.F.ok} admitted`,
        pass: f429 > 0 && f503 === 0,
      },
      {
        // The wait before Q's call reached the vendor: the latency's p99 (below, in the log line) also holds the call
        // itself, which the flood's load on this machine slows for everyone, the vendor fake included.
        name: `room: Q's added wait p99 before its call reached the vendor (p99 during − p50 alone)`,
        target: '≤ 100 ms',
        actual:
          `${ms0(result.qVendorWait.addedP99)} ms (${ms0(result.qVendorWait.flood.p99)} − ` +
          `${ms0(result.qVendorWait.alone.p50)})`,
        pass: result.qVendorWait.addedP99 <= 100,
      },
      {
        // The vendor also served Q's calls on the same cap meanwhile: its capacity time is for all it served.
        name:
          `room: F's drain against the vendor's capacity time for what it served meanwhile (F's ${fl.F.ok} and Q's ` +
          `calls)`,
        target: `≤ 1.05 × ${(result.capacityWithQMs / 1000).toFixed(2)} s`,
        actual:
          `${(drainMs / 1000).toFixed(2)} s (${(drainMs / result.capacityWithQMs).toFixed(3)}×; F's alone ` +
          `${(drainMs / capacityMs).toFixed(3)}×)`,
        pass: drainMs <= 1.05 * result.capacityWithQMs,
      },
      {
        name: 'room: vendor cap kept',
        target: `vendor ≤ ${cap}, 0 × 429 at vendor`,
        actual: `vendor max ${result.vendor.openaiMaxInFlight}, ${result.vendor.openaiOverCap} × 429`,
        pass: result.vendor.openaiOverCap === 0,
      },
    );
    const slots = stats.openai?.slotUse;
    if (slots)
      log(
        `  OpenAI's slots: idle between an answer and the next call p50 ${slots.gapMs.p50.toFixed(1)} ms, p90 ` +
          `${slots.gapMs.p90.toFixed(1)}, p99 ${slots.gapMs.p99.toFixed(1)}, mean ${slots.gapMs.mean.toFixed(1)}; ` +
          `busy ${(100 * slots.utilisation).toFixed(1)} % of cap × span`,
      );
    log(
      `  Q's longest waits before the call during the flood: ${qLongest.map(({ sentMs, waitMs }) => `${ms0(waitMs)} ms (sent at +${ms0(sentMs)} ms)`).join(', ')}`,
    );
    log(
      `  F ${fl.F.ok} admitted, ${f429} × 429, ${f503} × 503; Q ${codes(fl.Q) || 'all 2xx'}, R ${codes(fl.R) || 'all 2xx'}; Q added wait p99 ${ms0(result.qVendorWait.addedP99)} ms before the call, ` +
        (`${ms0(result.addedWaitP99.Q)} ms end to end (R ${ms0(result.addedWaitP99.R)} ms); drain ` +
          `${(drainMs / 1000).toFixed(2)} s (${(drainMs / result.capacityWithQMs).toFixed(3)}× capacity, F's alone ` +
          `${(drainMs / capacityMs).toFixed(3)}×); load generator's loop delay p99 ${ms0(floodLag.p99)} ms, max ` +
          `${ms0(floodLag.max)} ms`),
    );
    return result;
  } finally {
    await caller?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 6. priority (the priority attack)

async function runPriority(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<PriorityResults> {
  const { vendorMs, ratePerS } = settings;
  const cap = settings.smallCap;
  const fake = await startFake({ latencyMs: vendorMs, cap });
  log(`scheduler/priority (${build.label}): fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
  let gateway: Gateway | undefined;
  let caller: Caller | undefined;
  try {
    gateway = await freshGateway({ build, tag: 'priority', fake, redis, redisUrl, env: capEnv(cap) });
    const P = await makeAccount(gateway, 'P', 1);
    const D = await makeAccount(gateway, 'D', 1);
    const G = await makeAccount(gateway, 'G', 1);
    const H = await makeAccount(gateway, 'H', 1);
    const grants = { P: await grantPriority(gateway, P), G: await grantPriority(gateway, G) };
    const openToAll = grants.P.startsWith('400');
    for (const [name, answer] of Object.entries(grants)) {
      if (!answer.startsWith('2') && !answer.startsWith('400'))
        throw new Error(`PATCH service_tiers of ${name}: ${answer}`);
    }
    log(
      openToAll
        ? '  PATCH {service_tiers} answered 400: this build has no grant, priority is open to all'
        : `  P and G granted priority (${grants.P}, ${grants.G})`,
    );
    // Key and account changes reach every api within a second.
    await sleep(1500);
    await ready(gateway, D.keys[0]!);
    caller = new Caller(gateway.url);
    const call = caller;
    await warmUp(call, [P, D, G, H], [chat('priority'), chat()], cap);
    await waitForIdleVendors(fake);

    log(`scheduler/priority: D (default) alone, ${ratePerS}/s for ${settings.aloneS} s`);
    call.restart();
    const aloneUntil = performance.now() + settings.aloneS * 1000;
    const alone = await withRedis(
      redis,
      () =>
        paced(
          ratePerS,
          () => performance.now() < aloneUntil,
          () => call.send('D', D.keys[0]!, chat()),
        ),
      (d) => d.length,
    );
    await waitForIdleVendors(fake);
    await fakeControl(fake, 'POST', '/__reset');

    log(
      `scheduler/priority: P keeps ${settings.loops} priority requests going for ${settings.floodS} s; D sends ` +
        `default ${ratePerS}/s meanwhile`,
    );
    call.restart();
    const flood = await withRedis(
      redis,
      async () => {
        const until = performance.now() + settings.floodS * 1000;
        const more = () => performance.now() < until;
        const [p, d] = await Promise.all([
          loops(settings.loops, more, () => call.send('P', P.keys[0]!, chat('priority')), []),
          paced(ratePerS, more, () => call.send('D', D.keys[0]!, chat())),
        ]);
        return { p, d };
      },
      ({ p, d }) => p.length + d.length,
    );
    await waitForIdleVendors(fake);

    const perS = 1000 / settings.priorityGapMs;
    log(
      `scheduler/priority: H keeps ${settings.loops} default requests going for ${settings.leadS} s; G sends a ` +
        `priority request every ${settings.priorityGapMs} ms`,
    );
    call.restart();
    const lead = await withRedis(
      redis,
      async () => {
        const until = performance.now() + settings.leadS * 1000;
        const more = () => performance.now() < until;
        const hSink: Done[] = [];
        const h = loops(settings.loops, more, () => call.send('H', H.keys[0]!, chat()), hSink);
        // G starts once H's backlog is there.
        await sleep(Math.min(1000, settings.leadS * 500));
        const g = await paced(perS, more, () => call.send('G', G.keys[0]!, chat('priority'), true));
        return { h: await h, g };
      },
      ({ h, g }) => h.length + g.length,
    );
    const stats = (await fakeControl(fake, 'GET', '/__stats')).openai!;
    const aloneD = groupStats(alone.value);
    const result: PriorityResults = {
      cap,
      grants,
      openToAll,
      alone: { D: aloneD, redis: alone.redis },
      flood: { P: groupStats(flood.value.p), D: groupStats(flood.value.d), redis: flood.redis },
      lead: { H: groupStats(lead.value.h), G: groupStats(lead.value.g), redis: lead.redis },
      gWait: spread(await vendorWaits(fake, lead.value.g)),
      gLatencyWait: spread(lead.value.g.filter((d) => d.ok).map((d) => d.doneMs - d.sentMs - vendorMs)),
      vendor: { maxInFlight: stats.maxInFlight, overCap: stats.overCap ?? 0 },
      bars: [],
    };
    const failed = [result.flood.P, result.flood.D, result.lead.H, result.lead.G, aloneD].reduce(
      (sum, g) => sum + g.failed,
      0,
    );
    result.bars.push(
      {
        name: `priority: D's default p95 while P floods priority${openToAll ? ' (priority open to all)' : ''}`,
        target: `≤ alone + 500 ms (${Math.round(aloneD.latency.p95 + 500)} ms)`,
        actual: `${ms0(result.flood.D.latency.p95)} ms (alone ${ms0(aloneD.latency.p95)} ms)`,
        pass: result.flood.D.latency.p95 <= aloneD.latency.p95 + 500 && result.flood.D.failed === 0,
      },
      {
        name:
          `priority: G's wait behind nothing (from its send to its call reaching the vendor) during H's default ` +
          `flood`,
        target: 'p95 ≤ 100 ms',
        actual: `p95 ${ms0(result.gWait.p95)} ms (p50 ${ms0(result.gWait.p50)}, max ${ms0(result.gWait.max)})`,
        pass: result.gWait.p95 <= 100 && result.lead.G.failed === 0,
      },
      {
        name: 'priority: every request answered, vendor cap kept',
        target: '0 failed, 0 × 429 at vendor',
        actual: `${failed} failed, ${result.vendor.overCap} × 429`,
        pass: failed === 0 && result.vendor.overCap === 0,
      },
    );
    log(
      `  D p95 alone ${ms0(aloneD.latency.p95)} ms, during P's flood ${ms0(result.flood.D.latency.p95)} ms; G's ` +
        `wait p95 ${ms0(result.gWait.p95)} ms before the call (latency − ${vendorMs} ms: p95 ` +
        `${ms0(result.gLatencyWait.p95)} ms)`,
    );
    return result;
  } finally {
    await caller?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- 7. retry (retrying against one's own limit)

async function runRetry(
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
  build: BuildInfo,
): Promise<RetryResults> {
  const { vendorMs } = settings;
  const cap = settings.smallCap;
  const rpm = settings.retryRpm;
  const fake = await startFake({ latencyMs: vendorMs, cap });
  log(`scheduler/retry (${build.label}): fake OpenAI (${vendorMs} ms, 429 beyond ${cap}), pid ${fake.child.pid}`);
  let gateway: Gateway | undefined;
  let caller: Caller | undefined;
  try {
    gateway = await freshGateway({ build, tag: 'retry', fake, redis, redisUrl, env: capEnv(cap) });
    const X = await makeAccount(gateway, 'X', 1, { rpm });
    const Y = await makeAccount(gateway, 'Y', 1);
    await ready(gateway, Y.keys[0]!);
    caller = new Caller(gateway.url);
    const call = caller;
    await warmUp(call, [X, Y], [chat()], cap);
    await waitForIdleVendors(fake);
    await fakeControl(fake, 'POST', '/__reset');

    log(
      `scheduler/retry: X (rpm ${rpm}) alone over ${settings.retryLoops} loops retrying every 429${settings.retryDelayMs ? ` after ${settings.retryDelayMs} ms` : ' at once'}, until its burst is spent`,
    );
    call.restart();
    const xSink: Done[] = [];
    let xUntil = Number.POSITIVE_INFINITY;
    const xLoops = loops(
      settings.retryLoops,
      () => performance.now() < xUntil,
      () => call.send('X', X.keys[0]!, chat()),
      xSink,
      settings.retryDelayMs,
    );
    const burstStarted = performance.now();
    try {
      await waitUntil(
        `X's first 429 (its rpm of ${rpm} spent)`,
        async () => xSink.some((d) => d.status === 429),
        120_000,
        Object.values(gateway.children),
      );
    } catch (error) {
      xUntil = 0;
      await xLoops;
      throw error;
    }
    const burst = { ms: performance.now() - burstStarted, ok: xSink.filter((d) => d.ok).length };

    log(
      `scheduler/retry: X spent its burst (${burst.ok} answered in ${(burst.ms / 1000).toFixed(1)} s); Y keeps ` +
        `${settings.loops} requests going for ${settings.floodS} s, X keeps retrying`,
    );
    const commandsBefore = await commandStats(redis);
    const phaseStarted = performance.now();
    const yStart = phaseStarted - call.t0;
    const until = phaseStarted + settings.floodS * 1000;
    xUntil = until;
    const ySink: Done[] = [];
    const yLoops = loops(
      settings.loops,
      () => performance.now() < until,
      () => call.send('Y', Y.keys[0]!, chat()),
      ySink,
    );
    await sleep(Math.max(0, until - performance.now()));
    const stopAt = performance.now() - call.t0;
    await Promise.all([xLoops, yLoops]);
    const phaseS = (performance.now() - phaseStarted) / 1000;
    const xPhase = xSink.filter((d) => d.doneMs >= yStart);
    const redisPhase = redisUse(
      diffCommandStats(commandsBefore, await commandStats(redis)),
      xPhase.length + ySink.length,
      phaseS,
    );
    const stats = (await fakeControl(fake, 'GET', '/__stats')).openai!;

    // Both backlogged: from a second after Y started (its backlog built) to when both stopped sending.
    const from = yStart + 1000;
    const inWindow = (list: Done[]) => list.filter((d) => d.ok && d.doneMs >= from && d.doneMs <= stopAt).length;
    const nX = inWindow(xSink);
    const nY = inWindow(ySink);
    const seconds = Math.max(0.001, (stopAt - from) / 1000);
    const rateX = nX / seconds;
    const rateY = nY / seconds;
    const couldX = Math.min(rpm / 60, (rateX + rateY) / 2);
    const couldY = rateX + rateY - couldX;
    const x = rateX / couldX;
    const y = rateY / couldY;
    const jain = jainIndex([x, y]);
    const X429 = xPhase.filter((d) => d.status === 429).length;
    const result: RetryResults = {
      cap,
      rpm,
      burst,
      X: groupStats(xPhase),
      Y: groupStats(ySink),
      xRefused: X429,
      window: {
        ms: stopAt - from,
        X: nX,
        Y: nY,
        shareX: pct(nX, nX + nY),
        shareY: pct(nY, nX + nY),
        rateX,
        rateY,
        couldX,
        couldY,
        x,
        y,
        jain,
      },
      redis: redisPhase,
      vendor: { maxInFlight: stats.maxInFlight, overCap: stats.overCap ?? 0 },
      bars: [],
    };
    result.bars.push(
      {
        name: `retry: Jain's index while both backlogged (X at rpm ${rpm} retrying its 429s at once, Y flooding)`,
        target: '≥ 0.99',
        actual:
          `${jain.toFixed(3)} (X ${rateX.toFixed(2)}/s of ${couldX.toFixed(2)}, Y ${rateY.toFixed(2)}/s of ` +
          `${couldY.toFixed(2)})`,
        pass: jain >= 0.99,
      },
      {
        name: 'retry: Y answered, vendor cap kept',
        target: '0 failed, 0 × 429 at vendor',
        actual: `${result.Y.failed} failed, ${result.vendor.overCap} × 429`,
        pass: result.Y.failed === 0 && result.vendor.overCap === 0,
      },
    );
    log(
      `  X ${nX} and Y ${nY} completions in ${(result.window.ms / 1000).toFixed(1)} s (X ${X429} × 429 retried); ` +
        `normalised ${x.toFixed(2)} / ${y.toFixed(2)}, Jain ${jain.toFixed(3)}`,
    );
    return result;
  } finally {
    await caller?.close();
    if (gateway) await stopGateway(gateway);
    await fake.child.stop();
  }
}

// ---------------------------------------------------------------- the section

/** Runs one scenario against one build, into that build's results. */
async function runScenario(
  scenario: SchedulerScenario,
  into: ScenarioResults,
  build: BuildInfo,
  settings: SchedulerSettings,
  redis: Redis,
  redisUrl: string,
): Promise<void> {
  switch (scenario) {
    case 'latency':
      into.latency = await runLatency(settings, redis, redisUrl, build);
      break;
    case 'noisy':
      into.noisy = await runNoisy(settings, redis, redisUrl, build);
      break;
    case 'shares':
      into.shares = await runShares(settings, redis, redisUrl, build);
      break;
    case 'tiers':
      into.tiers = await runTiers(settings, redis, redisUrl, build);
      break;
    case 'room':
      into.room = await runRoom(settings, redis, redisUrl, build);
      break;
    case 'priority':
      into.priority = await runPriority(settings, redis, redisUrl, build);
      break;
    case 'retry':
      into.retry = await runRetry(settings, redis, redisUrl, build);
      break;
  }
}

const barsOf = (r: ScenarioResults, scenarios: SchedulerScenario[]): Bar[] =>
  scenarios.flatMap((s) => r[s]?.bars ?? []);

export async function runScheduler(options: {
  settings: SchedulerSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<SchedulerResults> {
  const { settings, redis, redisUrl } = options;
  const build = buildInfo('after', root);
  const baseline = settings.baseline ? buildInfo('before', settings.baseline) : undefined;
  log(
    `scheduler: this build ${build.commit} (${build.dir})${baseline ? `, side by side with ${baseline.commit} (${baseline.dir})` : ''}`,
  );
  const after: ScenarioResults = {};
  const before: BaselineResults | undefined = baseline ? { build: baseline } : undefined;
  for (const scenario of settings.scenarios) {
    // The older build first, then this one: the same minute of the same machine for both.
    if (before) {
      try {
        await runScenario(scenario, before, baseline!, settings, redis, redisUrl);
      } catch (error) {
        // Reported, not fatal: an older build may lack what a scenario needs.
        const message = (error as Error).message.split('\n').slice(0, 3).join(' / ');
        log(`scheduler/${scenario} (before): failed: ${message}`);
        before.errors = { ...before.errors, [scenario]: message };
      }
    }
    await runScenario(scenario, after, build, settings, redis, redisUrl);
  }
  await redis.flushdb();
  const bars = [
    ...barsOf(after, settings.scenarios),
    ...(before
      ? barsOf(before, settings.scenarios).map((b) => ({ ...b, name: `before: ${b.name}`, informational: true }))
      : []),
  ];
  return { settings, build, ...after, ...(before ? { before } : {}), bars };
}

// ---------------------------------------------------------------- tables

const ms0 = (v: number) => (Number.isNaN(v) ? '-' : String(Math.round(v)));
const int = (v: number) => Math.round(v).toLocaleString('en-US');
const mib = (bytes: number | null | undefined) => (bytes == null ? '-' : (bytes / 1024 / 1024).toFixed(0));
const share = (v: number) => (Number.isNaN(v) ? '-' : v.toFixed(1));
const fixed = (v: number, digits: number) => (Number.isFinite(v) ? v.toFixed(digits) : '-');
const codes = (g: GroupStats) =>
  Object.entries(g.statusCodes)
    .filter(([c]) => c !== '200')
    .map(([c, k]) => `${c}×${k}`)
    .join(' ');
const tierList = (g: GroupStats) =>
  Object.entries(g.tiers)
    .map(([t, k]) => `${t} ${k}`)
    .join(', ');

function groupRow(phase: string, name: string, g: GroupStats, extra: string[] = []): string[] {
  return [
    phase,
    name,
    String(g.sent),
    String(g.ok),
    `${g.failed}${codes(g) ? ` (${codes(g)})` : ''}`,
    ms0(g.latency.p50),
    ms0(g.latency.p95),
    ms0(g.latency.p99),
    ms0(g.latency.max),
    ...extra,
  ];
}

const groupHeader = ['phase', 'account', 'sent', '2xx', 'failed', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms'];

function redisLine(label: string, r: RedisUse): string {
  return `${label}: ${r.commandsPerRequest.toFixed(1)} Redis commands per request (${int(r.commandsPerSecond)}/s over ${r.requests} requests; ${r.top
    .slice(0, 5)
    .map((t) => `${t.command} ${t.perRequest.toFixed(1)}`)
    .join(', ')})`;
}

export function renderScheduler(results: SchedulerResults): string {
  const { settings } = results;
  const before = results.before;
  const side = before !== undefined;
  /** A scenario's results by build: the older one first. */
  const runs = <K extends SchedulerScenario>(key: K): Array<[string, NonNullable<ScenarioResults[K]>]> => {
    const out: Array<[string, NonNullable<ScenarioResults[K]>]> = [];
    const old = before?.[key];
    if (old) out.push(['before', old as NonNullable<ScenarioResults[K]>]);
    const now = results[key];
    if (now) out.push([side ? 'after' : '', now as NonNullable<ScenarioResults[K]>]);
    return out;
  };
  const header = (h: string[]) => (side ? ['build', ...h] : h);
  const row = (label: string, cells: string[]) => (side ? [label, ...cells] : cells);
  const prefix = (label: string) => (label ? `${label}: ` : '');
  const out: string[] = [];
  out.push(
    `Scheduler: every scenario against a fresh \`node dist/bin/start.js\` (no worker settings) on an emptied ` +
      `Redis database and record`,
  );
  if (results.build) {
    const changes = (b: BuildInfo) =>
      b.changed.length > 0 ? ` with uncommitted changes to ${b.changed.join(', ')}` : '';
    out.push(`Build: ${side ? 'after = ' : ''}${results.build.commit} (${results.build.dir})${changes(results.build)}`);
    if (before)
      out.push(
        `before = ${before.build.commit} (${before.build.dir})${changes(before.build)}, run just before each ` +
          `scenario's after`,
      );
  }
  for (const [scenario, message] of Object.entries(before?.errors ?? {}))
    out.push(`before: ${scenario} could not run: ${message}`);
  const lat = results.latency;
  if (lat) {
    out.push('');
    out.push(
      `Latency: fake OpenAI answering after ${settings.latencyMs} ms, no cap; closed loop (undici), ` +
        `${settings.warmupS} s warm-up then ${settings.durationS} s measured per cell; ` +
        (`Portkey ${lat.portkeyVersion} headless, pointed at the fake with ` +
          `x-portkey-provider/x-portkey-custom-host; RSS of the gateway = api + worker, per 1,000 in flight = ` +
          `(peak − idle) × 1,000 ÷ connections`) +
        (before?.latency ? `; before: its gateway only, its ratios against this run's direct and Portkey` : ''),
    );
    const cellRow = (c: LoadCell, target: string) => {
      const direct = lat.cells.find((d) => d.target === 'direct' && d.connections === c.connections);
      const portkey = lat.cells.find((d) => d.target === 'portkey' && d.connections === c.connections);
      return [
        String(c.connections),
        target,
        int(c.rps),
        ms0(c.latency.p50),
        ms0(c.latency.p99),
        String(c.errors + c.non2xx),
        direct ? `${(c.rps / direct.rps).toFixed(2)}×` : '-',
        c.target === 'gateway' && portkey ? `${(c.rps / portkey.rps).toFixed(2)}×` : '',
        c.rss ? `${mib(c.rss.idleSum)} → ${mib(c.rss.peakSum)}` : '',
        c.rss ? mib(c.rss.perThousandInFlight) : '',
        c.redis ? c.redis.commandsPerRequest.toFixed(1) : '',
        c.loadgenCpuPct === null ? '-' : `${Math.round(c.loadgenCpuPct)}%`,
      ];
    };
    const rows: string[][] = [];
    for (const c of lat.cells) {
      if (c.target === 'gateway')
        for (const b of before?.latency?.cells.filter(
          (x) => x.target === 'gateway' && x.connections === c.connections,
        ) ?? [])
          rows.push(cellRow(b, 'gateway (before)'));
      rows.push(cellRow(c, c.target === 'gateway' && side ? 'gateway (after)' : c.target));
    }
    out.push(
      table(
        [
          'conns',
          'target',
          'req/s',
          'p50 ms',
          'p99 ms',
          'errors',
          '× direct',
          '× Portkey',
          'RSS MiB idle → peak',
          'MiB per 1,000',
          'Redis cmds/req',
          'loadgen CPU',
        ],
        rows,
      ),
    );
  }
  const noisyRuns = runs('noisy');
  if (noisyRuns.length > 0) {
    out.push('');
    out.push(
      `Noisy neighbour: OpenAI capped at ${settings.cap} (OPENAI_MAX_CONCURRENCY; the fake answers 429 above), ` +
        `${settings.vendorMs} ms; Anthropic ${settings.vendorMs} ms, no cap. ` +
        (`A floods ${settings.noisyFlood} at once over 4 keys; B (OpenAI) and C (Anthropic) send ` +
          `${settings.ratePerS}/s, alone for ${settings.aloneS} s, then during the flood`),
    );
    out.push(
      table(
        header(groupHeader),
        noisyRuns.flatMap(([label, noisy]) => [
          row(label, groupRow('alone', 'B (OpenAI)', noisy.alone.B)),
          row(label, groupRow('alone', 'C (Anthropic)', noisy.alone.C)),
          row(label, groupRow('flood', 'A (OpenAI, flood)', noisy.flood.A)),
          row(label, groupRow('flood', 'B (OpenAI)', noisy.flood.B)),
          row(label, groupRow('flood', 'C (Anthropic)', noisy.flood.C)),
        ]),
      ),
    );
    for (const [label, noisy] of noisyRuns) {
      out.push(
        `${prefix(label)}A drained in ${(noisy.drainMs / 1000).toFixed(2)} s against ` +
          `${(noisy.capacityMs / 1000).toFixed(1)} s of vendor capacity ` +
          `(${(noisy.drainMs / noisy.capacityMs).toFixed(2)}×); ` +
          `vendor max in flight OpenAI ${noisy.vendor.openaiMaxInFlight} (${noisy.vendor.openaiOverCap} × 429), Anthropic ${noisy.vendor.anthropicMaxInFlight ?? '-'}`,
      );
      out.push(redisLine(`${prefix(label)}alone`, noisy.alone.redis));
      out.push(redisLine(`${prefix(label)}flood`, noisy.flood.redis));
    }
  }
  const shareRuns = runs('shares');
  if (shareRuns.length > 0) {
    out.push('');
    out.push(
      `Shares: OpenAI capped at ${settings.cap}, ${settings.vendorMs} ms; X (6 keys) and Y (1 key) flood ` +
        `${settings.shareFlood} each at once, X's sent first. ` +
        (`Shares (%) of the first half of completions, and while both were backlogged (until the first to finish ` +
          `had ≤ ${settings.cap} left); `) +
        `Jain's index over the backlogged completions ÷ weight (1 = exactly fair)`,
    );
    out.push(
      table(
        header([
          'weights X:Y',
          'PATCH',
          'first half X : Y',
          'backlogged X : Y',
          'Jain',
          'backlogged completions',
          'backlogged s',
          'X drain s',
          'Y drain s',
          'failed',
          'vendor max (429s)',
          'Redis cmds/req',
        ]),
        shareRuns.flatMap(([label, shares]) =>
          [shares.equal, shares.weighted].map((r) =>
            row(label, [
              `${r.weights.X}:${r.weights.Y}`,
              r.weightAnswer ?? '-',
              `${share(r.firstHalf.X)} : ${share(r.firstHalf.Y)}`,
              `${share(r.backlogged.X)} : ${share(r.backlogged.Y)}`,
              fixed(r.jain ?? Number.NaN, 4),
              String(r.backlogged.completions),
              (r.backlogged.ms / 1000).toFixed(2),
              (r.X.completion.max / 1000).toFixed(2),
              (r.Y.completion.max / 1000).toFixed(2),
              String(r.X.failed + r.Y.failed),
              `${r.vendor.maxInFlight} (${r.vendor.overCap})`,
              r.redis.commandsPerRequest.toFixed(1),
            ]),
          ),
        ),
      ),
    );
  }
  const tierRuns = runs('tiers');
  if (tierRuns.length > 0) {
    out.push('');
    out.push(
      `Tiers: OpenAI capped at ${settings.cap}, ${settings.vendorMs} ms; a flex flood and a default flood of ` +
        `${settings.tierFlood} at once (flex sent first), ` +
        (`priority ${settings.ratePerS}/s from a third account, alone for ${settings.aloneS} s, then during both ` +
          `floods. Completion = from the floods' start to the answer`),
    );
    const completion = (g: GroupStats) => [ms0(g.completion.p50), ms0(g.completion.max), tierList(g)];
    out.push(
      table(
        header([...groupHeader, 'completion p50 ms', 'completion max ms', 'service_tier echoed']),
        tierRuns.flatMap(([label, tiers]) => [
          row(label, groupRow('alone', 'priority', tiers.alone.priority, ['', '', tierList(tiers.alone.priority)])),
          row(label, groupRow('floods', 'flex', tiers.floods.flex, completion(tiers.floods.flex))),
          row(label, groupRow('floods', 'default', tiers.floods.default, completion(tiers.floods.default))),
          row(label, groupRow('floods', 'priority', tiers.floods.priority, ['', '', tierList(tiers.floods.priority)])),
        ]),
      ),
    );
    for (const [label, tiers] of tierRuns) {
      out.push(
        `${prefix(label)}default ÷ flex median completion ${tiers.medianRatio.toFixed(2)}; vendor max in flight ` +
          `${tiers.vendor.maxInFlight} (${tiers.vendor.overCap} × 429)`,
      );
      out.push(redisLine(`${prefix(label)}alone`, tiers.alone.redis));
      out.push(redisLine(`${prefix(label)}floods`, tiers.floods.redis));
    }
  }
  const roomRuns = runs('room');
  if (roomRuns.length > 0) {
    out.push('');
    out.push(
      `Room (the waiting-room attack): OpenAI capped at ${settings.cap}, ${settings.vendorMs} ms; Anthropic ` +
        `${settings.vendorMs} ms, no cap; QUEUE_MAX_WAITING_CHAT=${settings.roomWaiting}. ` +
        (`F sends ${settings.roomFlood} plain requests over 4 keys in ${settings.roomBursts} burst(s) ` +
          `${settings.roomBurstMs} ms apart; Q (OpenAI) and R (Anthropic) send ${settings.ratePerS}/s, `) +
        `alone for ${settings.aloneS} s, then until F's last answer. failed = not 2xx, by status`,
    );
    out.push(
      table(
        header(groupHeader),
        roomRuns.flatMap(([label, room]) => [
          row(label, groupRow('alone', 'Q (OpenAI)', room.alone.Q)),
          row(label, groupRow('alone', 'R (Anthropic)', room.alone.R)),
          row(label, groupRow('flood', 'F (OpenAI, flood)', room.flood.F)),
          row(label, groupRow('flood', 'Q (OpenAI)', room.flood.Q)),
          row(label, groupRow('flood', 'R (Anthropic)', room.flood.R)),
        ]),
      ),
    );
    out.push(
      table(
        header([
          'F admitted',
          'F 429',
          'F 503',
          'F drain s',
          "capacity s (F's admitted)",
          'drain ÷ capacity',
          "counting Q's calls",
          'Q added wait before its call p99 ms',
          'Q added latency p99 ms',
          'R added latency p99 ms',
          'loadgen loop delay p99 / max ms (alone → flood)',
          'OpenAI max (429s)',
          'Redis cmds/req',
        ]),
        roomRuns.map(([label, room]) =>
          row(label, [
            String(room.flood.F.ok),
            String(room.flood.F.statusCodes['429'] ?? 0),
            String(room.flood.F.statusCodes['503'] ?? 0),
            (room.drainMs / 1000).toFixed(2),
            (room.capacityMs / 1000).toFixed(2),
            `${(room.drainMs / room.capacityMs).toFixed(3)}×`,
            `${(room.drainMs / room.capacityWithQMs).toFixed(3)}×`,
            ms0(room.qVendorWait?.addedP99 ?? Number.NaN),
            ms0(room.addedWaitP99.Q),
            ms0(room.addedWaitP99.R),
            room.loadgenLag
              ? `${ms0(room.loadgenLag.alone.p99)} / ${ms0(room.loadgenLag.alone.max)} → ` +
                `${ms0(room.loadgenLag.flood.p99)} / ${ms0(room.loadgenLag.flood.max)}`
              : '-',
            `${room.vendor.openaiMaxInFlight} (${room.vendor.openaiOverCap})`,
            room.flood.redis.commandsPerRequest.toFixed(1),
          ]),
        ),
      ),
    );
  }
  const priorityRuns = runs('priority');
  if (priorityRuns.length > 0) {
    out.push('');
    out.push(
      `Priority (the priority attack): OpenAI capped at ${settings.smallCap}, ${settings.vendorMs} ms. P and G ` +
        `granted priority (PATCH {service_tiers}; 400 = no such grant, priority open to all). ` +
        (`D sends default ${settings.ratePerS}/s alone for ${settings.aloneS} s, then while P keeps ` +
          `${settings.loops} priority requests going for ${settings.floodS} s; `) +
        (`then H keeps ${settings.loops} default requests going for ${settings.leadS} s while G sends a priority ` +
          `request every ${settings.priorityGapMs} ms. G's wait = its latency − ${settings.vendorMs} ms`),
    );
    out.push(
      table(
        header([...groupHeader, 'service_tier echoed']),
        priorityRuns.flatMap(([label, p]) => [
          row(label, groupRow('alone', 'D (default)', p.alone.D, [tierList(p.alone.D)])),
          row(label, groupRow('P floods', 'P (priority)', p.flood.P, [tierList(p.flood.P)])),
          row(label, groupRow('P floods', 'D (default)', p.flood.D, [tierList(p.flood.D)])),
          row(label, groupRow('H floods', 'H (default)', p.lead.H, [tierList(p.lead.H)])),
          row(label, groupRow('H floods', 'G (priority)', p.lead.G, [tierList(p.lead.G)])),
        ]),
      ),
    );
    out.push(
      table(
        header([
          'PATCH service_tiers',
          'D p95 alone ms',
          "D p95 in P's flood ms",
          'G wait before its call p50 ms',
          'p95 ms',
          'max ms',
          'G latency − vendor time p95 ms',
          'OpenAI max (429s)',
        ]),
        priorityRuns.map(([label, p]) =>
          row(label, [
            p.openToAll ? `${p.grants.P.slice(0, 3)} (priority open to all)` : p.grants.P,
            ms0(p.alone.D.latency.p95),
            ms0(p.flood.D.latency.p95),
            ms0(p.gWait.p50),
            ms0(p.gWait.p95),
            ms0(p.gWait.max),
            ms0(p.gLatencyWait.p95),
            `${p.vendor.maxInFlight} (${p.vendor.overCap})`,
          ]),
        ),
      ),
    );
  }
  const retryRuns = runs('retry');
  if (retryRuns.length > 0) {
    out.push('');
    out.push(
      `Retry (retrying against one's own limit): OpenAI capped at ${settings.smallCap}, ${settings.vendorMs} ms. ` +
        `X's key has rpm ${settings.retryRpm}; ${settings.retryLoops} loops send X's requests, ` +
        `each retrying a 429 ${settings.retryDelayMs ? `after ${settings.retryDelayMs} ms` : 'at once'}; once X has spent its burst, Y keeps ${settings.loops} requests going for ${settings.floodS} s. ` +
        (`Counted while both are backlogged (from 1 s after Y's start to the stop); what each could get: X its ` +
          `rpm (at most half of what was served), Y the rest; Jain over the two normalised throughputs`),
    );
    out.push(
      table(
        header([
          'X burst (2xx in s)',
          'X sent',
          'X 429',
          'window s',
          'X : Y completions',
          'X : Y %',
          'X /s (could)',
          'Y /s (could)',
          'normalised x / y',
          'Jain',
          'X p95 ms',
          'Y p95 ms',
          'Y failed',
          'OpenAI max (429s)',
          'Redis cmds/req',
        ]),
        retryRuns.map(([label, r]) =>
          row(label, [
            `${r.burst.ok} in ${(r.burst.ms / 1000).toFixed(1)}`,
            String(r.X.sent),
            String(r.xRefused),
            (r.window.ms / 1000).toFixed(1),
            `${r.window.X} : ${r.window.Y}`,
            `${share(r.window.shareX)} : ${share(r.window.shareY)}`,
            `${fixed(r.window.rateX, 2)} (${fixed(r.window.couldX, 2)})`,
            `${fixed(r.window.rateY, 2)} (${fixed(r.window.couldY, 2)})`,
            `${fixed(r.window.x, 2)} / ${fixed(r.window.y, 2)}`,
            fixed(r.window.jain, 3),
            ms0(r.X.latency.p95),
            ms0(r.Y.latency.p95),
            String(r.Y.failed),
            `${r.vendor.maxInFlight} (${r.vendor.overCap})`,
            r.redis.commandsPerRequest.toFixed(1),
          ]),
        ),
      ),
    );
  }
  return out.join('\n').trimEnd();
}
