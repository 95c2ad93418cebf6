/**
 * The Responses API stream against the chat completions stream, through the
 * same gateway, on the same model and the same fake vendor, in one run:
 *
 *   chat       POST {gateway}/v1/chat/completions  stream: true (+ include_usage)
 *   responses  POST {gateway}/v1/responses         stream: true
 *   direct     POST {fake}/chat/completions         stream: true: the floor
 *
 * The fake OpenAI (bench/fake-upstream-process.ts, its own process) answers
 * every stream request with one long stream of N text deltas in one write
 * (bench/long-streams.ts). The gateway is `node dist/bin/start.js` (one
 * process, api and workers together) on a private redis-server. Requests are
 * sequential over one keep-alive connection per host; the three variants are
 * alternated request by request, in rounds whose order rotates (abc, bca,
 * cab, …), so drift of the machine falls on all three alike.
 *
 * Per stream, timed by the client from sending the request:
 *   first frame  the first SSE frame with a `data:` line (chat: the role chunk;
 *                Responses: `response.created`)
 *   first text   the first frame carrying text (chat: a chunk whose delta has
 *                non-empty content; Responses: `response.output_text.delta`)
 *   total        the end of the body
 * and the CPU the gateway, redis-server and the fake used during it (summed
 * over every thread's /proc/<pid>/task/<tid>/schedstat run time, ns), read
 * before the request and again `settle` ms after the body ended, so work the
 * gateway does just after the stream (storing the response, settlement, the
 * job's completion) is counted with the stream that caused it.
 *
 * Reported: medians and p90; added time (gateway − direct) to the first frame
 * and the first text; added wall µs per text delta ((total p50 − direct total
 * p50) ÷ N); gateway CPU per stream and per text delta; the ratios
 * Responses ÷ chat against the 1.2× bar.
 *
 *   npm run build --silent && node --import tsx bench/responses.ts
 *
 * Environment:
 *   BENCH_RESPONSES_REQUESTS  measured streams per variant (default 200)
 *   BENCH_RESPONSES_WARMUP    warm-up streams per variant, alternated the same way (default 20)
 *   BENCH_STREAM_CHUNKS       text deltas per stream (default 200)
 *   BENCH_RESPONSES_SETTLE_MS pause after each stream before its CPU is read (default 10)
 *   BENCH_QUIET_WAIT_S        before measuring, wait up to this long for a second in which the
 *                             machine uses < 25 % of a core (default 10; 0: do not check)
 *   BENCH_REDIS_URL           a Redis database to use instead of a private redis-server (it is FLUSHDB'd)
 *
 * Writes bench/results/latest-responses.json.
 */
import { readdirSync, readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { benchRedisUrl } from '../test/support/redis-server.js';
import { expectedText, longStream } from './long-streams.js';
import { envInt, machineFacts, percentile, redisProcessId, redisVersion } from './measure.js';
import { cpuWindow, installCleanup, root, sleep, stopAll, waitForQuiet } from './procs.js';
import { fakeControl, log, model, probe, startFake, startGateway, stopGateway, upstreamKey } from './stack.js';
import { testRecord } from '../test/support/record.js';

const settings = {
  requests: envInt('BENCH_RESPONSES_REQUESTS', 200, 1),
  warmup: envInt('BENCH_RESPONSES_WARMUP', 20, 0),
  chunks: envInt('BENCH_STREAM_CHUNKS', 200, 1),
  settleMs: envInt('BENCH_RESPONSES_SETTLE_MS', 10, 0),
  quietWaitMs: envInt('BENCH_QUIET_WAIT_S', 10, 0) * 1000,
  /** Idle time before the measured rounds, over which the background CPU of the gateway and Redis is read. */
  idleMs: 3000,
};

const BAR = 1.2;

type Variant = 'chat' | 'responses' | 'direct';
const variants: readonly Variant[] = ['chat', 'responses', 'direct'];
const variantNames: Record<Variant, string> = {
  chat: '(a) chat completions stream',
  responses: '(b) Responses stream',
  direct: '(c) direct to the fake',
};

// ---------------------------------------------------------------- CPU from /proc

/** Run time of every thread of a process so far, ns (/proc/<pid>/task/<tid>/schedstat, first field). */
function threadsCpuNs(pid: number): number | undefined {
  try {
    let total = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        total += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // the thread ended between the listing and the read
      }
    }
    return total;
  } catch {
    return undefined;
  }
}

