import { existsSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  binaries,
  claimCluster,
  engineLayout,
  engineUrl,
  initialiseCluster,
  maxSocketPath,
  processAlive,
  readOwner,
  secureDataDir,
  serverAnswers,
  serverPid,
  serverUser,
  startServer,
  stopServer,
  takeOwnerFile,
  type EngineLayout,
  type ServerUser,
} from './embedded-engine.js';
import { ensureOrphanWatch, orphanGraceMs } from './orphan-watch.js';
import { pgliteRecordPresent, upgradeFromPglite } from './pglite-upgrade.js';

/**
 * The embedded default record, for `npm start` without `DATABASE_URL`: a
 * PostgreSQL server (embedded-engine.ts) with its cluster under
 * `DATA_DIR/postgres`, on a Unix socket there. Every process of that DATA_DIR
 * connects to it as to any server, each session its own. One process owns it
 * — whichever finds none running and takes `DATA_DIR/postgres.owner`
 * (`npm start`'s main process, or `npm run keys` when no gateway runs) — and
 * stops it on close. The others are its peers; a peer that sees the owner gone
 * takes the record over (starts it again on the same socket, or adopts the
 * server a killed owner left running), and says so. A server whose owner is
 * gone and that no peer takes over is stopped by its orphan watch
 * (orphan-watch.ts) within seconds, whatever ended the owner.
 */

export interface LocatedRecord {
  /** `postgres://` URL to connect to. */
  url: string;
  /** Where it came from: `DATABASE_URL`, the embedded server this process owns, or one another process owns. */
  source: 'configured' | 'embedded' | 'embedded-peer';
  /** The embedded record: the process that owns it now. */
  readonly owner?: number;
  /** One sentence for the log: which record, and who serves it. */
  readonly described: string;
  /** A warning for the log: an embedded record left in DATA_DIR beside the DATABASE_URL in use. */
  readonly notice?: string;
  /** Stops the embedded server when this process owns it. */
  close(): Promise<void>;
}

export interface RecordLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface LocateOptions {
  /** Where a takeover and the upgrade are said. */
  log?: RecordLog;
  /** How often a peer checks that the owner still runs (0: never, for a short command). */
  watchMs?: number;
  /** Deadline for stopping the server on close. */
  stopMs?: number;
  /** How long the server may run with no owner before its orphan watch stops it. */
  orphanGraceMs?: number;
}

export { processAlive } from './embedded-engine.js';

const quiet: RecordLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/**
 * Becomes the owner (the server started here, or adopted from an owner that
 * died) or a peer of a live owner whose server answers: returns the owner's pid.
 */
