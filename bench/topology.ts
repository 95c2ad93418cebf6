/**
 * `npm run bench -- --topology`: where the next bottleneck is once the gateway
 * runs as several processes, and what a Redis Cluster with queue shards changes.
 *
 *   one Redis   the floor (bench/floor-process.ts), 1 api + 1 worker and 2 apis +
 *               2 workers (`node dist/bin/start.js --role=api|worker`), all started
 *               up front, each on its own database of the bench's Redis; plain
 *               chat at each of BENCH_TOPOLOGY_CONNECTIONS, the targets alternated
 *               round by round (two apis: one autocannon per api, the connections
 *               split between them)
 *   Cluster     a private Redis Cluster (3 primaries, BENCH_TOPOLOGY_REPLICAS
 *               replicas each) from test/support/redis-cluster.ts; 1 api + 1 worker
 *               with QUEUE_SHARDS_CHAT=1, 2, 3 in turn (restarted for each), plain
 *               chat at each of BENCH_TOPOLOGY_CLUSTER_CONNECTIONS spread over 30
 *               accounts (each request takes the next account's key, so billing
 *               spreads over the buckets as many tenants' would), Redis CPU read
 *               from every node (INFO cpu) before and after
 *
 * Per cell: req/s (× the floor's at the same connections), latency, errors,
 * CPU µs per request of every process (/proc) and of Redis (INFO cpu delta),
 * the machine's busy share. Writes bench/results/latest-topology.json and a
 * markdown report of tables bench/results/topology-<date>.md, and prints it; what
 * the figures say is written in docs/benchmarks.md.
 */
import { dbUrl, targetDbs } from './overhead.js';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import autocannon from 'autocannon';
import { Cluster, Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { freePort } from '../bin/local-redis.js';
import { billKey } from '../shared/redis-keys.js';
import { shardQueueName } from '../shared/queues.js';
import { parseInfo, startRedisCluster, type RedisClusterHarness } from '../test/support/redis-cluster.js';
import { envInt, redisProcessId, Samples, summarise, type LatencySummary } from './measure.js';
import { cpuTimeMs, root, sleep, spawnChild, systemBusyMs, waitUntil, type Child } from './procs.js';
import type { Machine } from './report.js';
import { log, plainBody, probe, startFake, startFloor, upstreamKey } from './stack.js';
import { recordUrlFor, testRecord } from '../test/support/record.js';

// ---------------------------------------------------------------- settings

export interface TopologySettings {
  /** Measured seconds per target, cell and round. */
  durationS: number;
  /** Warm-up seconds at the same connections before each measurement. */
  warmupS: number;
  rounds: number;
  /** Connections of the one-Redis cells. */
  connections: number[];
  /** Connections of the Cluster cells. */
  clusterConnections: number[];
  /** QUEUE_SHARDS_CHAT values of the Cluster cells. */
  shards: number[];
  /** Replicas per Cluster primary. */
  replicas: number;
}

function envInts(name: string, fallback: string, min: number, max: number): number[] {
  const raw = process.env[name] || fallback;
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const n = Number(s);
      if (!Number.isInteger(n) || n < min || n > max)
        throw new Error(`${name}: "${s}" is not an integer in ${min}..${max}`);
      return n;
    });
}

export function topologySettings(): TopologySettings {
  return {
    durationS: envInt('BENCH_TOPOLOGY_DURATION_S', 8, 1),
    warmupS: envInt('BENCH_TOPOLOGY_WARMUP_S', 2, 0),
    rounds: envInt('BENCH_TOPOLOGY_ROUNDS', 1, 1),
    connections: envInts('BENCH_TOPOLOGY_CONNECTIONS', '64,256', 1, 4096),
    clusterConnections: envInts('BENCH_TOPOLOGY_CLUSTER_CONNECTIONS', '64,256', 0, 4096).filter((c) => c > 0),
    shards: envInts('BENCH_TOPOLOGY_SHARDS', '1,2,3', 1, 16),
    replicas: envInt('BENCH_TOPOLOGY_REPLICAS', 0, 0),
  };
}

// ---------------------------------------------------------------- results

/** What one or more measured runs of one target at one connection count added up to. */
export interface CellResult {
  target: string;
  connections: number;
  rounds: number;
  /** Seconds measured in all (autocannon's duration, summed over rounds). */
  durationS: number;
  /** Wall-clock ms of the measured runs (the CPU shares divide by this). */
  wallMs: number;
  ok: number;
  rps: number;
  rpsByRound: number[];
  /** 2xx answers through each api (load balancing check). */
  okByApi: number[];
  latency: LatencySummary;
  errors: number;
  timeouts: number;
  non2xx: number;
  /** CPU ms per process (/proc), `loadgen` this process, summed over rounds. */
  cpuMs: Record<string, number | null>;
  /** CPU ms per Redis node (INFO cpu used_cpu_sys + used_cpu_user delta). */
  redisCpuMs: Record<string, number>;
  /** Commands executed per Redis node (INFO commandstats, commands inside scripts included). */
  redisCalls: Record<string, number>;
  /** CPU ms every core spent busy (from /proc/stat), summed over rounds. */
  busyMs: number | null;
  /**
   * Each Redis node in the second before the measured run, the load stopped (summed over rounds):
   * CPU ms and commands of what runs without requests (idle BullMQ workers, timers of every gateway started).
   */
  idleRedisCpuMs: Record<string, number>;
  idleRedisCalls: Record<string, number>;
}

