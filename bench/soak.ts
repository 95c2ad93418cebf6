/**
 * The soak (issue 75): mixed traffic for SOAK_MINUTES while the soak kills its
 * own processes, then the clients' records checked against the gateway's
 * record and Redis, to the micro-dollar. See docs/soak.md.
 *
 *   node bin/build.mjs && node --import tsx bench/soak.ts
 *
 *   SOAK_MINUTES=20        how long the traffic runs (3: the short mode)
 *   SOAK_MAX_REQUESTS=N    stop the traffic after N requests (default 1,000,000)
 *   SOAK_CONCURRENCY=8     client loops sending at once
 *   SOAK_SENTINEL=1        Redis as a primary, a replica and three Sentinels, failed over once mid-run
 *
 * Everything runs on 127.0.0.1: a private Redis (or Sentinel set) and a
 * private PostgreSQL the soak starts, stops and deletes itself; the vendor
 * fakes (bench/soak-fakes.ts); two api processes and one worker process per
 * capability (`--role=worker` with WORKER_QUEUES), two for chat.
 *
 * Faults, on a schedule from the traffic's start (T = SOAK_MINUTES):
 *   every minute      a worker SIGKILLed (in turn), started again a second later
 *   every 3 minutes   an api SIGKILLed (in turn, from 1.5 min), started again 2 s later on its port
 *   at 0.30 T         the fake OpenAI errors (500 on every other call) for 20 s, then hangs for 20 s
 *   at 0.55 T         PostgreSQL stopped (fast shutdown) for 30 s
 *   at 0.70 T         (SOAK_SENTINEL=1) `SENTINEL FAILOVER`
 *   always            clients that leave a stream after its first content
 *
 * Exits 0 when the check is green, 1 when it is not, 2 when the soak itself
 * could not run (or passed its global deadline: everything is killed).
 */
