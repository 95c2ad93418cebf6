/**
 * The cache section of `npm run bench` (`BENCH_ONLY=cache`): the response cache (shared/cache/,
 * api/cache/, workers/cached-job-end.ts) side by side with the paths it skips, in one run.
 *
 *   1. one connection   a zero-latency fake OpenAI; sequential chat completions, in rounds (the order
 *                       rotated by one each round): direct (the fake itself), the floor (the bare BullMQ
 *                       loop, bench/floor-process.ts), a default `start` without `Cache-Control` (plain),
 *                       the same body with `Cache-Control: max-age=600` once primed (hit: read from Redis,
 *                       never queued), a body that differs each request with `max-age=600` (miss: the
 *                       lookup, the lead's claim, the store and the lead's outcome are paid), and Portkey's
 *                       gateway (`@portkey-ai/gateway`, headless, pointed at the fake). p50/p99 and what
 *                       each adds over direct; Redis commands per request (INFO commandstats delta, whole
 *                       server, one target at a time) and CPU µs per request of each target's processes
 *   2. 64 connections   the same fake, autocannon (bench/measure.ts measureLoad, as the overhead section):
 *                       direct, floor, plain, hit, Portkey. Portkey's open-source build has no response cache
 *                       (its `cache` config is accepted, but the lookup is only wired in the hosted and
 *                       enterprise editions: every answer says `x-portkey-cache-status: DISABLED`, which part 3
 *                       checks), so it is measured without one, as the reference of a gateway that queues
 *                       nothing. A hit run is checked to have reached the fake not once (its in-flight peak)
 *   3. coalescing       a fake answering after BENCH_CACHE_LATENCY_MS (1,000 ms), its streams then paced as a
 *                       model writes them (BENCH_CACHE_PACE_TOKENS deltas, 50, one every BENCH_CACHE_PACE_MS,
 *                       20 ms), and a fresh `start` on it:
 *                       BENCH_CACHE_BURST (200) identical requests at once (`max-age=600`, a fresh body per
 *                       sitting), plain and streamed, against as many different ones; and the same 200
 *                       directly and through Portkey with its cache config. Vendor calls (the fake's
 *                       `GET /__stats`), p50/p99 time to the answer's end, for streams time to the first
 *                       content token, `Cache-Status` counts, Redis commands per request
 *   4. the miss's cost  from part 1: Redis commands per request of a miss against a plain request, command by
 *                       command, and the added µs (p50, mean) and gateway CPU µs at one connection
 *
 * Writes nothing itself: bench/run.ts writes bench/results/latest-cache.json and prints renderCache's tables.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import { Redis } from 'ioredis';
import { Agent, request, type Dispatcher } from 'undici';
import { KeyStore } from '../api/accounts/key-store.js';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import { resetRecordFor, testRecord } from '../test/support/record.js';
import {
  commandStats,
  diffCommandStats,
  envInt,
  measureLoad,
  redisProcessId,
  Samples,
  summarise,
  summariseSorted,
  type CommandDelta,
  type CommandStats,
  type LatencySummary,
} from './measure.js';
import { dbUrl, targetDbs } from './overhead.js';
import { cpuWindow, sleep, waitForQuiet, waitUntil } from './procs.js';
import {
  discoverProcesses,
  fakeControl,
  log,
  model,
  plainBody,
  probe,
  startFake,
  startFloor,
  startGateway,
  startPortkey,
  stopGateway,
  upstreamKey,
  type Fake,
  type Floor,
  type Gateway,
  type Portkey,
} from './stack.js';
import { table, type Bar } from './table.js';

export interface CacheSettings {
  /** Part 1: measured sequential requests per target, spread over `rounds`. */
  requests: number;
  /** Part 1: rounds; each measures every target once, the order rotated by one each round. */
  rounds: number;
  /** Part 1: unmeasured requests per target first. */
  warmup: number;
  /** Part 2: measured seconds per target at 64 connections. */
  durationS: number;
  /** Part 2: warm-up seconds before each. */
  warmupS: number;
  /** Part 3: requests at once per sitting. */
  burst: number;
  /** Part 3: the fake's answer time, ms. */
  latencyMs: number;
  /** Part 3: a stream's deltas after that wait, one every `paceMs`. */
  paceTokens: number;
  paceMs: number;
  /** Before each part, wait up to this long for a quiet second (ms; 0: do not check). */
  quietWaitMs: number;
}

export function cacheSettings(quietWaitMs: number): CacheSettings {
  return {
    requests: envInt('BENCH_CACHE_REQUESTS', 2000, 1),
    rounds: envInt('BENCH_CACHE_ROUNDS', 4, 1),
    warmup: 100,
    durationS: envInt('BENCH_CACHE_DURATION_S', 5, 1),
    warmupS: 1,
    burst: envInt('BENCH_CACHE_BURST', 200, 2),
    latencyMs: envInt('BENCH_CACHE_LATENCY_MS', 1000, 1),
    paceTokens: envInt('BENCH_CACHE_PACE_TOKENS', 50, 1),
    paceMs: envInt('BENCH_CACHE_PACE_MS', 20, 1),
    quietWaitMs,
  };
}

/** Part 1's targets. */
type OneTarget = 'direct' | 'floor' | 'plain' | 'hit' | 'miss' | 'portkey';

export interface OneConnectionRow {
  target: OneTarget;
  description: string;
  requests: number;
  failed: number;
  /** ms, every measured request of every round. */
  latency: LatencySummary;
  /** p50 of each round, ms. */
  p50ByRound: number[];
  /** Over direct's, ms. */
  addedP50: number;
  addedP99: number;
  /** `Cache-Status` values (ttl left out), `x-portkey-cache-status` for Portkey; `-`: none. */
  cacheStatus: Record<string, number>;
  /** INFO commandstats delta over its runs ÷ its requests (whole server; commands inside scripts count too). */
  redisCommandsPerRequest: number;
  /** Per command, ÷ its requests, busiest first. */
  redisCommands: Array<{ command: string; perRequest: number; usecPerRequest: number }>;
  /** CPU µs per request of its own processes (null: unreadable), and of Redis, the fake, the client, the rest. */
  cpuUsPerRequest: Record<string, number | null>;
  /** Its own processes' CPU µs per request, summed. */
  ownCpuUs: number | null;
  /**
   * CPU the rest of the machine (other tenants; also PostgreSQL, which the gateway writes to) used during its runs, %
   * of one core.
   */
  othersCorePct: number | null;
}