async function acquire(
  layout: EngineLayout,
  user: ServerUser | undefined,
  log: RecordLog,
  graceMs: number,
): Promise<number> {
  const url = () => engineUrl(layout);
  for (let attempt = 0; attempt < 600; attempt++) {
    if (!takeOwnerFile(layout)) {
      const owner = readOwner(layout);
      if (owner === process.pid) return owner;
      if (processAlive(owner)) {
        if (await serverAnswers(url())) return owner;
        // Its owner may still be starting it.
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      // Left by a process that is gone: taken over below, after a second look (another may be taking it too).
      if (readOwner(layout) === owner) rmSync(layout.ownerFile, { force: true });
      continue;
    }
    try {
      if (await serverAnswers(url())) {
        log.warn(
          { pid: serverPid(layout) },
          'the embedded record was left running by a process that is gone: this process owns it now',
        );
        ensureOrphanWatch(layout, graceMs);
        return process.pid;
      }
      claimCluster(layout, user);
      if (await initialiseCluster(layout, user))
        log.info({ cluster: layout.cluster }, `made a new embedded record (PostgreSQL) under ${layout.cluster}`);
      await startServer(layout, user);
      ensureOrphanWatch(layout, graceMs);
      return process.pid;
    } catch (error) {
      if (readOwner(layout) === process.pid) rmSync(layout.ownerFile, { force: true });
      throw error;
    }
  }
  throw new Error(
    `the embedded record under ${layout.dataDir} is owned by another process that does not answer on ` +
      `${layout.socketPath}`,
  );
}

/**
 * The embedded record's folder under `dataDir` when it holds one: the PostgreSQL cluster, or an older gateway's PGlite
 * record.
 */
export function embeddedRecordIn(dataDir: string): string | undefined {
  return ['postgres', 'pg']
    .map((folder) => join(resolve(dataDir), folder))
    .find((folder) => existsSync(join(folder, 'PG_VERSION')));
}

/**
 * The record to use: `DATABASE_URL` when set, else the embedded server under `dataDir`, owned here or by another
 * process.
 */
export async function locateRecord(
  databaseUrl: string | undefined,
  dataDir: string,
  options: LocateOptions = {},
): Promise<LocatedRecord> {
  if (databaseUrl) {
    const left = embeddedRecordIn(dataDir);
    return {
      url: databaseUrl,
      source: 'configured',
      described: 'the record is in PostgreSQL (DATABASE_URL)',
      // A move started by setting DATABASE_URL alone would leave every account behind, without a word.
      notice:
        left &&
        `DATA_DIR also holds an embedded record (${left}), which this gateway does not use: to move it to ` +
          `DATABASE_URL, stop the gateway and run npm run record -- copy --to <DATABASE_URL> (docs/operating.md); ` +
          `once moved, remove it`,
      close: async () => undefined,
    };
  }
  const log = options.log ?? quiet;
  const layout = engineLayout(resolve(dataDir));
  if (layout.socketPath.length > maxSocketPath) {
    throw new Error(
      `DATA_DIR is too long a path for the embedded record's socket (${layout.socketPath.length} characters, at ` +
        `most ${maxSocketPath}): use a shorter DATA_DIR, or DATABASE_URL`,
    );
  }
  const user = serverUser();
  secureDataDir(layout, user);
  const graceMs = options.orphanGraceMs ?? orphanGraceMs;
  const upgrade = pgliteRecordPresent(layout.dataDir);
  const url = engineUrl(layout);
  let owner = await acquire(layout, user, log, graceMs);
  if (owner === process.pid && upgrade) {
    try {
      await upgradeFromPglite(layout.dataDir, url, log);
    } catch (error) {
      await release(layout, options.stopMs);
      throw error;
    }
  }

  // A process that exits without closing (an uncaught error, process.exit) still stops the server it owns.
  const onExit = () => {
    if (owner !== process.pid) return;
    const pid = serverPid(layout);
    if (pid) {
      try {
        process.kill(pid, 'SIGINT');
      } catch {
        // already gone
      }
    }
    if (readOwner(layout) === process.pid) rmSync(layout.ownerFile, { force: true });
  };
  process.on('exit', onExit);

  // The owner's server stopped (its owner closed, or was killed and a server with it): take over.
  let checking = false;
  let closed = false;
  const check = async () => {
    if (checking || closed) return;
    checking = true;
    try {
      if (owner === process.pid) {
        if (serverPid(layout) === undefined && !(await serverAnswers(url))) {
          log.error(
            { cluster: layout.cluster },
            "the embedded record's server stopped unexpectedly: starting it again",
          );
          await startServer(layout, user);
          ensureOrphanWatch(layout, graceMs);
        }
        return;
      }
      if (processAlive(owner) && readOwner(layout) === owner) return;
      const gone = owner;
      log.warn({ owner: gone }, `the process that owned the embedded record (pid ${gone}) has stopped: taking it over`);
      owner = await acquire(layout, user, log, graceMs);
      log.warn(
        { owner },
        owner === process.pid
          ? `this process (pid ${owner}) owns the embedded record now`
          : `the embedded record is owned by pid ${owner} now`,
      );
    } catch (error) {
      log.error({ err: error }, 'could not take over the embedded record; trying again');
    } finally {
      checking = false;
    }
  };
  const watchMs = options.watchMs ?? 0;
  // As root: which user the server runs as, and the binaries it runs when the installed ones are out of its reach.
  const copiedTo = user && binaries(user).copiedTo;
  const runsAs = user
    ? ` as the user ${user.name}${copiedTo ? ` (its binaries copied to ${copiedTo}, out of the reach of a clone under a folder only root may enter)` : ''}`
    : '';
  const timer = watchMs > 0 ? setInterval(() => void check(), watchMs).unref() : undefined;

  return {
    url,
    get source() {
      return owner === process.pid ? ('embedded' as const) : ('embedded-peer' as const);
    },
    get owner() {
      return owner;
    },
    get described() {
      return owner === process.pid
        ? `the record (accounts, keys, credits, usage) is the embedded PostgreSQL under ${layout.cluster}, served ` +
            `by this process (pid ${owner})${runsAs}; set DATABASE_URL for a PostgreSQL server`
        : `the record is the embedded PostgreSQL under ${layout.cluster}, served by another process (pid ` +
            `${owner})${runsAs}; this one takes it over if that one stops`;
    },
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearInterval(timer);
      while (checking) await new Promise((r) => setTimeout(r, 20));
      process.removeListener('exit', onExit);
      if (owner === process.pid) await release(layout, options.stopMs);
    },
  };
}

async function release(layout: EngineLayout, stopMs = 20_000): Promise<void> {
  await stopServer(layout, stopMs);
  if (readOwner(layout) === process.pid) rmSync(layout.ownerFile, { force: true });
}
