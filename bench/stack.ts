/**
 * The system under test: the fake upstream and the gateway as child
 * processes, started the way an operator would (`node dist/bin/start.js`).
 */
import { mkdirSync } from 'node:fs';
import type { Redis } from 'ioredis';
import { join } from 'node:path';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import { freePort } from '../bin/local-redis.js';
import { root, sleep, spawnChild, waitUntil, type Child } from './procs.js';

export const upstreamKey = 'sk-bench';
export const model = 'gpt-4o-mini';

export const plainBody = { model, messages: [{ role: 'user', content: 'Say hello.' }] };
export const streamBody = { ...plainBody, stream: true };

export const log = (message: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

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

export async function fakeControl(fake: Fake, method: 'GET' | 'POST', path: string): Promise<Record<string, FakeStats>> {
  const response = await fetch(`${fake.controlUrl}${path}`, { method, signal: AbortSignal.timeout(5000) });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`fake control ${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text) as Record<string, FakeStats>;
}

export interface Gateway {
  url: string;
  children: Record<string, Child>;
}

export interface GatewayOptions {
  /** Added to (or replacing) the gateway's environment. */
  env?: Record<string, string>;
  /** Worker processes in the split configuration (default 1). */
  workers?: number;
  /** Log files are bench/results/logs/<tag>-<process>.log (default: the configuration name). */
  logTag?: string;
}

export async function startGateway(
  config: 'all' | 'split',
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
    OPENAI_API_KEY: upstreamKey,
    OPENAI_BASE_URL: fakeUrl,
    MOCK_VENDOR: 'off',
    LOG_LEVEL: 'warn',
    ...options.env,
  };
  const nodeArgs = (name: string) => {
    if (!cpuProfDir) return [];
    mkdirSync(cpuProfDir, { recursive: true });
    return ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`, `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`];
  };
  const logDir = join(root, 'bench', 'results', 'logs');
  mkdirSync(logDir, { recursive: true });
  const logFile = (name: string) => join(logDir, `${options.logTag ?? config}-${name}.log`);
  const children: Record<string, Child> = {};
  if (config === 'all') {
    children.gateway = spawnChild('gateway', [...nodeArgs('gateway'), 'dist/bin/start.js'], env, logFile('gateway'));
  } else {
    const workers = Math.max(1, options.workers ?? 1);
    for (let i = 1; i <= workers; i += 1) {
      const name = workers === 1 ? 'worker' : `worker${i}`;
      children[name] = spawnChild(name, [...nodeArgs(name), 'dist/bin/start.js', '--role=worker'], env, logFile(name));
    }
    children.api = spawnChild('api', [...nodeArgs('api'), 'dist/bin/start.js', '--role=api'], env, logFile('api'));
  }
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(
    'GET /readyz 200',
    async () => (await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200,
    20_000,
    Object.values(children),
  );
  return { url, children };
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
      if (body.choices?.[0]?.message?.content !== FAKE_REPLY_TEXT) throw new Error(`unexpected answer (not the fake upstream?): ${last}`);
      return true;
    },
    20_000,
    watched,
  ).catch((error: Error) => {
    throw new Error(`${error.message}\nlast answer: ${last}`);
  });
}


/** The api first, so it drains while the workers still serve. */
export async function stopGateway(gateway: Gateway): Promise<void> {
  const { gateway: all, api, ...workers } = gateway.children;
  for (const child of [all, api, ...Object.values(workers)]) await child?.stop();
}

/**
 * Waits until `count` BullMQ workers of `queue` hold their blocking connection
 * to this Redis database (CLIENT LIST, filtered by database: other tenants of
 * the shared server may run workers of a queue with the same name).
 */
export async function waitForQueueWorkers(redis: Redis, db: number, queue: string, count: number, watched: Child[]): Promise<void> {
  const name = `bull:${Buffer.from(queue).toString('base64')}`;
  await waitUntil(
    `${count} BullMQ worker(s) on queue "${queue}"`,
    async () => {
      const list = (await redis.client('LIST')) as string;
      const matching = list.split('\n').filter((line) => line.includes(` db=${db} `) && line.includes(` name=${name} `));
      return matching.length >= count;
    },
    20_000,
    watched,
  );
}
