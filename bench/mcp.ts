/**
 * Tools through the gateway (`/mcp`, docs/mcp.md), against an upstream MCP server built with the official SDK
 * (test/support/fake-mcp.ts) in this process:
 *
 *   1. a flood: one account sends BENCH_MCP_CALLS (default 200) calls of a tool that takes BENCH_MCP_TOOL_MS (default
 *      1,000 ms) at once, against a server capped at BENCH_MCP_CAP (default 20); a second later another account sends
 *      one call of it. Reported: every call answered once (the upstream's count of starts), the most the server saw at
 *      once, the flood's time against the cap's least (calls ÷ cap × the tool's time), and how long the other
 *      account's call waited beyond its own run (the bar: one call's time);
 *   2. the added latency of a fast tool: BENCH_MCP_FAST (default 500) calls one after another through the gateway, the
 *      same calls straight to the upstream, and through the floor (bench/mcp-floor-process.ts: a bare BullMQ loop, a
 *      job per call, nothing else), each with a connected SDK client, in five rounds that rotate the order; p50 and
 *      p99 of each.
 *
 *   node bin/build.mjs && node --import tsx bench/mcp.ts
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { KeyStore } from '../api/accounts/key-store.js';
import { startFakeMcp } from '../test/support/fake-mcp.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { testRecord } from '../test/support/record.js';
import { installCleanup, sleep, stopAll } from './procs.js';
import { log, startGateway, startMcpFloor, stopGateway } from './stack.js';
import { table } from './table.js';

export interface McpSettings {
  calls: number;
  toolMs: number;
  cap: number;
  fast: number;
}

export function mcpSettings(env: NodeJS.ProcessEnv): McpSettings {
  const int = (name: string, fallback: number, min: number) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < min)
      throw new Error(`${name} must be an integer of at least ${min}, got "${raw}"`);
    return value;
  };
  return {
    calls: int('BENCH_MCP_CALLS', 200, 1),
    toolMs: int('BENCH_MCP_TOOL_MS', 1000, 1),
    cap: int('BENCH_MCP_CAP', 20, 1),
    fast: int('BENCH_MCP_FAST', 500, 10),
  };
}

export interface McpResults {
  settings: McpSettings;
  flood: {
    answered: number;
    failed: number;
    upstreamStarts: number;
    mostAtOnce: number;
    seconds: number;
    leastSeconds: number;
  };
  /** The other account's call: its whole time, and what it waited beyond the tool's own run. */
  other: { ms: number; waitedMs: number };
  fast: {
    gateway: { p50: number; p99: number };
    direct: { p50: number; p99: number };
    floor: { p50: number; p99: number };
    addedP50: number;
    floorAddedP50: number;
  };
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

async function connect(url: string, headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

async function timed(client: Client, name: string, args: Record<string, unknown>, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const started = performance.now();
    await client.callTool({ name, arguments: args });
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b);
}

