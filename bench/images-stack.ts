/**
 * The processes of `bench/images.ts`: the fake image vendor
 * (`bench/fake-images-process.ts`) and the gateway, one process
 * (`node dist/bin/start.js`) or split (`--role=api` + `--role=worker`),
 * started as an operator would, with their output kept in
 * bench/results/logs/images-*.log. Only `bench/procs.ts` is used (spawn,
 * readiness, cleanup).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../bin/local-redis.js';
import { root, sleep, spawnChild, waitUntil, type Child } from './procs.js';
import { recordUrlFor } from '../test/support/record.js';

export const logDir = join(root, 'bench', 'results', 'logs');
export const upstreamKey = 'sk-bench';

export const log = (message: string) =>
  process.stderr.write(`[images ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

const baseEnv = (): Record<string, string> => ({ PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root' });

export interface FakeImages {
  child: Child;
  /** Base URL with `/v1`. */
  url: string;
  controlUrl: string;
  imageBytes: number;
  latencyMs: number;
  cap: number;
}

export interface FakeImagesStats {
  maxInFlight: number;
  requests: number;
  status429: number;
  inFlight: number;
  served: number;
  otherRequests: number;
  aborted: number;
  /** New connections since the last reset. */
  connections: number;
  slotUse: SlotUse | null;
}

/** How the vendor's slots were used (see bench/fake-images-process.ts). */
export interface SlotUse {
  handoffs: number;
  gapMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  spanMs: number;
  utilisation: number;
}

export async function startFakeImages(options: {
  latencyMs: number;
  cap: number;
  imageBytes: number;
}): Promise<FakeImages> {
  mkdirSync(logDir, { recursive: true });
  const env = {
    ...baseEnv(),
    BENCH_IMAGE_LATENCY_MS: String(options.latencyMs),
    BENCH_IMAGE_CAP: String(options.cap),
    BENCH_IMAGE_BYTES: String(options.imageBytes),
    BENCH_IMAGE_API_KEY: upstreamKey,
  };
  const child = spawnChild(
    'fake',
    ['--import', 'tsx', 'bench/fake-images-process.ts'],
    env,
    join(logDir, 'images-fake.log'),
  );
  const line = await Promise.race([
    child.firstLine,
    sleep(20_000).then(() => {
      throw new Error(`fake image vendor silent after 20 s:\n${child.tail.join('\n')}`);
    }),
  ]);
  return { child, ...(JSON.parse(line) as Omit<FakeImages, 'child'>) };
}

export async function fakeStats(fake: FakeImages, method: 'GET' | 'POST' = 'GET'): Promise<FakeImagesStats> {
  const path = method === 'GET' ? '/__stats' : '/__reset';
  const response = await fetch(`${fake.controlUrl}${path}`, { method, signal: AbortSignal.timeout(5000) });
  if (response.status !== 200) throw new Error(`fake ${method} ${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as FakeImagesStats;
}

export async function fakeImage(fake: FakeImages): Promise<Buffer> {
  const response = await fetch(`${fake.controlUrl}/__image`, { signal: AbortSignal.timeout(5000) });
  if (response.status !== 200) throw new Error(`fake GET /__image: ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

export type ConfigName = 'all' | 'split';

export interface Gateway {
  config: ConfigName;
  url: string;
  port: number;
  /** `gateway`, or `api` and `worker`. */
  children: Record<string, Child>;
  logFiles: Record<string, string>;
  env: Record<string, string>;
}

export async function startGateway(
  config: ConfigName,
  fakeUrl: string,
  redisUrl: string,
  blobDir: string,
  maxConcurrency: number,
): Promise<Gateway> {
  const port = await freePort();
  const env = {
    ...baseEnv(),
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redisUrl,
    DATABASE_URL: await recordUrlFor(redisUrl),
    OPENAI_API_KEY: upstreamKey,
    OPENAI_BASE_URL: fakeUrl,
    OPENAI_MAX_CONCURRENCY: String(maxConcurrency),
    MOCK_VENDOR: 'off',
    LOG_LEVEL: 'warn',
    BLOB_DIR: blobDir,
    // The signed links' origin (default http://localhost:<PORT>); the api listens on 127.0.0.1 only.
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
  };
  mkdirSync(logDir, { recursive: true });
  const logFiles: Record<string, string> = {};
  const logFile = (name: string) => (logFiles[name] = join(logDir, `images-${config}-${name}.log`));
  const children: Record<string, Child> = {};
  if (config === 'all') {
    children.gateway = spawnChild('gateway', ['dist/bin/start.js'], env, logFile('gateway'));
  } else {
    children.api = spawnChild('api', ['dist/bin/start.js', '--role=api'], env, logFile('api'));
    children.worker = spawnChild('worker', ['dist/bin/start.js', '--role=worker'], env, logFile('worker'));
  }
  const url = `http://127.0.0.1:${port}`;
  await waitUntil(
    'GET /readyz 200',
    async () => (await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200,
    20_000,
    Object.values(children),
  );
  return { config, url, port, children, logFiles, env };
}

/** The api first, so it drains while the worker still serves. */
export async function stopGateway(gateway: Gateway): Promise<void> {
  const { gateway: all, api, worker } = gateway.children;
  for (const child of [all, api, worker]) await child?.stop('SIGTERM', 10_000);
}