type CpuReading = Record<string, number | undefined>;

// ---------------------------------------------------------------- one stream

interface Stream {
  status: number;
  /** ms from sending the request. */
  firstFrameMs: number | undefined;
  firstTextMs: number | undefined;
  totalMs: number;
  body: string;
}

/** The data of an SSE frame's `data:` lines, or undefined if it has none. */
function frameData(frame: string): string | undefined {
  let data: string | undefined;
  for (const line of frame.split('\n')) {
    if (line.startsWith('data:')) data = (data === undefined ? '' : `${data}\n`) + line.slice(line[5] === ' ' ? 6 : 5);
  }
  return data;
}

function frameEvent(frame: string): string | undefined {
  for (const line of frame.split('\n')) if (line.startsWith('event:')) return line.slice(6).trim();
  return undefined;
}

/** Does this frame carry text? Cheap checks first: this runs while the stream is being timed. */
const carriesText: Record<Variant, (frame: string) => boolean> = {
  responses: (frame) => frameEvent(frame) === 'response.output_text.delta',
  chat: chatFrameHasText,
  direct: chatFrameHasText,
};

function chatFrameHasText(frame: string): boolean {
  const data = frameData(frame);
  if (data === undefined || data === '[DONE]') return false;
  try {
    const content = (JSON.parse(data) as { choices?: Array<{ delta?: { content?: unknown } }> }).choices?.[0]?.delta
      ?.content;
    return typeof content === 'string' && content.length > 0;
  } catch {
    return false;
  }
}

function streamOnce(variant: Variant, target: Target, agent: Agent): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(target.body);
    const req = httpRequest(
      target.url,
      {
        method: 'POST',
        agent,
        headers: {
          ...target.headers,
          'content-type': 'application/json',
          'content-length': String(payload.length),
          accept: 'text/event-stream',
        },
      },
      (res) => {
        const parts: string[] = [];
        let pending = '';
        let firstFrameMs: number | undefined;
        let firstTextMs: number | undefined;
        res.setEncoding('utf8');
        res.on('data', (text: string) => {
          const now = performance.now() - t0;
          parts.push(text);
          // Only until the first text frame: after it, the frames are kept and read once the stream ended.
          if (firstTextMs !== undefined) return;
          pending += text.includes('\r') ? text.replace(/\r\n/g, '\n') : text;
          let end: number;
          while ((end = pending.indexOf('\n\n')) >= 0) {
            const frame = pending.slice(0, end);
            pending = pending.slice(end + 2);
            if (firstFrameMs === undefined && frameData(frame) !== undefined) firstFrameMs = now;
            if (carriesText[variant](frame)) {
              firstTextMs = now;
              pending = '';
              break;
            }
          }
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            firstFrameMs,
            firstTextMs,
            totalMs: performance.now() - t0,
            body: parts.join(''),
          }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('stream request timed out')));
    req.on('error', reject);
    const t0 = performance.now();
    req.end(payload);
  });
}

// ---------------------------------------------------------------- checks

interface Shape {
  ok: boolean;
  why?: string;
  frames: number;
  textDeltas: number;
  /** Bytes of the last frame with data (chat: the usage chunk; Responses: response.completed). */
  lastFrameBytes: number;
}

function frames(body: string): string[] {
  return body
    .replace(/\r\n/g, '\n')
    .split('\n\n')
    .filter((frame) => frameData(frame) !== undefined);
}

/**
 * chat and direct: N content chunks whose text is the expected one, then [DONE] (direct: also the exact body the fake
 * sends).
 */
