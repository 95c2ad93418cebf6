/**
 * Where a request's Redis work goes: every command, by command and by script.
 *
 * Starts a private Redis, the zero-latency fake OpenAI and the gateway as `npm start` runs it on one core (api and
 * worker on one loop), makes a credited key with a spending limit, rpm and tpm (the overhead section's `quota` slot)
 * and sends warm-up requests. Then, with MONITOR on:
 *
 *   1. one plain request alone: each command in order, a script's own commands indented under it (the one-connection
 *      timeline);
 *   2. BENCH_WALK_REQUESTS (default 2,000) plain requests over BENCH_WALK_CONNECTIONS (default 64) connections:
 *      commands per request by command and by script, what clients send (round trips) apart from what scripts run.
 *
 * The gateway's periodic work (queue gauges, the scheduler's sweeps) is counted in 2, as `INFO commandstats` would
 * count it, and left out of 1 (shown apart). Scripts are named by the sha of their source: the gateway's from its
 * declarations (shared/redis-script.ts), BullMQ's from its script modules.
 *
 *   node bin/build.mjs && node --import tsx bench/redis-walk.ts
 */
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { declaredScripts } from '../shared/redis-script.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { testRecord } from '../test/support/record.js';
import { installCleanup, sleep, stopAll } from './procs.js';
import { plainBody, probe, startFake, startGateway } from './stack.js';

interface Command {
  /** Sent by a client (a round trip, or a part of a pipeline), or run inside a script. */
  fromScript: boolean;
  name: string;
  args: string[];
}

/** The periodic reads of the queue gauges and the scheduler, not caused by a request. */
const periodic = (c: Command, scripts: Map<string, string>) =>
  (c.name === 'evalsha' && scripts.get(c.args[0]!) === 'bullmq:getCounts') ||
  (c.name === 'hgetall' && /^sy:fair:.*:(waiting|weights)$/.test(c.args[0]!));

/** sha1 of each script's source → its name: the gateway's (every module that declares one is imported) and BullMQ's. */
async function scriptNames(): Promise<Map<string, string>> {
  await import('../api/server.js');
  await import('../workers/worker.js');
  const names = new Map<string, string>();
  const sha = (lua: string) => createHash('sha1').update(lua).digest('hex');
  for (const script of declaredScripts()) names.set(sha(script.lua), script.command);
  const require = createRequire(import.meta.url);
  const bullmqScripts = join(dirname(require.resolve('bullmq')), 'scripts');
  for (const file of readdirSync(bullmqScripts).filter((f) => f.endsWith('.js') && f !== 'index.js')) {
    const mod = require(join(bullmqScripts, file)) as Record<string, { name?: string; content?: string }>;
    for (const script of Object.values(mod))
      if (script?.name && script.content) names.set(sha(script.content), `bullmq:${script.name}`);
  }
  return names;
}

async function watch(redis: Redis, during: () => Promise<unknown>): Promise<Command[]> {
  const monitor = await redis.monitor();
  const seen: Command[] = [];
  monitor.on('monitor', (_time: string, args: unknown[], source: string) => {
    seen.push({ fromScript: source === 'lua', name: String(args[0]).toLowerCase(), args: args.slice(1).map(String) });
  });
  await sleep(200);
  seen.length = 0;
  await during();
  // What a request's end still sends after its answer (the usage record's hand-off, BullMQ's finish) lands within ms.
  await sleep(150);
  monitor.disconnect();
  return seen;
}