export interface RedisNodeInfo {
  name: string;
  port: number;
  role: 'primary' | 'replica' | 'single';
  /** Slot ranges (Cluster primaries). */
  slots?: string;
  /** What of the gateway lives there (Cluster): chat shards, the bills of how many of the load's accounts. */
  holds?: string;
}

export interface ClusterRun {
  shards: number;
  /** Primary (name) of each chat queue shard, by shard index. */
  shardPrimaries: string[];
  /** How many of the load's accounts bill on each primary (by name). */
  accountsByPrimary: Record<string, number>;
  cells: CellResult[];
}

export interface TopologyResults {
  startedAt: string;
  finishedAt: string;
  machine: Machine;
  cores: number;
  settings: TopologySettings;
  single: {
    redisUrl: string;
    targets: Array<{ name: string; description: string; db: number; processes: Record<string, number> }>;
    cells: CellResult[];
  };
  cluster?: {
    nodes: RedisNodeInfo[];
    runs: ClusterRun[];
    error?: string;
  };
  /** Log lines at warn or above per gateway process (bench/results/logs/topology-*). */
  warnings: Record<string, number>;
}

// ---------------------------------------------------------------- load

interface RedisProbe {
  name: string;
  cpuMs(): Promise<number>;
  calls(): Promise<number>;
}

const infoCpuMs = (info: Record<string, string>) =>
  (Number(info.used_cpu_sys ?? 0) + Number(info.used_cpu_user ?? 0)) * 1000;
const totalCalls = (text: string) =>
  [...text.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)].reduce((sum, m) => sum + Number(m[1]), 0);

function singleRedisProbe(redis: Redis): RedisProbe {
  return {
    name: 'redis',
    cpuMs: async () => infoCpuMs(parseInfo(await redis.info('cpu'))),
    calls: async () => totalCalls(await redis.info('commandstats')),
  };
}

function clusterNodeProbe(cluster: RedisClusterHarness, name: string, port: number): RedisProbe {
  return {
    name,
    cpuMs: async () => (await cluster.infoCpu(port)) * 1000,
    calls: async () => totalCalls(String(await cluster.call(port, 'INFO', 'commandstats'))),
  };
}

function runAutocannon(
  url: string,
  headers: Record<string, string>,
  body: string,
  connections: number,
  durationS: number,
  onLatency?: (ms: number) => void,
  keys?: readonly string[],
) {
  // Several keys: each request takes the next, so the load is spread over their accounts.
  let next = 0;
  const rotate =
    keys && keys.length > 1
      ? [
          {
            setupRequest: (req: autocannon.Request) => ({
              ...req,
              headers: { ...req.headers, authorization: `Bearer ${keys[next++ % keys.length]}` },
            }),
          },
        ]
      : undefined;
  return new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url,
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body,
        connections,
        pipelining: 1,
        duration: durationS,
        timeout: 10,
        ...(rotate ? { requests: rotate } : {}),
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

/** `connections` split over the URLs (the first ones get the remainder); URLs left with none are skipped. */
function split(urls: string[], connections: number): Array<[string, number]> {
  const base = Math.floor(connections / urls.length);
  const extra = connections % urls.length;
  return urls.map((url, i) => [url, base + (i < extra ? 1 : 0)] as [string, number]).filter(([, c]) => c > 0);
}

/**
 * Warm-up, a second's pause, then the measured run over every api at once, with CPU of every process and Redis node
 * around it.
 */
async function measure(options: {
  target: string;
  urls: string[];
  headers: Record<string, string>;
  connections: number;
  durationS: number;
  warmupS: number;
  pids: Record<string, number>;
  redis: RedisProbe[];
  latencies: Samples;
  /** Keys to take in turn (one per account); `headers` carries the first. */
  keys?: readonly string[];
}): Promise<CellResult> {
  const body = JSON.stringify(plainBody);
  const lanes = split(options.urls, options.connections);
  if (options.warmupS > 0)
    await Promise.all(
      lanes.map(([url, c]) => runAutocannon(url, options.headers, body, c, options.warmupS, undefined, options.keys)),
    );
  // Let the warm-up's tail drain, then a second without load: what Redis does in the background.
  await sleep(1000);
  const idleCpuBefore = await Promise.all(options.redis.map((r) => r.cpuMs()));
  const idleCallsBefore = await Promise.all(options.redis.map((r) => r.calls()));
  const idleT0 = performance.now();
  await sleep(1000);
  const idleCpuAfter = await Promise.all(options.redis.map((r) => r.cpuMs()));
  const idleCallsAfter = await Promise.all(options.redis.map((r) => r.calls()));
  const idleScale = 1000 / (performance.now() - idleT0);
  const pids = { ...options.pids, loadgen: process.pid };
  const redisCpuBefore = await Promise.all(options.redis.map((r) => r.cpuMs()));
  const redisCallsBefore = await Promise.all(options.redis.map((r) => r.calls()));
  const cpuBefore = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, cpuTimeMs(pid)]));
  const busyBefore = systemBusyMs();
  const t0 = performance.now();
  const results = await Promise.all(
    lanes.map(([url, c]) =>
      runAutocannon(url, options.headers, body, c, options.durationS, (ms) => options.latencies.push(ms), options.keys),
    ),
  );
  const wallMs = performance.now() - t0;
  const busyAfter = systemBusyMs();
  const cpuMs: Record<string, number | null> = {};
  for (const [name, pid] of Object.entries(pids)) {
    const before = cpuBefore[name];
    const after = cpuTimeMs(pid);
    cpuMs[name] = before === undefined || after === undefined ? null : after - before;
  }
  const redisCpuAfter = await Promise.all(options.redis.map((r) => r.cpuMs()));
  const redisCallsAfter = await Promise.all(options.redis.map((r) => r.calls()));
  const ok = results.reduce((sum, r) => sum + r['2xx'], 0);
  const durationS = Math.max(...results.map((r) => r.duration));
  return {
    target: options.target,
    connections: options.connections,
    rounds: 1,
    durationS,
    wallMs,
    ok,
    rps: ok / durationS,
    rpsByRound: [ok / durationS],
    okByApi: results.map((r) => r['2xx']),
    latency: summarise(options.latencies),
    errors: results.reduce((sum, r) => sum + r.errors, 0),
    timeouts: results.reduce((sum, r) => sum + r.timeouts, 0),
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
    cpuMs,
    redisCpuMs: Object.fromEntries(options.redis.map((r, i) => [r.name, redisCpuAfter[i]! - redisCpuBefore[i]!])),
    redisCalls: Object.fromEntries(options.redis.map((r, i) => [r.name, redisCallsAfter[i]! - redisCallsBefore[i]!])),
    busyMs: busyBefore === undefined || busyAfter === undefined ? null : busyAfter - busyBefore,
    idleRedisCpuMs: Object.fromEntries(
      options.redis.map((r, i) => [r.name, (idleCpuAfter[i]! - idleCpuBefore[i]!) * idleScale]),
    ),
    idleRedisCalls: Object.fromEntries(
      options.redis.map((r, i) => [r.name, (idleCallsAfter[i]! - idleCallsBefore[i]!) * idleScale]),
    ),
  };
}

