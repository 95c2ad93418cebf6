import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { KeyStore, type KeyLimits } from '../../api/accounts/key-store.js';
import type { RequestView } from '../../shared/money/usage.js';
import { onProcessEnd } from './process-end.js';
import { processPrivateRedis, redisServerInstalled } from './redis-server.js';
import { recordUrlFor, resetRecordFor, testRecord } from './record.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The Redis server the tests were told to use, as `redis://host:port` (no
 * database): `TEST_REDIS_URL`, else `TEST_REDIS_HOST` / `TEST_REDIS_PORT`
 * (defaults 127.0.0.1 and 6379). Undefined when none is set.
 */
export function toldTestRedis(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const url = env.TEST_REDIS_URL;
  if (url) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new Error(`TEST_REDIS_URL is not a URL: "${url}" (expected redis://host:port)`);
    }
    if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')
      throw new Error(`TEST_REDIS_URL must be redis://host:port, got "${url}"`);
    if (parsed.pathname.replace(/\/+$/, '') !== '' || parsed.search) {
      throw new Error(
        `TEST_REDIS_URL must name a server, not a database ("${url}"): each test file picks its own databases ` +
          `(1–15) and flushes them`,
      );
    }
    return url.replace(/\/+$/, '');
  }
  const host = env.TEST_REDIS_HOST;
  const port = env.TEST_REDIS_PORT;
  if (!host && !port) return undefined;
  if (port && !/^\d{1,5}$/.test(port)) throw new Error(`TEST_REDIS_PORT must be a port number, got "${port}"`);
  return `redis://${host || '127.0.0.1'}:${port || 6379}`;
}

let testRedis: Promise<string> | undefined;
/** The server `freshRedis` uses: the one the tests were told to use, else this process's private redis-server. */
function testRedisServer(): Promise<string> {
  testRedis ??= (async () => {
    const told = toldTestRedis();
    if (told) return told;
    if (!redisServerInstalled()) {
      throw new Error(
        'The tests need a Redis: install redis-server (e.g. `apt-get install redis-server`) and each test ' +
          'process starts its own private one, ' +
          'or set TEST_REDIS_URL=redis://host:port to use a running Redis (its databases 1–15 are flushed).',
      );
    }
    return (await processPrivateRedis()).url;
  })();
  return testRedis;
}

/**
 * Each test file works in its own Redis database, emptied first, so queues and
 * keys never mix. By default that database is on a private redis-server this
 * test process starts on first use (one per process, shared by every call,
 * gone when the process exits), so nothing else is touched. With
 * `TEST_REDIS_URL` (or `TEST_REDIS_HOST` / `TEST_REDIS_PORT`) it is on that
 * Redis, and database `db` there is flushed.
 */
