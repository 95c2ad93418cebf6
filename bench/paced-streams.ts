/**
 * The streams section of `npm run bench` (`BENCH_ONLY=streams`): streams as real traffic sends them.
 * A fake OpenAI paces every stream like a model (bench/fake-upstream-process.ts `--pace-tokens`,
 * `--pace-ms`: 300 text deltas, one write every 20 ms, the vendor's framing), and waves of clients
 * (200, then 1,000) each open one stream at once and read it to its end, against two targets in the
 * same run, on the same fake process:
 *
 *   direct   the client reads the paced fake itself
 *   gateway  a default `start` (`node dist/bin/start.js` as `npm start` runs it, its own Redis
 *            database and record) with a credited account's key, as the overhead section uses
 *
 * For every stream: time to first content token (from the request's send), every gap between two
 * consecutive content tokens (tokens that came in one read have a gap of 0: the client saw them at
 * once), and whether it ended with `data: [DONE]` after all its tokens (a stream that failed, broke
 * off or came short is counted broken). Per target and wave: TTFT p50/p99, gap p50/p99/max, the
 * wave's time (first open to last end), CPU ms per 1,000 tokens relayed by process (/proc deltas),
 * RSS peak by process, Redis commands per token (INFO commandstats delta over the wave ÷ tokens
 * the clients got; whole server, one target runs at a time) with the top commands. Bars (the issue's):
 * the gateway's gap p99 within 5 ms of direct, TTFT p50 within 50 ms of direct, the wave within 1.2×
 * direct's time, no stream broken; counted at the largest wave (1,000), reported at the others.
 */