/** Adds a round to a cell (the latency summary comes from the pooled samples, already in `next`). */
function merge(into: CellResult | undefined, next: CellResult): CellResult {
  if (!into) return next;
  const sumRecord = <T extends number | null>(a: Record<string, T>, b: Record<string, T>) =>
    Object.fromEntries(
      [...new Set([...Object.keys(a), ...Object.keys(b)])].map((k) => {
        const x = a[k];
        const y = b[k];
        return [k, x === null || y === null || x === undefined || y === undefined ? null : x + y];
      }),
    ) as Record<string, T>;
  const ok = into.ok + next.ok;
  const durationS = into.durationS + next.durationS;
  return {
    ...into,
    rounds: into.rounds + 1,
    durationS,
    wallMs: into.wallMs + next.wallMs,
    ok,
    rps: ok / durationS,
    rpsByRound: [...into.rpsByRound, ...next.rpsByRound],
    okByApi: into.okByApi.map((v, i) => v + (next.okByApi[i] ?? 0)),
    latency: next.latency,
    errors: into.errors + next.errors,
    timeouts: into.timeouts + next.timeouts,
    non2xx: into.non2xx + next.non2xx,
    cpuMs: sumRecord(into.cpuMs, next.cpuMs),
    redisCpuMs: sumRecord(into.redisCpuMs, next.redisCpuMs) as Record<string, number>,
    redisCalls: sumRecord(into.redisCalls, next.redisCalls) as Record<string, number>,
    busyMs: into.busyMs === null || next.busyMs === null ? null : into.busyMs + next.busyMs,
    idleRedisCpuMs: sumRecord(into.idleRedisCpuMs, next.idleRedisCpuMs) as Record<string, number>,
    idleRedisCalls: sumRecord(into.idleRedisCalls, next.idleRedisCalls) as Record<string, number>,
  };
}

// ---------------------------------------------------------------- processes

interface Stack {
  name: string;
  description: string;
  apiUrls: string[];
  children: Child[];
  pids: Record<string, number>;
  stop(): Promise<void>;
}

/**
 * `apis` × `node dist/bin/start.js --role=api` and `workers` × `--role=worker`, as an operator runs
 * the halves apart; ready when every api answers /readyz, every worker its METRICS_PORT listener
 * (it opens after the worker's queues), and one real request through each api came back from the fake.
 */