import { mkdtempSync, mkdirSync, readFileSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../bin/local-redis.js';
import { startPrivatePostgres, type PrivatePostgres } from '../test/support/postgres-server.js';
import { startPrivateRedis, type PrivateRedis } from '../test/support/redis-server.js';
import { startRedisSentinel, type RedisSentinelHarness } from '../test/support/redis-sentinel.js';
import { installCleanup, root, rssBytes, sleep, spawnChild, stopAll, waitUntil, type Child } from './procs.js';
import { check, pending, percentile, slope, type SoakAccount } from './soak-check.js';
import { kindNames, pickKind, send, type ClientRecord, type KindName } from './soak-traffic.js';

const log = (message: string) => process.stderr.write(`[soak ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

function intEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return value;
}

const minutes = intEnv('SOAK_MINUTES', 20);
const maxRequests = intEnv('SOAK_MAX_REQUESTS', 1_000_000);
const concurrency = intEnv('SOAK_CONCURRENCY', 8);
const withSentinel = process.env.SOAK_SENTINEL === '1';
const runMs = Math.round(minutes * 60_000);
/** Past this, everything is killed and the soak exits 2: the run, 4 min to drain and check, 2 min to start. */
const globalDeadlineMs = runMs + 6 * 60_000;
const adminToken = 'soak-admin-token';
const clientTimeoutMs = 60_000;
/** A session, an async job or a batch, from its first request to its last answer. */
const sessionTimeoutMs = 120_000;

installCleanup();
const hardStop = setTimeout(() => {
  log(`global deadline (${Math.round(globalDeadlineMs / 1000)} s) passed: killing everything`);
  void teardown().finally(() => process.exit(2));
  setTimeout(() => process.exit(2), 20_000).unref();
}, globalDeadlineMs);
hardStop.unref();

const dir = mkdtempSync(join(tmpdir(), 'switchyard-soak-'));
// However the soak ends, its temporary directory goes (the servers' own helpers remove theirs).
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
for (const event of ['uncaughtException', 'unhandledRejection'] as const) {
  process.on(event, (error: unknown) => {
    log(`soak failed (${event}): ${(error as Error)?.stack ?? String(error)}`);
    void teardown().finally(() => process.exit(2));
    setTimeout(() => process.exit(2), 20_000).unref();
  });
}
const logDir = join(root, 'bench', 'results', 'logs');
mkdirSync(logDir, { recursive: true });
let redisServer: PrivateRedis | undefined;
let sentinel: RedisSentinelHarness | undefined;
let postgres: PrivatePostgres | undefined;
let checkRedis: Redis | undefined;
let fakes: Child | undefined;

// ---- the gateway's processes: each started again after it is killed ------------------------

interface Incarnation {
  pid: number;
  startedMs: number;
  endedMs?: number;
  /** [ms since the traffic started, RSS bytes]. */
  rss: Array<[number, number]>;
}

interface Proc {
  name: string;
  role: 'api' | 'worker';
  env: Record<string, string>;
  child?: Child;
  /** The api's base URL (its port stays the same across restarts). */
  url?: string;
  incarnations: Incarnation[];
  /** Killed by the soak on purpose; another exit is a finding. */
  killing: boolean;
  unexpectedExits: number;
  /** Starts it gave up because the record (PostgreSQL) was away: the gateway does not start without it. */
  startsRefused: number;
  /** How long each start took until it was ready (an api: /readyz 200), ms. */
  startMs: number[];
}

const procs: Proc[] = [];
let trafficStart = 0;
const sinceTraffic = () => (trafficStart === 0 ? 0 : Date.now() - trafficStart);
let stopping = false;

/** Apis being waited for (a start that exits is followed by another: one wait covers them). */
const restarting = new Set<Proc>();
/** Errors of the soak's own machinery during the run (a fault that could not be injected): each fails the check. */
const soakErrors: string[] = [];

async function startProc(proc: Proc): Promise<void> {
  const n = proc.incarnations.length + 1;
  const child = spawnChild(
    `${proc.name}#${n}`,
    ['dist/bin/start.js', `--role=${proc.role}`],
    proc.env,
    join(logDir, `soak-${proc.name}-${n}.log`),
  );
  proc.child = child;
  proc.killing = false;
  const incarnation: Incarnation = { pid: child.pid, startedMs: sinceTraffic(), rss: [] };
  proc.incarnations.push(incarnation);
  child.proc.once('exit', (code, signal) => {
    incarnation.endedMs = sinceTraffic();
    if (stopping || proc.killing) return;
    const recordAway =
      child.tail.some((l) => l.includes('cannot reach PostgreSQL')) &&
      faults.some((f) => f.kind === 'PostgreSQL stopped' && incarnation.startedMs <= f.endMs);
    if (recordAway) {
      proc.startsRefused += 1;
      log(`${proc.name} did not start: the record is away (${code ?? signal}); trying again in 2 s`);
    } else {
      proc.unexpectedExits += 1;
      log(`${proc.name} exited by itself (${code ?? signal}); starting it again:\n${child.tail.slice(-8).join('\n')}`);
    }
    setTimeout(() => {
      if (!stopping)
        void startProc(proc).catch((error: Error) => log(`${proc.name} did not start again: ${error.message}`));
    }, 2000);
  });
  const t0 = Date.now();
  if (proc.role === 'api' && !restarting.has(proc)) {
    // Not tied to this child: one that exits (the record away) is started again by its exit handler.
    restarting.add(proc);
    try {
      await waitUntil(
        `${proc.name} GET /readyz 200`,
        async () => (await fetch(`${proc.url}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200,
        90_000,
      );
    } finally {
      restarting.delete(proc);
    }
    proc.startMs.push(Date.now() - t0);
    if (trafficStart) log(`${proc.name} ready again after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
}

async function killProc(proc: Proc, restartAfterMs: number): Promise<void> {
  const child = proc.child;
  if (!child || child.exited) return;
  proc.killing = true;
  await child.stop('SIGKILL', 5000);
  await sleep(restartAfterMs);
  if (!stopping) await startProc(proc);
}

// ---- faults -------------------------------------------------------------------------------

interface Fault {
  kind: string;
  startMs: number;
  endMs: number;
  detail: string;
}
const faults: Fault[] = [];

async function faultWindow<T>(kind: string, detail: string, run: () => Promise<T>, settleMs = 10_000): Promise<T> {
  const fault: Fault = { kind, detail, startMs: sinceTraffic(), endMs: Number.POSITIVE_INFINITY };
  faults.push(fault);
  log(`fault: ${kind} ${detail}`);
  try {
    return await run();
  } finally {
    fault.endMs = sinceTraffic() + settleMs;
  }
}

/** Waits until `atMs` after the traffic's start; false if the run ends first. */
async function until(atMs: number): Promise<boolean> {
  while (sinceTraffic() < atMs) {
    if (trafficOver) return false;
    await sleep(Math.min(500, atMs - sinceTraffic()));
  }
  return !trafficOver;
}

async function fakeFault(mode: 'off' | 'error' | 'hang'): Promise<void> {
  const response = await fetch(`${fakeControlUrl}/__fault?mode=${mode}`, {
    method: 'POST',
    signal: AbortSignal.timeout(5000),
  });
  if (response.status !== 200) throw new Error(`fake fault ${mode}: ${response.status}`);
}

async function schedule(): Promise<void> {
  const workers = procs.filter((p) => p.role === 'worker' && p.name !== 'worker-chat-1');
  const apis = procs.filter((p) => p.role === 'api');
  const chains: Array<Promise<void>> = [];
  chains.push(
    (async () => {
      for (let i = 1; await until(i * 60_000); i += 1) {
        const victim = workers[(i - 1) % workers.length]!;
        await faultWindow('worker SIGKILL', victim.name, () => killProc(victim, 1000));
      }
    })(),
  );
  chains.push(
    (async () => {
      for (let i = 0; await until(90_000 + i * 180_000); i += 1) {
        const victim = apis[i % apis.length]!;
        await faultWindow('api SIGKILL', victim.name, () => killProc(victim, 2000));
      }
    })(),
  );
  chains.push(
    (async () => {
      if (!(await until(0.3 * runMs))) return;
      await faultWindow('vendor errors', 'fake OpenAI: 500 on every other chat/embeddings call for 20 s', async () => {
        await fakeFault('error');
        await sleep(20_000);
      });
      await faultWindow(
        'vendor hangs',
        'fake OpenAI: every other chat/embeddings call held unanswered for 20 s',
        async () => {
          await fakeFault('hang');
          await sleep(20_000);
          await fakeFault('off');
        },
      );
    })(),
  );
  chains.push(
    (async () => {
      if (!(await until(0.55 * runMs))) return;
      await faultWindow('PostgreSQL stopped', '30 s (fast shutdown, then started again)', async () => {
        await postgres!.stop('SIGINT');
        await sleep(30_000);
        await postgres!.start();
      });
    })(),
  );
  if (withSentinel) {
    chains.push(
      (async () => {
        if (!(await until(0.7 * runMs))) return;
        await faultWindow('Redis failover', 'SENTINEL FAILOVER', async () => {
          const before = await sentinel!.primary();
          await sentinel!.call(sentinel!.sentinelPorts[0]!, 'SENTINEL', 'FAILOVER', sentinel!.name);
          await waitUntil(
            'the Sentinels to name a new primary',
            async () => (await sentinel!.primary()).port !== before.port,
            30_000,
          );
          log(`Redis primary ${before.address} → ${(await sentinel!.primary()).address}`);
        });
      })(),
    );
  }
  await Promise.all(
    chains.map((chain) =>
      chain.catch((error: Error) => {
        soakErrors.push(`fault schedule: ${error.message.split('\n')[0]}`);
        log(`fault schedule failed: ${error.stack ?? error.message}`);
      }),
    ),
  );
}

// ---- traffic ------------------------------------------------------------------------------

const records: ClientRecord[] = [];
let trafficOver = false;
let fakeControlUrl = '';
const keySecrets = new Map<string, string>();

async function clientLoop(loop: number): Promise<void> {
  const apis = procs.filter((p) => p.role === 'api');
  for (let i = 0; ; i += 1) {
    if (trafficOver || records.length + inFlight >= maxRequests) return;
    const seq = loop * 10_000_000 + i;
    const kind = pickKind(Math.random());
    const api = Math.floor(Math.random() * apis.length);
    const startedMs = sinceTraffic();
    inFlight += 1;
    const apiKey = keySecrets.get(kind.key)!;
    const results = kind.run
      ? await kind.run(seq, {
          apis: [apis[api]!.url!, ...apis.filter((_, i) => i !== api).map((p) => p.url!)],
          apiKey,
          timeoutMs: sessionTimeoutMs,
        })
      : [await send(kind, seq, { baseUrl: apis[api]!.url!, apiKey, timeoutMs: clientTimeoutMs })];
    inFlight -= 1;
    for (const result of results)
      records.push({ seq, kind: kind.name, key: kind.key, api: api + 1, startedMs, ...result });
    const result = results[results.length - 1]!;
    // A tenant's clients do not send back to back: about 20 requests a second per loop at most, and they
    // wait half a second after a connection refused or dropped before the next.
    await sleep(20 + Math.random() * 60 + (result.status === null ? 500 : 0));
  }
}
let inFlight = 0;

// ---- set-up -------------------------------------------------------------------------------

async function admin(url: string, method: string, path: string, body?: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const json = (await response.json()) as Record<string, unknown>;
  if (response.status >= 300) throw new Error(`admin ${method} ${path}: ${response.status} ${JSON.stringify(json)}`);
  return json;
}

interface KeyPlan {
  name: string;
  limitUsd?: number;
  rpm?: number;
  budgetUsd?: number;
}
const accountPlans: Array<{ name: string; creditsUsd: number; keys: KeyPlan[] }> = [
  { name: 'acme', creditsUsd: 100, keys: [{ name: 'main' }, { name: 'second' }] },
  { name: 'cachers', creditsUsd: 20, keys: [{ name: 'cache' }] },
  {
    name: 'limits',
    creditsUsd: 20,
    keys: [
      { name: 'limited', limitUsd: 0.0005 },
      { name: 'rpm', rpm: 12 },
      { name: 'budget', budgetUsd: 0.0003 },
    ],
  },
  { name: 'poor', creditsUsd: 0.0004, keys: [{ name: 'poor' }] },
];

async function makeAccounts(url: string): Promise<SoakAccount[]> {
  const out: SoakAccount[] = [];
  for (const plan of accountPlans) {
    const account = await admin(url, 'POST', '/admin/accounts', {
      email: `${plan.name}@soak.example`,
      name: plan.name,
    });
    const id = String(account.id);
    await admin(url, 'POST', `/admin/accounts/${id}/credits`, { amount_usd: plan.creditsUsd, note: 'soak' });
    const keys: SoakAccount['keys'] = [];
    for (const k of plan.keys) {
      const made = await admin(url, 'POST', '/admin/keys', {
        name: k.name,
        account_id: id,
        ...(k.limitUsd !== undefined ? { limit_usd: k.limitUsd } : {}),
        ...(k.rpm !== undefined ? { rpm: k.rpm } : {}),
        ...(k.budgetUsd !== undefined ? { budget_usd: k.budgetUsd, budget_period: 'day' } : {}),
      });
      keySecrets.set(k.name, String(made.key));
      keys.push({
        name: k.name,
        id: String(made.id),
        limitMicros: k.limitUsd === undefined ? null : Math.round(k.limitUsd * 1e6),
        budgetMicros: k.budgetUsd === undefined ? null : Math.round(k.budgetUsd * 1e6),
      });
    }
    out.push({ name: plan.name, id, creditsMicros: Math.round(plan.creditsUsd * 1e6), keys });
  }
  return out;
}

async function teardown(): Promise<void> {
  stopping = true;
  await Promise.allSettled(procs.map((p) => p.child?.stop('SIGTERM', 10_000)));
  await stopAll();
  checkRedis?.disconnect();
  await postgres?.remove().catch((error: Error) => log(`PostgreSQL remove: ${error.message}`));
  await redisServer?.remove().catch((error: Error) => log(`Redis remove: ${error.message}`));
  await sentinel?.stop().catch((error: Error) => log(`Sentinel stop: ${error.message}`));
  rmSync(dir, { recursive: true, force: true });
}

// ---- the run ------------------------------------------------------------------------------

async function main(): Promise<number> {
  if (!existsSync(join(root, 'dist', 'bin', 'start.js')))
    throw new Error('dist/bin/start.js is missing: run `node bin/build.mjs` first');
  log(
    `${minutes} min, at most ${maxRequests} requests, ${concurrency} client loops, ${withSentinel ? 'Redis with Sentinel' : 'one Redis'}`,
  );

  let redisEnv: Record<string, string>;
  if (withSentinel) {
    sentinel = await startRedisSentinel({ downAfterMs: 2000, failoverTimeoutMs: 10_000 });
    redisEnv = { REDIS_URL: 'redis://127.0.0.1', ...sentinel.env };
    checkRedis = new Redis({
      sentinels: sentinel.sentinelNodes,
      name: sentinel.name,
      maxRetriesPerRequest: 3,
      connectTimeout: 5000,
      failoverDetector: true,
    });
  } else {
    redisServer = await startPrivateRedis({ aof: true });
    redisEnv = { REDIS_URL: redisServer.url };
    checkRedis = new Redis(redisServer.url, { maxRetriesPerRequest: 3, connectTimeout: 5000 });
  }
  checkRedis.on('error', () => undefined);
  postgres = await startPrivatePostgres();
  log(
    `Redis ${redisEnv.REDIS_URL}${withSentinel ? ` (Sentinels ${sentinel!.sentinels})` : ''}, PostgreSQL ${postgres.url}`,
  );

  fakes = spawnChild(
    'fakes',
    ['--import', 'tsx', 'bench/soak-fakes.ts'],
    { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root' },
    join(logDir, 'soak-fakes.log'),
  );
  const line = await Promise.race([
    fakes.firstLine,
    sleep(30_000).then(() => Promise.reject(new Error(`fakes silent after 30 s:\n${fakes!.tail.join('\n')}`))),
  ]);
  const fake = JSON.parse(line) as {
    openaiUrl: string;
    anthropicUrl: string;
    geminiUrl: string;
    controlUrl: string;
    keys: { openai: string; anthropic: string; gemini: string };
  };
  fakeControlUrl = fake.controlUrl;

  const blobDir = join(dir, 'blobs');
  mkdirSync(blobDir, { recursive: true });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '/root',
    HOST: '127.0.0.1',
    ...redisEnv,
    DATABASE_URL: postgres.url,
    DATA_DIR: join(dir, 'data'),
    BLOB_DIR: blobDir,
    ADMIN_TOKEN: adminToken,
    OPENAI_API_KEY: fake.keys.openai,
    OPENAI_BASE_URL: fake.openaiUrl,
    ANTHROPIC_API_KEY: fake.keys.anthropic,
    ANTHROPIC_BASE_URL: fake.anthropicUrl,
    GEMINI_API_KEY: fake.keys.gemini,
    GEMINI_BASE_URL: fake.geminiUrl,
    MOCK_VENDOR: 'off',
    LOG_LEVEL: 'warn',
    LOG_FORMAT: 'json',
    // A killed worker's jobs are handed on within 4 s; a hung vendor call ends within about 3 s.
    WORKER_LOCK_MS: '4000',
    VENDOR_FIRST_BYTE_TIMEOUT_MS: '3000',
    VENDOR_IDLE_TIMEOUT_MS: '3000',
    // Reservations of jobs lost with their api and worker come back a minute after this.
    REQUEST_DEADLINE_MS: '30000',
  };
  const apiPorts = [await freePort(), await freePort()];
  for (const [i, port] of apiPorts.entries()) {
    procs.push({
      name: `api-${i + 1}`,
      role: 'api',
      env: { ...env, PORT: String(port), LOG_LEVEL: process.env.SOAK_API_LOG_LEVEL ?? 'warn' },
      url: `http://127.0.0.1:${port}`,
      incarnations: [],
      killing: false,
      unexpectedExits: 0,
      startsRefused: 0,
      startMs: [],
    });
  }
  const workerPlan: Array<[string, string]> = [
    ['worker-chat-1', 'chat'],
    ['worker-chat-2', 'chat'],
    ['worker-embeddings', 'embeddings'],
    ['worker-image', 'image'],
    ['worker-voice', 'audio,realtime'],
  ];
  for (const [name, queues] of workerPlan)
    procs.push({
      name,
      role: 'worker',
      env: { ...env, PORT: '0', WORKER_QUEUES: queues },
      incarnations: [],
      killing: false,
      unexpectedExits: 0,
      startsRefused: 0,
      startMs: [],
    });

  // The first api makes the record's tables; then the others.
  await startProc(procs[0]!);
  await Promise.all(procs.slice(1).map((p) => startProc(p)));
  const accounts = await makeAccounts(procs[0]!.url!);
  log(`${procs.length} gateway processes up; ${accounts.length} accounts, ${keySecrets.size} keys`);

  // RSS of every process now running, every 5 s.
  const rssTimer = setInterval(() => {
    for (const proc of procs) {
      const incarnation = proc.incarnations[proc.incarnations.length - 1];
      if (!incarnation || incarnation.endedMs !== undefined) continue;
      const rss = rssBytes(incarnation.pid);
      if (rss !== undefined) incarnation.rss.push([sinceTraffic(), rss]);
    }
  }, 5000);
  rssTimer.unref();

  trafficStart = Date.now();
  const progress = setInterval(() => {
    const counts = { answered: 0, refused: 0, failed: 0, left: 0 };
    for (const r of records) counts[r.outcome] += 1;
    log(
      `${Math.round(sinceTraffic() / 1000)} s: ${records.length} requests (${JSON.stringify(counts)}), ` +
        `${faults.length} faults`,
    );
  }, 30_000);
  progress.unref();
  const loops = Array.from({ length: concurrency }, (_, i) => clientLoop(i));
  const scheduled = schedule();
  await Promise.race([sleep(runMs), Promise.all(loops)]);
  trafficOver = true;
  await Promise.all(loops);
  await scheduled;
  clearInterval(progress);
  const trafficMs = sinceTraffic();
  log(`traffic over after ${Math.round(trafficMs / 1000)} s: ${records.length} requests; draining`);

  // Every process up (a restart may still be under way), then the record writer catches up.
  await fakeFault('off').catch(() => undefined);
  await waitUntil('every gateway process running', async () => procs.every((p) => p.child && !p.child.exited), 60_000);
  let last = { streamed: -1, reserved: -1, deadlines: -1 };
  const drained = await waitUntil(
    'the usage streams empty and nothing reserved',
    async () => {
      last = await pending(checkRedis!, accounts);
      return last.streamed === 0 && last.reserved === 0 && last.deadlines === 0;
    },
    150_000,
  ).then(
    () => true,
    () => false,
  );
  if (!drained) log(`not drained after 150 s: ${JSON.stringify(last)}`);
  // The api's request-log halves of the last answers trail them by a moment.
  await sleep(3000);
  clearInterval(rssTimer);

  // The vendors' view: an event the gateway sent the fake Realtime vendor that is not OpenAI's is a finding.
  const fakeStats = await fetch(`${fakeControlUrl}/__stats`, { signal: AbortSignal.timeout(5000) })
    .then((r) => r.json() as Promise<{ realtime?: { opened: number; problems: string[] } }>)
    .catch(() => undefined);
  const apiKills = faults
    .filter((f) => f.kind === 'api SIGKILL')
    .map((f) => ({ api: Number(f.detail.replace('api-', '')), atMs: f.startMs }));
  const result = await check(postgres.url, checkRedis, accounts, records, apiKills);
  if (!fakeStats) result.failures.push('the vendor fakes did not answer /__stats after the run');
  else if (fakeStats.realtime?.problems.length)
    result.failures.push(
      `the gateway sent the Realtime vendor events off its spec: ${fakeStats.realtime.problems.join('; ')}`,
    );
  if (!drained) result.failures.push(`the gateway did not drain within 150 s: ${JSON.stringify(last)}`);
  for (const error of soakErrors) result.failures.push(error);
  const unexpected = procs.filter((p) => p.unexpectedExits > 0);
  for (const p of unexpected)
    result.failures.push(`${p.name} exited ${p.unexpectedExits} time(s) without being killed`);
  const refusedStarts = procs.filter((p) => p.startsRefused > 0);
  if (refusedStarts.length)
    result.notes.push(
      `starts refused while PostgreSQL was away (the process exits; the soak starts it again): ${refusedStarts.map((p) => `${p.name} ×${p.startsRefused}`).join(', ')}`,
    );
  const apiRestarts = procs.filter((p) => p.role === 'api').flatMap((p) => p.startMs.slice(1));
  if (apiRestarts.length)
    result.notes.push(
      `api restarts took ${apiRestarts.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(', ')} to /readyz 200`,
    );

  // ---- figures ----
  const inFault = (r: ClientRecord) => faults.some((f) => r.startedMs >= f.startMs && r.startedMs <= f.endMs);
  const answeredLatency = (during: boolean) =>
    records.filter((r) => r.outcome === 'answered' && inFault(r) === during).map((r) => r.latencyMs);
  const p99With = percentile(answeredLatency(true), 0.99);
  const p99Without = percentile(answeredLatency(false), 0.99);
  const byKind = new Map<KindName, Record<string, number>>();
  for (const name of kindNames) byKind.set(name, { sent: 0, answered: 0, refused: 0, failed: 0, left: 0 });
  for (const r of records) {
    const row = byKind.get(r.kind)!;
    row.sent! += 1;
    row[r.outcome]! += 1;
  }
  const faultCounts = new Map<string, number>();
  for (const f of faults) faultCounts.set(f.kind, (faultCounts.get(f.kind) ?? 0) + 1);
  const cacheHits = records.filter((r) => r.cacheStatus?.includes('hit')).length;
  const coalesced = records.filter((r) => r.cacheStatus?.includes('collapsed')).length;

  // RSS: per start that lived through its first minute (warm-up) and 1 more, the slope of its samples during
  // the traffic, MB per minute; judged on those with 8 minutes or more of samples, over their second half
  // (a process that has just started grows its heap to its working size first).
  const rssRows: string[] = [];
  let worstSlope: number | null = null;
  const mb = (bytes: number) => (bytes / 1048576).toFixed(0);
  for (const proc of procs) {
    for (const [i, inc] of proc.incarnations.entries()) {
      const warm = inc.rss.filter(([ms]) => ms - inc.startedMs >= 60_000 && ms <= trafficMs);
      const span = warm.length > 1 ? warm[warm.length - 1]![0] - warm[0]![0] : 0;
      if (span < 60_000) continue;
      const judged = span >= 8 * 60_000;
      const points = (judged ? warm.slice(Math.floor(warm.length / 2)) : warm).map(([ms, rss]): [number, number] => [
        ms / 60_000,
        rss / 1048576,
      ]);
      const s = slope(points);
      if (s === null) continue;
      if (judged) worstSlope = Math.max(worstSlope ?? Number.NEGATIVE_INFINITY, s);
      const values = warm.map(([, rss]) => rss);
      rssRows.push(
        `${proc.name}#${i + 1}: ${mb(values[0]!)} → ${mb(values[values.length - 1]!)} MB (min ${mb(Math.min(...values))}, max ${mb(Math.max(...values))}) over ${(span / 60_000).toFixed(1)} min, slope ${s.toFixed(2)} MB/min${judged ? ' (second half, judged)' : ''}`,
      );
    }
  }
  const slopeLimit = Number(process.env.SOAK_RSS_SLOPE_MB_MIN ?? 2);
  if (worstSlope !== null && worstSlope > slopeLimit)
    result.failures.push(
      `RSS grows ${worstSlope.toFixed(2)} MB/min in a process over the second half of its life (limit ${slopeLimit})`,
    );

  const out: string[] = [];
  out.push('');
  out.push(
    `soak: ${minutes} min${withSentinel ? ', Redis with Sentinel' : ''}, ${records.length} requests in ${(trafficMs / 1000).toFixed(0)} s, ${concurrency} client loops`,
  );
  out.push('');
  out.push('| kind | sent | answered | refused | failed | left |');
  out.push('|---|---:|---:|---:|---:|---:|');
  for (const [name, row] of byKind)
    if (row.sent)
      out.push(`| ${name} | ${row.sent} | ${row.answered} | ${row.refused} | ${row.failed} | ${row.left} |`);
  const totals = { sent: records.length, answered: 0, refused: 0, failed: 0, left: 0 };
  for (const r of records) totals[r.outcome] += 1;
  out.push(`| all | ${totals.sent} | ${totals.answered} | ${totals.refused} | ${totals.failed} | ${totals.left} |`);
  out.push('');
  out.push(`cache: ${cacheHits} hits, ${coalesced} shared calls`);
  out.push(`faults: ${[...faultCounts].map(([k, n]) => `${k} ×${n}`).join(', ') || 'none'}`);
  const failedDetail = new Map<string, number>();
  for (const r of records)
    if (r.outcome === 'failed')
      failedDetail.set(
        `${r.kind}: ${r.detail ?? r.errorCode ?? r.status}`,
        (failedDetail.get(`${r.kind}: ${r.detail ?? r.errorCode ?? r.status}`) ?? 0) + 1,
      );
  if (failedDetail.size)
    out.push(
      `failed, as the clients saw it: ${[...failedDetail]
        .sort((a, b) => b[1] - a[1])
        .slice(0, 12)
        .map(([k, n]) => `${k} ×${n}`)
        .join('; ')}`,
    );
  const refusedDetail = new Map<string, number>();
  for (const r of records)
    if (r.outcome === 'refused')
      refusedDetail.set(
        `${r.kind}: ${r.status} ${r.errorCode}`,
        (refusedDetail.get(`${r.kind}: ${r.status} ${r.errorCode}`) ?? 0) + 1,
      );
  if (refusedDetail.size)
    out.push(
      `refused: ${[...refusedDetail]
        .sort((a, b) => b[1] - a[1])
        .map(([k, n]) => `${k} ×${n}`)
        .join('; ')}`,
    );
  out.push(
    `lost ${result.figures.lost}, doubled ${result.figures.doubled}, drift ${result.figures.driftMicros} µ$, ` +
      `record disagreeing ${result.figures.wrongStatus}, refusals unlogged ${result.figures.unloggedRefusals} ` +
      `(+${result.figures.refusalsLostWithApi} with their api killed as it answered)`,
  );
  out.push(
    `usage rows ${result.figures.usageRows} (${result.figures.rowsNoClientSaw} of requests no client got an id ` +
      `for), dead letters ${result.figures.deadLetters}`,
  );
  out.push(
    `spent: ${Object.entries(result.figures)
      .filter(([k]) => k.startsWith('spent.'))
      .map(([k, v]) => `${k.slice(6)} ${v} µ$`)
      .join(', ')}`,
  );
  const fmt = (v: number | null) => (v === null ? 'n/a' : `${v.toFixed(0)} ms`);
  out.push(
    `p99 of answered requests: ${fmt(p99With)} during faults (${answeredLatency(true).length}), ` +
      `${fmt(p99Without)} without (${answeredLatency(false).length})`,
  );
  out.push(
    `RSS slope: ${worstSlope === null ? 'n/a (no process lived 9 min)' : `${worstSlope.toFixed(2)} MB/min (limit ${slopeLimit})`}; per start, after its first minute:`,
  );
  for (const row of rssRows) out.push(`  ${row}`);
  for (const note of result.notes) out.push(`note: ${note}`);
  out.push('');
  out.push(result.failures.length === 0 ? 'CHECK GREEN' : `CHECK FAILED (${result.failures.length}):`);
  for (const failure of result.failures) out.push(`  - ${failure}`);

  const rss = Object.fromEntries(
    procs.map((p) => [
      p.name,
      p.incarnations.map((inc) => ({ pid: inc.pid, startedMs: inc.startedMs, endedMs: inc.endedMs, rss: inc.rss })),
    ]),
  );
  writeFileSync(join(logDir, 'soak-records.json'), JSON.stringify({ faults, records, rss }, null, 0));
  await teardown();
  // What the gateway's logs say went wrong on the way (each process's log, each incarnation).
  const warned = new Map<string, number>();
  for (const proc of procs) {
    for (let n = 1; n <= proc.incarnations.length; n += 1) {
      let text = '';
      try {
        text = readFileSync(join(logDir, `soak-${proc.name}-${n}.log`), 'utf8');
      } catch {
        continue;
      }
      for (const line of text.split('\n')) {
        const level = /"level":(\d+)/.exec(line);
        if (!level || Number(level[1]) < 40) continue;
        const msg = /"msg":"([^"]{0,120})/.exec(line)?.[1] ?? '?';
        const err = /"message":"([^"]{0,60})/.exec(line)?.[1];
        const what = `${proc.role} ${Number(level[1]) >= 50 ? 'error' : 'warn'}: ${msg}${err ? ` (${err})` : ''}`;
        warned.set(what, (warned.get(what) ?? 0) + 1);
      }
    }
  }
  if (warned.size) {
    out.push('gateway log warnings and errors (by message):');
    for (const [what, n] of [...warned].sort((a, b) => b[1] - a[1]).slice(0, 15)) out.push(`  ${n} × ${what}`);
  }
  // Nothing left behind: the servers' directories are gone and their processes with them.
  const leftovers = [postgres.data, redisServer?.dir, sentinel?.dir, dir].filter(
    (p): p is string => p !== undefined && existsSync(p),
  );
  const alive = procs.flatMap((p) => p.incarnations.map((i) => i.pid)).filter((pid) => rssBytes(pid) !== undefined);
  if (leftovers.length) result.failures.push(`left on disk: ${leftovers.join(', ')}`);
  if (alive.length) result.failures.push(`gateway processes still running: ${alive.join(', ')}`);
  out.push(
    leftovers.length === 0 && alive.length === 0
      ? 'nothing left behind (Redis, PostgreSQL, gateway processes, temporary files)'
      : 'LEFT BEHIND: see above',
  );
  process.stdout.write(`${out.join('\n')}\n`);
  return result.failures.length === 0 && leftovers.length === 0 && alive.length === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  async (error: Error) => {
    log(`soak could not run: ${error.stack ?? error.message}`);
    await teardown().catch(() => undefined);
    process.exit(2);
  },
);
