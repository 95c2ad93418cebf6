import type { Redis } from 'ioredis';

/**
 * How long a stop may go on past SHUTDOWN_GRACE_MS: the grace is for
 * draining; this is for closing what is left (connections, the record) once
 * the drain has ended or been given up. Kubernetes' default grace (30 s) is
 * above SHUTDOWN_GRACE_MS's ceiling (25 s) plus this and the parent's wait.
 */
export const closeMarginMs = 2000;

/**
 * Whether `work` settled by the epoch time `until`: false when the time ran
 * out first (the work goes on, unawaited; what it rejects with later is
 * ignored). A dead Redis makes BullMQ's `close()`, ioredis's `quit()` and
 * every command on a connection that retries for ever wait for ever: a stop
 * awaits them through this, so a deadline holds.
 */
export async function settledBy(work: Promise<unknown>, until: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>(
    (resolve) => (timer = setTimeout(() => resolve(false), Math.max(0, until - Date.now()))),
  );
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => true,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Closes a Redis connection by `until`: QUIT when it is connected (its
 * replies come first), else, or when QUIT is not answered in time, the
 * socket is dropped (a connection to a Redis that is gone would reconnect,
 * and hold its QUIT, for ever).
 */
export async function closeRedisBy(connection: Redis, until: number): Promise<void> {
  if (connection.status === 'ready' && (await settledBy(connection.quit(), until))) return;
  connection.disconnect();
}
