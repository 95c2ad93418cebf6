import { constants } from 'node:os';

const cleanups = new Set<() => void>();
let installed = false;

function runAll(): void {
  for (const cleanup of [...cleanups]) {
    try {
      cleanup();
    } catch {
      // the others still run
    }
  }
}

/**
 * Runs `cleanup` (synchronous: it may run in an 'exit' listener) when this
 * process ends: normally, through process.exit(), or on SIGINT, SIGTERM or
 * SIGHUP. On a signal nobody else listens to, the process then exits with
 * 128 + the signal's number, as the signal would have ended it. Registering
 * the same function twice runs it once.
 */
export function onProcessEnd(cleanup: () => void): void {
  cleanups.add(cleanup);
  if (installed) return;
  installed = true;
  process.on('exit', runAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      runAll();
      // Someone else handles the signal (the benches' cleanup): let them end the process.
      // Otherwise end it, after a moment for the killed children to be reaped (not left to init as zombies).
      if (process.listenerCount(signal) === 0) setTimeout(() => process.exit(128 + constants.signals[signal]), 100);
    });
  }
}
