/**
 * The gateway-overhead section of `npm run bench`: the gateway side by side
 * with (a) a direct call to the zero-latency fake OpenAI upstream and (b) the
 * floor, a bare BullMQ loop (bench/floor-process.ts), all started up front and
 * kept running, each on its own Redis database. Every cell ({non-stream,
 * stream} × {1, 64 connections}, then time to first token) runs in rounds; a
 * round measures every target once, the order rotated by one each round, so
 * drift of a shared machine falls on every target alike. Bars are ratios
 * within this one run. Then two keys side by side on the `start` gateway: the
 * Default account's key, made as an operator makes one (`POST /admin/keys`
 * with no account), and a credited account's limited key, alternated round by
 * round at 64 connections. Then the memory of the `start` target: idle RSS, a
 * soak, RSS 30 s after it, Redis memory over it.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { defaultAccountId } from '../shared/accounts.js';
import {
  measureLoad,
  measureTtft,
  Samples,
  soak,
  summarise,
  type CommandDelta,
  type LoadResult,
  type SoakSample,
} from './measure.js';
import { rssBytes, type Child } from './procs.js';
import type {
  CellStats,
  KeysSideBySide,
  OverheadBar,
  OverheadCell,
  OverheadMemory,
  OverheadResults,
  OverheadTarget,
  TtftStats,
} from './report.js';
import { testRecord } from '../test/support/record.js';
import {
  discoverProcesses,
  log,
  plainBody,
  probe,
  probeStream,
  startFake,
  startFloor,
  startGateway,
  stopGateway,
  streamBody,
  upstreamKey,
  type GatewayConfig,
} from './stack.js';

/** Gateway targets of this section. */
export type OverheadConfig = 'start' | 'unlimited' | 'log-off' | 'one-loop' | 'split';

export interface OverheadOptions {
  /** The bench database (the direct target's measurements read server-wide figures through it). */
  redis: Redis;
  redisUrl: string;
  rounds: number;
  durationS: number;
  warmupS: number;
  soakS: number;
  ttftRequests: number;
  ttftWarmup: number;
  /** Rounds of the keys side by side on `start` (each key once a round, the order alternated); 0 skips it. */
  keyRounds: number;
  configNames: OverheadConfig[];
  cpuProfDir?: string;
}

const descriptions: Record<OverheadConfig, string> = {
  start: 'node dist/bin/start.js, nothing added (what npm start runs)',
  unlimited:
    "node dist/bin/start.js, the Default account's key (POST /admin/keys with no account: unlimited, no limits; " +
    "start's is a credited account's, with a limit, rpm and tpm)",
  'log-off': 'node dist/bin/start.js with REQUEST_LOG=off (the same build without the request log)',
  'one-loop': 'node dist/bin/start.js with WORKER_PROCESS=off (api and workers on one event loop)',
  split: 'node dist/bin/start.js --role=api + --role=worker',
};

interface Target {
  name: string;
  description: string;
  db: number | null;
  /** A connection to its database (direct: the bench's). */
  redis: Redis;
  /** Its chat completions URL and the headers to call it with. */
  url: string;
  headers: Record<string, string>;
  /** Its own processes by role. */
  pids: Record<string, number>;
  children: Child[];
  idleRss: Record<string, number | null>;
  /** Whether its database still holds what the bench put there. */
  intact?: () => Promise<boolean>;
  /** `start`: the Default account's key, made through the admin API (measured beside its own key). */
  defaultKey?: string;
  stop: () => Promise<void>;
}

/** The URL of database `db` of the server of `redisUrl`. */
export function dbUrl(redisUrl: string, db: number): string {
  const url = new URL(redisUrl);
  url.pathname = `/${db}`;
  return url.toString();
}

/** `count` databases next to the bench's own: below it (15 → 14, 13, …), or above when there is no room. */
export function targetDbs(redisUrl: string, count: number): number[] {
  const base = Number(new URL(redisUrl).pathname.slice(1) || '0');
  if (!Number.isInteger(base)) throw new Error(`cannot read the database number of ${redisUrl}`);
  return Array.from({ length: count }, (_, i) => (base - count >= 0 ? base - 1 - i : base + 1 + i));
}

