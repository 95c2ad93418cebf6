/**
 * CPU profile of the gateway (api and workers on one event loop, so one
 * profile holds both) under the 64-connection non-stream load of
 * `npm run bench`, with quota and limits on for the key, summarised.
 *
 *   npm run build --silent && node --import tsx bench/profile.ts
 *
 * Env: BENCH_DURATION_S (default 10), BENCH_CONNECTIONS (default 64),
 * BENCH_PROFILE_STREAM=1 (stream requests instead of plain ones),
 * BENCH_PROFILE_CACHE=1 (every request sends `Cache-Control: max-age=600`: after the first, the hit path),
 * BENCH_PROFILE_SPLIT=1 (an api process and a worker process, `--role=api` and `--role=worker`, each
 * profiled and summarised apart),
 * BENCH_REDIS_URL (FLUSHDB'd; default: database 15 of a private redis-server
 * this run starts and stops).
 * Writes bench/results/profile/<process>-*.cpuprofile and summary.txt.
 */
import { readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { measureLoad } from './measure.js';
import { installCleanup, root, stopAll } from './procs.js';
import { renderSummary, summariseProfile } from './profile-summary.js';
import { log, plainBody, probe, startFake, startGateway } from './stack.js';
import { testRecord } from '../test/support/record.js';

const durationS = Number(process.env.BENCH_DURATION_S || 10);
const connections = Number(process.env.BENCH_CONNECTIONS || 64);
const outDir = join(root, 'bench', 'results', 'profile');

async function main(): Promise<void> {
  installCleanup();
  rmSync(outDir, { recursive: true, force: true });
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 15);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  try {
    const fake = await startFake();
    // Quota and limits on, as the overhead section measures: an account with a balance, a key with a limit, rpm and
    // tpm.
    const keyStore = new KeyStore(redis, await testRecord(redis));
    const account = await keyStore.accounts.create({ email: 'bench-profile@example.com', name: 'bench profile' });
    await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
    const { key } = await keyStore.create('bench-profile', {
      accountId: account.id,
      limitMicros: 10 ** 12,
      rpm: 10 ** 8,
      tpm: 10 ** 9,
    });
    const split = Boolean(process.env.BENCH_PROFILE_SPLIT);
    const gateway = await startGateway(split ? 'split' : 'all', fake.url, redisUrl, outDir);
    const children = Object.values(gateway.children);
    await probe(gateway.url, key, children);
    log(
      `profiling ${children.map((c) => `${c.name} (pid ${c.pid})`).join(' and ')} under ${connections} connections for ${durationS} s`,
    );
    const result = await measureLoad({
      target: {
        url: `${gateway.url}/v1/chat/completions`,
        headers: {
          authorization: `Bearer ${key}`,
          ...(process.env.BENCH_PROFILE_CACHE ? { 'cache-control': 'max-age=600' } : {}),
        },
        body: JSON.stringify(process.env.BENCH_PROFILE_STREAM ? { ...plainBody, stream: true } : plainBody),
      },
      connections,
      durationS,
      warmupS: 2,
      redis,
      pids: { ...Object.fromEntries(children.map((c) => [c.name, c.pid])), fake: fake.child.pid },
      settleMs: 500,
    });
    log(
      `${Math.round(result.rps)} req/s, p50 ${result.latency.p50.toFixed(2)} ms, errors ` +
        `${result.errors + result.non2xx + result.timeouts}`,
    );
    for (const child of children) await child.stop();
    const files = readdirSync(outDir).filter((f) => f.endsWith('.cpuprofile'));
    if (files.length !== children.length)
      throw new Error(`${files.length} .cpuprofile files were written to ${outDir}, not ${children.length}`);
    const summaries = files.map((file) => summariseProfile(join(outDir, file), 30));
    const cpu = Object.entries(result.cpuMs)
      .map(([n, ms]) => `${n} ${ms === null ? '-' : `${Math.round((ms * 1000) / Math.max(1, result.ok))} µs/request`}`)
      .join(', ');
    const text = [
      `${connections} connections, ${result.durationS} s: ${Math.round(result.rps)} req/s (profiler on), p50 ` +
        `${result.latency.p50.toFixed(2)} ms`,
      `CPU per request: ${cpu}`,
      `Redis commands per request: ${result.redisCommands
        .slice(0, 12)
        .map((c) => `${c.command} ${(c.calls / result.ok).toFixed(2)} (${(c.usec / result.ok).toFixed(1)} µs)`)
        .join(', ')}`,
      ...summaries.flatMap((summary) => ['', renderSummary(summary)]),
    ].join('\n');
    writeFileSync(join(outDir, 'summary.txt'), `${text}\n`);
    writeFileSync(join(outDir, 'summary.json'), `${JSON.stringify({ load: result, profiles: summaries }, null, 2)}\n`);
    process.stdout.write(`${text}\n\nWritten to bench/results/profile/\n`);
  } finally {
    await stopAll();
    await redis.flushdb().catch(() => undefined);
    redis.disconnect();
  }
}

main().catch(async (error: Error) => {
  process.stderr.write(`profile failed: ${error.stack ?? error.message}\n`);
  await stopAll().catch(() => undefined);
  process.exit(1);
});
