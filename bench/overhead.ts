/**
 * The gateway-overhead section of `npm run bench`: the gateway against a
 * zero-latency fake OpenAI upstream, direct and through the gateway (api +
 * workers in one process, then api and worker as two processes): non-stream
 * req/s and latency at 1 and 64 connections, time to first token of streams,
 * process RSS, Redis memory, and a soak.
 */
import type { Redis } from 'ioredis';
import { KeyStore } from '../api/key-store.js';
import { measureLoad, measureTtft, soak, type LoadTarget } from './measure.js';
import { rssBytes } from './procs.js';
import type { Bar, ConfigResult, OverheadResults } from './report.js';
import { log, plainBody, probe, startFake, startGateway, stopGateway, streamBody, upstreamKey } from './stack.js';

export interface OverheadOptions {
  redis: Redis;
  redisUrl: string;
  durationS: number;
  warmupS: number;
  soakS: number;
  ttftRequests: number;
  ttftWarmup: number;
  configNames: string[];
  cpuProfDir?: string;
}

export async function runOverhead(options: OverheadOptions): Promise<OverheadResults> {
  const { redis, redisUrl, durationS, warmupS, soakS, ttftRequests, ttftWarmup, configNames, cpuProfDir } = options;
  const fake = await startFake();
  const fakePid = fake.child.pid;
  log(`fake upstream at ${fake.url} (pid ${fakePid})`);
  const fakeIdleRss = rssBytes(fakePid) ?? null;
  const directTarget: LoadTarget = {
    url: `${fake.url}/chat/completions`,
    headers: { authorization: `Bearer ${upstreamKey}` },
    body: JSON.stringify(plainBody),
  };
  const common = { durationS, warmupS, redis };

  log(`direct, 1 connection (${warmupS} s warm-up + ${durationS} s)`);
  const d1 = await measureLoad({ ...common, target: directTarget, connections: 1, pids: { fake: fakePid } });
  log(`direct, 64 connections`);
  const d64 = await measureLoad({ ...common, target: directTarget, connections: 64, pids: { fake: fakePid } });
  log(`direct, time to first token (${ttftWarmup} + ${ttftRequests} stream requests)`);
  const dTtft = await measureTtft({
    url: directTarget.url,
    headers: directTarget.headers,
    body: JSON.stringify(streamBody),
    warmup: ttftWarmup,
    count: ttftRequests,
  });

  const configs: ConfigResult[] = [];
  for (const name of configNames) {
    if (name !== 'all' && name !== 'split') throw new Error(`BENCH_CONFIGS: unknown configuration "${name}" (all, split)`);
    const label = name === 'all' ? 'one process' : 'api + worker';
    await redis.flushdb();
    const keyStore = new KeyStore(redis);
    const { key, id: keyId } = await keyStore.create('bench');
    log(`gateway (${label}): starting`);
    const gateway = await startGateway(name, fake.url, redisUrl, cpuProfDir);
    const children = Object.values(gateway.children);
    try {
      await probe(gateway.url, key, children);
      const gatewayPids = Object.fromEntries(Object.entries(gateway.children).map(([n, c]) => [n, c.pid]));
      const idleRss = Object.fromEntries(Object.entries(gatewayPids).map(([n, pid]) => [n, rssBytes(pid) ?? null]));
      const pids = { ...gatewayPids, fake: fakePid };
      const target: LoadTarget = {
        url: `${gateway.url}/v1/chat/completions`,
        headers: { authorization: `Bearer ${key}` },
        body: JSON.stringify(plainBody),
      };
      log(`gateway (${label}), 1 connection`);
      const g1 = await measureLoad({ ...common, target, connections: 1, pids });
      log(`gateway (${label}), 64 connections`);
      const g64 = await measureLoad({ ...common, target, connections: 64, pids });
      // The same run on a key with every limit on (an account balance, a spending limit, rpm and tpm far above the load):
      // what admission's checks cost against the unlimited default account above.
      let limited: { c1: Awaited<ReturnType<typeof measureLoad>>; c64: Awaited<ReturnType<typeof measureLoad>> } | undefined;
      if (name === 'all') {
        const account = await keyStore.accounts.create({ email: 'bench@example.com', name: 'bench' });
        await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
        const limitedKey = await keyStore.create('bench-limited', { accountId: account.id, limitMicros: 10 ** 12, rpm: 10 ** 8, tpm: 10 ** 10 });
        const limitedTarget: LoadTarget = { ...target, headers: { authorization: `Bearer ${limitedKey.key}` } };
        log(`gateway (${label}), limits on, 1 connection`);
        const l1 = await measureLoad({ ...common, target: limitedTarget, connections: 1, pids });
        log(`gateway (${label}), limits on, 64 connections`);
        const l64 = await measureLoad({ ...common, target: limitedTarget, connections: 64, pids });
        limited = { c1: l1, c64: l64 };
      }
      log(`gateway (${label}), time to first token`);
      const gTtft = await measureTtft({
        url: target.url,
        headers: target.headers,
        body: JSON.stringify(streamBody),
        warmup: ttftWarmup,
        count: ttftRequests,
      });
      let soakResult;
      if (name === 'all' && soakS > 0) {
        log(`gateway (${label}), soak: 64 connections for ${soakS} s`);
        soakResult = await soak({
          target,
          connections: 64,
          durationS: soakS,
          everyS: 10,
          pauseS: 5,
          redis,
          pids: gatewayPids,
          cpuOnlyPids: { fake: fakePid },
          onSample: (s) =>
            log(`  soak t=${s.t}s ${s.phase}: redis ${(s.redisUsedMemory / 1048576).toFixed(1)} MiB (bench db ${(s.redisDbBytes / 1048576).toFixed(2)} MiB, ${s.redisKeys} keys), ` +
              Object.entries(s.rss).map(([n, v]) => `${n} ${v === null ? '-' : (v / 1048576).toFixed(1)} MiB`).join(', ')),
        });
      }

      const addedMs = { p50: g1.latency.p50 - d1.latency.p50, p99: g1.latency.p99 - d1.latency.p99 };
      const addedTtftP50Ms = gTtft.ttft.p50 - dTtft.ttft.p50;
      const failures64 = g64.errors + g64.timeouts + g64.non2xx;
      const bars: Bar[] = [
        {
          name: 'added p50 at 1 connection',
          target: '≤ 1.5 ms',
          actual: `${addedMs.p50.toFixed(2)} ms`,
          pass: addedMs.p50 <= 1.5 && g1.errors + g1.timeouts + g1.non2xx === 0,
        },
        {
          name: 'req/s at 64 connections, no errors',
          target: '≥ 1,600, 0 errors',
          actual: `${Math.round(g64.rps).toLocaleString('en-US')}, ${failures64} errors`,
          pass: g64.rps >= 1600 && failures64 === 0,
        },
        {
          name: 'added time-to-first-token p50',
          target: '≤ 3 ms',
          actual: `${addedTtftP50Ms.toFixed(2)} ms`,
          pass: addedTtftP50Ms <= 3 && gTtft.failures === 0,
        },
      ];
      if (limited) {
        const addedByLimits = limited.c1.latency.p50 - g1.latency.p50;
        const throughputRatio = limited.c64.rps / g64.rps;
        const limitedFailures = limited.c64.errors + limited.c64.timeouts + limited.c64.non2xx;
        bars.push(
          {
            name: 'limits on: added p50 at 1 connection',
            target: '≤ +0.15 ms',
            actual: `${addedByLimits >= 0 ? '+' : ''}${addedByLimits.toFixed(2)} ms`,
            pass: addedByLimits <= 0.15 && limited.c1.errors + limited.c1.timeouts + limited.c1.non2xx === 0,
          },
          {
            name: 'limits on: req/s at 64 connections',
            target: '≥ 0.95× limits off',
            actual: `${throughputRatio.toFixed(3)}× (${Math.round(limited.c64.rps).toLocaleString('en-US')} req/s), ${limitedFailures} errors`,
            pass: throughputRatio >= 0.95 && limitedFailures === 0,
          },
        );
      }
      configs.push({
        name: label,
        description: name === 'all' ? 'node dist/bin/start.js (api and workers in one process)' : 'node dist/bin/start.js --role=api + --role=worker',
        processes: gatewayPids,
        c1: g1,
        c64: g64,
        ttft: gTtft,
        addedMs,
        addedTtftP50Ms,
        ratio: { c1: g1.rps / d1.rps, c64: g64.rps / d64.rps },
        warnings: Object.fromEntries(Object.entries(gateway.children).map(([n, c]) => [n, c.warnings])),
        idleRss,
        ...(soakResult ? { soak: soakResult } : {}),
        bars,
      });
      // Someone else flushing our database mid-run would make the figures meaningless.
      const keyIntact = (await keyStore.list()).some((k) => k.id === keyId);
      if (!keyIntact) log(`WARNING: the bench API key vanished from ${redisUrl}: another client flushed this database during the run`);
      configs[configs.length - 1]!.databaseIntact = keyIntact;
      for (const child of children) {
        if (child.warnings > 0) log(`${child.name} logged ${child.warnings} line(s) at warn or above: see bench/results/logs/${name}-${child.name}.log`);
      }
    } finally {
      log(`gateway (${label}): stopping`);
      await stopGateway(gateway);
    }
  }
  await fake.child.stop();
  return {
    settings: { durationS, warmupS, soakS, ttftRequests, ttftWarmup, body: plainBody, streamBody },
    direct: { fakeUpstreamPid: fakePid, c1: d1, c64: d64, ttft: dTtft, idleRss: fakeIdleRss },
    configs,
  };
}