export async function freshRedis(db: number): Promise<{ url: string; redis: Redis }> {
  const url = `${await testRedisServer()}/${db}`;
  const redis = new Redis(url, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  // Its record (PostgreSQL) starts empty too.
  await resetRecordFor(url);
  return { url, redis };
}

/** A key store on a test Redis database and the record that goes with it. */
export async function testKeyStore(redis: Redis): Promise<KeyStore> {
  return new KeyStore(redis, await testRecord(redis));
}

/**
 * A key with `limits` on an account of its own holding `balance` micros (or unlimited), made through the stores as the
 * admin API makes them.
 */
export async function paidAccountKey(
  redis: Redis,
  balance: number | 'unlimited',
  limits: KeyLimits = {},
): Promise<{ id: string; key: string; account: string }> {
  return paidKeyIn(await testKeyStore(redis), balance, limits);
}

/** The same through a key store of the caller's (a Cluster's, a Sentinel's). */
export async function paidKeyIn(
  keys: KeyStore,
  balance: number | 'unlimited',
  limits: KeyLimits = {},
): Promise<{ id: string; key: string; account: string }> {
  const account = await keys.accounts.create({
    email: `paid-${randomBytes(6).toString('hex')}@example.com`,
    name: 'paid',
    unlimited: balance === 'unlimited',
  });
  if (balance !== 'unlimited' && balance !== 0) await keys.accounts.credit(account.id, balance, 'test');
  const created = await keys.create('paid', { accountId: account.id, ...limits });
  return { id: created.id, key: created.key, account: account.id };
}

export async function createKey(redis: Redis, name = 'test'): Promise<{ id: string; key: string }> {
  const created = await (await testKeyStore(redis)).create(name);
  return { id: created.id, key: created.key };
}

export interface GatewayProcess {
  proc: ChildProcess;
  /** `http://127.0.0.1:PORT` (api roles only). */
  url: string;
  logs: string[];
  client(apiKey: string, options?: Partial<ConstructorParameters<typeof OpenAI>[0]>): OpenAI;
  /** Sends a signal and waits for the process to exit. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const running = new Set<ChildProcess>();
function killGateways(): void {
  for (const proc of running) proc.kill('SIGKILL');
}

/**
 * Spawns the gateway as its own process (`bin/start.ts`, through tsx, or its build in dist/ under `npm test`), the
 * way `npm start` does, with the test's environment on top of a quiet,
 * loopback-only default; it does not wait for it to serve, and it is killed
 * with the test process whatever way that ends. With no
 * DATABASE_URL the record is the test database that goes with the gateway's
 * Redis; DATABASE_URL='' asks for the embedded default.
 */
export async function spawnGateway(
  role: 'all' | 'api' | 'worker',
  testEnv: Record<string, string>,
): Promise<ChildProcess> {
  const env = { ...testEnv };
  if (env.DATABASE_URL === '') delete env.DATABASE_URL;
  else
    env.DATABASE_URL ??= await recordUrlFor(
      env.REDIS_CLUSTER_NODES ? `redis://${env.REDIS_CLUSTER_NODES}` : (env.REDIS_URL ?? 'redis://127.0.0.1:6379/0'),
    );
  // Under `npm test`, dist/ was built before the first file ran: the gateway starts from it, as `npm start` does,
  // rather than compiling every source through tsx for each process. A file run by itself compiles them.
  const entry =
    process.env.SWITCHYARD_TEST_FROM_DIST === '1' ? ['dist/bin/start.js'] : ['--import', 'tsx', 'bin/start.ts'];
  const proc = spawn(process.execPath, [...entry, `--role=${role}`], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
      // `npm test` keeps V8's compiled code for every process it starts (bin/test.mjs): a gateway loads its modules
      // without compiling them again.
      ...(process.env.NODE_COMPILE_CACHE ? { NODE_COMPILE_CACHE: process.env.NODE_COMPILE_CACHE } : {}),
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      MOCK_STREAM_DELAY_MS: '5',
      // Tests of the money path use the mock as their vendor: bill its answers (off by default, refused in production).
      MOCK_BILLING: 'on',
      // `--role=all` keeps its workers on the api's event loop, as on one core, unless the test asks for the child
      // process (worker-process, readiness, metrics, stop-deadline and tracing do) or the run does
      // (TEST_WORKER_PROCESS=on): a start is then one process, not two, about 3 s of CPU less on a machine whose two
      // cores the other test files share.
      WORKER_PROCESS: process.env.TEST_WORKER_PROCESS ?? 'off',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(proc);
  onProcessEnd(killGateways);
  proc.once('exit', () => running.delete(proc));
  return proc;
}

/** Calls `onLine` with each whole line a process writes, on either stream. */
export function onLines(proc: ChildProcess, onLine: (line: string) => void): void {
  let buffer = '';
  const onData = (data: Buffer) => {
    buffer += data.toString();
    let newline: number;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      onLine(buffer.slice(0, newline));
      buffer = buffer.slice(newline + 1);
    }
  };
  proc.stdout!.on('data', onData);
  proc.stderr!.on('data', onData);
}

/** Starts the gateway (`spawnGateway`) and waits until it serves. */
export async function startGateway(options: {
  role?: 'all' | 'api' | 'worker';
  env: Record<string, string>;
}): Promise<GatewayProcess> {
  const role = options.role ?? 'all';
  const proc = await spawnGateway(role, options.env);
  const logs: string[] = [];
  let port = 0;
  const ready = new Promise<void>((resolve, reject) => {
    const onLine = (line: string) => {
      logs.push(line);
      if (process.env.TEST_GATEWAY_LOGS) process.stderr.write(`[${role}] ${line}\n`);
      const portMatch = /"port":(\d+)/.exec(line);
      if (portMatch && line.includes('gateway listening')) {
        port = Number(portMatch[1]);
        if (role !== 'all') resolve();
      }
      // `npm start` serves once its workers take jobs ("gateway ready", after its worker process's "workers started").
      if (role === 'worker' ? line.includes('workers started') : port > 0 && line.includes('gateway ready')) resolve();
    };
    onLines(proc, onLine);
    proc.once('exit', (code) =>
      reject(new Error(`gateway (${role}) exited with ${code} before it was ready:\n${logs.join('\n')}`)),
    );
    // Generous: a start compiles every source through tsx, slow on a 2-core machine running test files side by side.
    setTimeout(() => reject(new Error(`gateway (${role}) not ready after 60 s:\n${logs.join('\n')}`)), 60_000).unref();
  });
  try {
    await ready;
  } catch (error) {
    // A start that failed must not leave the process running: its pipes would keep this test process alive for ever.
    proc.kill('SIGKILL');
    throw error;
  }
  const url = `http://127.0.0.1:${port}`;
  return {
    proc,
    url,
    logs,
    client: (apiKey, clientOptions = {}) =>
      new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0, timeout: 20_000, ...clientOptions }),
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
      // 'close', not 'exit': by then every line it (and a worker process sharing its stdout) wrote has been read into
      // logs.
      const closed = once(proc, 'close');
      proc.kill(signal);
      const [code] = (await closed) as [number | null];
      return code;
    },
  };
}

/**
 * A request's record as `GET /v1/generation` answers the key that made it,
 * once the api's half is in and (with `settled`, the default) the worker's
 * settlement too: the record appears a moment after the answer. A Realtime
 * session's rows (`'session'`) are its worker's alone, written as it ends,
 * with no latency to wait for: their settlement is waited for, a while longer.
 */
export async function requestRecord(
  gatewayUrl: string,
  key: string,
  id: string,
  settled: boolean | 'session' = true,
): Promise<RequestView> {
  let found: RequestView | undefined;
  await waitFor(
    async () => {
      const res = await fetch(`${gatewayUrl}/v1/generation?id=${encodeURIComponent(id)}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      if (res.status !== 200) return false;
      found = ((await res.json()) as { data: RequestView }).data;
      return settled === 'session' ? found.settled : found.latency_ms !== null && (!settled || found.settled);
    },
    settled === 'session' ? 15_000 : 10_000,
    `the record of ${id}`,
  );
  return found!;
}

/** Polls until `check` returns true or the time runs out. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}