function checkChat(body: string, chunks: number, expected: string, exact?: string): Shape {
  const all = frames(body);
  let text = '';
  let textDeltas = 0;
  let done = false;
  let last = '';
  for (const frame of all) {
    const data = frameData(frame)!;
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    last = frame;
    const piece = (JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta
      ?.content;
    if (piece) {
      text += piece;
      textDeltas += 1;
    }
  }
  const shape = { frames: all.length, textDeltas, lastFrameBytes: Buffer.byteLength(last) + 2 };
  if (!done) return { ...shape, ok: false, why: 'no [DONE]' };
  if (textDeltas !== chunks || text !== expected)
    return {
      ...shape,
      ok: false,
      why: `${textDeltas} text deltas, text ${text === expected ? 'as expected' : 'differs'}`,
    };
  if (exact !== undefined && body !== exact)
    return { ...shape, ok: false, why: 'body differs from what the fake sends' };
  return { ...shape, ok: true };
}

/**
 * Responses: contiguous sequence numbers from 0, N text deltas, and a last `response.completed` whose output holds the
 * whole text.
 */
function checkResponses(body: string, chunks: number, expected: string): Shape {
  const all = frames(body);
  let text = '';
  let textDeltas = 0;
  let last: { type?: string; response?: { status?: string; output?: Array<{ content?: Array<{ text?: string }> }> } } =
    {};
  for (const [index, frame] of all.entries()) {
    const event = JSON.parse(frameData(frame)!) as typeof last & { sequence_number?: number; delta?: string };
    if (event.type !== frameEvent(frame))
      return {
        ok: false,
        why: `frame ${index}: event line and type differ`,
        frames: all.length,
        textDeltas,
        lastFrameBytes: 0,
      };
    if (event.sequence_number !== index)
      return {
        ok: false,
        why: `frame ${index}: sequence_number ${event.sequence_number}`,
        frames: all.length,
        textDeltas,
        lastFrameBytes: 0,
      };
    if (event.type === 'response.output_text.delta') {
      text += event.delta ?? '';
      textDeltas += 1;
    }
    last = event;
  }
  const shape = { frames: all.length, textDeltas, lastFrameBytes: Buffer.byteLength(all.at(-1) ?? '') + 2 };
  if (textDeltas !== chunks || text !== expected)
    return {
      ...shape,
      ok: false,
      why: `${textDeltas} text deltas, text ${text === expected ? 'as expected' : 'differs'}`,
    };
  if (last.type !== 'response.completed' || last.response?.status !== 'completed')
    return { ...shape, ok: false, why: `last event ${last.type}` };
  if (last.response.output?.[0]?.content?.[0]?.text !== expected)
    return { ...shape, ok: false, why: 'response.completed does not hold the text' };
  return { ...shape, ok: true };
}

// ---------------------------------------------------------------- the run

interface Target {
  url: string;
  headers: Record<string, string>;
  body: string;
}

interface Summary {
  count: number;
  p50: number;
  p90: number;
  mean: number;
}

function summary(values: number[]): Summary {
  const sorted = Float64Array.from(values).sort();
  return {
    count: sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    mean: sorted.length ? sorted.reduce((a, b) => a + b, 0) / sorted.length : Number.NaN,
  };
}

interface Collected {
  failures: number;
  failureReasons: string[];
  firstFrameMs: number[];
  firstTextMs: number[];
  totalMs: number[];
  /** CPU ms per measured stream, per process. */
  cpuMs: Record<string, number[]>;
  /** ms from the CPU reading before the request to the one after it. */
  windowMs: number[];
  shape?: Shape;
  bytes: number;
}

export interface VariantResult {
  variant: Variant;
  url: string;
  failures: number;
  failureReasons: string[];
  firstFrameMs: Summary;
  firstTextMs: Summary;
  totalMs: Summary;
  /** CPU ms per stream, per process (gateway, redis, fake, client): all of it, over the stream's window. */
  cpuMsPerStream: Record<string, Summary>;
  /** The same less the process's idle rate × the window (gateway, redis, fake). */
  netCpuMsPerStream: Record<string, Summary>;
  /** ms from the CPU reading before a request to the one after it. */
  windowMs: Summary;
  framesPerStream: number;
  textDeltasPerStream: number;
  bytesPerStream: number;
  lastFrameBytes: number;
}

export interface Derived {
  /** Gateway − direct, ms: p50 − p50 and p90 − p90. */
  addedFirstFrameMs: { p50: number; p90: number };
  addedFirstTextMs: { p50: number; p90: number };
  addedTotalMs: { p50: number; p90: number };
  /** (total p50 − direct total p50) ÷ N, µs. */
  addedWallUsPerDelta: number;
  /** Mean gateway CPU per stream, ms, less its idle CPU over the window; and ÷ N in µs. */
  gatewayCpuMsPerStream: number;
  gatewayCpuUsPerDelta: number;
  /** Mean gateway CPU per stream with nothing subtracted, ms. */
  gatewayRawCpuMsPerStream: number;
  redisCpuMsPerStream: number;
  /** The same, paired by round: median over rounds of (this − direct of the same round), ms. */
  pairedAddedFirstTextMs: number;
  pairedAddedTotalMs: number;
}

function derive(
  of: VariantResult,
  direct: VariantResult,
  paired: { firstText: number[]; total: number[] },
  chunks: number,
): Derived {
  return {
    addedFirstFrameMs: {
      p50: of.firstFrameMs.p50 - direct.firstFrameMs.p50,
      p90: of.firstFrameMs.p90 - direct.firstFrameMs.p90,
    },
    addedFirstTextMs: {
      p50: of.firstTextMs.p50 - direct.firstTextMs.p50,
      p90: of.firstTextMs.p90 - direct.firstTextMs.p90,
    },
    addedTotalMs: { p50: of.totalMs.p50 - direct.totalMs.p50, p90: of.totalMs.p90 - direct.totalMs.p90 },
    addedWallUsPerDelta: ((of.totalMs.p50 - direct.totalMs.p50) * 1000) / chunks,
    gatewayCpuMsPerStream: of.netCpuMsPerStream.gateway?.mean ?? Number.NaN,
    gatewayCpuUsPerDelta: ((of.netCpuMsPerStream.gateway?.mean ?? Number.NaN) * 1000) / chunks,
    gatewayRawCpuMsPerStream: of.cpuMsPerStream.gateway?.mean ?? Number.NaN,
    redisCpuMsPerStream: of.netCpuMsPerStream.redis?.mean ?? Number.NaN,
    pairedAddedFirstTextMs: summary(paired.firstText).p50,
    pairedAddedTotalMs: summary(paired.total).p50,
  };
}

async function main(): Promise<void> {
  installCleanup();
  const startedAt = new Date().toISOString();
  const loadAtStart = loadavg();
  const redisUrl = await benchRedisUrl('BENCH_REDIS_URL', 15);
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 3 });
  const machine = machineFacts(await redisVersion(redis));
  const { chunks, warmup, requests, settleMs } = settings;
  const expected = expectedText(chunks);
  const directBody = longStream('openai', chunks);
  log(
    `machine: ${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, Redis ${machine.redis}; load average ${loadAtStart.map((l) => l.toFixed(2)).join(' ')}`,
  );

  const fake = await startFake({ streamChunks: chunks });
  try {
    await redis.flushdb();
    const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-responses');
    const gateway = await startGateway('all', fake.url, redisUrl, undefined, { logTag: 'responses' });
    const child = gateway.children.gateway!;
    try {
      await probe(gateway.url, key, [child]);
      const gatewayAuth = { authorization: `Bearer ${key}` };
      const targets: Record<Variant, Target> = {
        chat: {
          url: `${gateway.url}/v1/chat/completions`,
          headers: gatewayAuth,
          body: JSON.stringify({
            model,
            messages: [{ role: 'user', content: 'Say hello.' }],
            stream: true,
            stream_options: { include_usage: true },
          }),
        },
        responses: {
          url: `${gateway.url}/v1/responses`,
          headers: gatewayAuth,
          body: JSON.stringify({ model, input: 'Say hello.', stream: true }),
        },
        direct: {
          url: `${fake.url}/chat/completions`,
          headers: { authorization: `Bearer ${upstreamKey}` },
          body: JSON.stringify({
            model,
            messages: [{ role: 'user', content: 'Say hello.' }],
            stream: true,
            stream_options: { include_usage: true },
          }),
        },
      };
      const check: Record<Variant, (body: string) => Shape> = {
        chat: (body) => checkChat(body, chunks, expected),
        responses: (body) => checkResponses(body, chunks, expected),
        direct: (body) => checkChat(body, chunks, expected, directBody),
      };

      const pids: Record<string, number> = { gateway: child.pid, fake: fake.child.pid };
      const redisPid = await redisProcessId(redis);
      if (redisPid !== undefined) pids.redis = redisPid;
      const readCpu = (): CpuReading => {
        const out: CpuReading = Object.fromEntries(
          Object.entries(pids).map(([name, pid]) => [name, threadsCpuNs(pid)]),
        );
        const own = process.cpuUsage();
        out.client = (own.user + own.system) * 1000;
        return out;
      };

      const empty = (): Collected => ({
        failures: 0,
        failureReasons: [],
        firstFrameMs: [],
        firstTextMs: [],
        totalMs: [],
        cpuMs: {},
        windowMs: [],
        bytes: 0,
      });
      const collected: Record<Variant, Collected> = { chat: empty(), responses: empty(), direct: empty() };
      const paired: Record<Exclude<Variant, 'direct'>, { firstText: number[]; total: number[] }> = {
        chat: { firstText: [], total: [] },
        responses: { firstText: [], total: [] },
      };

      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      let quiet: Awaited<ReturnType<typeof waitForQuiet>> | undefined;
      let cpuSince: ReturnType<typeof cpuWindow> | undefined;
      let loadAtMeasureStart: number[] = [];
      const idleRate: Record<string, number> = {};
      let measureStartedAt = 0;
      try {
        log(
          `responses bench: ${warmup} warm-up + ${requests} measured streams of ${chunks} text deltas per ` +
            `variant, alternated, one connection per host`,
        );
        for (let round = 0; round < warmup + requests; round += 1) {
          const measured = round >= warmup;
          if (round === warmup) {
            quiet = await waitForQuiet({ maxWaitMs: settings.quietWaitMs });
            if (!quiet.quiet)
              log(`  the machine did not go quiet (${quiet.busyPct?.toFixed(0)}% of a core busy): measuring anyway`);
            // The gateway's (and Redis's) own background CPU while nothing is asked of them, per ms: subtracted from
            // each stream's window.
            const idleBefore = readCpu();
            const idleStart = performance.now();
            await sleep(settings.idleMs);
            const idleAfter = readCpu();
            const idleWall = performance.now() - idleStart;
            for (const name of Object.keys(pids)) {
              const a = idleBefore[name];
              const b = idleAfter[name];
              idleRate[name] = a === undefined || b === undefined ? 0 : (b - a) / 1e6 / idleWall;
            }
            log(
              `  idle CPU over ${(idleWall / 1000).toFixed(1)} s: ${Object.entries(idleRate)
                .map(([n, r]) => `${n} ${(r * 100).toFixed(2)}%`)
                .join(', ')} of a core`,
            );
            loadAtMeasureStart = loadavg();
            cpuSince = cpuWindow(pids);
            measureStartedAt = performance.now();
          }
          const order = variants.map((_, i) => variants[(i + round) % variants.length]!);
          const thisRound: Partial<Record<Variant, Stream>> = {};
          for (const variant of order) {
            const windowStart = performance.now();
            const before = readCpu();
            let stream: Stream | undefined;
            let error: string | undefined;
            try {
              stream = await streamOnce(variant, targets[variant], agent);
            } catch (e) {
              error = (e as Error).message;
            }
            if (settleMs > 0) await sleep(settleMs);
            const after = readCpu();
            const windowMs = performance.now() - windowStart;
            if (!measured) continue;
            const into = collected[variant];
            const shape = stream && stream.status === 200 ? check[variant](stream.body) : undefined;
            if (
              !stream ||
              stream.status !== 200 ||
              !shape?.ok ||
              stream.firstTextMs === undefined ||
              stream.firstFrameMs === undefined
            ) {
              into.failures += 1;
              if (into.failureReasons.length < 5)
                into.failureReasons.push(
                  error ??
                    (stream?.status !== 200
                      ? `status ${stream?.status}: ${stream?.body.slice(0, 200)}`
                      : (shape?.why ?? 'no text frame')),
                );
              continue;
            }
            into.shape = shape;
            into.bytes = Buffer.byteLength(stream.body);
            into.firstFrameMs.push(stream.firstFrameMs);
            into.firstTextMs.push(stream.firstTextMs);
            into.totalMs.push(stream.totalMs);
            into.windowMs.push(windowMs);
            for (const name of Object.keys(after)) {
              const a = before[name];
              const b = after[name];
              if (a === undefined || b === undefined) continue;
              (into.cpuMs[name] ??= []).push((b - a) / 1e6);
            }
            thisRound[variant] = stream;
          }
          const direct = thisRound.direct;
          if (measured && direct) {
            for (const variant of ['chat', 'responses'] as const) {
              const s = thisRound[variant];
              if (!s) continue;
              paired[variant].firstText.push(s.firstTextMs! - direct.firstTextMs!);
              paired[variant].total.push(s.totalMs - direct.totalMs);
            }
          }
          if (round + 1 === warmup) log('  warm-up done');
          else if (measured && (round + 1 - warmup) % 50 === 0) log(`  ${round + 1 - warmup} of ${requests} rounds`);
        }
      } finally {
        agent.destroy();
      }
      const measuredMs = performance.now() - measureStartedAt;
      // What each process spent over the measured rounds, and the rest of the machine (null where /proc could not say).
      const { others: othersMs = null, ...ticksMs } =
        cpuSince?.() ?? Object.fromEntries(Object.keys(pids).map((name) => [name, null]));

      const results = Object.fromEntries(
        variants.map((variant) => {
          const c = collected[variant];
          const result: VariantResult = {
            variant,
            url: targets[variant].url,
            failures: c.failures,
            failureReasons: c.failureReasons,
            firstFrameMs: summary(c.firstFrameMs),
            firstTextMs: summary(c.firstTextMs),
            totalMs: summary(c.totalMs),
            cpuMsPerStream: Object.fromEntries(
              Object.entries(c.cpuMs).map(([name, values]) => [name, summary(values)]),
            ),
            netCpuMsPerStream: Object.fromEntries(
              Object.entries(c.cpuMs)
                .filter(([name]) => name in idleRate)
                .map(([name, values]) => [
                  name,
                  summary(values.map((cpu, i) => cpu - idleRate[name]! * c.windowMs[i]!)),
                ]),
            ),
            windowMs: summary(c.windowMs),
            framesPerStream: c.shape?.frames ?? 0,
            textDeltasPerStream: c.shape?.textDeltas ?? 0,
            bytesPerStream: c.bytes,
            lastFrameBytes: c.shape?.lastFrameBytes ?? 0,
          };
          return [variant, result];
        }),
      ) as Record<Variant, VariantResult>;
      const derived = {
        chat: derive(results.chat, results.direct, paired.chat, chunks),
        responses: derive(results.responses, results.direct, paired.responses, chunks),
      };
      const ratio = (f: (d: Derived) => number) => f(derived.responses) / f(derived.chat);
      const ratios = {
        addedFirstTextP50: ratio((d) => d.addedFirstTextMs.p50),
        addedFirstTextP90: ratio((d) => d.addedFirstTextMs.p90),
        addedFirstFrameP50: ratio((d) => d.addedFirstFrameMs.p50),
        pairedAddedFirstText: ratio((d) => d.pairedAddedFirstTextMs),
        addedWallPerDelta: ratio((d) => d.addedWallUsPerDelta),
        pairedAddedTotal: ratio((d) => d.pairedAddedTotalMs),
        gatewayCpuPerStream: ratio((d) => d.gatewayCpuMsPerStream),
        gatewayRawCpuPerStream: ratio((d) => d.gatewayRawCpuMsPerStream),
        redisCpuPerStream: ratio((d) => d.redisCpuMsPerStream),
      };
      const bar = {
        limit: BAR,
        addedTimeToFirstEvent: ratios.addedFirstTextP50 <= BAR,
        perEventWall: ratios.addedWallPerDelta <= BAR,
        perEventGatewayCpu: ratios.gatewayCpuPerStream <= BAR,
      };
      const output = {
        startedAt,
        finishedAt: new Date().toISOString(),
        settings: {
          ...settings,
          model,
          alternation: 'rounds of the three variants, order rotated each round (abc, bca, cab)',
        },
        machine: {
          ...machine,
          loadAverageAtStart: loadAtStart,
          loadAverageAtMeasureStart: loadAtMeasureStart,
          loadAverageAtEnd: loadavg(),
          quietBefore: quiet ? { quiet: quiet.quiet, busyPct: quiet.busyPct } : null,
          /** CPU each process used while idle before the rounds, as a share of one core. */
          idleCpuShare: idleRate,
          measuredSeconds: measuredMs / 1000,
          /**
           * CPU ms over the measured rounds from /proc/<pid>/stat (10 ms ticks); others: every other process on the
           * machine.
           */
          cpuMsWholeRun: { ...ticksMs, others: othersMs },
        },
        gatewayPid: child.pid,
        gatewayWarnings: child.warnings,
        fakeStats: await fakeControl(fake, 'GET', '/__stats').catch(() => null),
        variants: results,
        derived,
        ratios,
        bar,
      };
      const outDir = join(root, 'bench', 'results');
      mkdirSync(outDir, { recursive: true });
      writeFileSync(join(outDir, 'latest-responses.json'), `${JSON.stringify(output, null, 2)}\n`);
      process.stdout.write(`\n${render(output)}\n\nResults written to bench/results/latest-responses.json\n`);
      if (child.warnings > 0)
        log(`gateway logged ${child.warnings} line(s) at warn or above: see bench/results/logs/responses-gateway.log`);
    } finally {
      log('stopping the gateway');
      await stopGateway(gateway);
    }
  } finally {
    await fake.child.stop();
    await redis.flushdb().catch(() => undefined);
    redis.disconnect();
  }
}

