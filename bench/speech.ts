/**
 * Speech (`POST /v1/audio/speech`): time to the first byte of audio and to the last, through the gateway
 * (`node dist/bin/start.js`, api and worker, the mock's `mock-speech`) against the same mock speech served directly
 * by a process of its own (bench/speech-direct-process.ts: the same code, the same pacing, no queue), at 1 and at 64
 * connections. Each connection sends its requests one after another on a keep-alive socket; each answer is checked
 * byte for byte against the direct one (the mock is deterministic). Reported: p50 and p99 of both times, what the
 * gateway adds at the p50, and the CPU each side spent per request.
 */
import { Agent, request as httpRequest } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { KeyStore } from '../api/accounts/key-store.js';
import { testRecord } from '../test/support/record.js';
import { MOCK_SECONDS_PER_CHARACTER } from '../workers/vendors/mock/speech.js';
import { redisProcessId, Samples, summarise, type LatencySummary } from './measure.js';
import { cpuWindow, sleep, spawnChild, waitForQuiet } from './procs.js';
import { discoverProcesses, log, startGateway, stopGateway } from './stack.js';
import { table } from './table.js';

export interface SpeechSettings {
  /** Connections measured, each a level of its own. */
  connections: number[];
  /** Requests measured at each level (spread over its connections), after `warmup` per connection. */
  requests: number;
  warmupPerConnection: number;
  /** The mock's pause between chunks, directly and in the gateway (MOCK_STREAM_DELAY_MS). */
  delayMs: number;
  format: 'mp3' | 'wav' | 'pcm';
  input: string;
  quietWaitMs: number;
}

export function speechSettings(env: NodeJS.ProcessEnv, quietWaitMs: number): SpeechSettings {
  const int = (name: string, fallback: number) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const value = Number(raw);
    if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
    return value;
  };
  const format = env.BENCH_SPEECH_FORMAT ?? 'mp3';
  if (format !== 'mp3' && format !== 'wav' && format !== 'pcm')
    throw new Error(`BENCH_SPEECH_FORMAT: mp3, wav or pcm, got "${format}"`);
  return {
    connections: (env.BENCH_SPEECH_CONNECTIONS ?? '1,64').split(',').map((s) => {
      const n = Number(s.trim());
      if (!Number.isInteger(n) || n < 1 || n > 1024)
        throw new Error(`BENCH_SPEECH_CONNECTIONS: "${s}" is not an integer in 1..1024`);
      return n;
    }),
    requests: Math.max(1, int('BENCH_SPEECH_REQUESTS', 256)),
    warmupPerConnection: int('BENCH_SPEECH_WARMUP', 2),
    delayMs: int('BENCH_SPEECH_DELAY_MS', 20),
    format,
    input: env.BENCH_SPEECH_INPUT ?? 'Your call is important to us. Please stay on the line.',
    quietWaitMs,
  };
}

export interface SpeechTarget {
  requests: number;
  failures: number;
  /** ms from sending the request to the first byte of audio, and to the last. */
  firstByte: LatencySummary;
  total: LatencySummary;
  /** CPU ms per measured request, per process. */
  cpuMsPerRequest: Record<string, number | null>;
  before: { quiet: boolean; busyPct: number | null };
}

export interface SpeechLevel {
  connections: number;
  direct: SpeechTarget;
  gateway: SpeechTarget;
  addedFirstByteMsP50: number;
  addedTotalMsP50: number;
}

export interface SpeechResults {
  settings: SpeechSettings;
  audioBytes: number;
  audioSeconds: number;
  levels: SpeechLevel[];
  warnings: number;
}

interface Timed {
  status: number;
  firstByteMs: number;
  totalMs: number;
  body: Buffer;
}

function post(url: string, headers: Record<string, string>, body: string, agent: Agent): Promise<Timed> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(body);
    const t0 = performance.now();
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent,
        headers: { ...headers, 'content-type': 'application/json', 'content-length': String(payload.length) },
      },
      (res) => {
        const pieces: Buffer[] = [];
        let first = 0;
        res.on('data', (piece: Buffer) => {
          if (pieces.length === 0) first = performance.now() - t0;
          pieces.push(piece);
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            firstByteMs: first,
            totalMs: performance.now() - t0,
            body: Buffer.concat(pieces),
          }),
        );
        res.on('error', reject);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('speech request timed out')));
    req.on('error', reject);
    req.end(payload);
  });
}

