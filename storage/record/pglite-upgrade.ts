import { chmodSync, existsSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { openRecord } from './database.js';
import { migrateRecord } from './migrations.js';
import { copyRecordTables, recordRows, type Queryable } from './record-copy.js';

/**
 * The one-time upgrade of an embedded record made by an older gateway: PGlite
 * (PostgreSQL in WebAssembly) under `DATA_DIR/pg`. Its tables are brought to
 * the current schema in-process, copied into the new server, and the folder
 * is renamed and kept as a backup. PGlite stays a dependency for this alone.
 */

const markName = 'upgraded_from_pglite';

export interface UpgradeLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

/** The pid in `DATA_DIR/pg.lock` when that process still runs (an older gateway serving the folder). */
function pgliteHolder(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, 'pg.lock'), 'utf8').trim());
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return undefined;
    process.kill(pid, 0);
    return pid;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM' ? -1 : undefined;
  }
}

/** True when DATA_DIR holds an older embedded record to upgrade; throws while an older gateway still serves it. */
export function pgliteRecordPresent(dataDir: string): boolean {
  if (!existsSync(join(dataDir, 'pg', 'PG_VERSION'))) return false;
  const holder = pgliteHolder(dataDir);
  if (holder !== undefined) {
    throw new Error(
      `${join(dataDir, 'pg')} is the record of an older gateway that still runs (pid ${holder > 0 ? holder : 'of another user'}, ${join(dataDir, 'pg.lock')}): stop it, then start again to upgrade its record`,
    );
  }
  return true;
}

/** Kysely over one PGlite instance (one session, used by one caller at a time here): for the migrations. */
function pgliteKysely(db: PGlite): Kysely<unknown> {
  const client = {
    async query(text: string, params: unknown[] = []) {
      const result = await db.query<Record<string, unknown>>(text, params);
      return {
        command: text.trim().split(/\s+/)[0]!.toUpperCase(),
        rowCount: result.affectedRows ?? result.rows.length,
        rows: result.rows,
      };
    },
    release() {},
  };
  const pool = { connect: async () => client, end: async () => undefined };
  return new Kysely<unknown>({ dialect: new PostgresDialect({ pool: pool as unknown as pg.Pool }) });
}

function secureTree(path: string): void {
  chmodSync(path, 0o700);
  for (const entry of readdirSync(path, { withFileTypes: true })) {
    const at = join(path, entry.name);
    if (entry.isDirectory()) secureTree(at);
    else if (entry.isFile()) chmodSync(at, 0o600);
  }
}

/**
 * Copies the PGlite record under `DATA_DIR/pg` into the server at `url`
 * (already running, empty), then renames the folder to `pg.pglite-backup`.
 * A copy that was committed before a crash (marked in `record_meta`) is not
 * made twice: the folder is only renamed.
 */
export async function upgradeFromPglite(dataDir: string, url: string, log: UpgradeLog): Promise<void> {
  const folder = join(dataDir, 'pg');
  // The new server at the current schema (its indexes too) before anything is copied in.
  const target = await openRecord(url, { max: 1 });
  await target.destroy();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const marked = await client.query(`select value from record_meta where name = $1`, [markName]);
    if (marked.rowCount === 0) {
      if ((await recordRows(client)) > 0) {
        throw new Error(
          `${folder} holds an older embedded record, but the new one under ${join(dataDir, 'postgres')} is not empty: move one of them away`,
        );
      }
      log.info(
        { from: folder },
        `upgrading the embedded record: copying ${folder} (PGlite, from an older gateway) into PostgreSQL under ${join(dataDir, 'postgres')}`,
      );
      const source = new PGlite(folder);
      try {
        await source.waitReady;
        const kysely = pgliteKysely(source);
        await migrateRecord(kysely);
        await client.query('begin');
        const copied = await copyRecordTables(source as unknown as Queryable, client);
        await client.query(`insert into record_meta (name, value) values ($1, $2)`, [
          markName,
          JSON.stringify({ at: new Date().toISOString(), copied }),
        ]);
        await client.query('commit');
        log.info(
          { copied },
          `upgraded the embedded record: ${Object.entries(copied)
            .map(([table, n]) => `${n} ${table}`)
            .join(', ')}`,
        );
      } catch (error) {
        await client.query('rollback').catch(() => undefined);
        throw new Error(`the upgrade of ${folder} failed, nothing was changed: ${(error as Error).message}`);
      } finally {
        await source.close().catch(() => undefined);
      }
    }
  } finally {
    await client.end().catch(() => undefined);
  }
  let backup = join(dataDir, 'pg.pglite-backup');
  if (existsSync(backup)) backup = `${backup}-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  renameSync(folder, backup);
  rmSync(join(dataDir, 'pg.lock'), { force: true });
  // Written under any umask by the older gateway (0666 files): the backup is the operator's alone too.
  secureTree(backup);
  log.warn({ backup }, `the older embedded record is kept as ${backup}; delete it once the gateway runs as it should`);
}
