/** Plain-text tables of the benchmark results for stdout (and for BENCHMARKS.md). */
import type { BurstResults } from './burst.js';
import { renderBurst } from './burst.js';
import type { CommandDelta, LatencySummary, SoakResult } from './measure.js';
import type { SchedulerResults } from './scheduler.js';
import { renderScheduler } from './scheduler.js';
import type { TranslationResults } from './translation.js';
import { renderTranslation } from './translation.js';
import { table, type Bar } from './table.js';

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

/** How the overhead section measured (bench/overhead.ts). */
export interface OverheadSettings {
  /** Targets, in the order of the first round. */
  targets: string[];
  /** Rounds per cell; each round measures every target once, the order rotated by one each round. */
  rounds: number;
  durationS: number;
  warmupS: number;
  soakS: number;
  ttftRequests: number;
  /** Unmeasured stream requests before each target's TTFT round. */
  ttftWarmup: number;
  body: unknown;
  streamBody: unknown;
}

export interface OverheadTarget {
  /** direct, floor, start, one-loop, split. */
  name: string;
  description: string;
  /** Its own Redis database (null: direct, no Redis). */
  db: number | null;
  /** Its processes by role (the fake, Redis and the load generator are counted apart). */
  processes: Record<string, number>;
  /** RSS of each of its processes right after its start (one probe request), before any load. */
  idleRss: Record<string, number | null>;
  /** Log lines at warn or above per spawned process during the whole run. */
  warnings: Record<string, number>;
  /** False when its API key vanished: another client flushed its database mid-run. */
  databaseIntact?: boolean;
}

/** One target in one cell, over every round. */
export interface CellStats {
  rounds: number;
  /** Seconds measured in all. */
  measuredS: number;
  /** 2xx responses in all. */
  ok: number;
  /** ok ÷ measuredS. */
  rps: number;
  rpsByRound: number[];
  p50ByRound: number[];
  /** Milliseconds, pooled per-response latencies of every round (2xx only). */
  latency: LatencySummary;
  errors: number;
  timeouts: number;
  non2xx: number;
  /** CPU µs per 2xx response by process: the target's own, fake, redis, loadgen (autocannon) and others. */
  cpuUsPerRequest: Record<string, number | null>;
  /** Redis commands per 2xx response (INFO commandstats delta, whole server; one target runs at a time). */
  redisCommandsPerRequest: number;
  /** Commands summed over the rounds, busiest first. */
  redisCommands: CommandDelta[];
}

export interface OverheadCell {
  name: string;
  stream: boolean;
  connections: number;
  targets: Record<string, CellStats>;
}

export interface TtftStats {
  rounds: number;
  /** Measured requests in all. */
  requests: number;
  failures: number;
  ttft: LatencySummary;
  total: LatencySummary;
  p50ByRound: number[];
}

/** Memory of the `start` target: idle, a soak, and 30 s after it. */
export interface OverheadMemory {
  target: string;
  idleRss: Record<string, number | null>;
  soak?: SoakResult;
  /** The soak sample the Redis bars compare against (the first at ≥ 60 s, else the last under load). */
  referenceT?: number;
}

export interface OverheadBar extends Bar {
  /** The target the bar is about. */
  config: string;
}

/**
 * Two keys on one gateway (`start`), non-stream, alternated round by round: the Default account's key (made by
 * `POST /admin/keys` with no account: unlimited, no limits) and a credited account's limited key.
 */
export interface KeysSideBySide {
  target: string;
  connections: number;
  /** Each round's order. */
  orders: string[][];
  /** `default` and `credited`. */
  keys: Record<string, CellStats>;
}

/** The gateway-overhead section: every target side by side, alternated, in one run. */
export interface OverheadResults {
  settings: OverheadSettings;
  targets: OverheadTarget[];
  cells: OverheadCell[];
  ttft: Record<string, TtftStats>;
  keys?: KeysSideBySide;
  memory?: OverheadMemory;
  bars: OverheadBar[];
}

