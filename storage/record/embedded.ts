import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { connect } from 'node:net';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/**
 * The embedded default record, for `npm start` without `DATABASE_URL`:
 * PGlite (PostgreSQL compiled to WebAssembly) keeping its files under
 * `DATA_DIR/pg`. PGlite is one process's alone (two opening the same files
 * corrupt them), so exactly one process owns it — whichever first takes
 * `DATA_DIR/pg.lock` (`npm start`'s main process, or `npm run keys` when no
 * gateway runs) — and serves it over the PostgreSQL wire on a Unix socket
 * beside it, from a worker thread (embedded-server.ts), so its queries never
 * hold that process's event loop. Every other process (the forked workers, the CLI beside a live
 * gateway) connects to that socket with the same driver as to a server.
 */

export interface LocatedRecord {
  /** `postgres://` URL to connect to. */
  url: string;
  /** Where it came from: `DATABASE_URL`, the embedded database this process serves, or one another process serves. */
  source: 'configured' | 'embedded' | 'embedded-peer';
  /** Stops serving the embedded database (when this process owns it). */
  close(): Promise<void>;
}

const socketName = '.s.PGSQL.5432';
/** Unix socket paths longer than this are refused by the kernel. */
const maxSocketPath = 100;

const socketUrl = (dir: string) => `postgres://postgres@localhost/postgres?host=${encodeURIComponent(dir)}`;

/** Whether a process of this id exists (one of another user's counts). */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function answers(path: string): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect(path);
    const finish = (ok: boolean) => {
      socket.destroy();
      done(ok);
    };
    socket.once('connect', () => finish(true));
    socket.once('error', () => finish(false));
    setTimeout(() => finish(false), 2000).unref();
  });
}

/** The record to use: `DATABASE_URL` when set, else the embedded one under `dataDir`, served here or by its owner. */
export async function locateRecord(databaseUrl: string | undefined, dataDir: string): Promise<LocatedRecord> {
  if (databaseUrl) return { url: databaseUrl, source: 'configured', close: async () => undefined };
  const dir = resolve(dataDir);
  const socketPath = join(dir, socketName);
  if (socketPath.length > maxSocketPath) {
    throw new Error(`DATA_DIR is too long a path for the embedded database's socket (${socketPath.length} characters, at most ${maxSocketPath}): use a shorter DATA_DIR, or DATABASE_URL`);
  }
  mkdirSync(dir, { recursive: true });
  const lockPath = join(dir, 'pg.lock');
  for (let attempt = 0; attempt < 50; attempt++) {
    let fd: number;
    try {
      fd = openSync(lockPath, 'wx', 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number(readFileSync(lockPath, 'utf8').trim() || '0');
      if (owner === process.pid) return { url: socketUrl(dir), source: 'embedded-peer', close: async () => undefined };
      if (processAlive(owner)) {
        // Its owner may still be opening it: give it a few seconds to answer.
        if (await answers(socketPath)) return { url: socketUrl(dir), source: 'embedded-peer', close: async () => undefined };
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      // Left by a process that is gone (killed): take it over.
      rmSync(lockPath, { force: true });
      continue;
    }
    writeSync(fd, String(process.pid));
    closeSync(fd);
    try {
      return await serveEmbedded(dir, socketPath, lockPath);
    } catch (error) {
      rmSync(lockPath, { force: true });
      throw error;
    }
  }
  throw new Error(`the embedded database under ${dir} is held by another process that does not answer on ${socketPath}`);
}

/** The worker thread's module: the .ts beside this file when run from source (tsx), the .js in dist/. */
const serverModule = new URL(`./embedded-server${extname(fileURLToPath(import.meta.url))}`, import.meta.url);

async function serveEmbedded(dir: string, socketPath: string, lockPath: string): Promise<LocatedRecord> {
  rmSync(socketPath, { force: true });
  // PGlite in a worker thread: its queries run synchronously, and must not hold this process's event loop.
  const worker = new Worker(serverModule, { workerData: { dataPath: join(dir, 'pg'), socketPath } });
  const said = (what: 'ready' | 'closed') =>
    new Promise<void>((resolveSaid, reject) => {
      const onMessage = (message: Record<string, unknown>) => {
        if (!message[what]) return;
        cleanup();
        resolveSaid();
      };
      const onError = (error: Error) => {
        cleanup();
        reject(error);
      };
      const onExit = (code: number) => {
        cleanup();
        reject(new Error(`the embedded database's thread exited (code ${code}) before it was ${what}`));
      };
      const cleanup = () => {
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
      };
      worker.on('message', onMessage);
      worker.once('error', onError);
      worker.once('exit', onExit);
    });
  try {
    await said('ready');
  } catch (error) {
    await worker.terminate();
    throw error;
  }
  let closed = false;
  const release = () => {
    rmSync(socketPath, { force: true });
    rmSync(lockPath, { force: true });
  };
  // A process that exits without closing (an uncaught error, process.exit) still frees the lock for the next start.
  process.once('exit', release);
  return {
    url: socketUrl(dir),
    source: 'embedded',
    async close() {
      if (closed) return;
      closed = true;
      worker.postMessage('close');
      await Promise.race([said('closed').catch(() => undefined), new Promise((r) => setTimeout(r, 10_000).unref())]);
      await worker.terminate();
      release();
      process.removeListener('exit', release);
    },
  };
}