/** `requests` speech requests over `connections` keep-alive connections, each sequential; warm-up first, unmeasured. */
async function measure(options: {
  url: string;
  headers: Record<string, string>;
  body: string;
  connections: number;
  requests: number;
  warmupPerConnection: number;
  expected: Buffer | undefined;
  cpuPids: Record<string, number>;
  quietWaitMs: number;
}): Promise<{ target: SpeechTarget; sample: Buffer | undefined }> {
  const agent = new Agent({ keepAlive: true, maxSockets: options.connections });
  let failures = 0;
  let sample: Buffer | undefined;
  const firstBytes = new Samples();
  const totals = new Samples();
  const run = async (count: number, record: boolean) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: options.connections }, async () => {
        while (next < count) {
          next += 1;
          const answer = await post(options.url, options.headers, options.body, agent).catch(() => undefined);
          const good =
            answer !== undefined &&
            answer.status === 200 &&
            answer.body.length > 0 &&
            (options.expected === undefined || answer.body.equals(options.expected));
          sample ??= good ? answer.body : undefined;
          if (!record) continue;
          if (!good) {
            failures += 1;
            continue;
          }
          firstBytes.push(answer.firstByteMs);
          totals.push(answer.totalMs);
        }
      }),
    );
  };
  try {
    await run(options.warmupPerConnection * options.connections, false);
    const quiet =
      options.quietWaitMs > 0 ? await waitForQuiet({ maxWaitMs: options.quietWaitMs }) : { quiet: true, busyPct: null };
    const cpu = cpuWindow(options.cpuPids);
    await run(options.requests, true);
    const cpuMs = cpu();
    const cpuMsPerRequest = Object.fromEntries(
      Object.entries(cpuMs).map(([name, ms]) => [name, ms === null ? null : ms / options.requests]),
    );
    return {
      target: {
        requests: options.requests,
        failures,
        firstByte: summarise(firstBytes),
        total: summarise(totals),
        cpuMsPerRequest,
        before: { quiet: quiet.quiet, busyPct: quiet.busyPct },
      },
      sample,
    };
  } finally {
    agent.destroy();
  }
}