/** A key made through a gateway's admin API (`POST /admin/keys`), as an operator makes one. */
async function adminKey(
  gatewayUrl: string,
  adminToken: string,
  body: Record<string, unknown>,
): Promise<{ id: string; key: string; account_id: string }> {
  const response = await fetch(`${gatewayUrl}/admin/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (response.status !== 201) throw new Error(`POST /admin/keys: ${response.status} ${text}`);
  return JSON.parse(text) as { id: string; key: string; account_id: string };
}

const failuresOf = (r: Pick<LoadResult, 'errors' | 'timeouts' | 'non2xx'>) => r.errors + r.timeouts + r.non2xx;

/** Sums one target's runs in one cell. */
class CellAccumulator {
  readonly latencies = new Samples();
  private ok = 0;
  private measuredS = 0;
  private errors = 0;
  private timeouts = 0;
  private non2xx = 0;
  private readonly cpuMs = new Map<string, number | null>();
  private readonly commands = new Map<string, CommandDelta>();
  private readonly rpsByRound: number[] = [];
  private readonly p50ByRound: number[] = [];

  add(r: LoadResult): void {
    this.ok += r.ok;
    this.measuredS += r.durationS;
    this.errors += r.errors;
    this.timeouts += r.timeouts;
    this.non2xx += r.non2xx;
    this.rpsByRound.push(r.rps);
    this.p50ByRound.push(r.latency.p50);
    for (const [name, used] of Object.entries(r.cpuMs)) {
      const sum = this.cpuMs.has(name) ? this.cpuMs.get(name)! : 0;
      this.cpuMs.set(name, sum === null || used === null ? null : sum + used);
    }
    for (const d of r.redisCommands) {
      const sum = this.commands.get(d.command) ?? { command: d.command, calls: 0, usec: 0 };
      sum.calls += d.calls;
      sum.usec += d.usec;
      this.commands.set(d.command, sum);
    }
  }

  result(): CellStats {
    const per = Math.max(1, this.ok);
    const redisCommands = [...this.commands.values()].sort((a, b) => b.usec - a.usec);
    return {
      rounds: this.rpsByRound.length,
      measuredS: this.measuredS,
      ok: this.ok,
      rps: this.ok / Math.max(1e-9, this.measuredS),
      rpsByRound: this.rpsByRound,
      p50ByRound: this.p50ByRound,
      latency: summarise(this.latencies),
      errors: this.errors,
      timeouts: this.timeouts,
      non2xx: this.non2xx,
      cpuUsPerRequest: Object.fromEntries(
        [...this.cpuMs].map(([n, used]) => [n, used === null ? null : (used * 1000) / per]),
      ),
      redisCommandsPerRequest: redisCommands.reduce((sum, d) => sum + d.calls, 0) / per,
      redisCommands,
    };
  }
}

const cellDefs = [
  { name: 'Non-stream, 1 connection', stream: false, connections: 1 },
  { name: 'Non-stream, 64 connections', stream: false, connections: 64 },
  { name: 'Stream, 1 connection', stream: true, connections: 1 },
  { name: 'Stream, 64 connections', stream: true, connections: 64 },
] as const;

export async function runOverhead(options: OverheadOptions): Promise<OverheadResults> {
  const {
    redis,
    redisUrl,
    rounds,
    durationS,
    warmupS,
    soakS,
    ttftRequests,
    ttftWarmup,
    keyRounds,
    configNames,
    cpuProfDir,
  } = options;
  // The gateways' admin API, for the keys made as an operator makes them.
  const adminToken = `bench-${randomBytes(12).toString('hex')}`;
  const plainJson = JSON.stringify(plainBody);
  const streamJson = JSON.stringify(streamBody);
  const targets: Target[] = [];
  const connections: Redis[] = [];
  const dbs = targetDbs(redisUrl, 1 + configNames.length);
  const fake = await startFake();
  const fakePid = fake.child.pid;
  log(`fake upstream at ${fake.url} (pid ${fakePid})`);

  try {
    // ---- every target, started up front and kept running
    const direct: Target = {
      name: 'direct',
      description: 'the fake OpenAI upstream, called directly (bench/fake-upstream-process.ts)',
      db: null,
      redis,
      url: `${fake.url}/chat/completions`,
      headers: { authorization: `Bearer ${upstreamKey}` },
      pids: { fake: fakePid },
      children: [fake.child],
      idleRss: { fake: rssBytes(fakePid) ?? null },
      stop: async () => undefined,
    };
    await probeStream(direct.url, direct.headers);
    targets.push(direct);

    const openDb = async (db: number) => {
      const connection = new Redis(dbUrl(redisUrl, db), { maxRetriesPerRequest: 3 });
      connections.push(connection);
      await connection.flushdb();
      return connection;
    };

    const floorDb = dbs[0]!;
    const floorRedis = await openDb(floorDb);
    log(`floor: starting (Redis db ${floorDb})`);
    const floor = await startFloor(fake.url, dbUrl(redisUrl, floorDb));
    targets.push({
      name: 'floor',
      description: 'bench/floor-process.ts: HTTP server, BullMQ queue and worker, undici, pub/sub replies, one process',
      db: floorDb,
      redis: floorRedis,
      url: `${floor.url}/v1/chat/completions`,
      headers: { authorization: 'Bearer sk-floor' },
      pids: { floor: floor.child.pid },
      children: [floor.child],
      idleRss: {},
      stop: () => floor.child.stop(),
    });
    await probe(floor.url, 'sk-floor', [floor.child]);
    await probeStream(targets[1]!.url, targets[1]!.headers);
    targets[1]!.idleRss = { floor: rssBytes(floor.child.pid) ?? null };

    for (const [i, name] of configNames.entries()) {
      const db = dbs[i + 1]!;
      const gatewayRedis = await openDb(db);
      // Quota and limits on: an account with a balance, a key with a spending limit, rpm and tpm far above the load.
      // `unlimited`: the Default account's key instead, made once the gateway runs as the issue made it (POST
      // /admin/keys with no account: unlimited, no limits), the way a first key is commonly made.
      const keyStore = new KeyStore(gatewayRedis, await testRecord(gatewayRedis));
      const unlimited = name === 'unlimited';
      let key: { id: string; key: string } | undefined;
      if (!unlimited) {
        const account = await keyStore.accounts.create({ email: `bench-${name}@example.com`, name: `bench ${name}` });
        await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
        key = await keyStore.create('bench-limited', {
          accountId: account.id,
          limitMicros: 10 ** 12,
          rpm: 10 ** 8,
          tpm: 10 ** 9,
        });
      }
      log(`gateway ${name}: starting (Redis db ${db})`);
      // The per-request usage log is kept by design up to USAGE_RETENTION_RECORDS (default 10 million, about 250 bytes
      // each): capped at its minimum here, so that the soak shows whether anything else grows.
      const gateway = await startGateway(
        name === 'log-off' || name === 'unlimited' ? 'start' : (name satisfies GatewayConfig),
        fake.url,
        dbUrl(redisUrl, db),
        cpuProfDir,
        {
          env: {
            USAGE_BUFFER_RECORDS: '1000',
            ADMIN_TOKEN: adminToken,
            ...(name === 'log-off' ? { REQUEST_LOG: 'off' } : {}),
          },
          logTag: name,
        },
      );
      // The Default account's key, as `POST /admin/keys {"name":"perf"}` makes it: `unlimited`'s own, and `start`'s
      // second.
      const defaultKey =
        unlimited || (name === 'start' && keyRounds > 0)
          ? await adminKey(gateway.url, adminToken, { name: 'perf' })
          : undefined;
      if (defaultKey && defaultKey.account_id !== defaultAccountId)
        throw new Error(
          `POST /admin/keys with no account made a key of ${defaultKey.account_id}, not ${defaultAccountId}`,
        );
      key ??= defaultKey!;
      const made = key;
      const target: Target = {
        name,
        description: descriptions[name],
        db,
        redis: gatewayRedis,
        url: `${gateway.url}/v1/chat/completions`,
        headers: { authorization: `Bearer ${key.key}` },
        pids: gateway.pids,
        children: Object.values(gateway.children),
        idleRss: {},
        intact: async () => (await keyStore.list()).some((k) => k.id === made.id),
        stop: () => stopGateway(gateway),
        ...(name === 'start' && defaultKey ? { defaultKey: defaultKey.key } : {}),
      };
      targets.push(target);
      await probe(gateway.url, key.key, target.children);
      if (target.defaultKey) await probe(gateway.url, target.defaultKey, target.children);
      await probeStream(target.url, target.headers);
      target.pids = discoverProcesses(gateway);
      if (name === 'start' || name === 'log-off' || name === 'unlimited') {
        const forked = Object.keys(target.pids).length > 1;
        target.description += forked
          ? `: api + ${Object.keys(target.pids).length - 1} forked worker process(es)`
          : ': one process (nothing forked)';
      }
      target.idleRss = Object.fromEntries(Object.entries(target.pids).map(([n, pid]) => [n, rssBytes(pid) ?? null]));
      log(
        `gateway ${name}: ready, processes ${Object.entries(target.pids)
          .map(([n, pid]) => `${n} ${pid}`)
          .join(', ')}`,
      );
    }

    const lineup = (turn: number) => targets.map((_, i) => targets[(i + turn) % targets.length]!);
    const loadPids = (t: Target) => (t.name === 'direct' ? t.pids : { ...t.pids, fake: fakePid });
    // One counter for every cell: each target takes each place in the order as often as the rounds allow.
    let turn = 0;

    // ---- the load cells
    const cells: OverheadCell[] = [];
    for (const def of cellDefs) {
      const acc = new Map(targets.map((t) => [t.name, new CellAccumulator()]));
      for (let round = 1; round <= rounds; round += 1) {
        const order = lineup(turn++);
        log(`${def.name}, round ${round}/${rounds}: ${order.map((t) => t.name).join(', ')}`);
        for (const t of order) {
          const a = acc.get(t.name)!;
          const r = await measureLoad({
            target: { url: t.url, headers: t.headers, body: def.stream ? streamJson : plainJson },
            connections: def.connections,
            durationS,
            warmupS,
            redis: t.redis,
            pids: loadPids(t),
            settleMs: 500,
            latencies: a.latencies,
          });
          a.add(r);
          log(
            `  ${t.name}: ${Math.round(r.rps)} req/s, p50 ${r.latency.p50.toFixed(2)} ms, p99 ${r.latency.p99.toFixed(2)} ms${failuresOf(r) ? `, ${failuresOf(r)} failed` : ''}`,
          );
        }
      }
      cells.push({
        name: def.name,
        stream: def.stream,
        connections: def.connections,
        targets: Object.fromEntries([...acc].map(([n, a]) => [n, a.result()])),
      });
    }

    // ---- time to first token
    const pools = new Map(
      targets.map((t) => [
        t.name,
        { ttft: new Samples(), total: new Samples(), failures: 0, p50ByRound: [] as number[] },
      ]),
    );
    for (let round = 1; round <= rounds; round += 1) {
      const order = lineup(turn++);
      log(
        `time to first token, round ${round}/${rounds} (${ttftWarmup} + ${ttftRequests} stream requests each): ${order.map((t) => t.name).join(', ')}`,
      );
      for (const t of order) {
        const pool = pools.get(t.name)!;
        const r = await measureTtft({
          url: t.url,
          headers: t.headers,
          body: streamJson,
          warmup: ttftWarmup,
          count: ttftRequests,
          pool,
        });
        pool.failures += r.failures;
        pool.p50ByRound.push(r.ttft.p50);
      }
    }
    const ttft: Record<string, TtftStats> = Object.fromEntries(
      [...pools].map(([n, p]) => [
        n,
        {
          rounds,
          requests: rounds * ttftRequests,
          failures: p.failures,
          ttft: summarise(p.ttft),
          total: summarise(p.total),
          p50ByRound: p.p50ByRound,
        },
      ]),
    );

    // ---- two keys side by side on the one `start` gateway
    const start = targets.find((t) => t.name === 'start');
    const keys = start?.defaultKey
      ? await keysSideBySide(start, start.defaultKey, {
          rounds: keyRounds,
          durationS,
          warmupS,
          fakePid,
          body: plainJson,
        })
      : undefined;

    // ---- memory of `start`
    let memory: OverheadMemory | undefined;
    if (start) {
      memory = { target: 'start', idleRss: start.idleRss };
      if (soakS > 0) {
        log(`start: soak, 64 connections non-stream for ${soakS} s, then 30 s idle`);
        memory.soak = await soak({
          target: { url: start.url, headers: start.headers, body: plainJson },
          connections: 64,
          durationS: soakS,
          everyS: 10,
          pauseS: 30,
          redis: start.redis,
          pids: start.pids,
          cpuOnlyPids: { fake: fakePid },
          onSample: (s) =>
            log(
              `  soak t=${s.t}s ${s.phase}: redis ${(s.redisUsedMemory / 1048576).toFixed(1)} MiB (db ` +
                `${start.db}: ${(s.redisDbBytes / 1048576).toFixed(2)} MiB, ${s.redisKeys} keys), ` +
                Object.entries(s.rss)
                  .map(([n, v]) => `${n} ${v === null ? '-' : (v / 1048576).toFixed(1)} MiB`)
                  .join(', '),
            ),
        });
        const reference = referenceSample(memory.soak.samples);
        if (reference) memory.referenceT = reference.t;
      }
    }

    // ---- bookkeeping
    const info: OverheadTarget[] = [];
    for (const t of targets) {
      const intact = t.intact ? await t.intact().catch(() => false) : undefined;
      if (intact === false)
        log(
          `WARNING: the bench API key of ${t.name} vanished from db ${t.db}: another client flushed it during the run`,
        );
      info.push({
        name: t.name,
        description: t.description,
        db: t.db,
        processes: t.pids,
        idleRss: t.idleRss,
        warnings: Object.fromEntries(t.children.map((c) => [c.name, c.warnings])),
        ...(intact === undefined ? {} : { databaseIntact: intact }),
      });
      for (const c of t.children)
        if (c.warnings > 0)
          log(`${t.name}: ${c.name} logged ${c.warnings} line(s) at warn or above (bench/results/logs/)`);
    }

    return {
      settings: {
        targets: targets.map((t) => t.name),
        rounds,
        durationS,
        warmupS,
        soakS,
        ttftRequests,
        ttftWarmup,
        body: plainBody,
        streamBody,
      },
      targets: info,
      cells,
      ttft,
      ...(keys ? { keys } : {}),
      ...(memory ? { memory } : {}),
      bars: bars(configNames, cells, ttft, memory, keys),
    };
  } finally {
    for (const t of [...targets].reverse()) {
      if (t.name === 'direct') continue;
      log(`${t.name}: stopping`);
      await t.stop().catch((error: Error) => log(`${t.name}: stop failed: ${error.message}`));
    }
    await fake.child.stop();
    for (const connection of connections) {
      await connection.flushdb().catch(() => undefined);
      connection.disconnect();
    }
  }
}

/** The two kinds of key of the side-by-side cell: the Default account's and a credited account's limited one. */
export const sideBySideKeys = ['default', 'credited'] as const;

/**
 * The Default account's key and a credited account's limited key on the one `start` gateway, non-stream at 64
 * connections, each measured once a round, the order alternated round by round (default first in odd rounds), so
 * whatever the machine does falls on both alike; the ratio of their pooled req/s is the figure.
 */
async function keysSideBySide(
  start: Target,
  defaultKey: string,
  settings: { rounds: number; durationS: number; warmupS: number; fakePid: number; body: string },
): Promise<KeysSideBySide> {
  const headers = { default: { authorization: `Bearer ${defaultKey}` }, credited: start.headers };
  const acc = new Map(sideBySideKeys.map((k) => [k, new CellAccumulator()]));
  const orders: string[][] = [];
  for (let round = 1; round <= settings.rounds; round += 1) {
    const order = round % 2 === 1 ? [...sideBySideKeys] : [...sideBySideKeys].reverse();
    orders.push(order);
    log(
      `keys side by side on start, non-stream, 64 connections, round ${round}/${settings.rounds}: ${order.join(', ')}`,
    );
    for (const k of order) {
      const a = acc.get(k)!;
      const r = await measureLoad({
        target: { url: start.url, headers: headers[k], body: settings.body },
        connections: 64,
        durationS: settings.durationS,
        warmupS: settings.warmupS,
        redis: start.redis,
        pids: { ...start.pids, fake: settings.fakePid },
        settleMs: 500,
        latencies: a.latencies,
      });
      a.add(r);
      log(
        `  ${k} key: ${Math.round(r.rps)} req/s, p50 ${r.latency.p50.toFixed(2)} ms${failuresOf(r) ? `, ${failuresOf(r)} failed` : ''}`,
      );
    }
  }
  return {
    target: 'start',
    connections: 64,
    orders,
    keys: Object.fromEntries([...acc].map(([k, a]) => [k, a.result()])),
  };
}

/**
 * CPU µs per request of the gateway's own processes (api and worker, or the one process), null if one was unreadable.
 */
function gatewayCpuUs(c: CellStats): number | null {
  const own = Object.entries(c.cpuUsPerRequest).filter(([n]) => !['fake', 'redis', 'loadgen', 'others'].includes(n));
  return own.some(([, v]) => v === null) ? null : own.reduce((sum, [, v]) => sum + (v ?? 0), 0);
}

/**
 * The soak sample the Redis bars compare the end with: the first under load at ≥ 60 s (after warm-up), else the last
 * under load.
 */
function referenceSample(samples: SoakSample[]): SoakSample | undefined {
  const load = samples.filter((s) => s.phase === 'load');
  return load.find((s) => s.t >= 59) ?? load[load.length - 1];
}

const int = (value: number) => Math.round(value).toLocaleString('en-US');
const signedMs = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(2)} ms`;

function bars(
  configNames: OverheadConfig[],
  cells: OverheadCell[],
  ttft: Record<string, TtftStats>,
  memory: OverheadMemory | undefined,
  keys?: KeysSideBySide,
): OverheadBar[] {
  const out: OverheadBar[] = [];
  // The Default account's key costs what a credited key costs (or less: it checks no balance), on the same gateway.
  // Held to the gateway's own CPU and Redis commands per request: on a machine shared with other tenants req/s
  // swings by more between two rounds than between the keys (shown beside them, not counted).
  if (keys) {
    const own = keys.keys.default!;
    const credited = keys.keys.credited!;
    const ratio = own.rps / credited.rps;
    out.push({
      config: 'start',
      name: 'Default account key ÷ credited key, non-stream req/s at 64 connections (same gateway, alternated)',
      target: '≥ 0.95×',
      actual: `${ratio.toFixed(3)}× (${int(own.rps)} vs ${int(credited.rps)} req/s)`,
      pass: ratio >= 0.95,
      informational: true,
    });
    const ownCpu = gatewayCpuUs(own);
    const creditedCpu = gatewayCpuUs(credited);
    const cpuRatio = ownCpu !== null && creditedCpu !== null ? ownCpu / creditedCpu : Number.NaN;
    out.push({
      config: 'start',
      name: 'Default account key ÷ credited key, gateway CPU µs per request at 64 connections',
      target: '≤ 1.05×',
      actual: `${cpuRatio.toFixed(3)}× (${ownCpu === null ? '-' : int(ownCpu)} vs ${creditedCpu === null ? '-' : int(creditedCpu)} µs)`,
      pass: cpuRatio <= 1.05,
    });
    const added = own.redisCommandsPerRequest - credited.redisCommandsPerRequest;
    out.push({
      config: 'start',
      name: 'Default account key − credited key, Redis commands per request',
      target: '≤ +0.5',
      actual: `${added >= 0 ? '+' : ''}${added.toFixed(2)} (${own.redisCommandsPerRequest.toFixed(1)} vs ${credited.redisCommandsPerRequest.toFixed(1)})`,
      pass: added <= 0.5,
    });
  }
  const plain1 = cells.find((c) => !c.stream && c.connections === 1)!.targets;
  const plain64 = cells.find((c) => !c.stream && c.connections === 64)!.targets;
  const floorRps = plain64.floor!.rps;
  const floorAdded = plain1.floor!.latency.p50 - plain1.direct!.latency.p50;
  const floorAddedTtft = ttft.floor!.ttft.p50 - ttft.direct!.ttft.p50;
  for (const name of configNames) {
    // `start` (a credited account's limited key) and `unlimited` carry the bars; `split` its throughput bar; the
    // rest is reported alongside. Throughput: at least 0.75× the bare BullMQ loop on this machine's two cores.
    const ratio = plain64[name]!.rps / floorRps;
    const minRatio = name === 'split' ? 1.3 : 0.75;
    out.push({
      config: name,
      name: 'non-stream req/s at 64 connections ÷ floor',
      target: `≥ ${minRatio.toFixed(1)}×`,
      actual: `${ratio.toFixed(2)}× (${int(plain64[name]!.rps)} vs ${int(floorRps)} req/s)`,
      pass: ratio >= minRatio,
      informational: name === 'one-loop' || name === 'log-off',
    });
    const added = plain1[name]!.latency.p50 - plain1.direct!.latency.p50;
    out.push({
      config: name,
      name: 'added p50 at 1 connection, non-stream',
      target: '≤ +1.50 ms',
      actual: `${signedMs(added)} (floor ${signedMs(floorAdded)})`,
      pass: added <= 1.5,
      informational: name !== 'start' && name !== 'unlimited',
    });
    const addedTtft = ttft[name]!.ttft.p50 - ttft.direct!.ttft.p50;
    out.push({
      config: name,
      name: 'added TTFT p50',
      target: '≤ +2.00 ms',
      actual: `${signedMs(addedTtft)} (floor ${signedMs(floorAddedTtft)})`,
      pass: addedTtft <= 2,
      informational: name !== 'start' && name !== 'unlimited',
    });
    const failed = cells.reduce((sum, c) => sum + failuresOf(c.targets[name]!), 0);
    const ttftFailed = ttft[name]!.failures;
    out.push({
      config: name,
      name: 'no errors in any cell',
      target: '0',
      actual: `${failed} failed responses, ${ttftFailed} failed streams`,
      pass: failed + ttftFailed === 0,
    });
  }

  // The request log's cost: the same build with it on (start) and off, in the same run.
  if (configNames.includes('start') && configNames.includes('log-off')) {
    for (const cell of cells) {
      if (cell.connections !== 64) continue;
      const on = cell.targets.start!;
      const off = cell.targets['log-off']!;
      const ratio = on.rps / off.rps;
      out.push({
        config: 'start',
        name: `request log on ÷ off, ${cell.stream ? 'stream' : 'non-stream'} req/s at 64 connections`,
        target: '≥ 0.95×',
        actual: `${ratio.toFixed(3)}× (${int(on.rps)} vs ${int(off.rps)} req/s)`,
        pass: ratio >= 0.95,
      });
      if (!cell.stream) {
        const added = on.redisCommandsPerRequest - off.redisCommandsPerRequest;
        out.push({
          config: 'start',
          name: 'request log: Redis commands per request added',
          target: '≤ 2',
          actual:
            `+${added.toFixed(2)} (${on.redisCommandsPerRequest.toFixed(1)} vs ` +
            `${off.redisCommandsPerRequest.toFixed(1)})`,
          pass: added <= 2,
        });
      }
    }
  }

  const s = memory?.soak;
  if (memory && s) {
    const proc = 'api' in memory.idleRss ? 'api' : 'gateway';
    const idle = memory.idleRss[proc] ?? null;
    const last = s.samples[s.samples.length - 1]!;
    const after = last.rss[proc] ?? null;
    const rssRatio = idle !== null && after !== null ? after / idle : Number.NaN;
    out.push({
      config: 'start',
      name: `${proc} RSS 30 s after the soak ÷ idle`,
      target: '≤ 1.20×',
      actual: `${rssRatio.toFixed(2)}× (${mib(after)} vs ${mib(idle)} MiB)`,
      pass: rssRatio <= 1.2,
    });
    const load = s.samples.filter((x) => x.phase === 'load');
    const reference = referenceSample(s.samples);
    const end = load[load.length - 1];
    if (reference && end) {
      const memRatio = end.redisUsedMemory / reference.redisUsedMemory;
      out.push({
        config: 'start',
        name: `Redis used_memory, end of soak ÷ t=${reference.t} s`,
        target: '≤ 1.05×',
        actual: `${memRatio.toFixed(3)}× (${mib(end.redisUsedMemory)} vs ${mib(reference.redisUsedMemory)} MiB)`,
        pass: memRatio <= 1.05,
      });
      const keyLimit = 1.1 * reference.redisKeys + 50;
      out.push({
        config: 'start',
        name: `keys in its db, end of soak vs t=${reference.t} s`,
        target: '≤ 1.1× + 50',
        actual: `${end.redisKeys} vs ${reference.redisKeys} (limit ${Math.floor(keyLimit)})`,
        pass: end.redisKeys <= keyLimit,
      });
    }
  }
  return out;
}

const mib = (bytes: number | null) => (bytes === null ? '-' : (bytes / 1048576).toFixed(1));