async function startStack(
  name: string,
  apis: number,
  workers: number,
  env: Record<string, string>,
  fakeUrl: string,
  apiKey: string,
): Promise<Stack> {
  const logDir = join(root, 'bench', 'results', 'logs');
  mkdirSync(logDir, { recursive: true });
  const common: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/root',
    HOST: '127.0.0.1',
    OPENAI_API_KEY: upstreamKey,
    OPENAI_BASE_URL: fakeUrl,
    MOCK_VENDOR: 'off',
    LOG_LEVEL: 'warn',
    // The usage buffer capped at its minimum, as in the overhead section.
    USAGE_BUFFER_RECORDS: '1000',
    ...env,
    DATABASE_URL:
      env.DATABASE_URL ??
      (await recordUrlFor(env.REDIS_CLUSTER_NODES ? `redis://${env.REDIS_CLUSTER_NODES}` : env.REDIS_URL!)),
  };
  const children: Child[] = [];
  const workerPorts: number[] = [];
  const apiUrls: string[] = [];
  const label = (role: string, i: number, n: number) => (n === 1 ? role : `${role}${i}`);
  try {
    for (let i = 1; i <= workers; i += 1) {
      const metricsPort = await freePort();
      workerPorts.push(metricsPort);
      const child = spawnChild(
        label('worker', i, workers),
        ['dist/bin/start.js', '--role=worker'],
        { ...common, METRICS_PORT: String(metricsPort) },
        join(logDir, `topology-${name}-${label('worker', i, workers)}.log`),
      );
      children.push(child);
    }
    for (let i = 1; i <= apis; i += 1) {
      const port = await freePort();
      apiUrls.push(`http://127.0.0.1:${port}`);
      children.push(
        spawnChild(
          label('api', i, apis),
          ['dist/bin/start.js', '--role=api'],
          { ...common, PORT: String(port) },
          join(logDir, `topology-${name}-${label('api', i, apis)}.log`),
        ),
      );
    }
    const ready = async (url: string) => (await fetch(url, { signal: AbortSignal.timeout(1000) })).status === 200;
    for (const url of apiUrls) await waitUntil(`GET ${url}/readyz 200`, () => ready(`${url}/readyz`), 30_000, children);
    for (const port of workerPorts)
      await waitUntil(
        `a worker's GET /metrics on ${port}`,
        () => ready(`http://127.0.0.1:${port}/metrics`),
        30_000,
        children,
      );
    for (const url of apiUrls) await probe(url, apiKey, children);
  } catch (error) {
    for (const child of children) await child.stop().catch(() => undefined);
    throw error;
  }
  return {
    name,
    description: `${apis} × --role=api + ${workers} × --role=worker`,
    apiUrls,
    children,
    pids: Object.fromEntries(children.map((c) => [c.name, c.pid])),
    // The apis first, so they drain while the workers still serve.
    stop: async () => {
      for (const child of children.filter((c) => c.name.startsWith('api'))) await child.stop();
      for (const child of children.filter((c) => c.name.startsWith('worker'))) await child.stop();
    },
  };
}

/**
 * A key with quota and limits on, as the overhead section makes it: an account with a balance, a spending limit, rpm
 * and tpm far above the load.
 */
async function benchKey(redis: Redis, tag: string): Promise<string> {
  return (await benchAccounts(redis, tag, 1))[0]!.key;
}

/** `count` accounts, each with a balance and one such key. */
async function benchAccounts(
  redis: Redis,
  tag: string,
  count: number,
): Promise<Array<{ account: string; key: string }>> {
  const keyStore = new KeyStore(redis, await testRecord(redis));
  const made: Array<{ account: string; key: string }> = [];
  for (let i = 0; i < count; i++) {
    const account = await keyStore.accounts.create({
      email: `bench-${tag}-${i}@example.com`,
      name: `bench ${tag} ${i}`,
    });
    await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
    const key = await keyStore.create(`bench-${tag}-${i}`, {
      accountId: account.id,
      limitMicros: 10 ** 12,
      rpm: 10 ** 8,
      tpm: 10 ** 9,
    });
    made.push({ account: account.id, key: key.key });
  }
  return made;
}

/** Accounts the Cluster section spreads its load over (each request takes the next account's key). */
const clusterAccounts = 30;

const failures = (c: Pick<CellResult, 'errors' | 'timeouts' | 'non2xx'>) => c.errors + c.timeouts + c.non2xx;

function logCell(c: CellResult): void {
  const redisUs = (Object.values(c.redisCpuMs).reduce((s, v) => s + v, 0) * 1000) / Math.max(1, c.ok);
  log(
    `  ${c.target} @${c.connections}: ${Math.round(c.rpsByRound[c.rpsByRound.length - 1]!)} req/s, p50 ${c.latency.p50.toFixed(1)} ms, p99 ${c.latency.p99.toFixed(1)} ms, Redis ${Math.round(redisUs)} µs/req${failures(c) ? `, ${failures(c)} FAILED` : ''}`,
  );
}

// ---------------------------------------------------------------- the run