import { performance } from 'node:perf_hooks';
import { StringDecoder } from 'node:string_decoder';
import { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { KeyStore } from '../api/accounts/key-store.js';
import { testRecord } from '../test/support/record.js';
import {
  commandStats,
  diffCommandStats,
  redisProcessId,
  redisUsedMemory,
  RssSampler,
  Samples,
  summariseSorted,
  type CommandDelta,
  type LatencySummary,
} from './measure.js';
import { dbUrl, targetDbs } from './overhead.js';
import { cpuWindow, sleep, spawnChild, waitForQuiet } from './procs.js';
import {
  discoverProcesses,
  fakeControl,
  log,
  probe,
  startGateway,
  stopGateway,
  streamBody,
  upstreamKey,
  type Fake,
  type Gateway,
} from './stack.js';
import { table, type Bar } from './table.js';

export interface StreamsSettings {
  /** Streams opened at once, one wave per entry, each against every target. */
  waves: number[];
  /** Text deltas per stream. */
  tokens: number;
  /** The fake's pause between two writes of a stream, ms. */
  paceMs: number;
  /** Streams of the unmeasured warm-up wave per target. */
  warmupStreams: number;
  /** Before each wave, wait up to this long for a quiet second (ms; 0: do not check). */
  quietWaitMs: number;
}

export interface WaveStats {
  streams: number;
  /** Ended with `data: [DONE]` after every token. */
  ok: number;
  broken: number;
  /** Why streams broke, by reason (a few words), with counts. */
  brokenReasons: Record<string, number>;
  /** Content tokens the clients got, in all. */
  tokens: number;
  /** Milliseconds from the send to the first content token, of every stream that had one. */
  ttft: LatencySummary;
  /** Milliseconds between consecutive content tokens of a stream, pooled over the wave. */
  gap: LatencySummary;
  /** From the first open to the last end, ms. */
  waveMs: number;
  /** Whether the machine was quiet before the wave (busy share of one core in the last second). */
  quiet: { quiet: boolean; busyPct: number | null };
  /**
   * CPU ms (user + system) by process during the wave; `loadgen` is this process (the clients), `others` the rest of
   * the machine.
   */
  cpuMs: Record<string, number | null>;
  /** CPU ms per 1,000 tokens the clients got, by process. */
  cpuMsPer1000Tokens: Record<string, number | null>;
  /** Highest RSS sampled during the wave, bytes, by process. */
  rssPeak: Record<string, number | null>;
  /** Redis commands in the wave (whole server), per token, and the busiest by calls. */
  redisCommands: number;
  redisCommandsPerToken: number;
  redisTop: CommandDelta[];
  /**
   * Redis used_memory before the wave and right after its last stream ended, bytes (replay logs are kept a while after
   * a stream ends).
   */
  redisUsedMemory: { before: number; after: number };
  /** The fake's count of paced streams in the wave: started, completed, left by their client. */
  fake: { started: number; completed: number; aborted: number; maxActive: number } | null;
}

export interface StreamsWave {
  streams: number;
  targets: Record<string, WaveStats>;
}

export interface StreamsResults {
  settings: StreamsSettings;
  /** The processes of each target by role. */
  processes: Record<string, Record<string, number>>;
  waves: StreamsWave[];
  bars: Bar[];
}

interface Target {
  name: 'direct' | 'gateway';
  url: string;
  headers: Record<string, string>;
  /** Its processes whose CPU and RSS are its own. */
  pids: Record<string, number>;
}

interface Outcome {
  ok: boolean;
  reason?: string;
  tokens: number;
  ttft: number;
  end: number;
}

const TOKEN = '"content":"';

/**
 * One stream: opens it, reads every event, notes the time of each content token. Parsing is kept
 * minimal (the client shares the machine): a content token is a `data:` line with a non-empty
 * `"content":"…"`; the end is the `data: [DONE]` line.
 */
async function readStream(
  agent: Agent,
  target: Target,
  body: string,
  expected: number,
  gaps: Samples,
): Promise<Outcome> {
  const opened = performance.now();
  let tokens = 0;
  let ttft = Number.NaN;
  let last = 0;
  let done = false;
  let errorCode: string | undefined;
  try {
    const response = await request(target.url, {
      method: 'POST',
      dispatcher: agent,
      headers: { ...target.headers, 'content-type': 'application/json' },
      body,
      headersTimeout: 180_000,
      bodyTimeout: 60_000,
    });
    if (response.statusCode !== 200) {
      const text = await response.body.text().catch(() => '');
      const code = /"code":"([^"]+)"/.exec(text)?.[1];
      return {
        ok: false,
        reason: `HTTP ${response.statusCode}${code ? ` ${code}` : ''}`,
        tokens,
        ttft,
        end: performance.now(),
      };
    }
    // A read may end inside a UTF-8 character: the decoder keeps its bytes for the next.
    const decoder = new StringDecoder('utf8');
    let carry = '';
    for await (const bytes of response.body as AsyncIterable<Buffer>) {
      const now = performance.now();
      const chunk = decoder.write(bytes);
      const text = carry === '' ? chunk : carry + chunk;
      let start = 0;
      for (let newline = text.indexOf('\n', start); newline !== -1; newline = text.indexOf('\n', start)) {
        if (text.startsWith('data: ', start)) {
          if (text.startsWith('data: [DONE]', start)) done = true;
          else if (text.startsWith('data: {"error"', start)) {
            // The stream ended with an error event (output had started): its code says why.
            errorCode = /"code":"([^"]+)"/.exec(text.slice(start, newline))?.[1] ?? 'error event';
          } else {
            const at = text.indexOf(TOKEN, start);
            if (at !== -1 && at < newline && text.charCodeAt(at + TOKEN.length) !== 34 /* " */) {
              if (tokens === 0) ttft = now - opened;
              else gaps.push(now - last);
              last = now;
              tokens += 1;
            }
          }
        }
        start = newline + 1;
      }
      carry = start < text.length ? text.slice(start) : '';
    }
  } catch (error) {
    return {
      ok: false,
      reason: (error as { code?: string }).code ?? (error as Error).message.slice(0, 60),
      tokens,
      ttft,
      end: performance.now(),
    };
  }
  const end = performance.now();
  if (!done) return { ok: false, reason: errorCode ? `error event ${errorCode}` : 'no [DONE]', tokens, ttft, end };
  if (tokens !== expected) return { ok: false, reason: `${tokens} of ${expected} tokens`, tokens, ttft, end };
  return { ok: true, tokens, ttft, end };
}

/** Opens `streams` streams at once on a fresh agent (every client on a new connection) and reads them all. */
async function wave(target: Target, streams: number, expected: number) {
  const agent = new Agent({ connections: streams + 16, keepAliveTimeout: 10_000, pipelining: 1 });
  const body = JSON.stringify(streamBody);
  const gaps = new Samples();
  const started = performance.now();
  try {
    const outcomes = await Promise.all(
      Array.from({ length: streams }, () => readStream(agent, target, body, expected, gaps)),
    );
    const ended = Math.max(...outcomes.map((o) => o.end));
    return { outcomes, gaps, waveMs: ended - started };
  } finally {
    await agent.close().catch(() => undefined);
  }
}

