/** Plain-text tables of the benchmark results for stdout (and for BENCHMARKS.md). */
import type { BurstResults } from './burst.js';
import { renderBurst } from './burst.js';
import type { LoadResult, SoakResult, TtftResult } from './measure.js';
import type { TranslationResults } from './translation.js';
import { renderTranslation } from './translation.js';

export interface Machine {
  cpu: string;
  cores: number;
  memoryGiB: number;
  os: string;
  node: string;
  redis: string;
  autocannon: string;
  loadAverageAtStart: number[];
  loadAverageAtEnd?: number[];
}

export interface Settings {
  durationS: number;
  warmupS: number;
  soakS: number;
  ttftRequests: number;
  ttftWarmup: number;
  body: unknown;
  streamBody: unknown;
}

export interface Bar {
  name: string;
  target: string;
  actual: string;
  pass: boolean;
}

export interface ConfigResult {
  name: string;
  description: string;
  processes: Record<string, number>;
  c1: LoadResult;
  c64: LoadResult;
  ttft: TtftResult;
  addedMs: { p50: number; p99: number };
  addedTtftP50Ms: number;
  /** gateway req/s ÷ direct req/s at each concurrency. */
  ratio: { c1: number; c64: number };
  /** Log lines at warn or above per process during the whole configuration. */
  warnings: Record<string, number>;
  idleRss: Record<string, number | null>;
  soak?: SoakResult;
  /** False when the bench key vanished: another client flushed the database mid-run. */
  databaseIntact?: boolean;
  bars: Bar[];
}

export interface DirectResult {
  fakeUpstreamPid: number;
  c1: LoadResult;
  c64: LoadResult;
  ttft: TtftResult;
  idleRss: number | null;
}

/** The gateway-overhead section (load, streaming, memory, soak). */
export interface OverheadResults {
  settings: Settings;
  direct: DirectResult;
  configs: ConfigResult[];
}

export type Section = 'overhead' | 'burst' | 'translation';

/** What one run produced; only the sections that ran are present. */
export interface Results extends Partial<OverheadResults> {
  startedAt: string;
  finishedAt: string;
  machine: Machine;
  sections: Section[];
  burst?: BurstResults;
  translation?: TranslationResults;
  passed: boolean;
}

const mb = (bytes: number | null | undefined) => (bytes == null || Number.isNaN(bytes) ? '-' : (bytes / 1024 / 1024).toFixed(1));
const ms = (value: number) => (Number.isNaN(value) ? '-' : value.toFixed(2));
const int = (value: number) => Math.round(value).toLocaleString('en-US');
const signed = (value: number, digits = 2) => `${value >= 0 ? '+' : ''}${value.toFixed(digits)}`;

