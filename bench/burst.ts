/**
 * Burst against a vendor cap: a fake OpenAI with a fixed latency per answer
 * (own process; it answers 429 to any request beyond the cap and counts it),
 * the gateway started with `OPENAI_MAX_CONCURRENCY=<cap>`, and bursts of
 * 10× and 50× the cap fired at once through the gateway. Reports what the
 * vendor saw at once (read from the fake process), completions, errors, wall
 * time against the ideal (requests / cap × latency) and per-request latency.
 */
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { KeyStore } from '../api/accounts/key-store.js';
import { vendorInflightKey } from '../shared/redis-keys.js';
import { shardQueueName } from '../shared/queues.js';
import { FAKE_REPLY_TEXT } from '../test/support/fake-openai-defaults.js';
import {
  commandStats,
  diffCommandStats,
  redisProcessId,
  Samples,
  summarise,
  type CommandDelta,
  type LatencySummary,
} from './measure.js';
import { cpuWindow, sleep, waitForQuiet, waitUntil } from './procs.js';
import type { Bar } from './table.js';
import { table } from './table.js';
import {
  fakeControl,
  log,
  plainBody,
  probe,
  startFake,
  startGateway,
  stopGateway,
  waitForQueueWorkers,
  type Fake,
  type SlotUse,
} from './stack.js';
import { testRecord } from '../test/support/record.js';

export interface BurstSettings {
  cap: number;
  latencyMs: number;
  sizes: number[];
  configs: Array<'all' | 'split'>;
  /** Worker processes in the split configuration. */
  splitWorkers: number;
  /** Before each measured burst, wait up to this long for a quiet machine (0: do not check). */
  quietWaitMs: number;
}

export interface BurstRun {
  requests: number;
  /** From firing the first request to the last answer. */
  wallMs: number;
  /** ceil(requests / cap) × latency: the wall time if every slot were reused at once. */
  idealMs: number;
  /** 2xx answers carrying the fake's reply. */
  ok: number;
  /** 2xx whose body was not the fake's reply. */
  wrongBody: number;
  /** Transport failures (no HTTP answer). */
  errors: number;
  non2xx: number;
  clientStatus429: number;
  statusCodes: Record<string, number>;
  /** Milliseconds from sending each request to the end of its answer. */
  latency: LatencySummary;
  /** Read from the fake process after the burst. */
  vendor: { requests: number | null; maxInFlight: number; overCap: number; aborted: number; slotUse: SlotUse | null };
  /** Vendor slots still held in Redis after the burst (should be 0). */
  slotsLeft: number;
  /** CPU ms each process used during the burst; `others`: every other process on the machine. */
  cpuMs: Record<string, number | null>;
  /** Redis commands during the burst (whole server), busiest first. */
  redisCommands: CommandDelta[];
  /**
   * The machine's busy share (% of one core) in the second before the burst, and whether that was under the threshold.
   */
  before: { quiet: boolean; busyPct: number | null };
}

export interface BurstConfigResult {
  name: string;
  description: string;
  processes: Record<string, number>;
  runs: BurstRun[];
  warnings: Record<string, number>;
  bars: Bar[];
}

export interface BurstResults {
  settings: BurstSettings;
  configs: BurstConfigResult[];
}

interface Outcome {
  status: number;
  ms: number;
  body: string;
}

async function fire(agent: Agent, url: string, key: string): Promise<Outcome | Error> {
  const started = performance.now();
  try {
    const response = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(plainBody),
      headersTimeout: 120_000,
      bodyTimeout: 120_000,
    });
    const body = await response.body.text();
    return { status: response.statusCode, ms: performance.now() - started, body };
  } catch (error) {
    return error as Error;
  }
}

function answerText(body: string): string | undefined {
  try {
    return (JSON.parse(body) as { choices?: Array<{ message?: { content?: string } }> }).choices?.[0]?.message?.content;
  } catch {
    return undefined;
  }
}

