/**
 * Translation cost per streamed chunk: (a) in process, each adapter against
 * its fake (bench/translation-micro.ts); (b) end to end through the gateway
 * process against the three fakes in one process (bench/translation-e2e.ts).
 */
import type { Redis } from 'ioredis';
import { table } from './table.js';
import { log } from './stack.js';
import { runE2e, type E2eResults } from './translation-e2e.js';
import { runMicro, type MicroResults } from './translation-micro.js';

export interface TranslationSettings {
  /** Text deltas per stream. */
  chunks: number;
  microRuns: number;
  microWarmupRuns: number;
  e2eRequests: number;
  e2eWarmup: number;
  /** Before each measurement, wait up to this long for a quiet machine (0: do not check). */
  quietWaitMs: number;
}

export interface TranslationResults {
  settings: TranslationSettings;
  micro: MicroResults;
  e2e: E2eResults;
}

export async function runTranslation(options: {
  settings: TranslationSettings;
  redis: Redis;
  redisUrl: string;
}): Promise<TranslationResults> {
  const { settings } = options;
  log(
    `translation, in process: ${settings.microWarmupRuns} warm-up + ${settings.microRuns} measured rounds of one ` +
      `${settings.chunks}-delta stream per protocol`,
  );
  const micro = await runMicro({
    chunks: settings.chunks,
    runs: settings.microRuns,
    warmupRuns: settings.microWarmupRuns,
    quietWaitMs: settings.quietWaitMs,
  });
  for (const row of micro.rows) {
    log(`  ${row.name}: ${row.wallUsPerChunk.toFixed(2)} µs/chunk wall, ${row.cpuUsPerChunk.toFixed(2)} µs/chunk CPU`);
  }
  const e2e = await runE2e({
    chunks: settings.chunks,
    warmup: settings.e2eWarmup,
    requests: settings.e2eRequests,
    quietWaitMs: settings.quietWaitMs,
    redis: options.redis,
    redisUrl: options.redisUrl,
  });
  return { settings, micro, e2e };
}

const f2 = (value: number | null | undefined) => (value == null || Number.isNaN(value) ? '-' : value.toFixed(2));
const kib = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;

