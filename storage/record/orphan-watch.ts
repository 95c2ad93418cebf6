import { spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { engineLayout, processAlive, readOwner, serverPid, stopServer, type EngineLayout } from './embedded-engine.js';

/**
 * The embedded record's orphan watch: a small process of its own (its own
 * session, so a signal to the gateway's process group, SIGKILL included,
 * does not reach it) started beside each server. While the process named in
 * `postgres.owner` runs, it does nothing. Once that process is gone and no
 * peer has taken the record over for `orphanGraceMs` (peers look every 2 s),
 * it takes the owner file itself, so that nobody adopts a server on its way
 * down, stops the server and leaves. It leaves as well when the server stops.
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
    const child = spawn(process.execPath, [...loader, thisFile, layout.dataDir, String(graceMs)], { detached: true, stdio: ['ignore', log, log] });
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
    const fd = openSync(layout.ownerFile, 'wx', 0o600);
    writeSync(fd, String(process.pid));
    closeSync(fd);
    return true;
  } catch {
    return false;
  }
}

async function watch(layout: EngineLayout, graceMs: number): Promise<void> {
  let orphanSince: number | undefined;
  for (;;) {
    await new Promise((r) => setTimeout(r, pollMs));
    if (serverPid(layout) === undefined) return;
    const owner = readOwner(layout);
    if (owner !== 0 && processAlive(owner)) {
      orphanSince = undefined;
      continue;
    }
    orphanSince ??= Date.now();
    if (Date.now() - orphanSince < graceMs || !claim(layout, owner)) continue;
    const line = (what: string) => process.stdout.write(`${new Date().toISOString()} switchyard orphan watch: ${what}\n`);
    line(`the embedded record's owner (pid ${owner || 'none'}) is gone and nobody took it over in ${graceMs / 1000} s: stopping the server`);
    try {
      await stopServer(layout, stopMs);
    } finally {
      if (readOwner(layout) === process.pid) rmSync(layout.ownerFile, { force: true });
    }
    return;
  }
}

if (process.argv[1] && resolve(process.argv[1]) === thisFile) {
  const layout = engineLayout(resolve(process.argv[2]!));
  const graceMs = Number(process.argv[3] ?? orphanGraceMs);
  process.title = 'switchyard-record-orphan-watch';
  watch(layout, graceMs).then(
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