async function burstOnce(options: {
  size: number;
  settings: BurstSettings;
  fake: Fake;
  gatewayUrl: string;
  key: string;
  redis: Redis;
  pids: Record<string, number>;
  /** How long to wait for a quiet machine first (0: not at all). */
  quietWaitMs: number;
}): Promise<BurstRun> {
  const { size, settings, fake, redis } = options;
  const slotsKey = vendorInflightKey('openai');
  // Start from an idle vendor and no slot held.
  await waitUntil(
    'an idle vendor and no vendor slot held',
    async () => {
      const stats = await fakeControl(fake, 'GET', '/__stats');
      return stats.openai!.inFlight === 0 && (await redis.zcard(slotsKey)) === 0;
    },
    30_000,
  );
  const quiet = await waitForQuiet({ maxWaitMs: options.quietWaitMs });
  if (!quiet.quiet)
    log(`  the machine did not go quiet (${quiet.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
  await fakeControl(fake, 'POST', '/__reset');

  const cpuPids: Record<string, number> = { ...options.pids };
  const redisPid = await redisProcessId(redis);
  if (redisPid !== undefined) cpuPids.redis = redisPid;
  cpuPids.fake = fake.child.pid;
  cpuPids.client = process.pid;
  const cpuSpent = cpuWindow(cpuPids);
  const commandsBefore = await commandStats(redis);

  // One connection per request: nothing queues in the client, only in the gateway.
  const agent = new Agent({ connections: size, keepAliveTimeout: 30_000 });
  const url = `${options.gatewayUrl}/v1/chat/completions`;
  let outcomes: Array<Outcome | Error>;
  const started = performance.now();
  try {
    outcomes = await Promise.all(Array.from({ length: size }, () => fire(agent, url, options.key)));
  } finally {
    await agent.close().catch(() => undefined);
  }
  const wallMs = performance.now() - started;

  const cpuMs = cpuSpent();
  const redisCommands = diffCommandStats(commandsBefore, await commandStats(redis));
  // Slots are released just after each answer is published: give the last releases a moment.
  await sleep(200);
  const slotsLeft = await redis.zcard(slotsKey);
  const vendor = (await fakeControl(fake, 'GET', '/__stats')).openai!;

  const latencies = new Samples();
  const statusCodes: Record<string, number> = {};
  let ok = 0;
  let wrongBody = 0;
  let errors = 0;
  let non2xx = 0;
  for (const outcome of outcomes) {
    if (outcome instanceof Error) {
      errors += 1;
      statusCodes.error = (statusCodes.error ?? 0) + 1;
      continue;
    }
    statusCodes[outcome.status] = (statusCodes[outcome.status] ?? 0) + 1;
    if (outcome.status < 200 || outcome.status >= 300) {
      non2xx += 1;
      continue;
    }
    latencies.push(outcome.ms);
    if (answerText(outcome.body) === FAKE_REPLY_TEXT) ok += 1;
    else wrongBody += 1;
  }
  return {
    requests: size,
    wallMs,
    idealMs: Math.ceil(size / settings.cap) * settings.latencyMs,
    ok,
    wrongBody,
    errors,
    non2xx,
    clientStatus429: statusCodes['429'] ?? 0,
    statusCodes,
    latency: summarise(latencies),
    vendor: {
      requests: vendor.requests,
      maxInFlight: vendor.maxInFlight,
      overCap: vendor.overCap ?? 0,
      aborted: vendor.aborted,
      slotUse: vendor.slotUse ?? null,
    },
    slotsLeft,
    cpuMs,
    redisCommands,
    before: { quiet: quiet.quiet, busyPct: quiet.busyPct },
  };
}

function barsOf(run: BurstRun, cap: number): Bar[] {
  const failures = run.errors + run.non2xx + run.wrongBody;
  return [
    {
      name: `${run.requests} at once: vendor never above ${cap}`,
      target: `max in flight ≤ ${cap}`,
      actual: `${run.vendor.maxInFlight}`,
      pass: run.vendor.maxInFlight <= cap,
    },
    {
      name: `${run.requests} at once: all complete`,
      target: `${run.requests} × 2xx, 0 errors`,
      actual: `${run.ok} × 2xx, ${failures} failed`,
      pass: run.ok === run.requests && failures === 0,
    },
    {
      name: `${run.requests} at once: no 429`,
      target: '0 at client, 0 at vendor',
      actual: `${run.clientStatus429} at client, ${run.vendor.overCap} at vendor`,
      pass: run.clientStatus429 === 0 && run.vendor.overCap === 0,
    },
  ];
}

export async function runBurst(options: {
  settings: BurstSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<BurstResults> {
  const { settings, redis, redisUrl } = options;
  const db = Number(new URL(redisUrl).pathname.slice(1) || '0');
  const fake = await startFake({ latencyMs: settings.latencyMs, cap: settings.cap });
  log(
    `burst: fake OpenAI at ${fake.url} (pid ${fake.child.pid}), ${settings.latencyMs} ms per answer, 429 beyond ` +
      `${settings.cap} in flight`,
  );
  const configs: BurstConfigResult[] = [];
  try {
    for (const config of settings.configs) {
      const workers = config === 'split' ? settings.splitWorkers : 1;
      const label = config === 'all' ? 'one process' : `api + ${workers} workers`;
      await redis.flushdb();
      const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-burst');
      log(`burst, gateway (${label}): starting with OPENAI_MAX_CONCURRENCY=${settings.cap}`);
      const gateway = await startGateway(config, fake.url, redisUrl, undefined, {
        env: { OPENAI_MAX_CONCURRENCY: String(settings.cap) },
        workers,
        logTag: `burst-${config}`,
      });
      const children = Object.values(gateway.children);
      try {
        await probe(gateway.url, key, children);
        // Every worker process must be taking jobs, or the split run would test one worker only.
        await waitForQueueWorkers(redis, db, shardQueueName('chat', 0), workers, children);
        const pids = Object.fromEntries(Object.entries(gateway.children).map(([n, c]) => [n, c.pid]));
        // A small unmeasured burst first, so the measured ones do not pay for JIT warm-up.
        await burstOnce({
          size: settings.cap * 2,
          settings,
          fake,
          gatewayUrl: gateway.url,
          key,
          redis,
          pids,
          quietWaitMs: 0,
        });
        const runs: BurstRun[] = [];
        for (const size of settings.sizes) {
          log(`burst, gateway (${label}): ${size} requests at once`);
          const run = await burstOnce({
            size,
            settings,
            fake,
            gatewayUrl: gateway.url,
            key,
            redis,
            pids,
            quietWaitMs: settings.quietWaitMs,
          });
          log(
            `  vendor max in flight ${run.vendor.maxInFlight}, ${run.ok}/${size} ok, ${run.errors} errors, ` +
              `${run.non2xx} non-2xx, ` +
              (`429s ${run.clientStatus429}/${run.vendor.overCap}, wall ${Math.round(run.wallMs)} ms (ideal ` +
                `${run.idealMs})`),
          );
          runs.push(run);
        }
        for (const child of children) {
          if (child.warnings > 0)
            log(
              `${child.name} logged ${child.warnings} line(s) at warn or above: see ` +
                `bench/results/logs/burst-${config}-${child.name}.log`,
            );
        }
        configs.push({
          name: label,
          description:
            config === 'all'
              ? 'node dist/bin/start.js (api and workers in one process)'
              : `node dist/bin/start.js --role=api + ${workers} × --role=worker`,
          processes: pids,
          runs,
          warnings: Object.fromEntries(children.map((c) => [c.name, c.warnings])),
          bars: runs.flatMap((run) => barsOf(run, settings.cap)),
        });
      } finally {
        log(`burst, gateway (${label}): stopping`);
        await stopGateway(gateway);
      }
    }
  } finally {
    await fake.child.stop();
  }
  return { settings, configs };
}

const ms = (value: number) => (Number.isNaN(value) ? '-' : value.toFixed(1));

export function renderBurst(results: BurstResults): string {
  const { settings, configs } = results;
  const out: string[] = [];
  out.push(
    `Burst against a vendor cap: fake OpenAI answering in ${settings.latencyMs} ms (429 beyond ${settings.cap} ` +
      `in flight), gateway with OPENAI_MAX_CONCURRENCY=${settings.cap}; ` +
      `each burst fired at once (undici, one connection per request); latency in ms from send to end of answer`,
  );
  const rows: string[][] = [];
  for (const config of configs) {
    for (const run of config.runs) {
      rows.push([
        config.name,
        String(run.requests),
        String(run.vendor.maxInFlight),
        run.vendor.requests === null ? '-' : String(run.vendor.requests),
        String(run.ok),
        String(run.errors + run.wrongBody),
        String(run.non2xx),
        `${run.clientStatus429}/${run.vendor.overCap}`,
        String(Math.round(run.wallMs)),
        String(run.idealMs),
        (run.wallMs / run.idealMs).toFixed(2),
        ms(run.latency.p50),
        ms(run.latency.p90),
        ms(run.latency.p99),
        ms(run.latency.max),
        String(run.slotsLeft),
      ]);
    }
  }
  out.push(
    table(
      [
        'configuration',
        'burst',
        'vendor max',
        'vendor reqs',
        '2xx',
        'errors',
        'non-2xx',
        '429 client/vendor',
        'wall ms',
        'ideal ms',
        'wall/ideal',
        'p50',
        'p90',
        'p99',
        'max',
        'slots left',
      ],
      rows,
    ),
  );
  out.push('');
  out.push(
    `Vendor slots (from the fake's arrival times): idle time of a slot between an answer and the next request ` +
      `through the gateway (ms), ` +
      `and the share of ${settings.cap} slots × (first arrival → last answer) that was busy`,
  );
  out.push(
    table(
      [
        'configuration',
        'burst',
        'hand-offs',
        'idle p50',
        'idle p90',
        'idle p99',
        'idle max',
        'idle mean',
        'busy share',
      ],
      configs.flatMap((config) =>
        config.runs.map((run) => {
          const use = run.vendor.slotUse;
          return [
            config.name,
            String(run.requests),
            use ? String(use.handoffs) : '-',
            use ? ms(use.gapMs.p50) : '-',
            use ? ms(use.gapMs.p90) : '-',
            use ? ms(use.gapMs.p99) : '-',
            use ? ms(use.gapMs.max) : '-',
            use ? ms(use.gapMs.mean) : '-',
            use ? `${(use.utilisation * 100).toFixed(0)}%` : '-',
          ];
        }),
      ),
    ),
  );
  out.push('');
  out.push(
    "CPU during each burst (ms; others = every other process on the machine), the machine's busy share in the " +
      'second before it, ' +
      "and Redis EVALSHA calls (whole server: the vendor-slot script and BullMQ's)",
  );
  const cpuRows: string[][] = [];
  for (const config of configs) {
    for (const run of config.runs) {
      const evalsha = run.redisCommands.find((c) => c.command === 'evalsha');
      cpuRows.push([
        config.name,
        String(run.requests),
        Object.entries(run.cpuMs)
          .map(([n, v]) => `${n} ${v ?? '-'}`)
          .join(', '),
        run.before.busyPct === null ? '-' : `${run.before.busyPct.toFixed(0)}%`,
        evalsha
          ? `${evalsha.calls.toLocaleString('en-US')} (${(evalsha.calls / run.requests).toFixed(1)}/request)`
          : '-',
      ]);
    }
  }
  out.push(table(['configuration', 'burst', 'CPU ms by process', 'busy before', 'EVALSHA calls'], cpuRows));
  const warnings = configs.flatMap((c) =>
    Object.entries(c.warnings)
      .filter(([, n]) => n > 0)
      .map(([p, n]) => `${p} (${c.name}): ${n}`),
  );
  if (warnings.length) out.push('', `Log lines at warn or above during the bursts: ${warnings.join(', ')}`);
  return out.join('\n');
}
