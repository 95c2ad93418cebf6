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
