import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../bin/local-redis.js';

export { freePort };

/**
 * A private redis-server for tests that stop or restart Redis (the shared one
 * is never touched). With `aof` (the default) data survives `restart()`, as
 * with `appendonly yes` + `appendfsync everysec` in production; without it a
 * restart comes back empty, as a Redis run without persistence does.
 */
export async function startPrivateRedis(options: { aof?: boolean } = {}) {
  const aof = options.aof ?? true;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-redis-'));
  let proc: ChildProcess | undefined;
  const url = `redis://127.0.0.1:${port}`;

  async function start(): Promise<void> {
    const persistence = aof ? ['--appendonly', 'yes', '--appendfsync', 'everysec'] : ['--appendonly', 'no'];
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...persistence, '--save', ''], {
      stdio: 'ignore',
    });
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    for (let i = 0; i < 100; i++) {
      try {
        await probe.connect();
        await probe.ping();
        probe.disconnect();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    throw new Error('private redis-server did not start');
  }

  /** Kills the server with SIGKILL, as a crash or an OOM kill would. */
  async function stop(): Promise<void> {
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = once(proc, 'exit');
    proc.kill('SIGKILL');
    await exited;
  }

  /** Stops the server for good and deletes its data directory. */
  async function remove(): Promise<void> {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  }

  await start();
  return { url, port, dir, aof, stop, restart: start, remove };
}
