/**
 * Tables, checks and the markdown section of `bench/images.ts`.
 */
import type { FetchResult, ImageFormat, LatencySummary } from './images-load.js';
import type { ConfigName, SlotUse } from './images-stack.js';
import { MiB } from './images-sampler.js';

export interface RssFigures {
  idleBefore: number | null;
  /** Highest sample while the generations ran. */
  peakBurst: number | null;
  /** Highest sample while the signed links were downloaded (url runs). */
  peakFetch: number | null;
  /** Highest of the two. */
  peak: number | null;
  after: number | null;
}

export interface RunResult {
  config: ConfigName;
  format: ImageFormat;
  requests: number;
  /** 2xx answers holding the vendor's image (b64_json) or a signed link (url). */
  completed: number;
  /** 2xx whose body was not that. */
  invalid2xx: number;
  /** No HTTP answer (transport error or timeout). */
  failed: number;
  non2xx: number;
  statusCodes: Record<string, number>;
  errorSamples: string[];
  wallMs: number;
  /** ceil(requests / cap) × latency: every vendor slot reused at once. */
  idealMs: number;
  latency: LatencySummary | null;
  responseBytes: number;
  vendor: {
    requests: number;
    served: number;
    status429: number;
    maxInFlight: number;
    aborted: number;
    otherRequests: number;
    connections: number;
    /** Idle time of a vendor slot between an answer and the next request, from the fake's arrival times. */
    slotUse: SlotUse | null;
  };
  /** Highest `ZCARD sy:limit:{openai}:inflight` seen by the sampler (the gateway's own count of slots held). */
  gatewaySlotsPeak: number | null;
  /** Slots still held after the pause (should be 0). */
  slotsLeft: number;
  fetch: FetchResult | null;
  /** Bytes in the blob directory after the run. */
  blobDirBytes: number;
  /** Per process (gateway processes, plus `fake` and `bench`, the load generator, for context), bytes. */
  rss: Record<string, RssFigures>;
  /** CPU ms each process used from the first request to the end of the downloads. */
  cpuMs: Record<string, number | null>;
  redis: {
    usedBefore: number;
    usedPeak: number | null;
    usedAfter: number;
    dbKeysAfter: number;
    /** MEMORY USAGE of every key of the database after the pause, by key family. */
    byFamily: Record<string, { keys: number; bytes: number }>;
  };
  /** BullMQ `image` queue after the pause. */
  queue: { waiting: number; active: number; delayed: number; completed: number; failed: number };
  /** Log lines at warn or above each gateway process printed during the run. */
  warnings: Record<string, number>;
  pauseMs: number;
  /** The machine's busy share (% of one core) in the second before the run, and whether it was under 40%. */
  before: { quiet: boolean; busyPct: number | null };
}

export interface Check {
  name: string;
  pass: boolean;
  detail: string;
}

export interface Settings {
  requests: number;
  cap: number;
  latencyMs: number;
  imageBytes: number;
  rssBoundMiB: number;
  pauseMs: number;
  sampleMs: number;
  redisUrl: string;
}

export interface Machine {
  cpu: string;
  cores: number;
  memoryGiB: number;
  node: string;
  redis: string;
  kernel: string;
  date: string;
}

const mib = (bytes: number | null | undefined) =>
  bytes == null || Number.isNaN(bytes) ? '–' : `${Math.round(bytes / MiB)}`;
const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const gatewayProcesses = (run: RunResult) => Object.keys(run.rss).filter((name) => name !== 'fake' && name !== 'bench');

export function checksOf(run: RunResult, settings: Settings): Check[] {
  const checks: Check[] = [];
  const fetchOk = run.fetch === null || run.fetch.ok === run.requests;
  checks.push({
    name: 'all complete',
    pass: run.completed === run.requests && run.failed === 0 && run.non2xx === 0 && run.invalid2xx === 0 && fetchOk,
    detail:
      `${run.completed}/${run.failed}/${run.non2xx} completed/failed/non-2xx` +
      (run.invalid2xx ? `, ${run.invalid2xx} 2xx without the image` : '') +
      (run.fetch ? `; links ${run.fetch.ok}/${run.fetch.requested} downloaded with the vendor's bytes` : ''),
  });
  const queueLeft = run.queue.waiting + run.queue.active + run.queue.delayed;
  checks.push({
    name: 'none lost',
    pass:
      run.completed + run.invalid2xx + run.failed + run.non2xx === run.requests &&
      run.failed === 0 &&
      queueLeft === 0 &&
      run.queue.failed === 0 &&
      fetchOk,
    detail:
      `every request answered: ${run.failed === 0 ? 'yes' : `no (${run.failed} without an answer)`}; ` +
      (`queue after: ${queueLeft} waiting/active/delayed, ${run.queue.failed} failed; vendor produced ` +
        `${run.vendor.served} images for ${run.requests} requests`),
  });
  checks.push({
    name: `vendor never above ${settings.cap}`,
    pass: run.vendor.maxInFlight <= settings.cap && run.vendor.status429 === 0,
    detail: `max in flight at the vendor ${run.vendor.maxInFlight} (cap ${settings.cap}; reached it: ${run.vendor.maxInFlight >= settings.cap ? 'yes' : 'no'}), 429s ${run.vendor.status429}`,
  });
  const peaks = gatewayProcesses(run).map((name) => ({ name, peak: run.rss[name]!.peak }));
  checks.push({
    name: `RSS peak < ${settings.rssBoundMiB} MiB per gateway process`,
    pass: peaks.every((p) => p.peak !== null && p.peak < settings.rssBoundMiB * MiB),
    detail: peaks.map((p) => `${p.name} ${mib(p.peak)} MiB`).join(', '),
  });
  return checks;
}

