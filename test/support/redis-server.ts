import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../../bin/local-redis.js';
import { onProcessEnd } from './process-end.js';

export { freePort };

export type PrivateRedis = Awaited<ReturnType<typeof startPrivateRedis>>;

let installed: boolean | undefined;
/** Whether `redis-server` can be run here (looked up once per process). */
export function redisServerInstalled(): boolean {
  installed ??= spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0;
  return installed;
}

// ---- cleanup: no server or data directory outlives the process that started it ----------

interface Live {
  proc?: ChildProcess;
  guard?: ChildProcess;
  dir: string;
}
const live = new Set<Live>();

function killQuietly(proc: ChildProcess | undefined): void {
  if (proc && proc.exitCode === null && proc.signalCode === null) {
    try {
      proc.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

/** Synchronous, so it can run in an 'exit' listener: SIGKILLs every server and deletes its directory. */
function cleanupAll(): void {
  for (const server of live) {
    killQuietly(server.guard);
    killQuietly(server.proc);
    try {
      rmSync(server.dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // the guard removes it too
    }
  }
  live.clear();
}

/**
 * When the event loop runs dry (the tests are done; the servers do not keep
 * the process alive), stops the servers and waits for them, so none is left
 * for init to reap; the 'exit' listener is the fallback for every other way out.
 */
async function reapAll(): Promise<void> {
  const servers = [...live];
  live.clear();
  await Promise.all(
    servers.map(async (server) => {
      killQuietly(server.guard);
      const proc = server.proc;
      if (proc && proc.exitCode === null && proc.signalCode === null) {
        const exited = once(proc, 'exit');
        proc.ref();
        proc.kill('SIGKILL');
        await exited;
      }
      rmSync(server.dir, { recursive: true, force: true });
    }),
  );
}

let reaperInstalled = false;
function installReaper(): void {
  if (reaperInstalled) return;
  reaperInstalled = true;
  process.on('beforeExit', () => {
    if (live.size > 0) void reapAll();
  });
}

/**
 * A watchdog for the case no listener sees: this process killed with SIGKILL
 * (or crashing in native code). It holds the read end of a pipe from us; when
 * we die the pipe closes and it SIGKILLs the server and deletes its directory.
 * Its own session, and SIGINT/SIGHUP ignored, so a Ctrl-C does not take it first.
 */
function startGuard(pid: number, dir: string): ChildProcess {
  const script = [
    "trap '' INT HUP",
    'cat >/dev/null',
    'kill -9 "$1" 2>/dev/null',
    // until it is dead (a zombie counts: init reaps it), at most 2 s
    'i=0; while [ "$i" -lt 40 ] && [ -e "/proc/$1" ] && ! grep -q ") Z" "/proc/$1/stat" 2>/dev/null; do sleep ' +
      '0.05; i=$((i + 1)); done',
    'rm -rf "$2"',
  ].join('; ');
  const guard = spawn('sh', ['-c', script, 'switchyard-redis-guard', String(pid), dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
    detached: true,
  });
  guard.on('error', () => undefined);
  guard.stdin!.on('error', () => undefined);
  // Neither the guard nor its pipe keeps this process alive.
  guard.unref();
  (guard.stdin as Socket).unref();
  return guard;
}

/**
 * A private redis-server on a free port of 127.0.0.1, with its data in a new
 * temporary directory, for tests that must not touch any other Redis (and for
 * those that stop or restart it). With `aof` (the default) data survives
 * `restart()`, as with `appendonly yes` + `appendfsync everysec` in production;
 * without it a restart comes back empty, as a Redis run without persistence does.
 *
 * The server does not keep this process alive, and it is SIGKILLed and its
 * directory deleted when this process exits, however it exits (a SIGINT, or
 * a SIGKILL through a watchdog); `remove()` does the same earlier.
 */
export async function startPrivateRedis(options: { aof?: boolean } = {}) {
  // A free port can be taken before redis-server binds it (by a server of another test file, or the local end of
  // any connection): try another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnFreePort(options);
    } catch (error) {
      if (attempt === 3 || !redisServerInstalled()) throw error;
    }
  }
}

async function startOnFreePort(options: { aof?: boolean }) {
  if (!redisServerInstalled()) {
    throw new Error(
      'redis-server is not installed (e.g. `apt-get install redis-server`): cannot start a private Redis',
    );
  }
  const aof = options.aof ?? true;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'switchyard-redis-'));
  const server: Live = { dir };
  live.add(server);
  onProcessEnd(cleanupAll);
  installReaper();
  const url = `redis://127.0.0.1:${port}`;

  async function start(): Promise<void> {
    // A second server on the port would fail to bind while the probe below still reached the first one.
    const running = server.proc;
    if (running && running.exitCode === null && running.signalCode === null)
      throw new Error(`the Redis on port ${port} is still running: stop() it first`);
    const persistence = aof ? ['--appendonly', 'yes', '--appendfsync', 'everysec'] : ['--appendonly', 'no'];
    const proc = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, ...persistence, '--save', ''],
      {
        stdio: 'ignore',
      },
    );
    proc.on('error', () => undefined);
    proc.unref();
    server.proc = proc;
    if (proc.pid !== undefined) server.guard = startGuard(proc.pid, dir);
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    for (let i = 0; i < 100; i++) {
      if (proc.exitCode !== null || proc.signalCode !== null || proc.pid === undefined) break;
      try {
        await probe.connect();
        await probe.ping();
        probe.disconnect();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    probe.disconnect();
    throw new Error(
      `private redis-server on port ${port} did not start (exit ${proc.exitCode ?? proc.signalCode ?? 'none'})`,
    );
  }

  /** Kills the server with SIGKILL, as a crash or an OOM kill would. */
  async function stop(): Promise<void> {
    killQuietly(server.guard);
    server.guard = undefined;
    const proc = server.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = once(proc, 'exit');
    proc.ref();
    proc.kill('SIGKILL');
    await exited;
    proc.unref();
  }

  /**
   * Resolves once every write the server has acknowledged so far is in its
   * AOF file (INFO persistence: `aof_buffer_length:0`), so a SIGKILL after it
   * loses none of them. With `appendfsync everysec` Redis holds writes in its
   * buffer for up to 2 s while a slow fsync is behind (a large AOF on a busy
   * disk), and a crash then loses them: a test that restarts Redis to show
   * what survives waits for this first, rather than for a guessed second.
   */
  async function persisted(timeoutMs = 10_000): Promise<void> {
    if (!aof) throw new Error('persisted(): this server runs without an AOF');
    const probe = new Redis(url, { maxRetriesPerRequest: 0, lazyConnect: true });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      for (const started = Date.now(); Date.now() - started < timeoutMs;) {
        if (/^aof_buffer_length:0\r?$/m.test(await probe.info('persistence'))) return;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`the AOF buffer of the Redis on port ${port} was not written within ${timeoutMs} ms`);
    } finally {
      probe.disconnect();
    }
  }

  /** Stops the server for good and deletes its data directory. */
  async function remove(): Promise<void> {
    await stop();
    rmSync(dir, { recursive: true, force: true });
    live.delete(server);
  }

  try {
    await start();
  } catch (error) {
    await remove();
    throw error;
  }
  return { url, port, dir, aof, stop, restart: start, remove, persisted };
}

let processRedis: Promise<PrivateRedis> | undefined;
/**
 * This process's own private redis-server without AOF, started on first use
 * and shared by every caller in the process (`freshRedis`, the benches).
 */
export function processPrivateRedis(): Promise<PrivateRedis> {
  processRedis ??= startPrivateRedis({ aof: false });
  return processRedis;
}

/**
 * The Redis database a benchmark uses: the URL in `envName` as given (that
 * database is flushed), else database `db` of this process's private
 * redis-server, so a benchmark never empties a database of a Redis it did not start.
 */
export async function benchRedisUrl(envName: string, db: number): Promise<string> {
  const told = process.env[envName];
  if (told) return told;
  if (!redisServerInstalled()) {
    throw new Error(
      `The benchmark needs a Redis: install redis-server (e.g. \`apt-get install redis-server\`) and it starts ` +
        `its own private one, ` +
        `or set ${envName}=redis://host:port/db to use a running Redis (that database is flushed).`,
    );
  }
  return `${(await processPrivateRedis()).url}/${db}`;
}
