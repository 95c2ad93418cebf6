/**
 * Child processes of the benchmark (fake upstream, gateway processes): spawn,
 * readiness, log capture, and a cleanup that runs on every way out.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, readFileSync, type WriteStream } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('..', import.meta.url));

export interface Child {
  name: string;
  proc: ChildProcess;
  pid: number;
  /** Last lines of stdout/stderr, for error reports. */
  tail: string[];
  /** Log lines at pino level warn (40) or above seen so far. */
  warnings: number;
  /** Resolves at the first stdout line. */
  firstLine: Promise<string>;
  exited: boolean;
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<void>;
}

const children = new Set<Child>();

function killAll(): void {
  for (const child of children) {
    if (!child.exited) child.proc.kill('SIGKILL');
  }
}

let handlersInstalled = false;
/** Kills every child when this process leaves, however it leaves. */
export function installCleanup(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  process.on('exit', killAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      process.stderr.write(`\nbench: ${signal}; stopping child processes\n`);
      killAll();
      process.exit(130);
    });
  }
}

/** Stops every child still running, politely first. */
export async function stopAll(): Promise<void> {
  await Promise.allSettled([...children].map((child) => child.stop()));
}

/** Spawns `node <args>`; every output line is kept in `tail` (last 50) and, with `logFile`, written there. */
export function spawnChild(name: string, args: string[], env: Record<string, string>, logFile?: string): Child {
  const proc = spawn(process.execPath, args, {
    cwd: root,
    env,
    // stdin stays a pipe: a child that watches it sees EOF if we die without cleanup.
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  if (proc.pid === undefined) throw new Error(`could not start ${name}`);
  const tail: string[] = [];
  const logStream: WriteStream | undefined = logFile ? createWriteStream(logFile) : undefined;
  let resolveFirst!: (line: string) => void;
  let rejectFirst!: (error: Error) => void;
  const firstLine = new Promise<string>((resolve, reject) => {
    resolveFirst = resolve;
    rejectFirst = reject;
  });
  firstLine.catch(() => undefined);
  const child: Child = {
    name,
    proc,
    pid: proc.pid,
    tail,
    warnings: 0,
    firstLine,
    exited: false,
    async stop(signal = 'SIGTERM', timeoutMs = 15_000) {
      if (child.exited) return;
      const exit = once(proc, 'exit');
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      await exit;
      clearTimeout(timer);
    },
  };
  children.add(child);
  proc.once('exit', (code, sig) => {
    child.exited = true;
    children.delete(child);
    rejectFirst(new Error(`${name} exited (${code ?? sig}) before printing anything:\n${tail.join('\n')}`));
  });
  // 'close' comes after the last output line, unlike 'exit'.
  proc.once('close', () => logStream?.end());
  proc.stdin!.on('error', () => undefined);
  let sawFirst = false;
  const lines = (stream: NodeJS.ReadableStream, isStdout: boolean) => {
    let buffer = '';
    stream.on('data', (data: Buffer) => {
      buffer += data.toString();
      let newline: number;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        tail.push(line);
        logStream?.write(`${line}\n`);
        if (tail.length > 50) tail.shift();
        const level = /"level":(\d+)/.exec(line);
        if (level && Number(level[1]) >= 40) child.warnings += 1;
        if (isStdout && !sawFirst) {
          sawFirst = true;
          resolveFirst(line);
        }
      }
    });
  };
  lines(proc.stdout!, true);
  lines(proc.stderr!, false);
  return child;
}

/** Resident set size of a process in bytes, from /proc (undefined once it is gone). */
export function rssBytes(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used so far, in ms, from /proc (clock ticks of 10 ms). */
export function cpuTimeMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may contain spaces.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

/** CPU time all cores have spent busy (not idle or iowait) since boot, in ms, from /proc/stat. */
export function systemBusyMs(): number | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const [, ...values] = line.trim().split(/\s+/);
    const ticks = values.map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already inside user)
    const busy = ticks[0]! + ticks[1]! + ticks[2]! + ticks[5]! + ticks[6]! + ticks[7]!;
    return busy * 10;
  } catch {
    return undefined;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns true; throws after `timeoutMs` or when `child` exits. */
export async function waitUntil(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  watched: Child[] = [],
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const dead = watched.find((c) => c.exited);
    if (dead) throw new Error(`${dead.name} exited while waiting for ${what}:\n${dead.tail.join('\n')}`);
    if (await check().catch(() => false)) return;
    await sleep(100);
  }
  const tails = watched.map((c) => `--- ${c.name} ---\n${c.tail.join('\n')}`).join('\n');
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${tails}`);
}

/**
 * Waits (at most `maxWaitMs`) for a second in which the whole machine used
 * less than `thresholdPct` of one core: other tenants of a shared machine, or
 * a process still busy after its start, would otherwise skew a short
 * measurement. Returns the last second's busy share (% of one core) and
 * whether it was quiet; never throws.
 */
export async function waitForQuiet(
  options: { thresholdPct?: number; maxWaitMs?: number } = {},
): Promise<{ quiet: boolean; busyPct: number | null; waitedMs: number }> {
  const threshold = options.thresholdPct ?? 25;
  const maxWaitMs = options.maxWaitMs ?? 10_000;
  // Not asked to check: reported as quiet, with no figure.
  if (maxWaitMs <= 0) return { quiet: true, busyPct: null, waitedMs: 0 };
  const started = Date.now();
  let busyPct: number | null = null;
  do {
    const before = systemBusyMs();
    const t0 = Date.now();
    await sleep(1000);
    const after = systemBusyMs();
    if (before === undefined || after === undefined)
      return { quiet: false, busyPct: null, waitedMs: Date.now() - started };
    busyPct = ((after - before) / Math.max(1, Date.now() - t0)) * 100;
    if (busyPct < threshold) return { quiet: true, busyPct, waitedMs: Date.now() - started };
  } while (Date.now() - started < maxWaitMs);
  return { quiet: false, busyPct, waitedMs: Date.now() - started };
}

/**
 * CPU ms each named process spends from now until the returned function is called (null where /proc could not
 * say), and `others`: what the rest of the machine kept busy meanwhile.
 */
export function cpuWindow(pids: Readonly<Record<string, number>>): () => Record<string, number | null> {
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid)]));
  const busyBefore = systemBusyMs();
  return () => {
    const cpuMs: Record<string, number | null> = {};
    for (const [name, pid] of Object.entries(pids)) {
      const start = before[name];
      const end = cpuTimeMs(pid);
      cpuMs[name] = start === undefined || end === undefined ? null : end - start;
    }
    const busyAfter = systemBusyMs();
    if (busyBefore !== undefined && busyAfter !== undefined) {
      const ours = Object.values(cpuMs).reduce<number>((sum, v) => sum + (v ?? 0), 0);
      cpuMs.others = Math.max(0, busyAfter - busyBefore - ours);
    }
    return cpuMs;
  };
}