export function latencyCell(latency: LatencySummary | null): string {
  return latency ? `${Math.round(latency.p50)} / ${Math.round(latency.p99)} ms` : '–';
}

function rssCell(run: RunResult): string {
  return gatewayProcesses(run)
    .map((name) => {
      const r = run.rss[name]!;
      return `${name} ${mib(r.idleBefore)} → ${mib(r.peak)} → ${mib(r.after)}`;
    })
    .join('<br>');
}

/** The results table (markdown; it reads in a terminal too). */
export function resultsTable(runs: RunResult[]): string {
  const head = [
    'config',
    'response_format',
    'completed / failed / non-2xx',
    'vendor max in flight (429s)',
    'wall (ideal)',
    'p50 / p99',
    'signed links fetched (wall, p50 / p99)',
    'RSS MiB idle → peak → after 5 s',
    'Redis used_memory MiB before → peak → after (db keys after)',
  ];
  const rows = runs.map((run) => [
    run.config === 'all' ? 'one process' : 'api + 1 worker',
    run.format,
    `${run.completed} / ${run.failed} / ${run.non2xx}${run.invalid2xx ? ` (+${run.invalid2xx} bad 2xx)` : ''}`,
    `${run.vendor.maxInFlight} (${run.vendor.status429})`,
    `${sec(run.wallMs)} (${sec(run.idealMs)})`,
    latencyCell(run.latency),
    run.fetch
      ? `${run.fetch.ok}/${run.fetch.requested} (${sec(run.fetch.wallMs)}, ${latencyCell(run.fetch.latency)})`
      : '–',
    rssCell(run),
    `${mib(run.redis.usedBefore)} → ${mib(run.redis.usedPeak)} → ${mib(run.redis.usedAfter)} ` +
      `(${run.redis.dbKeysAfter})`,
  ]);
  return [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

export function checksTable(runs: RunResult[], settings: Settings): string {
  const perRun = runs.map((run) => checksOf(run, settings));
  const names = perRun[0]?.map((c) => c.name) ?? [];
  const head = ['check', ...runs.map((run) => `${run.config === 'all' ? 'one process' : 'split'} / ${run.format}`)];
  const rows = names.map((name, i) => [
    name,
    ...perRun.map((checks) => `${checks[i]!.pass ? 'PASS' : '**FAIL**'}: ${checks[i]!.detail}`),
  ]);
  return [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}

/** Other figures worth having beside the table. */
export function detailsTable(runs: RunResult[]): string {
  const head = [
    'config',
    'format',
    'CPU ms (from first request to end)',
    'vendor requests / images / new connections',
    'vendor slot idle between answer and next request p50 / p90 / max (busy share)',
    'gateway slots peak / left',
    'response bytes',
    'Redis keys after, by family (MiB)',
    'blob dir',
    'warn+ log lines',
    'machine busy before (% of a core)',
  ];
  const rows = runs.map((run) => [
    run.config,
    run.format,
    Object.entries(run.cpuMs)
      .map(([name, ms]) => `${name} ${ms ?? '–'}`)
      .join(', '),
    `${run.vendor.requests} / ${run.vendor.served} / ${run.vendor.connections}`,
    run.vendor.slotUse
      ? `${Math.round(run.vendor.slotUse.gapMs.p50)} / ${Math.round(run.vendor.slotUse.gapMs.p90)} / ` +
        `${Math.round(run.vendor.slotUse.gapMs.max)} ms (${Math.round(run.vendor.slotUse.utilisation * 100)}%)`
      : '–',
    `${run.gatewaySlotsPeak ?? '–'} / ${run.slotsLeft}`,
    `${(run.responseBytes / MiB).toFixed(1)} MiB`,
    Object.entries(run.redis.byFamily)
      .sort((a, b) => b[1].bytes - a[1].bytes)
      .slice(0, 4)
      .map(([family, v]) => `${family} ${v.keys} (${(v.bytes / MiB).toFixed(1)})`)
      .join(', '),
    `${(run.blobDirBytes / MiB).toFixed(1)} MiB`,
    Object.entries(run.warnings)
      .map(([name, n]) => `${name} ${n}`)
      .join(', '),
    `${run.before.busyPct ?? '–'}${run.before.quiet ? '' : ' (busy)'}`,
  ]);
  return [head, head.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`).join('\n');
}
