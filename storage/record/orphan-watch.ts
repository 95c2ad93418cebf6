import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  engineLayout,
  processAlive,
  readOwner,
  serverPid,
  signalUntilGone,
  stopServer,
  takeOwnerFile,
  type EngineLayout,
} from './embedded-engine.js';

/**
 * The embedded record's orphan watch: a small process of its own (its own
 * session, so a signal to the gateway's process group, SIGKILL included,
 * does not reach it) started beside each server. While the process named in
 * `postgres.owner` runs, it does nothing. Once that process is gone and no
 * peer has taken the record over for `orphanGraceMs` (peers look every 2 s),
 * it takes the owner file itself, so that nobody adopts a server on its way
 * down, stops the server and leaves. It leaves as well when the server stops.
 * A server whose DATA_DIR was removed under it (a test run's, a trial's) is
 * stopped the same way once its last owner is gone.
 */

/** How long a server may run with no owner before its watch stops it (docs/operating.md). */
export const orphanGraceMs = 10_000;
const pollMs = 1_000;
const stopMs = 20_000;

const thisFile = fileURLToPath(import.meta.url);

/** Whether the watch named in the layout's watch file still runs. */
function watchRuns(layout: EngineLayout): boolean {
  try {
    const pid = Number(readFileSync(layout.watchFile, 'utf8').trim());
    return processAlive(pid) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('orphan-watch');
  } catch {
    return false;
  }
}

/** Starts the watch of the server under `layout` unless one runs already. */
export function ensureOrphanWatch(layout: EngineLayout, graceMs = orphanGraceMs): void {
  if (process.platform !== 'linux' || watchRuns(layout)) return;
  // From the sources (tests run them through tsx) the watch needs the same loader.
  const loader = thisFile.endsWith('.ts') ? ['--import', import.meta.resolve('tsx')] : [];
  const log = openSync(layout.logFile, 'a', 0o600);
  try {
    // The server's pid goes along: the watch knows it even if DATA_DIR is removed before it first looks.
    const server = String(serverPid(layout) ?? 0);
    const child = spawn(process.execPath, [...loader, thisFile, layout.dataDir, String(graceMs), server], {
      detached: true,
      stdio: ['ignore', log, log],
    });
    child.unref();
    const temporary = `${layout.watchFile}.${process.pid}`;
    writeFileSync(temporary, String(child.pid), { mode: 0o600 });
    renameSync(temporary, layout.watchFile);
  } finally {
    closeSync(log);
  }
}

/** Takes the owner file from a gone owner (`gone`, 0 for none): false when a live process took it first. */
function claim(layout: EngineLayout, gone: number): boolean {
  if (readOwner(layout) !== gone) return false;
  rmSync(layout.ownerFile, { force: true });
  try {
    return takeOwnerFile(layout);
  } catch {
    return false; // DATA_DIR gone meanwhile
  }
}

/** When a process started (clock ticks since boot), to tell it from a later one given the same pid. */
function startedAt(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ')[19];
  } catch {
    return undefined;
  }
}

async function watch(layout: EngineLayout, graceMs: number, first: number): Promise<void> {
  let orphanSince: number | undefined;
  let server: { pid: number; started: string | undefined } | undefined =
    first > 0 ? { pid: first, started: startedAt(first) } : undefined;
  let lastOwner = 0;
  const line = (what: string) => process.stdout.write(`${new Date().toISOString()} switchyard orphan watch: ${what}\n`);
  for (;;) {
    await new Promise((r) => setTimeout(r, pollMs));
    const pid = serverPid(layout);
    if (pid !== undefined) server = { pid, started: startedAt(pid) };
    // Stopped; or, with its cluster still there, no longer the server of it.
    else if (!server || existsSync(layout.cluster) || startedAt(server.pid) !== server.started) return;
    // Else it runs with its DATA_DIR removed from under it (a test run, a trial): nobody can take that one over.
    const owner = existsSync(layout.ownerFile) ? readOwner(layout) : lastOwner;
    if (owner !== 0 && processAlive(owner)) {
      lastOwner = owner;
      orphanSince = undefined;
      continue;
    }
    orphanSince ??= Date.now();
    if (Date.now() - orphanSince < graceMs) continue;
    if (pid === undefined) {
      line(
        `the embedded record's owner (pid ${owner || 'none'}) is gone and its DATA_DIR with it: stopping the server (pid ${server.pid})`,
      );
      await stopRemoved(server.pid, server.started);
      return;
    }
    if (!claim(layout, owner)) continue;
    line(
      `the embedded record's owner (pid ${owner || 'none'}) is gone and nobody took it over in ${graceMs / 1000} s: stopping the server`,
    );
    try {
      await stopServer(layout, stopMs);
    } finally {
      if (readOwner(layout) === process.pid) rmSync(layout.ownerFile, { force: true });
    }
    return;
  }
}

/** Stops a server whose cluster is gone (nothing of it to keep): an immediate shutdown, then a kill. */
function stopRemoved(pid: number, started: string | undefined): Promise<void> {
  return signalUntilGone(
    pid,
    [
      ['SIGQUIT', 5000],
      ['SIGKILL', 2000],
    ],
    () => startedAt(pid) === started,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === thisFile) {
  const layout = engineLayout(resolve(process.argv[2]!));
  const graceMs = Number(process.argv[3] ?? orphanGraceMs);
  process.title = 'switchyard-record-orphan-watch';
  watch(layout, graceMs, Number(process.argv[4] ?? 0)).then(
    () => {
      try {
        if (Number(readFileSync(layout.watchFile, 'utf8')) === process.pid) rmSync(layout.watchFile, { force: true });
      } catch {
        // gone already
      }
      process.exit(0);
    },
    (error: unknown) => {
      process.stderr.write(`switchyard orphan watch: ${(error as Error).stack ?? String(error)}\n`);
      process.exit(1);
    },
  );
}
