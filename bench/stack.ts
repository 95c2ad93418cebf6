/**
 * The system under test: the fake upstream and the gateway as child
 * processes, started the way an operator would (`node dist/bin/start.js`).
 */
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import { join } from 'node:path';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import { freePort } from '../bin/local-redis.js';
import { root, sleep, spawnChild, waitUntil, type Child } from './procs.js';
import { recordUrlFor } from '../test/support/record.js';

export const upstreamKey = 'sk-bench';
export const model = 'gpt-4o-mini';

export const plainBody = { model, messages: [{ role: 'user', content: 'Say hello.' }] };
export const streamBody = { ...plainBody, stream: true };

export const log = (message: string) =>
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

const baseEnv = (): Record<string, string> => ({ PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root' });

export interface FakeOptions {
  /** The fake OpenAI waits this long before every default answer. */
  latencyMs?: number;
  /** Requests beyond this many in flight are answered 429 and counted (0: no cap). */
  cap?: number;
  /** Which fakes run in the process (default: openai only). */
  vendors?: Array<'openai' | 'anthropic' | 'gemini'>;
  /** Stream requests get one long stream of this many text deltas (bench/long-streams.ts). */
  streamChunks?: number;
  /** The fake Anthropic answers this late (with `vendors` including anthropic). */
  anthropicLatencyMs?: number;
  /** Chat streams are answered as a model writes them: this many deltas, one every `paceMs` (after `latencyMs`). */
  paceTokens?: number;
  paceMs?: number;
}

export interface Fake {
  child: Child;
  /** The fake OpenAI's base URL (with `/v1`). */
  url: string;
  /** The control server of the fake process (`GET /__stats`, `POST /__reset`, `POST /__enqueue`). */
  controlUrl: string;
  anthropicUrl?: string;
  geminiUrl?: string;
}

export async function startFake(options: FakeOptions = {}): Promise<Fake> {
  const args = ['--import', 'tsx', 'bench/fake-upstream-process.ts'];
  if (options.latencyMs) args.push(`--latency-ms=${options.latencyMs}`);
  if (options.cap) args.push(`--cap=${options.cap}`);
  if (options.vendors) args.push(`--vendors=${options.vendors.join(',')}`);
  if (options.streamChunks) args.push(`--stream-chunks=${options.streamChunks}`);
  if (options.anthropicLatencyMs) args.push(`--anthropic-latency-ms=${options.anthropicLatencyMs}`);
  if (options.paceTokens) args.push(`--pace-tokens=${options.paceTokens}`, `--pace-ms=${options.paceMs ?? 20}`);
  const child = spawnChild('fake', args, baseEnv());
  const line = await Promise.race([
    child.firstLine,
    sleep(20_000).then(() => {
      throw new Error(`fake upstream silent after 20 s:\n${child.tail.join('\n')}`);
    }),
  ]);
  const started = JSON.parse(line) as Omit<Fake, 'child'>;
  return { child, ...started };
}

/** Per-fake counters of the fake process (see bench/fake-upstream-process.ts). */
export interface FakeStats {
  requests: number | null;
  inFlight: number;
  maxInFlight: number;
  /** Requests the fake answered 429 because more than its cap were in flight. */
  overCap?: number;
  aborted: number;
  /** With a cap and a latency: idle time of a slot between an answer and the next request, and busy share. */
  slotUse?: SlotUse | null;
}

export interface SlotUse {
  handoffs: number;
  gapMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  spanMs: number;
  utilisation: number;
}

export async function fakeControl(
  fake: Fake,
  method: 'GET' | 'POST',
  path: string,
): Promise<Record<string, FakeStats>> {
  const response = await fetch(`${fake.controlUrl}${path}`, { method, signal: AbortSignal.timeout(5000) });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`fake control ${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text) as Record<string, FakeStats>;
}

/**
 * How the gateway runs:
 *   start     `node dist/bin/start.js` as `npm start` runs it, nothing added (it may fork a worker process)
 *   one-loop  the same with WORKER_PROCESS=off: api and workers on one event loop
 *   all       one process, as before (= one-loop)
 *   split     `--role=api` + `--role=worker` processes
 */
export type GatewayConfig = 'all' | 'split' | 'start' | 'one-loop';
export const gatewayConfigs: readonly GatewayConfig[] = ['start', 'one-loop', 'all', 'split'];

export interface Gateway {
  config: GatewayConfig;
  url: string;
  /** The processes this bench spawned. */
  children: Record<string, Child>;
  /**
   * Every process of the gateway by role: the spawned ones, and (after `discoverProcesses`) those
   * `start` forked itself: `api` and `worker`, or `gateway` when it forked nothing.
   */
  pids: Record<string, number>;
  /** Processes the gateway started itself (found by `discoverProcesses`): waited for, or killed, at stop. */
  forked: number[];
}

export interface GatewayOptions {
  /** Added to (or replacing) the gateway's environment. */
  env?: Record<string, string>;
  /** Worker processes in the split configuration (default 1). */
  workers?: number;
  /** Log files are bench/results/logs/<tag>-<process>.log (default: the configuration name). */
  logTag?: string;
  /** Another checkout's build to run (`<dir>/dist/bin/start.js`), side by side with this one's (default: this one). */
  buildDir?: string;
}

export async function startGateway(
  config: GatewayConfig,
  fakeUrl: string,
  redisUrl: string,
  cpuProfDir?: string,
  options: GatewayOptions = {},
): Promise<Gateway> {
  const port = await freePort();
  const env = {
    ...baseEnv(),
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redisUrl,
    // The record (PostgreSQL) that goes with this Redis database, as the tests pair them.
    DATABASE_URL: await recordUrlFor(redisUrl),
    OPENAI_API_KEY: upstreamKey,
    OPENAI_BASE_URL: fakeUrl,
    MOCK_VENDOR: 'off',
    LOG_LEVEL: 'warn',
    ...(config === 'all' || config === 'one-loop' ? { WORKER_PROCESS: 'off' } : {}),
    ...options.env,
  };
  const tag = options.logTag ?? config;
  const nodeArgs = (name: string) => {
    if (!cpuProfDir) return [];
    if (config === 'start') {
      // A forked process inherits these flags: node's own file names (with the pid) keep the profiles apart.
      const dir = join(cpuProfDir, `${tag}-${Date.now()}`);
      mkdirSync(dir, { recursive: true });
      return ['--cpu-prof', `--cpu-prof-dir=${dir}`];
    }
    mkdirSync(cpuProfDir, { recursive: true });
    return ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`, `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`];
  };
  const logDir = join(root, 'bench', 'results', 'logs');
  mkdirSync(logDir, { recursive: true });
  const logFile = (name: string) => join(logDir, `${tag}-${name}.log`);
  const children: Record<string, Child> = {};
  const script = options.buildDir ? join(options.buildDir, 'dist', 'bin', 'start.js') : 'dist/bin/start.js';
  if (config !== 'split') {
    children.gateway = spawnChild('gateway', [...nodeArgs('gateway'), script], env, logFile('gateway'));
  } else {
    const workers = Math.max(1, options.workers ?? 1);
    for (let i = 1; i <= workers; i += 1) {
      const name = workers === 1 ? 'worker' : `worker${i}`;
      children[name] = spawnChild(name, [...nodeArgs(name), script, '--role=worker'], env, logFile(name));
    }
    children.api = spawnChild('api', [...nodeArgs('api'), script, '--role=api'], env, logFile('api'));
  }
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(
    'GET /readyz 200',
    async () => (await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200,
    20_000,
    Object.values(children),
  );
  const pids = Object.fromEntries(Object.entries(children).map(([name, child]) => [name, child.pid]));
  return { config, url, children, pids, forked: [] };
}

/** Child processes of a process, from /proc/<pid>/task/<tid>/children of each of its threads. */
export function childPids(pid: number): number[] {
  const out = new Set<number>();
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  for (const task of tasks) {
    try {
      for (const child of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim().split(/\s+/)) {
        if (child) out.add(Number(child));
      }
    } catch {
      // the thread ended meanwhile
    }
  }
  return [...out];
}

/**
 * Finds the processes a `start` gateway forked for itself (call it once the gateway has answered a
 * real request, so its workers are up): with a child, the spawned process is `api` and the child
 * `worker` (`worker2`, … if several); without, `gateway`. Other configurations are left as they are.
 */
export function discoverProcesses(gateway: Gateway): Record<string, number> {
  if (gateway.config !== 'start') return gateway.pids;
  const top = gateway.children.gateway!.pid;
  const forked = childPids(top);
  gateway.forked = forked;
  if (forked.length === 0) gateway.pids = { gateway: top };
  else
    gateway.pids = {
      api: top,
      ...Object.fromEntries(forked.map((pid, i) => [i === 0 ? 'worker' : `worker${i + 1}`, pid])),
    };
  return gateway.pids;
}

/** One real request end to end, until it comes back from the fake upstream (also waits for a separate worker). */
export async function probe(gatewayUrl: string, apiKey: string, watched: Child[]): Promise<void> {
  let last = '';
  await waitUntil(
    'an end-to-end chat completion through the gateway',
    async () => {
      const response = await fetch(`${gatewayUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(plainBody),
        signal: AbortSignal.timeout(3000),
      });
      last = `${response.status} ${await response.text()}`;
      if (response.status !== 200) return false;
      const body = JSON.parse(last.slice(4)) as { choices?: Array<{ message?: { content?: string } }> };
      if (body.choices?.[0]?.message?.content !== FAKE_REPLY_TEXT)
        throw new Error(`unexpected answer (not the fake upstream?): ${last}`);
      return true;
    },
    20_000,
    watched,
  ).catch((error: Error) => {
    throw new Error(`${error.message}\nlast answer: ${last}`);
  });
}

/**
 * The api first, so it drains while the workers still serve; then waits for what the gateway forked (killed after 10
 * s).
 */
export async function stopGateway(gateway: Gateway): Promise<void> {
  const { gateway: all, api, ...workers } = gateway.children;
  for (const child of [all, api, ...Object.values(workers)]) await child?.stop();
  const alive = (pid: number) => {
    try {
      return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
    } catch {
      return false;
    }
  };
  const until = Date.now() + 10_000;
  while (gateway.forked.some(alive) && Date.now() < until) await sleep(100);
  for (const pid of gateway.forked.filter(alive)) {
    log(`gateway process ${pid} (forked by start.js) still running 10 s after its parent stopped: SIGKILL`);
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
}

export interface Floor {
  child: Child;
  /** Base URL (without /v1). */
  url: string;
}

/** bench/floor-process.ts: the bare BullMQ loop the overhead section measures the gateway against. */
export async function startFloor(fakeUrl: string, redisUrl: string, concurrency = 256): Promise<Floor> {
  const logDir = join(root, 'bench', 'results', 'logs');
  mkdirSync(logDir, { recursive: true });
  const child = spawnChild(
    'floor',
    [
      '--import',
      'tsx',
      'bench/floor-process.ts',
      `--redis-url=${redisUrl}`,
      `--fake-url=${fakeUrl}`,
      '--port=0',
      `--concurrency=${concurrency}`,
    ],
    baseEnv(),
    join(logDir, 'floor.log'),
  );
  const line = await Promise.race([
    child.firstLine,
    sleep(20_000).then(() => {
      throw new Error(`floor silent after 20 s:\n${child.tail.join('\n')}`);
    }),
  ]);
  return { child, url: (JSON.parse(line) as { url: string }).url };
}

/**
 * The floor of the MCP benchmark (bench/mcp-floor-process.ts): a bare BullMQ loop in front of one MCP server; `url` is
 * its endpoint.
 */
export async function startMcpFloor(upstreamUrl: string, upstreamToken: string, redisUrl: string): Promise<Floor> {
  const logDir = join(root, 'bench', 'results', 'logs');
  mkdirSync(logDir, { recursive: true });
  const child = spawnChild(
    'mcp-floor',
    [
      '--import',
      'tsx',
      'bench/mcp-floor-process.ts',
      `--redis-url=${redisUrl}`,
      `--upstream-url=${upstreamUrl}`,
      `--upstream-token=${upstreamToken}`,
    ],
    baseEnv(),
    join(logDir, 'mcp-floor.log'),
  );
  const line = await Promise.race([
    child.firstLine,
    sleep(20_000).then(() => {
      throw new Error(`mcp floor silent after 20 s:\n${child.tail.join('\n')}`);
    }),
  ]);
  return { child, url: (JSON.parse(line) as { url: string }).url };
}

/**
 * One stream request to a chat completions URL: it must answer 200 with at least one content
 * delta and end with `data: [DONE]`. Returns the stream's text.
 */
export async function probeStream(url: string, headers: Record<string, string>): Promise<string> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(streamBody),
    signal: AbortSignal.timeout(5000),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`stream probe of ${url}: ${response.status} ${text}`);
  if (!/"content":"[^"]+"/.test(text))
    throw new Error(`stream probe of ${url}: no content delta in ${JSON.stringify(text)}`);
  if (!text.trimEnd().endsWith('data: [DONE]'))
    throw new Error(`stream probe of ${url}: does not end with data: [DONE]: ${JSON.stringify(text.slice(-200))}`);
  return text;
}

/**
 * Waits until `count` BullMQ workers of `queue` hold their blocking connection
 * to this Redis database (CLIENT LIST, filtered by database: other tenants of
 * the shared server may run workers of a queue with the same name).
 */
export async function waitForQueueWorkers(
  redis: Redis,
  db: number,
  queue: string,
  count: number,
  watched: Child[],
): Promise<void> {
  const name = `bull:${Buffer.from(queue).toString('base64')}`;
  await waitUntil(
    `${count} BullMQ worker(s) on queue "${queue}"`,
    async () => {
      const list = (await redis.client('LIST')) as string;
      const matching = list
        .split('\n')
        .filter((line) => line.includes(` db=${db} `) && line.includes(` name=${name} `));
      return matching.length >= count;
    },
    20_000,
    watched,
  );
}

export interface Portkey {
  child: Child;
  url: string;
  version: string;
}

/**
 * Portkey's gateway from its npm package, as its `start:node` script runs it (headless: no UI); its log under
 * bench/results/logs/<logName>.log.
 */
export async function startPortkey(logName: string): Promise<Portkey> {
  // A test tool (test/tools): `npm run bench` installs it, the gateway's own install does not.
  const dir = join(root, 'test', 'tools', 'node_modules', '@portkey-ai', 'gateway');
  let version: string;
  try {
    version = (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version;
  } catch {
    throw new Error(
      '@portkey-ai/gateway is not installed: run `node bin/test-setup.mjs --tools` (it is a test tool, test/tools)',
    );
  }
  const port = await freePort();
  const child = spawnChild(
    'portkey',
    [join(dir, 'build', 'start-server.js'), `--port=${port}`, '--headless'],
    { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', NODE_ENV: 'production' },
    join(root, 'bench', 'results', 'logs', `${logName}.log`),
  );
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(
    'Portkey GET / 200',
    async () => (await fetch(`${url}/`, { signal: AbortSignal.timeout(1000) })).status === 200,
    30_000,
    [child],
  );
  return { child, url, version };
}