export async function runTopology(options: {
  redis: Redis;
  redisUrl: string;
  machine: Machine;
  startedAt: string;
  settings: TopologySettings;
}): Promise<TopologyResults> {
  const { redis, redisUrl, settings } = options;
  const { durationS, warmupS, rounds } = settings;
  const warnings: Record<string, number> = {};
  const noteWarnings = (stack: { name: string; children: Child[] }) => {
    for (const c of stack.children)
      warnings[`${stack.name}/${c.name}`] = (warnings[`${stack.name}/${c.name}`] ?? 0) + c.warnings;
  };
  const fake = await startFake();
  log(`fake upstream at ${fake.url} (pid ${fake.child.pid})`);
  const connections: Redis[] = [];
  const stacks: Stack[] = [];
  let floorChild: Child | undefined;
  const single: TopologyResults['single'] = { redisUrl, targets: [], cells: [] };
  let clusterResult: TopologyResults['cluster'];

  try {
    // ---- one Redis: floor, 1 + 1, 2 + 2, every target started up front
    const [floorDb, oneDb, twoDb] = targetDbs(redisUrl, 3) as [number, number, number];
    const openDb = async (db: number) => {
      const connection = new Redis(dbUrl(redisUrl, db), { maxRetriesPerRequest: 3 });
      connections.push(connection);
      await connection.flushdb();
      return connection;
    };
    await openDb(floorDb);
    log(`floor: starting (Redis db ${floorDb})`);
    const floor = await startFloor(fake.url, dbUrl(redisUrl, floorDb));
    floorChild = floor.child;
    await probe(floor.url, 'sk-floor', [floor.child]);

    interface Target {
      name: string;
      urls: string[];
      headers: Record<string, string>;
      pids: Record<string, number>;
    }
    const targets: Target[] = [
      {
        name: 'floor',
        urls: [`${floor.url}/v1/chat/completions`],
        headers: { authorization: 'Bearer sk-floor' },
        pids: { floor: floor.child.pid },
      },
    ];
    single.targets.push({
      name: 'floor',
      description: 'bench/floor-process.ts: HTTP → BullMQ → fake → PUBLISH in one process',
      db: floorDb,
      processes: { floor: floor.child.pid },
    });
    for (const [name, apis, workers, db] of [
      ['1api+1worker', 1, 1, oneDb],
      ['2api+2worker', 2, 2, twoDb],
    ] as const) {
      const key = await benchKey(await openDb(db), name);
      log(`${name}: starting (Redis db ${db})`);
      const stack = await startStack(name, apis, workers, { REDIS_URL: dbUrl(redisUrl, db) }, fake.url, key);
      stacks.push(stack);
      targets.push({
        name,
        urls: stack.apiUrls.map((u) => `${u}/v1/chat/completions`),
        headers: { authorization: `Bearer ${key}` },
        pids: stack.pids,
      });
      single.targets.push({ name, description: stack.description, db, processes: stack.pids });
      log(
        `${name}: ready, ${Object.entries(stack.pids)
          .map(([n, p]) => `${n} ${p}`)
          .join(', ')}`,
      );
    }
    const redisPid = await redisProcessId(redis);
    const singleProbe = singleRedisProbe(redis);
    let turn = 0;
    for (const c of settings.connections) {
      const cells = new Map<string, CellResult>();
      const pools = new Map(targets.map((t) => [t.name, new Samples()]));
      for (let round = 1; round <= rounds; round += 1) {
        const order = targets.map((_, i) => targets[(i + turn) % targets.length]!);
        turn += 1;
        log(`one Redis, plain chat @${c}, round ${round}/${rounds}: ${order.map((t) => t.name).join(', ')}`);
        for (const t of order) {
          const r = await measure({
            target: t.name,
            urls: t.urls,
            headers: t.headers,
            connections: c,
            durationS,
            warmupS,
            pids: { ...t.pids, fake: fake.child.pid, ...(redisPid !== undefined ? { 'redis-server': redisPid } : {}) },
            redis: [singleProbe],
            latencies: pools.get(t.name)!,
          });
          logCell(r);
          cells.set(t.name, merge(cells.get(t.name), r));
        }
      }
      for (const t of targets) single.cells.push(cells.get(t.name)!);
    }
    for (const stack of stacks.splice(0)) {
      noteWarnings(stack);
      log(`${stack.name}: stopping`);
      await stack.stop();
    }
    await floor.child.stop();
    floorChild = undefined;

    // ---- Redis Cluster: 1 api + 1 worker, QUEUE_SHARDS_CHAT = each of settings.shards
    if (settings.clusterConnections.length > 0 && settings.shards.length > 0) {
      clusterResult = await runCluster(settings, fake.url, fake.child.pid, noteWarnings, stacks).catch(
        (error: Error) => {
          log(`Cluster part failed: ${error.stack ?? error.message}`);
          return { nodes: [], runs: [], error: error.message };
        },
      );
    }
  } finally {
    for (const stack of stacks) {
      noteWarnings(stack);
      await stack.stop().catch(() => undefined);
    }
    await floorChild?.stop().catch(() => undefined);
    await fake.child.stop().catch(() => undefined);
    for (const connection of connections) {
      await connection.flushdb().catch(() => undefined);
      connection.disconnect();
    }
  }
  return {
    startedAt: options.startedAt,
    finishedAt: new Date().toISOString(),
    machine: options.machine,
    cores: options.machine.cores,
    settings,
    single,
    ...(clusterResult ? { cluster: clusterResult } : {}),
    warnings,
  };
}