export type Section = 'overhead' | 'burst' | 'translation' | 'scheduler';

/** What one run produced; only the sections that ran are present. */
export interface Results {
  startedAt: string;
  finishedAt: string;
  machine: Machine;
  sections: Section[];
  overhead?: OverheadResults;
  burst?: BurstResults;
  translation?: TranslationResults;
  scheduler?: SchedulerResults;
  passed: boolean;
}

const mb = (bytes: number | null | undefined) =>
  bytes == null || Number.isNaN(bytes) ? '-' : (bytes / 1024 / 1024).toFixed(1);
const ms = (value: number) => (Number.isNaN(value) ? '-' : value.toFixed(2));
const int = (value: number) => Math.round(value).toLocaleString('en-US');
const signed = (value: number, digits = 2) => `${value >= 0 ? '+' : ''}${value.toFixed(digits)}`;

/** Renders rows as a fixed-width table with a header rule; the first column is left-aligned, the rest right-aligned. */

const result = (b: Bar) => (b.informational ? `(${b.pass ? 'PASS' : 'FAIL'})` : b.pass ? 'PASS' : 'FAIL');

export function render(results: Results): string {
  const { machine } = results;
  const out: string[] = [];
  out.push(`Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB.toFixed(1)} GiB RAM, ${machine.os}`);
  out.push(
    `Node ${machine.node}, Redis ${machine.redis}, autocannon ${machine.autocannon}; load average (1/5/15 min) at start ${machine.loadAverageAtStart.map((l) => l.toFixed(2)).join(' ')}` +
      (machine.loadAverageAtEnd ? `, at end ${machine.loadAverageAtEnd.map((l) => l.toFixed(2)).join(' ')}` : ''),
  );
  out.push(`Sections: ${results.sections.join(', ')}`);
  out.push('');
  if (results.overhead) out.push(renderOverhead(results.overhead), '');
  if (results.burst) out.push(renderBurst(results.burst), '');
  if (results.translation) out.push(renderTranslation(results.translation), '');
  if (results.scheduler) out.push(renderScheduler(results.scheduler), '');

  const barRows = [
    ...(results.overhead?.bars ?? []).map((b) => [`overhead, ${b.config}`, b.name, b.target, b.actual, result(b)]),
    ...(results.burst?.configs ?? []).flatMap((c) =>
      c.bars.map((b) => [`burst, ${c.name}`, b.name, b.target, b.actual, result(b)]),
    ),
    ...(results.scheduler?.bars ?? []).map((b) => ['scheduler', b.name, b.target, b.actual, result(b)]),
  ];
  if (barRows.length > 0) {
    out.push('Target bars (in parentheses: informational, not counted)');
    out.push(table(['section, target', 'bar', 'target', 'actual', 'result'], barRows));
  }
  return out.join('\n').trimEnd();
}

/** The processes a target's CPU column sums: its own, not the fake, Redis, the load generator or others. */
const shared = new Set(['fake', 'redis', 'loadgen', 'others']);

/** CPU µs per request of the gateway's own processes (not the shared ones), or null when one was not measured. */
function ownCpu(cpuUsPerRequest: Record<string, number | null>): number | null {
  const own = Object.entries(cpuUsPerRequest).filter(([n]) => !shared.has(n));
  return own.some(([, v]) => v === null) ? null : own.reduce((sum, [, v]) => sum + (v ?? 0), 0);
}