export async function runMcpBench(options: {
  redis: Redis;
  redisUrl: string;
  settings: McpSettings;
}): Promise<McpResults> {
  const { redis, redisUrl, settings } = options;
  const upstreamToken = 'bench-upstream';
  const upstream = await startFakeMcp({ token: upstreamToken, json: true });
  const dir = mkdtempSync(join(tmpdir(), 'bench-mcp-'));
  const file = join(dir, 'mcp.json');
  writeFileSync(
    file,
    JSON.stringify({
      servers: {
        tools: {
          url: upstream.url,
          headers: { Authorization: `Bearer ${upstreamToken}` },
          max_concurrency: settings.cap,
          timeout_ms: 60_000,
          price_per_call_usd: '0.001',
        },
      },
    }),
  );
  const keyStore = new KeyStore(redis, await testRecord(redis));
  const keyOf = async (email: string) => {
    const account = await keyStore.accounts.create({ email, name: email });
    await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
    return (
      await keyStore.create('bench-mcp', { accountId: account.id, limitMicros: 10 ** 12, rpm: 10 ** 8, tpm: 10 ** 9 })
    ).key;
  };
  const [floodKey, otherKey] = [await keyOf('bench-mcp-flood@example.com'), await keyOf('bench-mcp-other@example.com')];
  const gateway = await startGateway('start', 'http://127.0.0.1:9', redisUrl, undefined, {
    env: { MCP_SERVERS_FILE: file, MCP_CHECK_INTERVAL_MS: '2000', MOCK_VENDOR: 'on' },
    logTag: 'mcp',
  });
  const clients: Client[] = [];
  let floorChild: { stop(): Promise<void> } | undefined;
  try {
    const mcpUrl = `${gateway.url}/mcp`;
    // The tools are listed once a worker has checked the server.
    const lister = await connect(mcpUrl, { authorization: `Bearer ${floodKey}` });
    clients.push(lister);
    for (let i = 0; (await lister.listTools()).tools.length === 0; i += 1) {
      if (i > 100) throw new Error('the MCP server was never checked');
      await sleep(200);
    }
    log(
      `mcp: ${settings.calls} calls of a ${settings.toolMs} ms tool at once, capped at ${settings.cap}; another ` +
        `account's one call a second in`,
    );
    const floodClients = await Promise.all(
      Array.from({ length: 8 }, () => connect(mcpUrl, { authorization: `Bearer ${floodKey}` })),
    );
    const otherClient = await connect(mcpUrl, { authorization: `Bearer ${otherKey}` });
    clients.push(...floodClients, otherClient);
    upstream.slow.most = 0;
    const startsBefore = upstream.slow.started;
    const floodStarted = performance.now();
    const flood = Array.from({ length: settings.calls }, (_, i) =>
      floodClients[i % floodClients.length]!.callTool(
        { name: 'tools__slow', arguments: { ms: settings.toolMs } },
        undefined,
        { timeout: 600_000 },
      ),
    );
    await sleep(1000);
    const otherStarted = performance.now();
    await otherClient.callTool({ name: 'tools__slow', arguments: { ms: settings.toolMs } }, undefined, {
      timeout: 600_000,
    });
    const otherMs = performance.now() - otherStarted;
    const settled = await Promise.allSettled(flood);
    const floodSeconds = (performance.now() - floodStarted) / 1000;
    const answered = settled.filter((s) => s.status === 'fulfilled').length;

    log(
      `mcp: ${settings.fast} calls of a fast tool, one after another, through the gateway, directly and through ` +
        `the floor`,
    );
    const floor = await startMcpFloor(upstream.url, upstreamToken, redisUrl);
    floorChild = floor.child;
    const direct = await connect(upstream.url, { authorization: `Bearer ${upstreamToken}` });
    const through = await connect(mcpUrl, { authorization: `Bearer ${otherKey}` });
    const floored = await connect(floor.url, {});
    clients.push(direct, through, floored);
    const targets = [
      { client: through, tool: 'tools__search', times: [] as number[] },
      { client: direct, tool: 'search', times: [] as number[] },
      { client: floored, tool: 'search', times: [] as number[] },
    ];
    for (const target of targets) await timed(target.client, target.tool, { word: 'warm' }, 20);
    // Five rounds, each target's share of the calls in each, the order rotated: a shared machine's drift falls on all.
    const rounds = 5;
    for (let round = 0; round < rounds; round += 1) {
      for (let i = 0; i < targets.length; i += 1) {
        const target = targets[(round + i) % targets.length]!;
        target.times.push(
          ...(await timed(target.client, target.tool, { word: 'bench' }, Math.ceil(settings.fast / rounds))),
        );
      }
    }
    const [gatewayTimes, directTimes, floorTimes] = targets.map((target) => target.times.sort((a, b) => a - b)) as [
      number[],
      number[],
      number[],
    ];
    const p = (times: number[]) => ({ p50: quantile(times, 0.5), p99: quantile(times, 0.99) });
    return {
      settings,
      flood: {
        answered,
        failed: settled.length - answered,
        upstreamStarts: upstream.slow.started - startsBefore,
        mostAtOnce: upstream.slow.most,
        seconds: floodSeconds,
        leastSeconds: (Math.ceil((settings.calls + 1) / settings.cap) * settings.toolMs) / 1000,
      },
      other: { ms: otherMs, waitedMs: otherMs - settings.toolMs },
      fast: {
        gateway: p(gatewayTimes),
        direct: p(directTimes),
        floor: p(floorTimes),
        addedP50: quantile(gatewayTimes, 0.5) - quantile(directTimes, 0.5),
        floorAddedP50: quantile(floorTimes, 0.5) - quantile(directTimes, 0.5),
      },
    };
  } finally {
    await Promise.allSettled(clients.map((client) => client.close()));
    await floorChild?.stop();
    await stopGateway(gateway);
    await upstream.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function renderMcp(results: McpResults): string {
  const { settings, flood, other, fast } = results;
  const ms = (value: number) => value.toFixed(2);
  return [
    `MCP tool calls (bench/mcp.ts): ${settings.calls} calls of a ${settings.toolMs} ms tool from one account at ` +
      `once, the server capped at ${settings.cap}; another account's call a second in`,
    table(
      [
        'calls',
        'answered',
        'failed',
        'upstream starts',
        'most at once (cap)',
        'flood s (least)',
        "other account's call ms",
        'it waited beyond its run ms (bar: one call)',
      ],
      [
        [
          String(settings.calls + 1),
          String(flood.answered + 1),
          String(flood.failed),
          String(flood.upstreamStarts),
          `${flood.mostAtOnce} (${settings.cap})`,
          `${flood.seconds.toFixed(2)} (${flood.leastSeconds.toFixed(2)})`,
          ms(other.ms),
          `${ms(other.waitedMs)} (${settings.toolMs})`,
        ],
      ],
    ),
    '',
    `A fast tool, ${settings.fast} calls one after another with a connected client: through the gateway and ` +
      `through the floor (a bare BullMQ loop) against straight to the upstream`,
    table(
      ['path', 'p50 ms', 'p99 ms', 'added p50 ms'],
      [
        ['direct', ms(fast.direct.p50), ms(fast.direct.p99), ''],
        ['floor', ms(fast.floor.p50), ms(fast.floor.p99), ms(fast.floorAddedP50)],
        ['gateway', ms(fast.gateway.p50), ms(fast.gateway.p99), `${ms(fast.addedP50)} (bar: 2)`],
      ],
    ),
  ].join('\n');
}

async function main(): Promise<void> {
  installCleanup();
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 13);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  await redis.flushdb();
  try {
    const results = await runMcpBench({ redis, redisUrl, settings: mcpSettings(process.env) });
    process.stdout.write(`${renderMcp(results)}\n`);
  } finally {
    redis.disconnect();
    await stopAll();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
