/**
 * `node --import tsx bench/request-log-lag.ts` (after `node bin/build.mjs`):
 * how soon a request's log record can be read. `node dist/bin/start.js` on a
 * private Redis and the tests' PostgreSQL, against the zero-latency fake
 * OpenAI upstream, loaded by 64 connections of plain chat (autocannon) while a
 * probe, in a loop, makes one request with the same key and then polls
 * `GET /v1/generation?id=<its x-request-id>` every 20 ms until it answers 200
 * with the api's half and the worker's half both in. The lag is from the
 * answer's last byte to that 200. Prints p50, p95, p99 and the worst, and the
 * load's req/s meanwhile.
 *
 *   BENCH_LAG_PROBES   probe requests (default 300)
 *   BENCH_LAG_CONNECTIONS  connections of the load (default 64)
 */
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { testRecord } from '../test/support/record.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { envInt, percentile } from './measure.js';
import { installCleanup, sleep, stopAll } from './procs.js';
import { log, plainBody, startFake, startGateway, stopGateway } from './stack.js';

const probes = envInt('BENCH_LAG_PROBES', 300, 1);
const connections = envInt('BENCH_LAG_CONNECTIONS', 64, 1);

installCleanup();
const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 15);
const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
await redis.flushdb();
const fake = await startFake();
const keyStore = new KeyStore(redis, await testRecord(redis));
const account = await keyStore.accounts.create({ email: 'bench-lag@example.com', name: 'bench lag' });
await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
const key = await keyStore.create('bench-lag', {
  accountId: account.id,
  limitMicros: 10 ** 12,
  rpm: 10 ** 8,
  tpm: 10 ** 9,
});
const gateway = await startGateway('start', fake.url, redisUrl, undefined, { logTag: 'log-lag' });
const headers = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };

try {
  log(
    `load: ${connections} connections of plain chat; probe: ${probes} requests, each followed by GET ` +
      `/v1/generation until it answers`,
  );
  let finished: (result: autocannon.Result) => void = () => {};
  const done = new Promise<autocannon.Result>((resolve) => (finished = resolve));
  const load = autocannon(
    {
      url: `${gateway.url}/v1/chat/completions`,
      method: 'POST',
      headers,
      body: JSON.stringify(plainBody),
      connections,
      pipelining: 1,
      duration: 3600,
      timeout: 10,
    },
    (error: unknown, result: autocannon.Result) => (error ? log(`load: ${String(error)}`) : finished(result)),
  );
  await sleep(2000);
  const lags: number[] = [];
  let polls = 0;
  for (let i = 0; i < probes; i++) {
    const answer = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body: JSON.stringify(plainBody),
    });
    await answer.arrayBuffer();
    const answered = performance.now();
    if (answer.status !== 200) throw new Error(`probe ${i}: the request answered ${answer.status}`);
    const id = answer.headers.get('x-request-id')!;
    for (;;) {
      polls += 1;
      const read = await fetch(`${gateway.url}/v1/generation?id=${encodeURIComponent(id)}`, {
        headers: { authorization: headers.authorization },
      });
      const body = (await read.json()) as { data?: { settled: boolean; latency_ms: number | null } };
      if (read.status === 200 && body.data?.settled && body.data.latency_ms !== null) break;
      if (performance.now() - answered > 30_000) throw new Error(`probe ${i}: ${id} not readable after 30 s`);
      await sleep(20);
    }
    lags.push(performance.now() - answered);
  }
  load.stop();
  const result = await done;
  const sorted = Float64Array.from(lags).sort();
  const ms = (q: number) => `${percentile(sorted, q).toFixed(0)} ms`;
  console.log(`| probes | load | lag p50 | p95 | p99 | worst | polls per probe |`);
  console.log(`|---:|---|---:|---:|---:|---:|---:|`);
  console.log(
    `| ${probes} | ${connections} connections, ${Math.round(result.requests.average)} req/s, ${result.non2xx} ` +
      `non-2xx | ${ms(0.5)} | ${ms(0.95)} | ${ms(0.99)} | ${sorted.at(-1)!.toFixed(0)} ms | ` +
      `${(polls / probes).toFixed(1)} |`,
  );
  console.log(`bar: p99 ≤ 2000 ms: ${percentile(sorted, 0.99) <= 2000 ? 'pass' : 'FAIL'}`);
} finally {
  await stopGateway(gateway);
  redis.disconnect();
  await stopAll();
}