export function renderOverhead(results: OverheadResults): string {
  const { settings, targets, cells, ttft } = results;
  const out: string[] = [];
  const names = targets.map((t) => t.name);
  out.push(
    `Targets ${names.join(', ')}, all running throughout, each on its own Redis database. Each cell: ${settings.rounds} round(s); ` +
      (`a round measures every target once (${settings.warmupS} s warm-up, then ${settings.durationS} s), the ` +
        `order rotated by one each round. `) +
      `Figures pool every round: req/s = 2xx ÷ measured seconds, percentiles over every response. ` +
      (`Time to first token: ${settings.rounds} round(s) of ${settings.ttftWarmup} warm-up + ` +
        `${settings.ttftRequests} sequential stream requests per target.`),
  );
  out.push('');
  out.push(
    table(
      ['target', 'processes', 'Redis db', 'idle RSS MiB', 'what runs'],
      targets.map((t) => [
        t.name,
        Object.entries(t.processes)
          .map(([n, pid]) => `${n} ${pid}`)
          .join(', '),
        t.db === null ? '-' : String(t.db),
        Object.entries(t.idleRss)
          .map(([n, v]) => `${n} ${mb(v)}`)
          .join(', '),
        t.description,
      ]),
    ),
  );
  out.push('');

  for (const cell of cells) {
    const direct = cell.targets.direct;
    const floor = cell.targets.floor;
    out.push(`${cell.name}: latency ms per response (2xx), CPU µs and Redis commands per 2xx response`);
    const rows = names.map((name) => {
      const c = cell.targets[name];
      if (!c) return [name];
      const ownSum = ownCpu(c.cpuUsPerRequest);
      return [
        name,
        int(c.rps),
        c.rpsByRound.map(int).join(' / '),
        ms(c.latency.p50),
        ms(c.latency.p90),
        ms(c.latency.p99),
        name === 'direct' || !direct ? '' : `${signed(c.latency.p50 - direct.latency.p50)}`,
        floor ? `${(c.rps / floor.rps).toFixed(2)}×` : '-',
        String(c.errors + c.timeouts + c.non2xx),
        c.redisCommandsPerRequest.toFixed(1),
        name === 'direct' ? '' : ownSum === null ? '-' : int(ownSum),
        Object.entries(c.cpuUsPerRequest)
          .map(([n, v]) => `${n} ${v === null ? '-' : int(v)}`)
          .join(', '),
      ];
    });
    out.push(
      table(
        [
          'target',
          'req/s',
          'req/s by round',
          'p50',
          'p90',
          'p99',
          'added p50',
          '× floor req/s',
          'errors',
          'Redis cmds',
          'CPU µs (own)',
          'CPU µs by process',
        ],
        rows,
      ),
    );
    out.push('');
  }

  out.push('Streaming: time to first content token and to end of stream (ms, sequential, pooled over rounds)');
  const dTtft = ttft.direct;
  const fTtft = ttft.floor;
  const floorAdded = dTtft && fTtft ? fTtft.ttft.p50 - dTtft.ttft.p50 : Number.NaN;
  out.push(
    table(
      [
        'target',
        'n',
        'failed',
        'TTFT p50',
        'TTFT p90',
        'TTFT p99',
        'added TTFT p50',
        '÷ floor added',
        'end p50',
        'end p99',
        'TTFT p50 by round',
      ],
      names.map((name) => {
        const t = ttft[name];
        if (!t) return [name];
        const added = dTtft ? t.ttft.p50 - dTtft.ttft.p50 : Number.NaN;
        return [
          name,
          String(t.ttft.count),
          String(t.failures),
          ms(t.ttft.p50),
          ms(t.ttft.p90),
          ms(t.ttft.p99),
          name === 'direct' ? '' : signed(added),
          name === 'direct' || name === 'floor' ? '' : `${(added / floorAdded).toFixed(2)}×`,
          ms(t.total.p50),
          ms(t.total.p99),
          t.p50ByRound.map(ms).join(' / '),
        ];
      }),
    ),
  );
  out.push('');

  const plain64 = cells.find((c) => !c.stream && c.connections === 64);
  if (plain64) {
    const shown = names.filter((n) => n !== 'direct' && plain64.targets[n]);
    const commands = new Map<string, number>();
    for (const n of shown) {
      const c = plain64.targets[n]!;
      for (const d of c.redisCommands)
        commands.set(d.command, Math.max(commands.get(d.command) ?? 0, d.usec / Math.max(1, c.ok)));
    }
    const top = [...commands.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 14)
      .map(([command]) => command);
    out.push(
      `Redis commands per request, ${plain64.name} (calls per 2xx, commandstats delta; commands inside scripts ` +
        `also count within evalsha)`,
    );
    out.push(
      table(
        ['command', ...shown],
        top.map((command) => [
          command,
          ...shown.map((n) => {
            const c = plain64.targets[n]!;
            const d = c.redisCommands.find((x) => x.command === command);
            return d ? (d.calls / Math.max(1, c.ok)).toFixed(2) : '';
          }),
        ]),
      ),
    );
    out.push('');
  }

  const keys = results.keys;
  if (keys) {
    const credited = keys.keys.credited;
    out.push(
      `Keys side by side on ${keys.target}, non-stream, ${keys.connections} connections, ${keys.orders.length} round(s), orders ${keys.orders.map((o) => o.join(' → ')).join('; ')}: ` +
        (`default = the Default account's key (POST /admin/keys with no account), credited = a credited account's ` +
          `key with a limit, rpm and tpm`),
    );
    out.push(
      table(
        [
          'key',
          'req/s',
          'req/s by round',
          '÷ credited',
          'p50',
          'p99',
          'errors',
          'Redis cmds',
          'CPU µs (own)',
          'CPU µs by process',
        ],
        Object.entries(keys.keys).map(([name, c]) => {
          const ownSum = ownCpu(c.cpuUsPerRequest);
          return [
            name,
            int(c.rps),
            c.rpsByRound.map(int).join(' / '),
            credited ? `${(c.rps / credited.rps).toFixed(3)}×` : '-',
            ms(c.latency.p50),
            ms(c.latency.p99),
            String(c.errors + c.timeouts + c.non2xx),
            c.redisCommandsPerRequest.toFixed(1),
            ownSum === null ? '-' : int(ownSum),
            Object.entries(c.cpuUsPerRequest)
              .map(([n, v]) => `${n} ${v === null ? '-' : int(v)}`)
              .join(', '),
          ];
        }),
      ),
    );
    out.push('');
  }

  const memory = results.memory;
  if (memory) {
    out.push(
      `Memory, target ${memory.target}: idle RSS after start ${Object.entries(memory.idleRss)
        .map(([n, v]) => `${n} ${mb(v)} MiB`)
        .join(', ')}`,
    );
    const s = memory.soak;
    if (s) {
      out.push(
        `Soak: ${s.connections} connections, non-stream, for ${s.durationS} s: ${int(s.rps)} req/s, p50 ` +
          `${ms(s.latency.p50)} ms, p99 ${ms(s.latency.p99)} ms, ` +
          `errors ${s.errors}, timeouts ${s.timeouts}, non-2xx ${s.non2xx}; the last sample is 30 s after the load` +
          (memory.referenceT !== undefined ? `; Redis bars compare the end with t=${memory.referenceT} s` : ''),
      );
      const procNames = Object.keys(memory.idleRss);
      out.push(
        table(
          [
            't (s)',
            'phase',
            'Redis used_memory MiB',
            'bench db MiB',
            'keys in db',
            ...procNames.map((n) => `${n} RSS MiB`),
            '2xx in interval',
            'CPU % of a core in interval',
          ],
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
    } else {
      out.push('Soak skipped (BENCH_SOAK_S=0).');
    }
    out.push('');
  }

  const warnings = targets.flatMap((t) =>
    Object.entries(t.warnings)
      .filter(([, n]) => n > 0)
      .map(([p, n]) => `${p} (${t.name}): ${n}`),
  );
  if (warnings.length) out.push(`Log lines at warn or above: ${warnings.join(', ')} (bench/results/logs/)`, '');
  const flushed = targets.filter((t) => t.databaseIntact === false).map((t) => t.name);
  if (flushed.length)
    out.push(`WARNING: another client flushed the database of: ${flushed.join(', ')}; those figures are suspect.`, '');
  return out.join('\n').trimEnd();
}