export function renderTranslation(results: TranslationResults): string {
  const { micro, e2e, settings } = results;
  const out: string[] = [];
  const names: Record<string, string> = {
    transport: 'transport only (undici read of the OpenAI body, no parsing)',
    openai: 'OpenAI passthrough',
    anthropic: 'Anthropic → OpenAI',
    gemini: 'Gemini → OpenAI',
  };
  out.push(
    `Translation cost per streamed chunk, in process: adapter.streamChatCompletion against its fake in the same ` +
      `process, one stream of ${settings.chunks} text deltas sent in one write; ` +
      (`whole consumption timed (fake included, nothing subtracted), median of ${micro.runs} rounds after ` +
        `${micro.warmupRuns} warm-up; µs per text delta`),
  );
  out.push(
    table(
      [
        'protocol',
        'body',
        'events',
        'wall ms',
        'CPU ms',
        'wall µs/chunk',
        'min–max',
        'CPU µs/chunk',
        'wall ×OpenAI',
        'CPU ×OpenAI',
      ],
      micro.rows.map((row) => [
        names[row.name] ?? row.name,
        kib(row.bytes),
        String(row.events),
        f2(row.wallMs),
        f2(row.cpuMs),
        f2(row.wallUsPerChunk),
        `${f2(row.wallUsPerChunkMin)}–${f2(row.wallUsPerChunkMax)}`,
        f2(row.cpuUsPerChunk),
        row.ratioWall.toFixed(2),
        row.ratioCpu.toFixed(2),
      ]),
    ),
  );
  out.push(
    `Machine busy share in the second before the rounds: ${micro.before.busyPct === null ? '-' : `${micro.before.busyPct.toFixed(0)}%`} of a core; ` +
      `CPU over all rounds: bench process ${Math.round(micro.cpuMs.bench)} ms, every other process ${micro.cpuMs.others === null ? '-' : Math.round(micro.cpuMs.others)} ms`,
  );
  out.push('');
  out.push(
    `Translation end to end: the same streams through the gateway (one process) vs directly from the fake (three ` +
      `fakes in one process); ` +
      (`${e2e.warmup} warm-up + ${e2e.requests} sequential requests each; ms to the last chunk; CPU µs per text ` +
        `delta over the measured gateway requests`),
  );
  out.push(
    table(
      [
        'protocol',
        'model',
        'failed d/g',
        'direct p50',
        'direct p90',
        'gateway p50',
        'gateway p90',
        'added µs/chunk',
        'gateway CPU µs/chunk',
        'Redis CPU µs/chunk',
        'bytes in → out',
      ],
      e2e.rows.map((row) => [
        names[row.protocol] ?? row.protocol,
        row.model,
        `${row.direct.failures}/${row.gateway.failures}`,
        f2(row.direct.total.p50),
        f2(row.direct.total.p90),
        f2(row.gateway.total.p50),
        f2(row.gateway.total.p90),
        f2(row.addedWallUsPerChunkP50),
        f2(row.gatewayCpuUsPerChunk),
        f2(row.redisCpuUsPerChunk),
        `${kib(row.direct.bytes)} → ${kib(row.gateway.bytes)}`,
      ]),
    ),
  );
  out.push('');
  out.push(
    "The Messages API (`/v1/messages`, Anthropic's dialect) beside chat completions, the same streams and requests: " +
      ("an Anthropic model's events relayed as the vendor sent them, the others' answer events written as " +
        "Anthropic's; ms to the last chunk"),
  );
  out.push(
    table(
      [
        'vendor',
        'chat p50',
        '/v1/messages p50',
        '/v1/messages p90',
        'failed',
        'added µs/chunk chat',
        'added µs/chunk messages',
        'gateway CPU µs/chunk chat',
        'gateway CPU µs/chunk messages',
      ],
      e2e.rows.map((row) => [
        row.protocol,
        f2(row.gateway.total.p50),
        f2(row.messages?.total.p50),
        f2(row.messages?.total.p90),
        String(row.messages?.failures ?? '-'),
        f2(row.addedWallUsPerChunkP50),
        f2(row.messagesAddedWallUsPerChunkP50),
        f2(row.gatewayCpuUsPerChunk),
        f2(row.messagesGatewayCpuUsPerChunk),
      ]),
    ),
  );
  out.push('');
  out.push(
    "Google's Gemini API (`:streamGenerateContent?alt=sse`) beside chat completions and the Messages API, the " +
      'same streams and requests: ' +
      ("a Gemini model's chunks relayed as the vendor sent them, the others' answer events written as Gemini's; " +
        'ms to the last chunk'),
  );
  out.push(
    table(
      [
        'vendor',
        'chat p50',
        'messages p50',
        'gemini p50',
        'gemini p90',
        'failed',
        'added µs/chunk chat',
        'messages',
        'gemini',
        'gateway CPU µs/chunk chat',
        'messages',
        'gemini',
      ],
      e2e.rows.map((row) => [
        row.protocol,
        f2(row.gateway.total.p50),
        f2(row.messages?.total.p50),
        f2(row.gemini?.total.p50),
        f2(row.gemini?.total.p90),
        String(row.gemini?.failures ?? '-'),
        f2(row.addedWallUsPerChunkP50),
        f2(row.messagesAddedWallUsPerChunkP50),
        f2(row.geminiAddedWallUsPerChunkP50),
        f2(row.gatewayCpuUsPerChunk),
        f2(row.messagesGatewayCpuUsPerChunk),
        f2(row.geminiGatewayCpuUsPerChunk),
      ]),
    ),
  );
  const cpuRows = e2e.rows.flatMap((row) =>
    (['direct', 'gateway'] as const).map((target) => [
      names[row.protocol] ?? row.protocol,
      target,
      Object.entries(row[target].cpuMs)
        .map(([n, v]) => `${n} ${v ?? '-'}`)
        .join(', '),
      row[target].before.busyPct === null ? '-' : `${row[target].before.busyPct.toFixed(0)}%`,
    ]),
  );
  out.push('');
  out.push(
    `CPU ms by process during the ${e2e.requests} measured requests (from /proc, 10 ms ticks; others = every ` +
      `other process), and the machine's busy share in the second before`,
  );
  out.push(table(['protocol', 'target', 'CPU ms', 'busy before'], cpuRows));
  if ((e2e.warnings.gateway ?? 0) > 0) out.push('', `Gateway log lines at warn or above: ${e2e.warnings.gateway}`);
  return out.join('\n');
}
