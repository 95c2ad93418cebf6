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

// Counting starts before the project's modules load: code compiled (and optimised) before it would not be counted.
const session = new Session();
session.connect();
await session.post('Profiler.enable');
await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });

const { Redis } = await import('ioredis');
const { createApiServer } = await import('../api/server.js');
const { KeyStore } = await import('../api/key-store.js');
const { loadConfig } = await import('../shared/config.js');
const { createLogger } = await import('../shared/logger.js');
const { startWorkers } = await import('../workers/worker.js');
const { startFakeOpenAI } = await import('../test/support/fake-openai.js');
const { startPrivateRedis } = await import('../test/support/redis-server.js');

const root = fileURLToPath(new URL('..', import.meta.url));
const sourceDirs = ['api/', 'workers/', 'shared/', 'storage/'];

const redisServer = await startPrivateRedis({ aof: false });
const fake = await startFakeOpenAI({ record: false });
const config = loadConfig({ REDIS_URL: redisServer.url, OPENAI_API_KEY: 'sk-walk', OPENAI_BASE_URL: fake.url, MOCK_VENDOR: 'off', LOG_LEVEL: 'warn' });
const log = createLogger('warn', 'walk');
const api = await createApiServer(config, log);
const port = await api.listen(0, '127.0.0.1');
const workers = await startWorkers(config, log);
const redis = new Redis(redisServer.url);
const { key } = await new KeyStore(redis).create('walk');

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
async function filesRun(): Promise<string[]> {
  const { result } = (await session.post('Profiler.takePreciseCoverage')) as { result: Array<{ url: string; functions: FunctionCoverage[] }> };
  const files: string[] = [];
  for (const script of result) {
    if (!script.url.startsWith('file://')) continue;
    const path = fileURLToPath(script.url);
    if (!path.startsWith(root)) continue;
    const relative = path.slice(root.length);
    if (!sourceDirs.some((dir) => relative.startsWith(dir))) continue;
    // The function whose range starts at offset 0 is the module's top level, which ran when it loaded.
    const ran = script.functions.some((fn) => fn.ranges[0]!.startOffset > 0 && fn.ranges[0]!.count > 0);
    if (ran) files.push(relative);
  }
  return files.sort();
}

const report: Record<string, string[]> = {};
for (const stream of [false, true]) {
  for (let i = 0; i < 20; i++) await chat(stream);
  // Let timers of the warm-up (liveness sweeps, heartbeats) pass, then zero the counters.
  await new Promise((resolve) => setTimeout(resolve, 50));
  await filesRun();
  await chat(stream);
  report[stream ? 'streamed chat' : 'plain chat'] = await filesRun();
}

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