async function runCluster(
  settings: TopologySettings,
  fakeUrl: string,
  fakePid: number,
  noteWarnings: (stack: Stack) => void,
  stacks: Stack[],
): Promise<NonNullable<TopologyResults['cluster']>> {
  const { durationS, warmupS, rounds } = settings;
  log(`Redis Cluster: starting 3 primaries, ${settings.replicas} replica(s) each`);
  const cluster = await startRedisCluster({ primaries: 3, replicasPerPrimary: settings.replicas });
  const client = new Cluster(cluster.startupNodes, {
    redisOptions: { maxRetriesPerRequest: 3 },
    retryDelayOnFailover: 200,
  }) as unknown as Redis;
  client.on('error', () => undefined);
  try {
    const primaries = await cluster.primaries();
    const nodes: RedisNodeInfo[] = [];
    primaries.forEach((p, i) => {
      nodes.push({
        name: `P${i + 1}`,
        port: p.port,
        role: 'primary',
        slots: p.slots.map(([a, b]) => `${a}-${b}`).join(','),
      });
      p.replicas.forEach((r, j) => nodes.push({ name: `P${i + 1}r${j + 1}`, port: r.port, role: 'replica' }));
    });
    const nameOfPort = (port: number) => nodes.find((n) => n.port === port)?.name ?? String(port);
    const probes = nodes.map((n) => clusterNodeProbe(cluster, n.name, n.port));
    const serverPids: Record<string, number> = {};
    for (const n of nodes) {
      const pid = Number(parseInfo(String(await cluster.call(n.port, 'INFO', 'server'))).process_id);
      if (Number.isInteger(pid) && pid > 0) serverPids[`redis-${n.name}`] = pid;
    }
    const accounts = await benchAccounts(client, 'cluster', clusterAccounts);
    const keys = accounts.map((a) => a.key);
    const key = keys[0]!;
    const accountsByPrimary: Record<string, number> = {};
    for (const a of accounts) {
      const primary = nameOfPort((await cluster.primaryForKey(billKey(a.account))).port);
      accountsByPrimary[primary] = (accountsByPrimary[primary] ?? 0) + 1;
    }
    const spread = Object.entries(accountsByPrimary)
      .sort()
      .map(([p, n]) => `${p} ${n}`)
      .join(', ');
    log(
      `Redis Cluster: ${nodes.map((n) => `${n.name} :${n.port}${n.slots ? ` (${n.slots})` : ''}`).join(', ')}; ${clusterAccounts} accounts billing on ${spread}`,
    );

    const runs = new Map<number, ClusterRun>();
    const pools = new Map<string, Samples>();
    for (let round = 1; round <= rounds; round += 1) {
      const order = settings.shards.map((_, i) => settings.shards[(i + round - 1) % settings.shards.length]!);
      for (const shards of order) {
        const name = `cluster-shards${shards}`;
        log(`${name}: starting 1 api + 1 worker, QUEUE_SHARDS_CHAT=${shards} (round ${round}/${rounds})`);
        const stack = await startStack(
          name,
          1,
          1,
          {
            REDIS_CLUSTER_NODES: cluster.nodes,
            REDIS_URL: `redis://127.0.0.1:${cluster.ports[0]}`,
            QUEUE_SHARDS_CHAT: String(shards),
          },
          fakeUrl,
          key,
        );
        stacks.push(stack);
        const shardPrimaries: string[] = [];
        for (let i = 0; i < shards; i += 1)
          shardPrimaries.push(
            nameOfPort((await cluster.primaryForKey(`bull:${shardQueueName('chat', i, shards)}:wait`)).port),
          );
        const run = runs.get(shards) ?? { shards, shardPrimaries, accountsByPrimary, cells: [] };
        runs.set(shards, run);
        for (const c of settings.clusterConnections) {
          const poolKey = `${shards}@${c}`;
          if (!pools.has(poolKey)) pools.set(poolKey, new Samples());
          const r = await measure({
            target: name,
            urls: stack.apiUrls.map((u) => `${u}/v1/chat/completions`),
            headers: { authorization: `Bearer ${key}` },
            connections: c,
            durationS,
            warmupS,
            pids: { ...stack.pids, fake: fakePid, ...serverPids },
            redis: probes,
            latencies: pools.get(poolKey)!,
            keys,
          });
          logCell(r);
          log(
            `    Redis µs/req by node: ${Object.entries(r.redisCpuMs)
              .map(([n, ms]) => `${n} ${Math.round((ms * 1000) / Math.max(1, r.ok))}`)
              .join(', ')}`,
          );
          const at = run.cells.findIndex((x) => x.connections === c);
          if (at < 0) run.cells.push(r);
          else run.cells[at] = merge(run.cells[at], r);
        }
        noteWarnings(stack);
        stacks.splice(stacks.indexOf(stack), 1);
        log(`${name}: stopping`);
        await stack.stop();
      }
    }
    for (const n of nodes) {
      if (n.role !== 'primary') continue;
      const held: string[] = [];
      for (const run of [...runs.values()].sort((a, b) => a.shards - b.shards)) {
        const mine = run.shardPrimaries.flatMap((p, i) =>
          p === n.name ? [`${shardQueueName('chat', i, run.shards)}`] : [],
        );
        if (mine.length) held.push(`shards=${run.shards}: ${mine.join(' ')}`);
      }
      if (accountsByPrimary[n.name])
        held.push(`bills of ${accountsByPrimary[n.name]} of the ${clusterAccounts} accounts`);
      n.holds = held.join('; ');
    }
    return {
      nodes,
      runs: settings.shards
        .filter((s, i, all) => all.indexOf(s) === i)
        .map((s) => runs.get(s)!)
        .filter(Boolean),
    };
  } finally {
    client.disconnect();
    log('Redis Cluster: stopping');
    await cluster.stop();
  }
}

// ---------------------------------------------------------------- report

const int = (v: number) => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '-');
const ms = (v: number) => (Number.isFinite(v) ? v.toFixed(1) : '-');
const perReq = (c: CellResult, cpuMs: number | null | undefined) =>
  cpuMs === null || cpuMs === undefined ? Number.NaN : (cpuMs * 1000) / Math.max(1, c.ok);
const pctCore = (c: CellResult, cpuMs: number | null | undefined) =>
  cpuMs === null || cpuMs === undefined ? Number.NaN : (cpuMs / c.wallMs) * 100;
const sum = (values: Array<number | null | undefined>) => values.reduce<number>((s, v) => s + (v ?? 0), 0);
const redisTotalMs = (c: CellResult) => sum(Object.values(c.redisCpuMs));
/** Every CPU ms of the machine not in a process the bench names (other tenants of the machine). */
function othersMs(c: CellResult): number | null {
  if (c.busyMs === null) return null;
  const named = sum(
    Object.entries(c.cpuMs)
      .filter(([n]) => !n.startsWith('redis'))
      .map(([, v]) => v),
  );
  return Math.max(0, c.busyMs - named - redisTotalMs(c));
}
const role = (n: string) => (n.startsWith('api') ? 'api' : n.startsWith('worker') ? 'worker' : n);
/** CPU ms by role (apis summed, workers summed), gateway processes only. */
function byRole(c: CellResult): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [n, v] of Object.entries(c.cpuMs)) {
    if (!/^(api|worker|floor)/.test(n)) continue;
    const r = role(n);
    out[r] = out[r] === null || v === null ? null : (out[r] ?? 0) + v;
  }
  return out;
}