/** Renders rows as a fixed-width table with a header rule; the first column is left-aligned, the rest right-aligned. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

function loadRow(target: string, r: LoadResult): string[] {
  return [
    target,
    String(r.connections),
    int(r.rps),
    ms(r.latency.p50),
    ms(r.latency.p90),
    ms(r.latency.p99),
    ms(r.latency.max),
    int(r.ok),
    String(r.errors),
    String(r.timeouts),
    String(r.non2xx),
  ];
}

export function render(results: Results): string {
  const { machine } = results;
  const out: string[] = [];
  out.push(`Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB.toFixed(1)} GiB RAM, ${machine.os}`);
  out.push(`Node ${machine.node}, Redis ${machine.redis}, autocannon ${machine.autocannon}; load average (1/5/15 min) at start ${machine.loadAverageAtStart.map((l) => l.toFixed(2)).join(' ')}` +
    (machine.loadAverageAtEnd ? `, at end ${machine.loadAverageAtEnd.map((l) => l.toFixed(2)).join(' ')}` : ''));
  out.push(`Sections: ${results.sections.join(', ')}`);
  out.push('');
  if (results.settings && results.direct && results.configs) {
    out.push(renderOverhead({ settings: results.settings, direct: results.direct, configs: results.configs }), '');
  }
  if (results.burst) out.push(renderBurst(results.burst), '');
  if (results.translation) out.push(renderTranslation(results.translation), '');

  const barRows = [
    ...(results.configs ?? []).flatMap((c) => c.bars.map((b) => [`overhead, ${c.name}`, b.name, b.target, b.actual, b.pass ? 'PASS' : 'FAIL'])),
    ...(results.burst?.configs ?? []).flatMap((c) => c.bars.map((b) => [`burst, ${c.name}`, b.name, b.target, b.actual, b.pass ? 'PASS' : 'FAIL'])),
  ];
  if (barRows.length > 0) {
    out.push('Target bars');
    out.push(table(['section, configuration', 'bar', 'target', 'actual', 'result'], barRows));
  }
  return out.join('\n').trimEnd();
}

function renderOverhead(results: OverheadResults): string {
  const { settings, direct, configs } = results;
  const out: string[] = [];
  out.push(
    `Each load run: ${settings.warmupS} s warm-up, then ${settings.durationS} s measured. Time to first token: ${settings.ttftWarmup} warm-up + ${settings.ttftRequests} sequential stream requests.`,
  );
  out.push('');

  out.push('Non-stream chat completion (latency in ms, 2xx only, per response)');
  const rows: string[][] = [];
  for (const c of [1, 64] as const) {
    rows.push(loadRow('direct to fake upstream', c === 1 ? direct.c1 : direct.c64));
    for (const config of configs) rows.push(loadRow(`gateway, ${config.name}`, c === 1 ? config.c1 : config.c64));
  }
  out.push(table(['target', 'conns', 'req/s', 'p50', 'p90', 'p99', 'max', '2xx', 'errors', 'timeouts', 'non-2xx'], rows));
  out.push('');

  out.push('Gateway overhead');
  out.push(
    table(
      ['configuration', 'added p50 @1', 'added p99 @1', 'req/s ratio @1', 'req/s ratio @64', 'added TTFT p50'],
      configs.map((c) => [c.name, `${signed(c.addedMs.p50)} ms`, `${signed(c.addedMs.p99)} ms`, c.ratio.c1.toFixed(2), c.ratio.c64.toFixed(2), `${signed(c.addedTtftP50Ms)} ms`]),
    ),
  );
  out.push('');

  out.push('Streaming: time to first content token and to end of stream (ms, sequential)');
  const ttftRow = (name: string, t: TtftResult) => [
    name,
    String(t.ttft.count),
    String(t.failures),
    ms(t.ttft.p50),
    ms(t.ttft.p90),
    ms(t.ttft.p99),
    ms(t.total.p50),
    ms(t.total.p99),
  ];
  out.push(
    table(
      ['target', 'n', 'failed', 'TTFT p50', 'TTFT p90', 'TTFT p99', 'end p50', 'end p99'],
      [ttftRow('direct to fake upstream', direct.ttft), ...configs.map((c) => ttftRow(`gateway, ${c.name}`, c.ttft))],
    ),
  );
  out.push('');

  out.push('Process RSS (MiB): idle after start, then before / peak / after each 64-connection run');
  const rssRows: string[][] = [];
  rssRows.push(['fake upstream (direct run)', mb(direct.idleRss), mb(direct.c64.rss.fake?.before), mb(direct.c64.rss.fake?.peak), mb(direct.c64.rss.fake?.after)]);
  for (const config of configs) {
    for (const name of Object.keys(config.processes)) {
      const stats = config.c64.rss[name];
      rssRows.push([`${name} (${config.name})`, mb(config.idleRss[name]), mb(stats?.before), mb(stats?.peak), mb(stats?.after)]);
    }
  }
  out.push(table(['process', 'idle', 'before', 'peak', 'after'], rssRows));
  out.push('');

  out.push('CPU used during the 64-connection runs (loadgen = autocannon in the bench process)');
  const cpuRows = (target: string, r: LoadResult) =>
    Object.entries(r.cpuMs).map(([name, used]) => [
      target,
      name,
      used == null ? '-' : int(used),
      used == null ? '-' : int((used * 1000) / Math.max(1, r.ok)),
      used == null ? '-' : `${Math.round((used / (r.durationS * 1000)) * 100)}%`,
    ]);
  out.push(
    table(
      ['target', 'process', 'CPU ms', 'µs per 2xx', 'of one core'],
      [...cpuRows('direct to fake upstream', direct.c64), ...configs.flatMap((c) => cpuRows(`gateway, ${c.name}`, c.c64))],
    ),
  );
  out.push('');
  for (const config of configs) {
    const r = config.c64;
    out.push(`Redis commands per request, gateway ${config.name}, 64 connections (commandstats delta; commands inside scripts also count within evalsha time)`);
    out.push(
      table(
        ['command', 'calls/request', 'µs/request'],
        r.redisCommands.slice(0, 12).map((c) => [c.command, (c.calls / Math.max(1, r.ok)).toFixed(2), (c.usec / Math.max(1, r.ok)).toFixed(1)]),
      ),
    );
    out.push('');
  }

  out.push('Redis memory (MiB) before → after each measured run: used_memory of the whole (shared) server, and the bench database\'s keys (sum of MEMORY USAGE)');
  const redisRow = (target: string, a: LoadResult, b: LoadResult) => [
    target,
    `${mb(a.redisUsedMemoryBefore)} → ${mb(a.redisUsedMemoryAfter)}`,
    `${mb(b.redisUsedMemoryBefore)} → ${mb(b.redisUsedMemoryAfter)}`,
    `${mb(a.redisDbBytesBefore)} → ${mb(a.redisDbBytesAfter)}`,
    `${mb(b.redisDbBytesBefore)} → ${mb(b.redisDbBytesAfter)}`,
  ];
  const redisRows: string[][] = [redisRow('direct to fake upstream', direct.c1, direct.c64), ...configs.map((c) => redisRow(`gateway, ${c.name}`, c.c1, c.c64))];
  out.push(table(['target', 'used_memory @1', 'used_memory @64', 'bench db @1', 'bench db @64'], redisRows));
  out.push('');

  for (const config of configs) {
    if (!config.soak) continue;
    const s = config.soak;
    out.push(
      `Soak, gateway ${config.name}: ${s.connections} connections for ${s.durationS} s: ${int(s.rps)} req/s, p50 ${ms(s.latency.p50)} ms, p99 ${ms(s.latency.p99)} ms, errors ${s.errors}, timeouts ${s.timeouts}, non-2xx ${s.non2xx}`,
    );
    const procNames = Object.keys(config.processes);
    out.push(
      table(
        ['t (s)', 'phase', 'Redis used_memory MiB', 'bench db MiB', 'keys in db', ...procNames.map((n) => `${n} RSS MiB`), '2xx in interval', 'CPU % of a core in interval'],
        s.samples.map((sample) => [
          sample.t.toFixed(1),
          sample.phase,
          mb(sample.redisUsedMemory),
          mb(sample.redisDbBytes),
          String(sample.redisKeys),
          ...procNames.map((n) => mb(sample.rss[n])),
          int(sample.okSincePrevious),
          sample.phase === 'idle'
            ? ''
            : [...Object.entries(sample.cpuPct ?? {}), ['others', sample.othersCpuPct ?? null] as const]
                .map(([n, v]) => `${n} ${v ?? '-'}`)
                .join(', '),
        ]),
      ),
    );
    out.push('');
  }

  const warnings = configs.flatMap((c) => Object.entries(c.warnings).filter(([, n]) => n > 0).map(([p, n]) => `${p} (${c.name}): ${n}`));
  if (warnings.length) out.push(`Log lines at warn or above: ${warnings.join(', ')}`, '');

  const flushed = configs.filter((c) => c.databaseIntact === false).map((c) => c.name);
  if (flushed.length) out.push(`WARNING: another client flushed the bench database during: ${flushed.join(', ')}; those figures are suspect.`, '');
  return out.join('\n').trimEnd();
}