export interface LoadRow {
  target: 'direct' | 'floor' | 'plain' | 'hit' | 'portkey';
  description: string;
  connections: number;
  measuredS: number;
  ok: number;
  rps: number;
  latency: LatencySummary;
  errors: number;
  timeouts: number;
  non2xx: number;
  redisCommandsPerRequest: number;
  cpuUsPerRequest: Record<string, number | null>;
  ownCpuUs: number | null;
  /** CPU the rest of the machine used during the run, % of one core. */
  othersCorePct: number | null;
  /** hit: the fake's in-flight peak over the warm-up and the run (0: no request reached it). */
  vendorMaxInFlight?: number;
}

export interface Sitting {
  name: string;
  target: 'gateway' | 'direct' | 'portkey';
  identical: boolean;
  stream: boolean;
  requests: number;
  ok: number;
  failed: number;
  /** What failed, by reason, with counts. */
  failures: Record<string, number>;
  statusCodes: Record<string, number>;
  /** Calls the fake got in the sitting. */
  vendorCalls: number | null;
  vendorMaxInFlight: number;
  /** From the first send to the last answer's end, ms. */
  wallMs: number;
  /**
   * When the vendor calls reached the fake, ms after the first send (each request carries `user: bench-mark:<id>`,
   * one id for the whole sitting when identical: `user` is left out of the cache's hash): the first and the last.
   */
  vendorCallAtMs: { first: number; last: number } | null;
  /** Each request, from its send to its answer's end, ms. */
  latency: LatencySummary;
  /** Streams: from the send to the first `data:` line with content, ms. */
  ttft?: LatencySummary;
  cacheStatus: Record<string, number>;
  redisCommandsPerRequest: number;
  /** The machine's busy share (% of one core) in the second before, and whether it was under 25 %. */
  before: { quiet: boolean; busyPct: number | null };
}

export interface MissCost {
  /** Per command: calls per request of a plain request and of a miss (part 1), and the difference. */
  commands: Array<{ command: string; plain: number; miss: number; added: number }>;
  plainPerRequest: number;
  missPerRequest: number;
  /** ms: miss − plain. */
  addedP50Ms: number;
  addedMeanMs: number;
  /** µs of the gateway's processes (api + worker): miss − plain. */
  addedGatewayCpuUs: number | null;
  addedRedisCpuUs: number | null;
}

export interface CacheResults {
  settings: CacheSettings;
  processes: Record<string, Record<string, number>>;
  portkey: {
    version: string;
    /**
     * What its open-source build does with `"cache":{"mode":"simple"}`: the header it answers and the calls two
     * requests in a row made.
     */
    cacheCheck: { config: unknown; cacheStatus: Record<string, number>; vendorCallsForTwoInARow: number | null };
  };
  oneConnection: OneConnectionRow[];
  connections64: LoadRow[];
  coalescing: Sitting[];
  missCost: MissCost;
  bars: Bar[];
}

const cacheHeader = { 'cache-control': 'max-age=600' };

/** A `Cache-Status` value without its ttl (`Switchyard; hit; ttl=599` → `Switchyard; hit`), or `-`. */
function statusOf(headers: Record<string, string | string[] | undefined>, name: string): string {
  const raw = headers[name];
  const value = Array.isArray(raw) ? raw.join(', ') : raw;
  return value ? value.replace(/;\s*ttl=\d+/, '') : '-';
}

const count = (into: Record<string, number>, key: string, by = 1) => {
  into[key] = (into[key] ?? 0) + by;
};

const chatBody = (content: string, stream = false, user?: string) =>
  JSON.stringify({
    model,
    messages: [{ role: 'user', content }],
    ...(stream ? { stream: true } : {}),
    ...(user ? { user } : {}),
  });

// ---------------------------------------------------------------- Portkey

const portkeyHeaders = (fake: Fake) => ({
  'x-portkey-provider': 'openai',
  'x-portkey-custom-host': fake.url,
  authorization: `Bearer ${upstreamKey}`,
});

/**
 * Portkey's config with its simple cache asked for (the hosted and enterprise editions serve it; the open-source build
 * accepts it).
 */
const portkeyCacheConfig = (fake: Fake) => ({
  provider: 'openai',
  api_key: upstreamKey,
  custom_host: fake.url,
  cache: { mode: 'simple', max_age: 600 },
});

// ---------------------------------------------------------------- clients

interface Answer {
  status: number;
  text: string;
  cacheStatus: string;
  ms: number;
  ttftMs?: number;
}