function startPacedFake(tokens: number, paceMs: number): Promise<Fake> {
  const child = spawnChild(
    'fake',
    ['--import', 'tsx', 'bench/fake-upstream-process.ts', `--pace-tokens=${tokens}`, `--pace-ms=${paceMs}`],
    {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '/root',
    },
  );
  return Promise.race([
    child.firstLine.then((line) => ({ child, ...(JSON.parse(line) as Omit<Fake, 'child'>) })),
    sleep(20_000).then(() => {
      throw new Error(`paced fake silent after 20 s:\n${child.tail.join('\n')}`);
    }),
  ]);
}

/** One stream read to its end (stack.ts's probeStream gives up after 5 s: a paced stream takes longer). */
async function probeOne(target: Target, tokens: number): Promise<void> {
  const agent = new Agent({ connections: 1 });
  try {
    const outcome = await readStream(agent, target, JSON.stringify(streamBody), tokens, new Samples());
    if (!outcome.ok) throw new Error(`streams: probe stream of ${target.name} failed: ${outcome.reason}`);
  } finally {
    await agent.close().catch(() => undefined);
  }
}

type Paced = NonNullable<WaveStats['fake']>;
async function pacedStats(fake: Fake): Promise<Paced | null> {
  const stats = (await fakeControl(fake, 'GET', '/__stats').catch(() => undefined)) as
    Record<string, { paced?: Paced }> | undefined;
  return stats?.openai?.paced ?? null;
}

async function measureWave(options: {
  target: Target;
  streams: number;
  settings: StreamsSettings;
  redis: Redis;
  fake: Fake;
  redisPid: number | undefined;
}): Promise<WaveStats> {
  const { target, streams, settings, redis, fake, redisPid } = options;
  const quiet = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
  await fakeControl(fake, 'POST', '/__reset');
  const cpuPids: Record<string, number> = { ...target.pids, fake: fake.child.pid, loadgen: process.pid };
  if (redisPid !== undefined) cpuPids.redis = redisPid;
  const sampler = new RssSampler({ ...target.pids, fake: fake.child.pid }, 250);
  const memoryBefore = await redisUsedMemory(redis);
  const statsBefore = await commandStats(redis);
  const cpuSpent = cpuWindow(cpuPids);
  sampler.start();
  const { outcomes, gaps, waveMs } = await wave(target, streams, settings.tokens);
  const rssPeak = sampler.stop();
  const cpuMs = cpuSpent();
  const commands = diffCommandStats(statsBefore, await commandStats(redis)).sort((a, b) => b.calls - a.calls);
  const memoryAfter = await redisUsedMemory(redis);
  const tokens = outcomes.reduce((sum, o) => sum + o.tokens, 0);
  const ttft = new Float64Array(outcomes.filter((o) => o.tokens > 0).map((o) => o.ttft)).sort();
  const brokenReasons: Record<string, number> = {};
  for (const o of outcomes)
    if (!o.ok) brokenReasons[o.reason ?? 'unknown'] = (brokenReasons[o.reason ?? 'unknown'] ?? 0) + 1;
  const per1000 = Math.max(1, tokens) / 1000;
  const redisCommands = commands.reduce((sum, d) => sum + d.calls, 0);
  return {
    streams,
    ok: outcomes.filter((o) => o.ok).length,
    broken: outcomes.filter((o) => !o.ok).length,
    brokenReasons,
    tokens,
    ttft: summariseSorted(ttft),
    gap: summariseSorted(gaps.sorted()),
    waveMs,
    quiet: { quiet: quiet.quiet, busyPct: quiet.busyPct },
    cpuMs,
    cpuMsPer1000Tokens: Object.fromEntries(Object.entries(cpuMs).map(([n, v]) => [n, v === null ? null : v / per1000])),
    rssPeak,
    redisCommands,
    redisCommandsPerToken: redisCommands / Math.max(1, tokens),
    redisTop: commands.slice(0, 8),
    redisUsedMemory: { before: memoryBefore, after: memoryAfter },
    fake: await pacedStats(fake),
  };
}