export async function runSpeechBench(options: {
  settings: SpeechSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<SpeechResults> {
  const { settings, redis, redisUrl } = options;
  const direct = spawnChild(
    'speech-direct',
    ['--import', 'tsx', 'bench/speech-direct-process.ts', `--delay-ms=${settings.delayMs}`],
    { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root' },
  );
  const started = JSON.parse(
    await Promise.race([
      direct.firstLine,
      sleep(20_000).then(() => {
        throw new Error(`direct speech silent after 20 s:\n${direct.tail.join('\n')}`);
      }),
    ]),
  ) as { url: string };
  try {
    await redis.flushdb();
    const { key } = await new KeyStore(redis, await testRecord(redis)).create('bench-speech');
    const gateway = await startGateway('start', 'http://127.0.0.1:9/v1', redisUrl, undefined, {
      env: { MOCK_VENDOR: 'on', MOCK_STREAM_DELAY_MS: String(settings.delayMs), OPENAI_API_KEY: '' },
      logTag: 'speech',
    });
    try {
      const body = JSON.stringify({
        model: 'mock-speech',
        input: settings.input,
        voice: 'alloy',
        response_format: settings.format,
      });
      const directUrl = `${started.url}/v1/audio/speech`;
      const gatewayUrl = `${gateway.url}/v1/audio/speech`;
      const headers = { authorization: `Bearer ${key}` };
      // The expected audio: the direct answer (the gateway's must be the same bytes); and the gateway's workers up.
      const reference = await measure({
        url: directUrl,
        headers: {},
        body,
        connections: 1,
        requests: 1,
        warmupPerConnection: 0,
        expected: undefined,
        cpuPids: {},
        quietWaitMs: 0,
      });
      const expected = reference.sample;
      if (!expected) throw new Error('the direct mock speech answered no audio');
      const check = await measure({
        url: gatewayUrl,
        headers,
        body,
        connections: 1,
        requests: 1,
        warmupPerConnection: 0,
        expected,
        cpuPids: {},
        quietWaitMs: 0,
      });
      if (check.target.failures > 0) throw new Error('the gateway answered other bytes than the mock speech directly');
      const gatewayPids = discoverProcesses(gateway);
      const redisPid = await redisProcessId(redis);
      const cpuBase = { client: process.pid, ...(redisPid !== undefined ? { redis: redisPid } : {}) };
      const levels: SpeechLevel[] = [];
      for (const connections of settings.connections) {
        const common = {
          body,
          connections,
          requests: Math.max(settings.requests, connections),
          warmupPerConnection: settings.warmupPerConnection,
          expected,
          quietWaitMs: settings.quietWaitMs,
        };
        log(`speech: ${connections} connection(s), ${common.requests} requests directly to the mock speech`);
        const directTarget = (
          await measure({ ...common, url: directUrl, headers: {}, cpuPids: { ...cpuBase, direct: direct.pid } })
        ).target;
        log(`speech: ${connections} connection(s), ${common.requests} requests through the gateway`);
        const gatewayTarget = (
          await measure({ ...common, url: gatewayUrl, headers, cpuPids: { ...cpuBase, ...gatewayPids } })
        ).target;
        levels.push({
          connections,
          direct: directTarget,
          gateway: gatewayTarget,
          addedFirstByteMsP50: gatewayTarget.firstByte.p50 - directTarget.firstByte.p50,
          addedTotalMsP50: gatewayTarget.total.p50 - directTarget.total.p50,
        });
      }
      const warnings = Object.values(gateway.children).reduce((sum, child) => sum + child.warnings, 0);
      if (warnings > 0) log(`gateway logged ${warnings} line(s) at warn or above: see bench/results/logs/speech-*.log`);
      const audioSeconds =
        settings.format === 'mp3'
          ? settings.input.length * MOCK_SECONDS_PER_CHARACTER
          : (expected.length - (settings.format === 'wav' ? 44 : 0)) / 48_000;
      return { settings, audioBytes: expected.length, audioSeconds, levels, warnings };
    } finally {
      await stopGateway(gateway);
    }
  } finally {
    await direct.stop();
  }
}

const f2 = (value: number | null | undefined) => (value == null || Number.isNaN(value) ? '-' : value.toFixed(2));

export function renderSpeech(results: SpeechResults): string {
  const { settings } = results;
  const out: string[] = [];
  out.push(
    `Speech (POST /v1/audio/speech, mock-speech, ${settings.format}, ${results.audioBytes} bytes ≈ ` +
      `${results.audioSeconds.toFixed(1)} s of audio, in chunks ${settings.delayMs} ms apart): ` +
      (`through the gateway (npm start: api + worker, Redis) against the same mock speech served directly by a ` +
        `process of its own; `) +
      (`ms from the request to the first byte of audio and to the last; each connection sequential on keep-alive; ` +
        `every answer checked byte for byte`),
  );
  const rows: string[][] = [];
  for (const level of results.levels) {
    for (const [name, target] of [
      ['direct', level.direct],
      ['gateway', level.gateway],
    ] as const) {
      const cpu = Object.entries(target.cpuMsPerRequest)
        .filter(([proc]) => proc !== 'client' && proc !== 'others')
        .map(([proc, ms]) => `${proc} ${f2(ms)}`)
        .join(', ');
      rows.push([
        String(level.connections),
        name,
        `${target.requests - target.failures}/${target.requests}`,
        f2(target.firstByte.p50),
        f2(target.firstByte.p99),
        f2(target.total.p50),
        f2(target.total.p99),
        name === 'gateway' ? `+${f2(level.addedFirstByteMsP50)}` : '',
        name === 'gateway' ? `+${f2(level.addedTotalMsP50)}` : '',
        cpu,
        target.before.quiet ? 'quiet' : `busy ${f2(target.before.busyPct)}%`,
      ]);
    }
  }
  out.push(
    table(
      [
        'conns',
        'target',
        'ok',
        'first byte p50',
        'p99',
        'last byte p50',
        'p99',
        'added first p50',
        'added last p50',
        'CPU ms/request',
        'machine before',
      ],
      rows,
    ),
  );
  return out.join('\n\n');
}