/** One request, read to its end; for a stream, the time of the first `data:` line carrying content is noted. */
async function send(
  dispatcher: Dispatcher,
  url: string,
  headers: Record<string, string>,
  body: string,
  statusHeader: string,
  stream = false,
): Promise<Answer> {
  const sent = performance.now();
  const response = await request(url, {
    method: 'POST',
    dispatcher,
    headers: { 'content-type': 'application/json', ...headers },
    body,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  let text = '';
  let ttftMs: number | undefined;
  if (stream) {
    const decoder = new StringDecoder('utf8');
    // Lines not yet complete, until the first content token is seen.
    let pending = '';
    for await (const chunk of response.body) {
      const piece = decoder.write(chunk as Buffer);
      text += piece;
      if (ttftMs !== undefined) continue;
      pending += piece;
      let newline: number;
      while ((newline = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        if (line.startsWith('data:') && /"content":"[^"]/.test(line)) {
          ttftMs = performance.now() - sent;
          pending = '';
          break;
        }
      }
    }
    text += decoder.end();
  } else {
    text = await response.body.text();
  }
  return {
    status: response.statusCode,
    text,
    cacheStatus: statusOf(response.headers, statusHeader),
    ms: performance.now() - sent,
    ...(ttftMs === undefined ? {} : { ttftMs }),
  };
}

/** What a good answer is: the fake's reply, as a body or a stream that ends with `data: [DONE]`. */
function answerProblem(answer: Answer, stream: boolean): string | undefined {
  if (answer.status !== 200) return `HTTP ${answer.status}`;
  if (stream) {
    if (answer.ttftMs === undefined) return 'stream without a content token';
    if (!answer.text.trimEnd().endsWith('data: [DONE]')) return 'stream not ended by data: [DONE]';
    return undefined;
  }
  return answer.text.includes(FAKE_REPLY_TEXT) ? undefined : 'not the fake reply';
}

// ---------------------------------------------------------------- part 1

interface OneTargetDef {
  name: OneTarget;
  description: string;
  url: string;
  headers: Record<string, string>;
  body: (n: number) => string;
  statusHeader: string;
  /** Its own processes. */
  pids: Record<string, number>;
  dispatcher: Agent;
  /** Requests sent so far (a miss's body is numbered by it). */
  sent: number;
}

class OneAccumulator {
  readonly latencies = new Samples();
  readonly p50ByRound: number[] = [];
  readonly cacheStatus: Record<string, number> = {};
  requests = 0;
  failed = 0;
  /** Wall time of its measured runs, ms. */
  wallMs = 0;
  readonly commands = new Map<string, { calls: number; usec: number }>();
  readonly cpuMs = new Map<string, number | null>();

  addCommands(delta: CommandDelta[]): void {
    for (const d of delta) {
      const sum = this.commands.get(d.command) ?? { calls: 0, usec: 0 };
      sum.calls += d.calls;
      sum.usec += d.usec;
      this.commands.set(d.command, sum);
    }
  }

  addCpu(cpu: Record<string, number | null>): void {
    for (const [name, used] of Object.entries(cpu)) {
      const sum = this.cpuMs.has(name) ? this.cpuMs.get(name)! : 0;
      this.cpuMs.set(name, sum === null || used === null ? null : sum + used);
    }
  }
}

async function sequentialRun(t: OneTargetDef, n: number, acc?: OneAccumulator): Promise<void> {
  const round = new Samples();
  for (let i = 0; i < n; i += 1) {
    const body = t.body(t.sent++);
    let answer: Answer | undefined;
    try {
      answer = await send(t.dispatcher, t.url, t.headers, body, t.statusHeader);
    } catch {
      answer = undefined;
    }
    if (!acc) {
      if (!answer || answerProblem(answer, false))
        throw new Error(
          `${t.name}: warm-up request failed: ${answer ? `${answer.status} ${answer.text.slice(0, 200)}` : 'no answer'}`,
        );
      continue;
    }
    acc.requests += 1;
    if (!answer || answerProblem(answer, false)) {
      acc.failed += 1;
      continue;
    }
    count(acc.cacheStatus, answer.cacheStatus);
    acc.latencies.push(answer.ms);
    round.push(answer.ms);
  }
  if (acc) acc.p50ByRound.push(summarise(round).p50);
}

// ---------------------------------------------------------------- part 3

async function atOnce(o: {
  url: string;
  headers: Record<string, string>;
  bodies: string[];
  stream: boolean;
  statusHeader: string;
}): Promise<{ answers: Array<Answer | Error>; wallMs: number }> {
  // One connection per request: nothing waits in the client, only in the target.
  const agent = new Agent({
    connections: o.bodies.length,
    keepAliveTimeout: 30_000,
    headersTimeout: 120_000,
    bodyTimeout: 120_000,
  });
  const started = performance.now();
  try {
    const answers = await Promise.all(
      o.bodies.map((body) =>
        send(agent, o.url, o.headers, body, o.statusHeader, o.stream).catch((error: unknown) => error as Error),
      ),
    );
    return { answers, wallMs: performance.now() - started };
  } finally {
    await agent.close().catch(() => undefined);
  }
}

async function waitIdle(fake: Fake): Promise<void> {
  await waitUntil(
    'an idle fake vendor',
    async () => (await fakeControl(fake, 'GET', '/__stats')).openai!.inFlight === 0,
    60_000,
  );
}

// ---------------------------------------------------------------- the section

async function gatewayWithKey(
  fake: Fake,
  redisUrl: string,
  db: number,
  tag: string,
): Promise<{ gateway: Gateway; key: string; redis: Redis; pids: Record<string, number> }> {
  const url = dbUrl(redisUrl, db);
  const redis = new Redis(url, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  await resetRecordFor(url);
  // A credited account's key with a spending limit and rate limits far above the load (as the overhead section).
  const keyStore = new KeyStore(redis, await testRecord(redis));
  const account = await keyStore.accounts.create({
    email: `bench-${tag}-${randomBytes(4).toString('hex')}@example.com`,
    name: `bench ${tag}`,
  });
  await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
  const key = await keyStore.create(`bench-${tag}`, {
    accountId: account.id,
    limitMicros: 10 ** 12,
    rpm: 10 ** 8,
    tpm: 10 ** 9,
  });
  log(`cache: gateway ${tag} starting (Redis db ${db})`);
  const gateway = await startGateway('start', fake.url, url, process.env.BENCH_CPU_PROF || undefined, {
    env: { USAGE_BUFFER_RECORDS: '1000' },
    logTag: tag,
  });
  await probe(gateway.url, key.key, Object.values(gateway.children));
  const pids = discoverProcesses(gateway);
  log(
    `cache: gateway ${tag} ready, processes ${Object.entries(pids)
      .map(([n, pid]) => `${n} ${pid}`)
      .join(', ')}`,
  );
  return { gateway, key: key.key, redis, pids };
}

const ownCpu = (cpuUs: Record<string, number | null>, own: string[]) =>
  own.length === 0 ? null : own.some((n) => cpuUs[n] == null) ? null : own.reduce((sum, n) => sum + (cpuUs[n] ?? 0), 0);

export async function runCache(options: {
  settings: CacheSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<CacheResults> {
  const { settings, redis, redisUrl } = options;
  const [floorDb, gatewayDb, coalesceDb] = targetDbs(redisUrl, 3) as [number, number, number];
  const redisPid = await redisProcessId(redis);
  const nonce = randomBytes(6).toString('hex');
  const processes: Record<string, Record<string, number>> = {};
  const connections: Redis[] = [];
  let fake: Fake | undefined;
  let slowFake: Fake | undefined;
  let floor: Floor | undefined;
  let gateway: Gateway | undefined;
  let slowGateway: Gateway | undefined;
  let portkey: Portkey | undefined;
  const agents: Agent[] = [];
  try {
    fake = await startFake();
    log(`cache: zero-latency fake OpenAI at ${fake.url} (pid ${fake.child.pid})`);
    const floorRedis = new Redis(dbUrl(redisUrl, floorDb), { maxRetriesPerRequest: 3 });
    connections.push(floorRedis);
    await floorRedis.flushdb();
    floor = await startFloor(fake.url, dbUrl(redisUrl, floorDb));
    await probe(floor.url, 'sk-floor', [floor.child]);
    log(`cache: floor ready (Redis db ${floorDb}, pid ${floor.child.pid})`);
    const made = await gatewayWithKey(fake, redisUrl, gatewayDb, 'cache');
    gateway = made.gateway;
    connections.push(made.redis);
    portkey = await startPortkey('cache-portkey');
    log(`cache: Portkey ${portkey.version} (pid ${portkey.child.pid})`);
    processes.fake = { fake: fake.child.pid };
    processes.floor = { floor: floor.child.pid };
    processes.gateway = made.pids;
    processes.portkey = { portkey: portkey.child.pid };

    const gwHeaders = { authorization: `Bearer ${made.key}` };
    const plainJson = JSON.stringify(plainBody);
    const agent = () => {
      const a = new Agent({ connections: 1, keepAliveTimeout: 60_000 });
      agents.push(a);
      return a;
    };
    const defs: OneTargetDef[] = [
      {
        name: 'direct',
        description: 'the fake OpenAI, called directly',
        url: `${fake.url}/chat/completions`,
        headers: { authorization: `Bearer ${upstreamKey}` },
        body: () => plainJson,
        statusHeader: 'cache-status',
        pids: {},
        dispatcher: agent(),
        sent: 0,
      },
      {
        name: 'floor',
        description: 'bench/floor-process.ts: node:http → BullMQ → fake → PUBLISH, one process',
        url: `${floor.url}/v1/chat/completions`,
        headers: { authorization: 'Bearer sk-floor' },
        body: () => plainJson,
        statusHeader: 'cache-status',
        pids: { floor: floor.child.pid },
        dispatcher: agent(),
        sent: 0,
      },
      {
        name: 'plain',
        description: 'start, no Cache-Control (the cache neither read nor written)',
        url: `${gateway.url}/v1/chat/completions`,
        headers: gwHeaders,
        body: () => plainJson,
        statusHeader: 'cache-status',
        pids: made.pids,
        dispatcher: agent(),
        sent: 0,
      },
      {
        name: 'hit',
        description:
          'start, the same body with Cache-Control: max-age=600, primed once (read from Redis, never queued)',
        url: `${gateway.url}/v1/chat/completions`,
        headers: { ...gwHeaders, ...cacheHeader },
        body: () => plainJson,
        statusHeader: 'cache-status',
        pids: made.pids,
        dispatcher: agent(),
        sent: 0,
      },
      {
        name: 'miss',
        description:
          'start, a different body each request with Cache-Control: max-age=600 (lookup, lead claim, queue, ' +
          'store, lead outcome)',
        url: `${gateway.url}/v1/chat/completions`,
        headers: { ...gwHeaders, ...cacheHeader },
        body: (n) => chatBody(`Say hello. ${nonce} miss ${n}`),
        statusHeader: 'cache-status',
        pids: made.pids,
        dispatcher: agent(),
        sent: 0,
      },
      {
        name: 'portkey',
        description: `Portkey ${portkey.version} headless, no cache (its open-source build has none)`,
        url: `${portkey.url}/v1/chat/completions`,
        headers: portkeyHeaders(fake),
        body: () => plainJson,
        statusHeader: 'x-portkey-cache-status',
        pids: { portkey: portkey.child.pid },
        dispatcher: agent(),
        sent: 0,
      },
    ];

    // ---- 1. one connection
    const perRound = Math.max(1, Math.ceil(settings.requests / settings.rounds));
    log(
      `cache/1: one connection, ${settings.warmup} unmeasured then ${settings.rounds} × ${perRound} sequential ` +
        `requests per target`,
    );
    for (const t of defs) await sequentialRun(t, settings.warmup);
    const quiet1 = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
    if (!quiet1.quiet)
      log(`  the machine did not go quiet (${quiet1.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
    const acc = new Map(defs.map((t) => [t.name, new OneAccumulator()]));
    for (let round = 0; round < settings.rounds; round += 1) {
      const order = defs.map((_, i) => defs[(i + round) % defs.length]!);
      log(`cache/1: round ${round + 1}/${settings.rounds}: ${order.map((t) => t.name).join(', ')}`);
      for (const t of order) {
        const a = acc.get(t.name)!;
        const cpuPids: Record<string, number> = { ...t.pids, fake: fake.child.pid, client: process.pid };
        if (redisPid !== undefined) cpuPids.redis = redisPid;
        const before: CommandStats = await commandStats(redis);
        const spent = cpuWindow(cpuPids);
        const began = performance.now();
        await sequentialRun(t, perRound, a);
        a.wallMs += performance.now() - began;
        a.addCpu(spent());
        a.addCommands(diffCommandStats(before, await commandStats(redis)));
      }
    }
    const directP = summarise(acc.get('direct')!.latencies);
    const oneConnection: OneConnectionRow[] = defs.map((t) => {
      const a = acc.get(t.name)!;
      const latency = summarise(a.latencies);
      const per = Math.max(1, a.requests - a.failed);
      const cpuUs = Object.fromEntries([...a.cpuMs].map(([n, v]) => [n, v === null ? null : (v * 1000) / per]));
      const commands = [...a.commands]
        .map(([command, d]) => ({ command, perRequest: d.calls / per, usecPerRequest: d.usec / per }))
        .sort((x, y) => y.perRequest - x.perRequest);
      return {
        target: t.name,
        description: t.description,
        requests: a.requests,
        failed: a.failed,
        latency,
        p50ByRound: a.p50ByRound,
        addedP50: latency.p50 - directP.p50,
        addedP99: latency.p99 - directP.p99,
        cacheStatus: a.cacheStatus,
        redisCommandsPerRequest: commands.reduce((sum, c) => sum + c.perRequest, 0),
        redisCommands: commands,
        cpuUsPerRequest: cpuUs,
        ownCpuUs: ownCpu(cpuUs, Object.keys(t.pids)),
        othersCorePct: a.cpuMs.get('others') == null ? null : (a.cpuMs.get('others')! / Math.max(1, a.wallMs)) * 100,
      };
    });
    for (const row of oneConnection) {
      log(
        `  ${row.target}: p50 ${row.latency.p50.toFixed(3)} ms (+${row.addedP50.toFixed(3)}), p99 ` +
          `${row.latency.p99.toFixed(3)} ms, ${row.redisCommandsPerRequest.toFixed(1)} Redis cmds/req, ` +
          `${row.failed} failed, ${JSON.stringify(row.cacheStatus)}`,
      );
    }

    // ---- 4. what a miss costs over a plain request (from part 1)
    const plainRow = oneConnection.find((r) => r.target === 'plain')!;
    const missRow = oneConnection.find((r) => r.target === 'miss')!;
    const names = new Set([...plainRow.redisCommands, ...missRow.redisCommands].map((c) => c.command));
    const perReq = (row: OneConnectionRow, command: string) =>
      row.redisCommands.find((c) => c.command === command)?.perRequest ?? 0;
    const plainCpu = plainRow.ownCpuUs;
    const missCpu = missRow.ownCpuUs;
    const missCost: MissCost = {
      commands: [...names]
        .map((command) => ({
          command,
          plain: perReq(plainRow, command),
          miss: perReq(missRow, command),
          added: perReq(missRow, command) - perReq(plainRow, command),
        }))
        .filter((c) => Math.abs(c.added) >= 0.05 || c.miss >= 0.05)
        .sort((x, y) => y.added - x.added || y.miss - x.miss),
      plainPerRequest: plainRow.redisCommandsPerRequest,
      missPerRequest: missRow.redisCommandsPerRequest,
      addedP50Ms: missRow.latency.p50 - plainRow.latency.p50,
      addedMeanMs: missRow.latency.mean - plainRow.latency.mean,
      addedGatewayCpuUs: plainCpu !== null && missCpu !== null ? missCpu - plainCpu : null,
      addedRedisCpuUs:
        plainRow.cpuUsPerRequest.redis != null && missRow.cpuUsPerRequest.redis != null
          ? missRow.cpuUsPerRequest.redis - plainRow.cpuUsPerRequest.redis
          : null,
    };

    // ---- 2. 64 connections
    const quiet2 = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
    if (!quiet2.quiet)
      log(`  the machine did not go quiet (${quiet2.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
    const loadDefs = defs.filter((t): t is OneTargetDef & { name: LoadRow['target'] } => t.name !== 'miss');
    const connections64: LoadRow[] = [];
    for (const t of loadDefs) {
      log(`cache/2: ${t.name} at 64 connections (${settings.warmupS} s warm-up, ${settings.durationS} s measured)`);
      if (t.name === 'hit') await fakeControl(fake, 'POST', '/__reset');
      const r = await measureLoad({
        target: { url: t.url, headers: t.headers, body: plainJson },
        connections: 64,
        durationS: settings.durationS,
        warmupS: settings.warmupS,
        redis: t.name === 'floor' ? floorRedis : t.name === 'plain' || t.name === 'hit' ? made.redis : redis,
        pids: { ...t.pids, fake: fake.child.pid },
        settleMs: 500,
      });
      const per = Math.max(1, r.ok);
      const cpuUs = Object.fromEntries(
        Object.entries(r.cpuMs).map(([n, v]) => [n, v === null ? null : (v * 1000) / per]),
      );
      const row: LoadRow = {
        target: t.name,
        description: t.description,
        connections: 64,
        measuredS: r.durationS,
        ok: r.ok,
        rps: r.rps,
        latency: r.latency,
        errors: r.errors,
        timeouts: r.timeouts,
        non2xx: r.non2xx,
        redisCommandsPerRequest: r.redisCommands.reduce((sum, d) => sum + d.calls, 0) / per,
        cpuUsPerRequest: cpuUs,
        ownCpuUs: ownCpu(cpuUs, Object.keys(t.pids)),
        othersCorePct: r.cpuMs.others == null ? null : (r.cpuMs.others / (r.durationS * 1000)) * 100,
      };
      if (t.name === 'hit') {
        row.vendorMaxInFlight = (await fakeControl(fake, 'GET', '/__stats')).openai!.maxInFlight;
        const check = await send(t.dispatcher, t.url, t.headers, plainJson, 'cache-status');
        if (!check.cacheStatus.startsWith('Switchyard; hit'))
          log(`  WARNING: after the hit run a request was not a hit: ${check.cacheStatus}`);
      }
      connections64.push(row);
      log(
        `  ${Math.round(row.rps)} req/s, p50 ${row.latency.p50.toFixed(2)} ms, p99 ${row.latency.p99.toFixed(2)} ms, ${row.errors + row.timeouts + row.non2xx} failed${row.vendorMaxInFlight !== undefined ? `, vendor in-flight peak ${row.vendorMaxInFlight}` : ''}`,
      );
    }

    // ---- 3. coalescing, on a fake that takes real time and a fresh gateway
    await stopGateway(gateway);
    gateway = undefined;
    await floor.child.stop();
    floor = undefined;
    // Streams paced as a model writes them (after the same wait): a request following another's stream gets its
    // first token with that stream's, not at its end.
    slowFake = await startFake({
      latencyMs: settings.latencyMs,
      paceTokens: settings.paceTokens,
      paceMs: settings.paceMs,
    });
    log(
      `cache/3: fake OpenAI answering after ${settings.latencyMs} ms, streams ${settings.paceTokens} deltas one ` +
        `every ${settings.paceMs} ms (pid ${slowFake.child.pid})`,
    );
    const slow = await gatewayWithKey(slowFake, redisUrl, coalesceDb, 'cache-coalesce');
    slowGateway = slow.gateway;
    connections.push(slow.redis);
    processes.slowFake = { fake: slowFake.child.pid };
    processes.coalesceGateway = slow.pids;
    const slowUrl = `${slowGateway.url}/v1/chat/completions`;
    const slowHeaders = { authorization: `Bearer ${slow.key}`, ...cacheHeader };

    // Portkey's simple cache, asked for as its docs say: what its open-source build answers, and whether a repeat
    // reaches the vendor.
    const pkConfig = portkeyCacheConfig(slowFake);
    const pkHeaders = { 'x-portkey-config': JSON.stringify(pkConfig) };
    const pkUrl = `${portkey.url}/v1/chat/completions`;
    await waitIdle(slowFake);
    await fakeControl(slowFake, 'POST', '/__reset');
    const pkStatus: Record<string, number> = {};
    const pkAgent = agent();
    for (let i = 0; i < 2; i += 1) {
      const answer = await send(
        pkAgent,
        pkUrl,
        pkHeaders,
        chatBody(`Say hello. ${nonce} portkey repeat`),
        'x-portkey-cache-status',
      );
      const problem = answerProblem(answer, false);
      if (problem) throw new Error(`Portkey with its cache config: ${problem}: ${answer.text.slice(0, 300)}`);
      count(pkStatus, answer.cacheStatus);
    }
    const pkCalls = (await fakeControl(slowFake, 'GET', '/__stats')).openai!.requests;
    log(
      `cache/3: Portkey with {"cache":{"mode":"simple"}}: two identical requests in a row made ${pkCalls} vendor ` +
        `calls, x-portkey-cache-status ${JSON.stringify(pkStatus)}`,
    );

    // Unmeasured: the new gateway's first burst (JIT, connections to the fake).
    log('cache/3: warm-up, 20 identical and 20 different requests at once');
    await atOnce({
      url: slowUrl,
      headers: slowHeaders,
      bodies: Array.from({ length: 20 }, () => chatBody(`Say hello. ${nonce} warm-up`)),
      stream: false,
      statusHeader: 'cache-status',
    });
    await atOnce({
      url: slowUrl,
      headers: slowHeaders,
      bodies: Array.from({ length: 20 }, (_, i) => chatBody(`Say hello. ${nonce} warm-up ${i}`)),
      stream: false,
      statusHeader: 'cache-status',
    });

    const sittings: Array<{ name: string; target: Sitting['target']; identical: boolean; stream: boolean }> = [
      { name: 'gateway, identical, plain', target: 'gateway', identical: true, stream: false },
      { name: 'gateway, different, plain', target: 'gateway', identical: false, stream: false },
      { name: 'gateway, identical, stream', target: 'gateway', identical: true, stream: true },
      { name: 'gateway, different, stream', target: 'gateway', identical: false, stream: true },
      { name: 'direct, identical, plain', target: 'direct', identical: true, stream: false },
      { name: 'direct, identical, stream', target: 'direct', identical: true, stream: true },
      { name: 'Portkey with its cache config, identical, plain', target: 'portkey', identical: true, stream: false },
    ];
    const coalescing: Sitting[] = [];
    const quiet3 = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
    for (const [index, s] of sittings.entries()) {
      await waitIdle(slowFake);
      await sleep(300);
      // The first sitting waits for a quiet second as the other parts do; the rest note the last second's use only.
      const before = index === 0 ? quiet3 : await waitForQuiet({ maxWaitMs: Math.min(settings.quietWaitMs, 1000) });
      await fakeControl(slowFake, 'POST', '/__reset');
      // The fake notes when a request with each id reaches it: one id for a sitting of identical requests (the
      // gateway's identical sittings should make one call; Portkey's are byte for byte identical too, so only its last
      // call is noted and not shown), one per request otherwise (direct: the fake has no cache, the id changes
      // nothing).
      const mark = `${nonce}-${index}`;
      const sameUser = s.identical && s.target !== 'direct';
      const bodies = Array.from({ length: settings.burst }, (_, i) =>
        chatBody(
          s.identical ? `Say hello. ${nonce} sitting ${index}` : `Say hello. ${nonce} sitting ${index} #${i}`,
          s.stream,
          `bench-mark:${sameUser ? mark : `${mark}-${i}`}`,
        ),
      );
      const target =
        s.target === 'gateway'
          ? { url: slowUrl, headers: slowHeaders, statusHeader: 'cache-status' }
          : s.target === 'direct'
            ? {
                url: `${slowFake.url}/chat/completions`,
                headers: { authorization: `Bearer ${upstreamKey}` },
                statusHeader: 'cache-status',
              }
            : { url: pkUrl, headers: pkHeaders, statusHeader: 'x-portkey-cache-status' };
      log(`cache/3: ${s.name}: ${settings.burst} at once`);
      const statsBefore = await commandStats(redis);
      const firedAt = Date.now();
      const { answers, wallMs } = await atOnce({ ...target, bodies, stream: s.stream });
      const delta = diffCommandStats(statsBefore, await commandStats(redis));
      const vendor = (await fakeControl(slowFake, 'GET', '/__stats')).openai!;
      const marks = Object.entries(
        (await (await fetch(`${slowFake.controlUrl}/__marks`, { signal: AbortSignal.timeout(5000) })).json()) as Record<
          string,
          number
        >,
      )
        .filter(([id]) => id === mark || id.startsWith(`${mark}-`))
        .map(([, at]) => at - firedAt);
      const latencies: number[] = [];
      const ttfts: number[] = [];
      const failures: Record<string, number> = {};
      const statusCodes: Record<string, number> = {};
      const cacheStatus: Record<string, number> = {};
      for (const answer of answers) {
        if (answer instanceof Error) {
          count(failures, answer.message.slice(0, 80));
          count(statusCodes, 'error');
          continue;
        }
        count(statusCodes, String(answer.status));
        count(cacheStatus, answer.cacheStatus);
        const problem = answerProblem(answer, s.stream);
        if (problem) {
          count(failures, problem);
          continue;
        }
        latencies.push(answer.ms);
        if (answer.ttftMs !== undefined) ttfts.push(answer.ttftMs);
      }
      const failed = answers.length - latencies.length;
      const sitting: Sitting = {
        ...s,
        requests: answers.length,
        ok: latencies.length,
        failed,
        failures,
        statusCodes,
        vendorCalls: vendor.requests,
        vendorMaxInFlight: vendor.maxInFlight,
        wallMs,
        vendorCallAtMs:
          marks.length > 0 && !(sameUser && (vendor.requests ?? 0) > 1)
            ? { first: Math.min(...marks), last: Math.max(...marks) }
            : null,
        latency: summariseSorted(new Float64Array(latencies).sort()),
        ...(s.stream ? { ttft: summariseSorted(new Float64Array(ttfts).sort()) } : {}),
        cacheStatus,
        redisCommandsPerRequest: delta.reduce((sum, d) => sum + d.calls, 0) / Math.max(1, answers.length),
        before: { quiet: before.quiet, busyPct: before.busyPct },
      };
      coalescing.push(sitting);
      log(
        `  ${sitting.ok}/${sitting.requests} ok, ${sitting.vendorCalls} vendor calls${sitting.vendorCallAtMs ? ` (reached the fake at +${sitting.vendorCallAtMs.first}…+${sitting.vendorCallAtMs.last} ms)` : ''}, p50 ${sitting.latency.p50.toFixed(0)} ms, p99 ${sitting.latency.p99.toFixed(0)} ms` +
          `${sitting.ttft ? `, TTFT p50 ${sitting.ttft.p50.toFixed(0)} ms p99 ${sitting.ttft.p99.toFixed(0)} ms` : ''}, ${JSON.stringify(cacheStatus)}${failed ? `, failures ${JSON.stringify(failures)}` : ''}`,
      );
    }

    for (const [name, child] of [...Object.entries(made.gateway.children), ...Object.entries(slowGateway.children)]) {
      if (child.warnings > 0)
        log(`cache: gateway ${name} logged ${child.warnings} line(s) at warn or above (bench/results/logs/cache*.log)`);
    }

    const results: CacheResults = {
      settings,
      processes,
      portkey: {
        version: portkey.version,
        cacheCheck: {
          config: { ...pkConfig, custom_host: '<the fake>' },
          cacheStatus: pkStatus,
          vendorCallsForTwoInARow: pkCalls,
        },
      },
      oneConnection,
      connections64,
      coalescing,
      missCost,
      bars: [],
    };
    results.bars = cacheBars(results);
    return results;
  } finally {
    for (const a of agents) await a.close().catch(() => undefined);
    if (slowGateway)
      await stopGateway(slowGateway).catch((error: Error) =>
        log(`cache: stopping the gateway failed: ${error.message}`),
      );
    if (gateway)
      await stopGateway(gateway).catch((error: Error) => log(`cache: stopping the gateway failed: ${error.message}`));
    await floor?.child.stop();
    await portkey?.child.stop();
    await slowFake?.child.stop();
    await fake?.child.stop();
    for (const c of connections) {
      await c.flushdb().catch(() => undefined);
      c.disconnect();
    }
  }
}

// ---------------------------------------------------------------- bars and tables

function cacheBars(r: CacheResults): Bar[] {
  const bars: Bar[] = [];
  const one = (t: OneTarget) => r.oneConnection.find((x) => x.target === t)!;
  const load = (t: LoadRow['target']) => r.connections64.find((x) => x.target === t)!;
  const hit = one('hit');
  const floor = one('floor');
  bars.push({
    name: 'a hit at 1 connection adds less than the floor (p50 over direct)',
    target: '< floor',
    actual: `${signedMs(hit.addedP50)} vs ${signedMs(floor.addedP50)}`,
    pass: hit.addedP50 < floor.addedP50,
  });
  const hit64 = load('hit');
  const floor64 = load('floor');
  bars.push({
    name: 'hits at 64 connections ÷ floor, req/s',
    target: '≥ 1.00×',
    actual: `${(hit64.rps / floor64.rps).toFixed(2)}× (${int(hit64.rps)} vs ${int(floor64.rps)} req/s)`,
    pass: hit64.rps >= floor64.rps,
    informational: true,
  });
  bars.push({
    name: 'no vendor call during the hit run at 64 connections',
    target: '0',
    actual: `in-flight peak ${hit64.vendorMaxInFlight ?? '-'}`,
    pass: hit64.vendorMaxInFlight === 0,
  });
  for (const s of r.coalescing.filter((x) => x.target === 'gateway' && x.identical)) {
    bars.push({
      name: `${s.name}: vendor calls for ${s.requests} at once`,
      target: '1',
      actual: String(s.vendorCalls),
      pass: s.vendorCalls === 1,
    });
  }
  const failed =
    r.oneConnection.reduce((sum, x) => sum + (x.target === 'portkey' ? 0 : x.failed), 0) +
    r.connections64.reduce((sum, x) => sum + (x.target === 'portkey' ? 0 : x.errors + x.timeouts + x.non2xx), 0) +
    r.coalescing.reduce((sum, x) => sum + (x.target === 'portkey' ? 0 : x.failed), 0);
  bars.push({
    name: 'no failed answer (direct, floor, gateway; every part)',
    target: '0',
    actual: String(failed),
    pass: failed === 0,
  });
  return bars;
}

const int = (value: number) => Math.round(value).toLocaleString('en-US');
const f2 = (value: number | null | undefined) => (value == null || Number.isNaN(value) ? '-' : value.toFixed(2));
const f0 = (value: number | null | undefined) =>
  value == null || Number.isNaN(value) ? '-' : Math.round(value).toLocaleString('en-US');
const signedMs = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(3)} ms`;
const statuses = (counts: Record<string, number>) =>
  Object.entries(counts)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${v} ${k.replace(/^Switchyard; /, '')}`)
    .join(', ') || '-';
const result = (b: Bar) => (b.informational ? `(${b.pass ? 'PASS' : 'FAIL'})` : b.pass ? 'PASS' : 'FAIL');

export function renderCache(r: CacheResults): string {
  const out: string[] = [];
  const s = r.settings;
  const one = r.oneConnection;
  const floorOne = one.find((x) => x.target === 'floor')!;
  out.push(
    `Response cache, 1 connection: zero-latency fake OpenAI; ${s.warmup} unmeasured then ${s.rounds} rounds of ` +
      `${Math.ceil(s.requests / s.rounds)} sequential requests per target, ` +
      (`the order rotated each round (undici, one keep-alive connection). Added: over direct. Redis commands: ` +
        `INFO commandstats delta ÷ requests (whole server, `) +
      (`commands inside scripts counted too). CPU: µs per request of the target's own processes (gateway: api + ` +
        `worker); others %: what every other process `) +
      (`on the machine used meanwhile (other tenants, and PostgreSQL, which the gateway writes its record to), % ` +
        `of one core.`),
  );
  out.push(
    table(
      [
        'target',
        'p50 ms',
        'p99 ms',
        'added p50',
        'added p99',
        'added p50 ÷ floor',
        'Redis cmds/req',
        'own CPU µs/req',
        'Redis CPU µs/req',
        'others %',
        'failed',
        'status',
      ],
      one.map((x) => [
        x.target,
        x.latency.p50.toFixed(3),
        x.latency.p99.toFixed(3),
        x.target === 'direct' ? '-' : x.addedP50.toFixed(3),
        x.target === 'direct' ? '-' : x.addedP99.toFixed(3),
        x.target === 'direct' || x.target === 'floor' ? '-' : `${(x.addedP50 / floorOne.addedP50).toFixed(2)}×`,
        x.redisCommandsPerRequest.toFixed(1),
        f0(x.ownCpuUs),
        f0(x.cpuUsPerRequest.redis),
        f0(x.othersCorePct),
        String(x.failed),
        statuses(x.cacheStatus),
      ]),
    ),
  );
  out.push('');
  out.push(
    `Response cache, 64 connections: autocannon, ${s.warmupS} s warm-up then ${s.durationS} s per target, one ` +
      `target at a time; Portkey without a cache (its open-source build has none).`,
  );
  const load = r.connections64;
  const floor64 = load.find((x) => x.target === 'floor')!;
  const plain64 = load.find((x) => x.target === 'plain')!;
  out.push(
    table(
      [
        'target',
        'req/s',
        '× floor',
        '× plain',
        'p50 ms',
        'p99 ms',
        'failed',
        'Redis cmds/req',
        'own CPU µs/req',
        'others %',
        'vendor in-flight peak',
      ],
      load.map((x) => [
        x.target,
        int(x.rps),
        (x.rps / floor64.rps).toFixed(2),
        (x.rps / plain64.rps).toFixed(2),
        f2(x.latency.p50),
        f2(x.latency.p99),
        String(x.errors + x.timeouts + x.non2xx),
        x.redisCommandsPerRequest.toFixed(1),
        f0(x.ownCpuUs),
        f0(x.othersCorePct),
        x.vendorMaxInFlight === undefined ? '' : String(x.vendorMaxInFlight),
      ]),
    ),
  );
  out.push('');
  out.push(
    `Coalescing: a fake answering after ${s.latencyMs} ms (streams then paced: ${s.paceTokens} deltas, one every ` +
      `${s.paceMs} ms), ${s.burst} requests at once per sitting (one connection each), Cache-Control: max-age=600 ` +
      `through the gateway, ` +
      (`a fresh body per sitting; vendor calls from the fake's /__stats; call at: when the first and last vendor ` +
        `calls reached the fake, after the first send `) +
      (`(each request carries user: bench-mark:<id>, one id per identical sitting: user is not in the cache's ` +
        `hash); time: send → end of the answer; TTFT: send → first data: line with content. `) +
      (`Portkey ${r.portkey.version} with ${JSON.stringify(r.portkey.cacheCheck.config)}: two identical requests ` +
        `in a row made ${r.portkey.cacheCheck.vendorCallsForTwoInARow} vendor calls, `) +
      `x-portkey-cache-status ${statuses(r.portkey.cacheCheck.cacheStatus)}.`,
  );
  out.push(
    table(
      [
        'sitting',
        'ok',
        'vendor calls',
        'call at ms',
        'p50 ms',
        'p99 ms',
        'TTFT p50',
        'TTFT p99',
        'wall ms',
        'Redis cmds/req',
        'busy before %',
        'status',
      ],
      r.coalescing.map((x) => [
        x.name,
        `${x.ok}/${x.requests}`,
        x.vendorCalls === null ? '-' : String(x.vendorCalls),
        !x.vendorCallAtMs
          ? '-'
          : x.vendorCallAtMs.first === x.vendorCallAtMs.last
            ? `+${x.vendorCallAtMs.first}`
            : `+${x.vendorCallAtMs.first}…${x.vendorCallAtMs.last}`,
        f0(x.latency.p50),
        f0(x.latency.p99),
        x.ttft ? f0(x.ttft.p50) : '',
        x.ttft ? f0(x.ttft.p99) : '',
        f0(x.wallMs),
        x.target === 'gateway' ? x.redisCommandsPerRequest.toFixed(1) : '',
        f0(x.before.busyPct),
        statuses(x.cacheStatus),
      ]),
    ),
  );
  out.push('');
  const m = r.missCost;
  out.push(
    `A miss's cost over a plain request (part 1, 1 connection): p50 ${signedMs(m.addedP50Ms)}, mean ${signedMs(m.addedMeanMs)}, gateway CPU ${m.addedGatewayCpuUs === null ? '-' : `${m.addedGatewayCpuUs >= 0 ? '+' : ''}${m.addedGatewayCpuUs.toFixed(0)} µs`}, ` +
      `Redis CPU ${m.addedRedisCpuUs === null ? '-' : `${m.addedRedisCpuUs >= 0 ? '+' : ''}${m.addedRedisCpuUs.toFixed(0)} µs`} per request; Redis commands per request ${m.missPerRequest.toFixed(1)} vs ${m.plainPerRequest.toFixed(1)} ` +
      `(${m.missPerRequest - m.plainPerRequest >= 0 ? '+' : ''}${(m.missPerRequest - m.plainPerRequest).toFixed(1)}), by command:`,
  );
  out.push(
    table(
      ['command', 'plain /req', 'miss /req', 'added'],
      m.commands.map((c) => [
        c.command,
        c.plain.toFixed(2),
        c.miss.toFixed(2),
        `${c.added >= 0 ? '+' : ''}${c.added.toFixed(2)}`,
      ]),
    ),
  );
  out.push('');
  out.push('Bars of the cache section (in parentheses: informational)');
  out.push(
    table(
      ['bar', 'target', 'actual', 'result'],
      r.bars.map((b) => [b.name, b.target, b.actual, result(b)]),
    ),
  );
  return out.join('\n');
}