export async function runPacedStreams(options: {
  settings: StreamsSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<StreamsResults> {
  const { settings, redis, redisUrl } = options;
  const fake = await startPacedFake(settings.tokens, settings.paceMs);
  log(
    `streams: paced fake at ${fake.url} (pid ${fake.child.pid}): ${settings.tokens} tokens, one write every ` +
      `${settings.paceMs} ms`,
  );
  const [db] = targetDbs(redisUrl, 1);
  const gatewayRedis = new Redis(dbUrl(redisUrl, db!), { maxRetriesPerRequest: 3 });
  let gateway: Gateway | undefined;
  try {
    await gatewayRedis.flushdb();
    const direct: Target = {
      name: 'direct',
      url: `${fake.url}/chat/completions`,
      headers: { authorization: `Bearer ${upstreamKey}` },
      pids: {},
    };
    await probeOne(direct, settings.tokens);

    // A credited account's key with a spending limit and rate limits far above the load (as the overhead section).
    const keyStore = new KeyStore(gatewayRedis, await testRecord(gatewayRedis));
    const account = await keyStore.accounts.create({ email: 'bench-streams@example.com', name: 'bench streams' });
    await keyStore.accounts.credit(account.id, 10 ** 12, 'bench');
    const key = await keyStore.create('bench-streams', {
      accountId: account.id,
      limitMicros: 10 ** 12,
      rpm: 10 ** 8,
      tpm: 10 ** 9,
    });
    log(`streams: gateway starting (Redis db ${db})`);
    gateway = await startGateway('start', fake.url, dbUrl(redisUrl, db!), process.env.BENCH_CPU_PROF || undefined, {
      logTag: 'streams',
    });
    await probe(gateway.url, key.key, Object.values(gateway.children));
    const target: Target = {
      name: 'gateway',
      url: `${gateway.url}/v1/chat/completions`,
      headers: { authorization: `Bearer ${key.key}` },
      pids: {},
    };
    await probeOne(target, settings.tokens);
    target.pids = discoverProcesses(gateway);
    log(
      `streams: gateway ready, processes ${Object.entries(target.pids)
        .map(([n, pid]) => `${n} ${pid}`)
        .join(', ')}`,
    );
    const targets = [direct, target];
    const redisPid = await redisProcessId(redis);

    if (settings.warmupStreams > 0) {
      for (const t of targets) {
        log(`streams: warm-up, ${t.name}, ${settings.warmupStreams} streams`);
        const { outcomes } = await wave(t, settings.warmupStreams, settings.tokens);
        const broken = outcomes.filter((o) => !o.ok);
        if (broken.length > 0)
          throw new Error(
            `streams: ${broken.length} warm-up stream(s) of ${t.name} broke (${broken[0]!.reason}); see ` +
              `bench/results/logs/streams-*.log`,
          );
      }
    }

    const waves: StreamsWave[] = [];
    for (const streams of settings.waves) {
      const row: StreamsWave = { streams, targets: {} };
      for (const t of targets) {
        log(`streams: ${streams} streams at once, ${t.name}`);
        const s = await measureWave({ target: t, streams, settings, redis, fake, redisPid });
        row.targets[t.name] = s;
        log(
          `  ${t.name}: TTFT p50 ${s.ttft.p50.toFixed(1)} ms, p99 ${s.ttft.p99.toFixed(1)} ms; gap p50 ` +
            `${s.gap.p50.toFixed(1)}, p99 ${s.gap.p99.toFixed(1)}, max ${s.gap.max.toFixed(1)} ms; ` +
            `wave ${(s.waveMs / 1000).toFixed(2)} s; ${s.broken} broken${s.broken ? ` (${JSON.stringify(s.brokenReasons)})` : ''}`,
        );
      }
      waves.push(row);
    }
    for (const c of Object.values(gateway.children))
      if (c.warnings > 0)
        log(`streams: ${c.name} logged ${c.warnings} line(s) at warn or above (bench/results/logs/streams-*.log)`);
    return {
      settings,
      processes: { direct: { fake: fake.child.pid }, gateway: { ...target.pids, fake: fake.child.pid } },
      waves,
      bars: streamBars(waves),
    };
  } finally {
    if (gateway)
      await stopGateway(gateway).catch((error: Error) => log(`streams: gateway stop failed: ${error.message}`));
    await fake.child.stop();
    await gatewayRedis.flushdb().catch(() => undefined);
    gatewayRedis.disconnect();
  }
}

const f1 = (value: number) => (Number.isNaN(value) ? '-' : value.toFixed(1));

/** The issue's bars, per wave: counted at the largest, reported (informational) at the others. */
export function streamBars(waves: StreamsWave[]): Bar[] {
  const largest = Math.max(...waves.map((w) => w.streams));
  const out: Bar[] = [];
  for (const w of waves) {
    const d = w.targets.direct;
    const g = w.targets.gateway;
    if (!d || !g) continue;
    const informational = w.streams !== largest;
    const at = `${w.streams} streams`;
    out.push({
      name: `${at}: gap p99, gateway − direct`,
      target: '≤ +5 ms',
      actual: `${g.gap.p99 - d.gap.p99 >= 0 ? '+' : ''}${f1(g.gap.p99 - d.gap.p99)} ms (${f1(g.gap.p99)} vs ${f1(d.gap.p99)})`,
      pass: g.gap.p99 - d.gap.p99 <= 5,
      informational,
    });
    out.push({
      name: `${at}: TTFT p50, gateway − direct`,
      target: '≤ +50 ms',
      actual: `${g.ttft.p50 - d.ttft.p50 >= 0 ? '+' : ''}${f1(g.ttft.p50 - d.ttft.p50)} ms (${f1(g.ttft.p50)} vs ${f1(d.ttft.p50)})`,
      pass: g.ttft.p50 - d.ttft.p50 <= 50,
      informational,
    });
    out.push({
      name: `${at}: wave time, gateway ÷ direct`,
      target: '≤ 1.20×',
      actual:
        `${(g.waveMs / d.waveMs).toFixed(2)}× (${(g.waveMs / 1000).toFixed(2)} vs ${(d.waveMs / 1000).toFixed(2)} ` +
        `s)`,
      pass: g.waveMs <= 1.2 * d.waveMs,
      informational,
    });
    out.push({
      name: `${at}: streams broken`,
      target: '0',
      actual: `${g.broken} of ${g.streams} (direct ${d.broken})`,
      pass: g.broken === 0 && d.broken === 0,
      informational,
    });
  }
  return out;
}

const mib = (bytes: number | null | undefined) => (bytes == null ? '-' : (bytes / 1048576).toFixed(0));
const result = (b: Bar) => (b.informational ? `(${b.pass ? 'PASS' : 'FAIL'})` : b.pass ? 'PASS' : 'FAIL');

export function renderStreams(results: StreamsResults): string {
  const { settings, waves } = results;
  const out: string[] = [];
  out.push(
    `Streams as real traffic sends them: a fake OpenAI pacing ${settings.tokens} tokens ${settings.paceMs} ms ` +
      `apart; each wave opens every stream at once ` +
      `(new connections), direct to the fake, then through a default \`start\` (${Object.entries(
        results.processes.gateway ?? {},
      )
        .map(([n, pid]) => `${n} ${pid}`)
        .join(', ')}). ` +
      (`Gaps: between consecutive content tokens of a stream, pooled. CPU per 1,000 tokens the clients got; ` +
        `Redis: whole server, commandstats delta.`),
  );
  out.push('');
  const rows: string[][] = [];
  for (const w of waves) {
    for (const [name, s] of Object.entries(w.targets)) {
      rows.push([
        `${w.streams}`,
        name,
        f1(s.ttft.p50),
        f1(s.ttft.p99),
        f1(s.gap.p50),
        f1(s.gap.p99),
        f1(s.gap.max),
        (s.waveMs / 1000).toFixed(2),
        `${s.broken}`,
        Object.entries(s.cpuMsPer1000Tokens)
          .map(([n, v]) => `${n} ${v === null ? '-' : v.toFixed(0)}`)
          .join(', '),
        Object.entries(s.rssPeak)
          .map(([n, v]) => `${n} ${mib(v)}`)
          .join(', '),
        s.redisCommandsPerToken.toFixed(2),
      ]);
    }
  }
  out.push(
    table(
      [
        'streams',
        'target',
        'TTFT p50',
        'TTFT p99',
        'gap p50',
        'gap p99',
        'gap max',
        'wave s',
        'broken',
        'CPU ms per 1,000 tokens by process',
        'RSS peak MiB',
        'Redis cmds/token',
      ],
      rows,
    ),
  );
  out.push('');
  for (const w of waves) {
    const g = w.targets.gateway;
    if (!g) continue;
    out.push(
      `${w.streams} streams, gateway: ${g.redisCommands.toLocaleString('en-US')} Redis commands for ${g.tokens.toLocaleString('en-US')} tokens; top by calls per token: ` +
        g.redisTop.map((d) => `${d.command} ${(d.calls / Math.max(1, g.tokens)).toFixed(3)}`).join(', ') +
        `; Redis used_memory ${mib(g.redisUsedMemory.before)} → ${mib(g.redisUsedMemory.after)} MiB`,
    );
    const broken = Object.entries(w.targets).filter(([, s]) => s.broken > 0);
    for (const [name, s] of broken)
      out.push(
        `  ${name} broken: ${Object.entries(s.brokenReasons)
          .map(([r, n]) => `${r} × ${n}`)
          .join(', ')}`,
      );
  }
  out.push('');
  out.push('Streams bars (in parentheses: informational, not counted)');
  out.push(
    table(
      ['bar', 'target', 'actual', 'result'],
      results.bars.map((b) => [b.name, b.target, b.actual, result(b)]),
    ),
  );
  return out.join('\n');
}