// ---------------------------------------------------------------- report

const f2 = (v: number | null | undefined) => (v == null || Number.isNaN(v) ? '-' : v.toFixed(2));
const f1 = (v: number | null | undefined) => (v == null || Number.isNaN(v) ? '-' : v.toFixed(1));
const x2 = (v: number) => (Number.isFinite(v) ? `${v.toFixed(2)}×` : '-');

function mdTable(header: string[], rows: string[][]): string {
  return [
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function render(o: {
  settings: typeof settings;
  machine: ReturnType<typeof machineFacts> & {
    loadAverageAtStart: number[];
    loadAverageAtMeasureStart: number[];
    loadAverageAtEnd: number[];
    quietBefore: { quiet: boolean; busyPct: number | null } | null;
    idleCpuShare: Record<string, number>;
    measuredSeconds: number;
    cpuMsWholeRun: Record<string, number | null>;
  };
  variants: Record<Variant, VariantResult>;
  derived: Record<'chat' | 'responses', Derived>;
  ratios: Record<string, number>;
  bar: { limit: number; addedTimeToFirstEvent: boolean; perEventWall: boolean; perEventGatewayCpu: boolean };
}): string {
  const { settings: s, machine: m, variants: v, derived: d, ratios: r, bar } = o;
  const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(' ');
  const out: string[] = [];
  out.push(
    `Responses stream vs chat stream: ${s.warmup} warm-up + ${s.requests} measured streams per variant, ` +
      `${s.chunks} text deltas each, ` +
      `alternated in rotating rounds, one keep-alive connection per host; ms from sending the request; ` +
      (`CPU per stream (mean) from /proc (all threads), read ${s.settleMs} ms after the body ended, less the ` +
        `process's idle CPU over that window`),
  );
  out.push(
    `Machine: ${m.cpu}, ${m.cores} cores, Node ${m.node}, Redis ${m.redis}; load average ` +
      `${load(m.loadAverageAtStart)} at start, ${load(m.loadAverageAtMeasureStart)} when measuring began, ` +
      `${load(m.loadAverageAtEnd)} at end; ` +
      `busy share in the second before measuring: ${m.quietBefore?.busyPct == null ? '-' : `${m.quietBefore.busyPct.toFixed(0)}% of a core`}; ` +
      `idle CPU: ${Object.entries(m.idleCpuShare)
        .map(([n, r]) => `${n} ${(r * 100).toFixed(1)}%`)
        .join(', ')} of a core; ` +
      `other processes used ${m.cpuMsWholeRun.others ?? '-'} ms of CPU over the ${m.measuredSeconds.toFixed(1)} s measured`,
  );
  out.push('');
  out.push(
    mdTable(
      [
        'variant',
        'failed',
        'first frame p50 / p90',
        'first text p50 / p90',
        'total p50 / p90',
        'frames',
        'bytes',
        'last frame bytes',
        'gateway CPU ms/stream',
        'Redis CPU ms/stream',
        'fake CPU ms/stream',
      ],
      variants.map((name) => {
        const x = v[name];
        const cpu = (p: string) => x.netCpuMsPerStream[p];
        return [
          variantNames[name],
          String(x.failures),
          `${f2(x.firstFrameMs.p50)} / ${f2(x.firstFrameMs.p90)}`,
          `${f2(x.firstTextMs.p50)} / ${f2(x.firstTextMs.p90)}`,
          `${f2(x.totalMs.p50)} / ${f2(x.totalMs.p90)}`,
          String(x.framesPerStream),
          String(x.bytesPerStream),
          String(x.lastFrameBytes),
          f2(cpu('gateway')?.mean),
          f2(cpu('redis')?.mean),
          f2(cpu('fake')?.mean),
        ];
      }),
    ),
  );
  out.push('');
  out.push(
    'Added by the gateway (against (c), ms; "paired": median over rounds of the difference to the same round\'s ' +
      'direct stream)',
  );
  out.push('');
  out.push(
    mdTable(
      [
        'path',
        'first frame p50 / p90',
        'first text p50 / p90',
        'first text, paired',
        'total p50 / p90',
        'total, paired',
        'wall µs per delta',
        'gateway CPU µs per delta',
      ],
      (['chat', 'responses'] as const).map((name) => {
        const x = d[name];
        return [
          variantNames[name],
          `${f2(x.addedFirstFrameMs.p50)} / ${f2(x.addedFirstFrameMs.p90)}`,
          `${f2(x.addedFirstTextMs.p50)} / ${f2(x.addedFirstTextMs.p90)}`,
          f2(x.pairedAddedFirstTextMs),
          `${f2(x.addedTotalMs.p50)} / ${f2(x.addedTotalMs.p90)}`,
          f2(x.pairedAddedTotalMs),
          f1(x.addedWallUsPerDelta),
          f1(x.gatewayCpuUsPerDelta),
        ];
      }),
    ),
  );
  out.push('');
  const verdict = (pass: boolean) => (pass ? 'PASS' : 'FAIL');
  out.push(`Responses ÷ chat (bar: within ${bar.limit}×)`);
  out.push('');
  out.push(
    mdTable(
      ['measure', 'ratio', 'bar'],
      [
        ['added time to first text event, p50', x2(r.addedFirstTextP50!), verdict(bar.addedTimeToFirstEvent)],
        ['added time to first text event, p90', x2(r.addedFirstTextP90!), '-'],
        ['added time to first text event, paired median', x2(r.pairedAddedFirstText!), '-'],
        ['added time to first frame, p50', x2(r.addedFirstFrameP50!), '-'],
        ['added wall time per text delta (total p50)', x2(r.addedWallPerDelta!), verdict(bar.perEventWall)],
        ['added total, paired median', x2(r.pairedAddedTotal!), '-'],
        ['gateway CPU per stream (mean, idle subtracted)', x2(r.gatewayCpuPerStream!), verdict(bar.perEventGatewayCpu)],
        ['gateway CPU per stream (mean, nothing subtracted)', x2(r.gatewayRawCpuPerStream!), '-'],
        ['Redis CPU per stream (mean)', x2(r.redisCpuPerStream!), '-'],
      ],
    ),
  );
  const failed = variants.filter((name) => v[name].failures > 0);
  for (const name of failed)
    out.push(
      '',
      `${variantNames[name]}: ${v[name].failures} failed; first reasons: ${v[name].failureReasons.join(' | ')}`,
    );
  return out.join('\n');
}

main()
  .then(() => stopAll())
  .then(() => process.exit(process.exitCode ?? 0))
  .catch(async (error: Error) => {
    process.stderr.write(`bench failed: ${error.stack ?? error.message}\n`);
    await stopAll().catch(() => undefined);
    process.exit(1);
  });