function mdTable(header: string[], rows: string[][]): string {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

/** The report: tables only. What the figures say is written once, in docs/benchmarks.md. */
export function renderTopology(r: TopologyResults): string {
  const s = r.settings;
  const m = r.machine;
  const out: string[] = [];
  out.push(`## Topology (${r.startedAt.slice(0, 16).replace('T', ' ')}–${r.finishedAt.slice(11, 16)} UTC)`);
  out.push('');
  out.push(
    `${m.cpu}, ${m.cores} cores, ${m.memoryGiB.toFixed(1)} GiB, ${m.os}; Node ${m.node}, Redis ${m.redis}, ` +
      `autocannon ${m.autocannon}; ` +
      `load average ${m.loadAverageAtStart.map((l) => l.toFixed(2)).join(' ')} at the start${m.loadAverageAtEnd ? `, ${m.loadAverageAtEnd.map((l) => l.toFixed(2)).join(' ')} at the end` : ''}. ` +
      (`${s.rounds} round(s) of ${s.warmupS} s warm-up + ${s.durationS} s per cell. CPU in µs per 2xx response; ` +
        `"others" is the machine's busy time outside the bench's processes; `) +
      `"busy" is busy time ÷ (wall time × ${r.cores} cores).`,
  );
  out.push('');

  // ---- one Redis
  out.push(`### One Redis (${r.single.redisUrl.replace(/\/\d+$/, '')}, each target on its own database)`);
  out.push('');
  const floorAt = (c: number) => r.single.cells.find((x) => x.target === 'floor' && x.connections === c);
  out.push(
    mdTable(
      [
        'target',
        'conns',
        'req/s',
        'by round',
        '× floor',
        'p50 ms',
        'p99 ms',
        'errors',
        'api µs',
        'worker µs',
        'Redis µs',
        'fake µs',
        'loadgen µs',
        'others, % of a core',
        'busy',
      ],
      r.single.cells.map((c) => {
        const roles = byRole(c);
        const floor = floorAt(c.connections);
        const gateway = c.target === 'floor' ? `floor ${int(perReq(c, roles.floor))}` : int(perReq(c, roles.api));
        return [
          c.target,
          String(c.connections),
          int(c.rps),
          c.rpsByRound.map(int).join(' / '),
          floor ? `${(c.rps / floor.rps).toFixed(2)}×` : '-',
          ms(c.latency.p50),
          ms(c.latency.p99),
          String(failures(c)),
          gateway,
          c.target === 'floor' ? '' : int(perReq(c, roles.worker)),
          int(perReq(c, redisTotalMs(c))),
          int(perReq(c, c.cpuMs.fake)),
          int(perReq(c, c.cpuMs.loadgen)),
          int(pctCore(c, othersMs(c))),
          c.busyMs === null ? '-' : `${Math.round((c.busyMs / (c.wallMs * r.cores)) * 100)} %`,
        ];
      }),
    ),
  );
  out.push('');
  out.push(
    mdTable(
      [
        'target',
        'conns',
        'per process, % of a core',
        'Redis % of a core',
        'Redis cmds/req',
        'Redis idle: % of a core, cmds/s',
        'answered by api',
      ],
      r.single.cells.map((c) => [
        c.target,
        String(c.connections),
        Object.entries(c.cpuMs)
          .filter(([n]) => /^(api|worker|floor|fake|loadgen)/.test(n))
          .map(([n, v]) => `${n} ${int(pctCore(c, v))}`)
          .join(', '),
        int(pctCore(c, redisTotalMs(c))),
        (sum(Object.values(c.redisCalls)) / Math.max(1, c.ok)).toFixed(1),
        `${(sum(Object.values(c.idleRedisCpuMs)) / c.rounds / 10).toFixed(1)}, ` +
          `${int(sum(Object.values(c.idleRedisCalls)) / c.rounds)}`,
        c.okByApi.length > 1 ? c.okByApi.map(int).join(' / ') : '',
      ]),
    ),
  );
  out.push('');

  // ---- Cluster
  const cl = r.cluster;
  if (cl) {
    out.push(
      `### Redis Cluster: 3 primaries, ${s.replicas} replica(s) each; 1 api + 1 worker; QUEUE_SHARDS_CHAT = ${s.shards.join(', ')}`,
    );
    out.push('');
    if (cl.error) out.push(`The Cluster part failed: ${cl.error}`, '');
    if (cl.nodes.length) {
      out.push(
        mdTable(
          ['node', 'port', 'slots', 'holds'],
          cl.nodes.map((n) => [n.name, String(n.port), n.slots ?? 'replica', n.holds ?? '']),
        ),
      );
      out.push('');
    }
    const nodeNames = cl.nodes.map((n) => n.name);
    const primaries = cl.nodes.filter((n) => n.role === 'primary').map((n) => n.name);
    const rows: string[][] = [];
    for (const run of cl.runs) {
      for (const c of run.cells) {
        const roles = byRole(c);
        const total = redisTotalMs(c);
        const floor = floorAt(c.connections);
        const busiest = Math.max(...nodeNames.map((n) => c.redisCpuMs[n] ?? 0));
        rows.push([
          String(run.shards),
          run.shardPrimaries.join(', '),
          String(c.connections),
          int(c.rps),
          floor ? `${(c.rps / floor.rps).toFixed(2)}×` : '-',
          ms(c.latency.p50),
          ms(c.latency.p99),
          String(failures(c)),
          int(perReq(c, roles.api)),
          int(perReq(c, roles.worker)),
          int(perReq(c, total)),
          ...nodeNames.map((n) => `${int(perReq(c, c.redisCpuMs[n]))} (${int(pctCore(c, c.redisCpuMs[n]))} %)`),
          total > 0 ? `${Math.round((busiest / total) * 100)} %` : '-',
          int(pctCore(c, othersMs(c))),
          c.busyMs === null ? '-' : `${Math.round((c.busyMs / (c.wallMs * r.cores)) * 100)} %`,
        ]);
      }
    }
    out.push(
      'Redis CPU µs per request on each node (% of one core); "× floor" against the one-Redis floor at the same ' +
        'connections, measured earlier in this run.',
    );
    out.push('');
    out.push(
      mdTable(
        [
          'shards',
          'chat shards on',
          'conns',
          'req/s',
          '× floor',
          'p50 ms',
          'p99 ms',
          'errors',
          'api µs',
          'worker µs',
          'Redis µs (all nodes)',
          ...nodeNames.map((n) => `${n} µs`),
          'busiest node share',
          'others, % of a core',
          'busy',
        ],
        rows,
      ),
    );
    out.push('');
    out.push(
      mdTable(
        ['shards', 'conns', 'Redis cmds/req by node', 'idle, before the run: % of a core, cmds/s by node'],
        cl.runs.flatMap((run) =>
          run.cells.map((c) => [
            String(run.shards),
            String(c.connections),
            nodeNames.map((n) => `${n} ${((c.redisCalls[n] ?? 0) / Math.max(1, c.ok)).toFixed(1)}`).join(', '),
            nodeNames
              .map(
                (n) =>
                  `${n} ${((c.idleRedisCpuMs[n] ?? 0) / c.rounds / 10).toFixed(1)} %, ` +
                  `${int((c.idleRedisCalls[n] ?? 0) / c.rounds)}`,
              )
              .join('; '),
          ]),
        ),
      ),
    );
    out.push('');
    // Pooled over the connection counts: a cell slowed by other tenants weighs by the few requests it served.
    const pooled = cl.runs
      .filter((run) => run.cells.length > 0)
      .map((run) => {
        const c = run.cells.reduce<CellResult | undefined>((a, x) => merge(a, x), undefined)!;
        const total = redisTotalMs(c);
        const busiestUs = Math.max(...primaries.map((p) => perReq(c, c.redisCpuMs[p])));
        return [
          String(run.shards),
          int(c.ok),
          Object.entries(run.accountsByPrimary)
            .sort()
            .map(([p, n]) => `${p} ${n}`)
            .join(', '),
          int(perReq(c, total)),
          primaries.map((p) => int(perReq(c, c.redisCpuMs[p]))).join(' / '),
          primaries.map((p) => `${Math.round(((c.redisCpuMs[p] ?? 0) / Math.max(1e-9, total)) * 100)} %`).join(' / '),
          int(1e6 / busiestUs),
        ];
      });
    out.push(
      mdTable(
        [
          'shards',
          'requests (pooled)',
          `bills of the ${clusterAccounts} accounts`,
          'Redis µs/req, all nodes',
          `${primaries.join(' / ')} µs`,
          'split of Redis CPU',
          '1e6 ÷ busiest primary µs (req/s)',
        ],
        pooled,
      ),
    );
    out.push('');
  }

  const failed = [...r.single.cells, ...(cl?.runs.flatMap((x) => x.cells) ?? [])].filter((c) => failures(c) > 0);
  if (failed.length)
    out.push(`FAILURES: ${failed.map((c) => `${c.target} @${c.connections}: ${failures(c)}`).join('; ')}.`, '');
  const warned = Object.entries(r.warnings).filter(([, n]) => n > 0);
  if (warned.length)
    out.push(
      `Log lines at warn or above: ${warned.map(([p, n]) => `${p} ${n}`).join(', ')} (bench/results/logs/topology-*).`,
    );
  return out.join('\n').trimEnd();
}

// ---------------------------------------------------------------- entry from bench/run.ts

/** Runs the section, prints the markdown report, writes it and the JSON under bench/results/. */
export async function runTopologySection(options: {
  redis: Redis;
  redisUrl: string;
  machine: Machine;
  startedAt: string;
  loadAverageAtEnd: () => number[];
}): Promise<void> {
  const settings = topologySettings();
  log(
    `topology: ${settings.rounds} round(s) × (${settings.warmupS} s warm-up + ${settings.durationS} s) per cell; one Redis @${settings.connections.join(',')}; ` +
      `Cluster (${settings.replicas} replica(s) per primary) shards ${settings.shards.join(',')} @${settings.clusterConnections.join(',') || 'none'}`,
  );
  const results = await runTopology({ ...options, settings });
  results.machine = { ...results.machine, loadAverageAtEnd: options.loadAverageAtEnd() };
  const report = renderTopology(results);
  const outDir = join(root, 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const stamp = results.startedAt.slice(0, 16).replace(/:/g, '');
  writeFileSync(join(outDir, 'latest-topology.json'), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(outDir, `topology-${stamp}.md`), `${report}\n`);
  process.stdout.write(
    `\n${report}\n\nResults written to bench/results/latest-topology.json and bench/results/topology-${stamp}.md\n`,
  );
  const failed = [...results.single.cells, ...(results.cluster?.runs.flatMap((x) => x.cells) ?? [])].some(
    (c) => failures(c) > 0,
  );
  if (failed || results.cluster?.error) process.exitCode = 1;
}