function countPerRequest(commands: Command[], scripts: Map<string, string>, requests: number) {
  const byCommand = new Map<string, number>();
  const byScript = new Map<string, { calls: number; inside: number }>();
  let sent = 0;
  let current: { calls: number; inside: number } | undefined;
  for (const c of commands) {
    byCommand.set(c.name, (byCommand.get(c.name) ?? 0) + 1);
    if (c.fromScript) {
      if (current) current.inside += 1;
      continue;
    }
    sent += 1;
    current = undefined;
    if (c.name === 'evalsha' || c.name === 'eval') {
      const name = scripts.get(c.args[0]!) ?? `sha ${c.args[0]!.slice(0, 8)}`;
      current = byScript.get(name) ?? { calls: 0, inside: 0 };
      current.calls += 1;
      byScript.set(name, current);
    }
  }
  const per = (n: number) => (n / requests).toFixed(2);
  return [
    `${per(commands.length)} commands per request, ${per(sent)} sent by clients, ${per(commands.length - sent)} ` +
      `inside scripts`,
    `by command: ${[...byCommand]
      .sort((a, b) => b[1] - a[1])
      .map(([c, n]) => `${c} ${per(n)}`)
      .join(', ')}`,
    `by script (calls, commands inside per request): ${[...byScript]
      .sort((a, b) => b[1].calls + b[1].inside - a[1].calls - a[1].inside)
      .map(([s, n]) => `${s} ${per(n.calls)} + ${per(n.inside)}`)
      .join(', ')}`,
  ].join('\n');
}

async function main(): Promise<void> {
  installCleanup();
  const scripts = await scriptNames();
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 14);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  try {
    const fake = await startFake();
    const keyStore = new KeyStore(redis, await testRecord(redis));
    const account = await keyStore.accounts.create({ email: 'bench-walk@example.com', name: 'bench walk' });
    await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
    const { key } = await keyStore.create('bench-walk', {
      accountId: account.id,
      limitMicros: 10 ** 12,
      rpm: 10 ** 8,
      tpm: 10 ** 9,
    });
    const gateway = await startGateway('all', fake.url, redisUrl);
    const child = gateway.children.gateway!;
    await probe(gateway.url, key, [child]);
    const body = JSON.stringify(plainBody);
    const send = async () => {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body,
      });
      await res.text();
      if (res.status !== 200) throw new Error(`status ${res.status}`);
    };
    for (let i = 0; i < 50; i += 1) await send();
    await sleep(1000);

    const one = await watch(redis, send);
    const out: string[] = ['## One plain request, one connection', ''];
    let skipped = 0;
    let inPeriodic = false;
    for (const c of one) {
      if (!c.fromScript) inPeriodic = periodic(c, scripts);
      if (inPeriodic) {
        skipped += 1;
        continue;
      }
      const shown =
        c.name === 'evalsha'
          ? `EVALSHA ${scripts.get(c.args[0]!) ?? c.args[0]!.slice(0, 8)} ${c.args.slice(2, 4).join(' ')}`
          : `${c.name.toUpperCase()} ${c.args.slice(0, 2).join(' ')}`;
      out.push(`${c.fromScript ? '    ' : ''}${shown}`.slice(0, 140));
    }
    out.push('', countPerRequest(one, scripts, 1));
    out.push(
      `(${skipped} commands of the gateway's periodic reads in the same window left out above, counted in the line)`,
      '',
    );

    const requests = Number(process.env.BENCH_WALK_REQUESTS || 2000);
    const connections = Number(process.env.BENCH_WALK_CONNECTIONS || 64);
    let next = 0;
    const many = await watch(redis, () =>
      Promise.all(
        Array.from({ length: connections }, async () => {
          while (next < requests) {
            next += 1;
            await send();
          }
        }),
      ),
    );
    out.push(
      `## ${requests} plain requests over ${connections} connections`,
      '',
      countPerRequest(many, scripts, requests),
    );
    process.stdout.write(`${out.join('\n')}\n`);
    await child.stop();
  } finally {
    await stopAll();
    await redis.flushdb().catch(() => undefined);
    redis.disconnect();
  }
}

main().catch(async (error: Error) => {
  process.stderr.write(`redis-walk failed: ${error.stack ?? error.message}\n`);
  await stopAll().catch(() => undefined);
  process.exit(1);
});
