import type { Server } from 'node:http';

/**
 * For a bench child process (a fake vendor, the floor): runs `stop` on
 * SIGTERM or SIGINT, and when the parent is gone. The parent holds the
 * child's stdin open, so its end means the parent exited, even if killed.
 */
export function stopWithParent(stop: () => void): void {
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  process.stdin.on('end', stop);
  process.stdin.on('close', stop);
  process.stdin.on('error', stop);
  process.stdin.resume();
}

/**
 * A bench child's stop (a fake vendor, a floor), once, when its parent goes: its control server's connections cut, its
 * servers closed (each `closers` entry; undefined for one it did not start), then the process exits, at the latest 2 s
 * later.
 */
export function closeWithParent(control: Server, closers: () => ReadonlyArray<Promise<unknown> | undefined>): void {
  let closing = false;
  stopWithParent(() => {
    if (closing) return;
    closing = true;
    setTimeout(() => process.exit(0), 2000).unref();
    control.closeAllConnections();
    control.close();
    void Promise.allSettled(closers()).then(() => process.exit(0));
  });
}
