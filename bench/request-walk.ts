/**
 * Which of the project's source files one request runs through.
 *
 * The gateway (api and worker in this one process, as `npm start` runs them)
 * serves a few warm-up requests against the fake OpenAI; then V8's precise
 * coverage counters are zeroed, one request is sent, and every project file
 * in which a function ran is listed. Module top-level code is not counted
 * (it ran at start), nor are the fake vendor and this script.
 *
 *   node --import tsx bench/request-walk.ts            plain and streamed chat
 */
import { Session } from 'node:inspector/promises';
import { fileURLToPath } from 'node:url';
import { testRecord } from '../test/support/record.js';

// Counting starts before the project's modules load: code compiled (and optimised) before it would not be counted.
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });

const { Redis } = await import('ioredis');
const { createApiServer } = await import('../api/server.js');
const { KeyStore } = await import('../api/accounts/key-store.js');
const { loadConfig } = await import('../shared/config.js');
const { createLogger } = await import('../shared/logger.js');
const { startWorkers } = await import('../workers/worker.js');
const { startFakeOpenAI } = await import('../test/support/fake-openai.js');
const { startPrivateRedis } = await import('../test/support/redis-server.js');

const root = fileURLToPath(new URL('..', import.meta.url));
const sourceDirs = ['api/', 'workers/', 'shared/', 'storage/'];
/** `--functions`: name the functions that ran in each file. */
const showFunctions = process.argv.includes('--functions');

const redisServer = await startPrivateRedis({ aof: false });
const fake = await startFakeOpenAI({ record: false });
const { recordUrlFor } = await import('../test/support/record.js');
const config = loadConfig({
  REDIS_URL: redisServer.url,
  DATABASE_URL: await recordUrlFor(redisServer.url),
  OPENAI_API_KEY: 'sk-walk',
  OPENAI_BASE_URL: fake.url,
  MOCK_VENDOR: 'off',
  LOG_LEVEL: 'warn',
});
const log = createLogger('warn', 'walk');
const api = await createApiServer(config, log);
const port = await api.listen(0, '127.0.0.1');
const workers = await startWorkers(config, log);
const redis = new Redis(redisServer.url);
const { key } = await new KeyStore(redis, await testRecord(redis)).create('walk');

const base = `http://127.0.0.1:${port}/v1/chat/completions`;
async function chat(stream: boolean): Promise<void> {
  const response = await fetch(base, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello.' }], stream }),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`walk request answered ${response.status}: ${text}`);
}

interface FunctionCoverage {
  functionName: string;
  ranges: Array<{ startOffset: number; endOffset: number; count: number }>;
}
interface Ran {
  file: string;
  /** `name@offset` of every function that ran. */
  functions: Map<string, string>;
}

/**
 * Every project source file in which a function ran since the last call (module top levels, which ran at load, not
 * counted).
 */
async function functionsRun(): Promise<Ran[]> {
  const { result } = (await session.post('Profiler.takePreciseCoverage')) as {
    result: Array<{ url: string; functions: FunctionCoverage[] }>;
  };
  const files: Ran[] = [];
  for (const script of result) {
    if (!script.url.startsWith('file://')) continue;
    const path = fileURLToPath(script.url);
    if (!path.startsWith(root)) continue;
    const relative = path.slice(root.length);
    if (!sourceDirs.some((dir) => relative.startsWith(dir))) continue;
    const functions = new Map<string, string>();
    for (const fn of script.functions) {
      const range = fn.ranges[0]!;
      if (range.startOffset > 0 && range.count > 0)
        functions.set(`${fn.functionName}@${range.startOffset}`, fn.functionName || '(anonymous)');
    }
    if (functions.size > 0) files.push({ file: relative, functions });
  }
  return files.sort((a, b) => a.file.localeCompare(b.file));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * What runs with no request at all (timers: liveness sweeps, heartbeats, queue
 * depth refreshes, the event-loop monitor, BullMQ's own polling) over a few
 * seconds: those functions are background, not the request's walk.
 */
async function backgroundFunctions(): Promise<Set<string>> {
  await functionsRun();
  await sleep(6000);
  const idle = await functionsRun();
  return new Set(idle.flatMap((ran) => [...ran.functions.keys()].map((fn) => `${ran.file}:${fn}`)));
}

const report: Record<string, string[]> = {};
let background = new Set<string>();
for (const stream of [false, true]) {
  for (let i = 0; i < 20; i++) await chat(stream);
  if (!stream) background = await backgroundFunctions();
  await sleep(50);
  await functionsRun();
  await chat(stream);
  const files: string[] = [];
  for (const ran of await functionsRun()) {
    const own = [...ran.functions].filter(([key]) => !background.has(`${ran.file}:${key}`)).map(([, name]) => name);
    if (own.length > 0) files.push(showFunctions ? `${ran.file}  ${own.join(', ')}` : ran.file);
  }
  report[stream ? 'streamed chat' : 'plain chat'] = files;
}

const backgroundFiles = [...new Set([...background].map((key) => key.slice(0, key.indexOf(':'))))].sort();
console.log(`background (run with no request in 6 s, left out): ${backgroundFiles.join(', ')}`);
for (const [name, files] of Object.entries(report)) {
  const byDir = (dir: string) => files.filter((f) => f.startsWith(dir)).length;
  console.log(`${name}: ${files.length} files (${sourceDirs.map((d) => `${byDir(d)} in ${d}`).join(', ')})`);
  for (const file of files) console.log(`  ${file}`);
}

await session.post('Profiler.stopPreciseCoverage');
session.disconnect();
await api.shutdown();
await workers.close();
redis.disconnect();
await fake.close();
await redisServer.remove();
process.exit(0);
