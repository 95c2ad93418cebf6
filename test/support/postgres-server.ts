import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../bin/local-redis.js';

/**
 * A PostgreSQL server of a test's own, for tests that stop or restart it
 * (the shared one on 5432 is never touched): initdb into a temporary
 * directory, `postgres` as a child process on a free port, trust auth.
 * PostgreSQL refuses to run as root: run as root, it runs as the `postgres` user.
 */

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const version of versions)
    if (existsSync(join(root, version, 'bin', 'postgres'))) return join(root, version, 'bin');
  throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)');
}

function runAs(): Pick<SpawnOptions, 'uid' | 'gid'> {
  if (process.getuid?.() !== 0) return {};
  const uid = Number(spawnSync('id', ['-u', 'postgres']).stdout.toString().trim());
  const gid = Number(spawnSync('id', ['-g', 'postgres']).stdout.toString().trim());
  return { uid, gid };
}

const live = new Set<{ proc?: ChildProcess; dir: string }>();
process.once('exit', () => {
  for (const server of live) {
    try {
      server.proc?.kill('SIGKILL');
    } catch {
      // gone
    }
    rmSync(server.dir, { recursive: true, force: true });
  }
});

export type PrivatePostgres = Awaited<ReturnType<typeof startPrivatePostgres>>;

export async function startPrivatePostgres() {
  const bin = binDir();
  const user = runAs();
  const dir = mkdtempSync(join(tmpdir(), 'sy-pg-'));
  if (user.uid !== undefined) chownSync(dir, user.uid, user.gid!);
  const data = join(dir, 'data');
  const init = spawnSync(
    join(bin, 'initdb'),
    ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8'],
    { ...user, encoding: 'utf8' },
  );
  if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`);
  const port = await freePort();
  const server: { proc?: ChildProcess; dir: string } = { dir };
  live.add(server);

  const start = async () => {
    const proc = spawn(
      join(bin, 'postgres'),
      ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'],
      {
        ...user,
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let log = '';
    proc.stderr!.on('data', (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4000)));
    server.proc = proc;
    const until = Date.now() + 20_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`postgres exited: ${log}`);
      const ready = spawnSync(join(bin, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port)]);
      if (ready.status === 0) return;
      if (Date.now() > until) throw new Error(`postgres did not start: ${log}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  /**
   * SIGQUIT is PostgreSQL's immediate shutdown: every backend ends at once, as in a crash; restart recovers from the
   * WAL.
   */
  const stop = async (signal: NodeJS.Signals = 'SIGQUIT') => {
    const proc = server.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill(signal);
    await once(proc, 'exit');
  };
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    /** The cluster's folder (PGDATA), for a test that copies it while the server is stopped. */
    data,
    stop,
    start,
    /** Stops it as a crash would, waits `downMs`, and starts it again on the same port. */
    async restart(downMs = 0): Promise<void> {
      await stop();
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
      await start();
    },
    async remove(): Promise<void> {
      await stop('SIGINT');
      live.delete(server);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
