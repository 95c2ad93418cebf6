import pg from 'pg';
import type { Redis } from 'ioredis';
import { sql, type Selectable } from 'kysely';
import { openRecord, type RecordDb, type UsageTable } from '../../storage/record/database.js';
import { processAlive } from '../../storage/record/embedded.js';

/**
 * The record (PostgreSQL) of the tests: a database of its own for each Redis
 * database a test process uses, on the server `TEST_DATABASE_URL` names
 * (default: the local PostgreSQL, `postgres://postgres@127.0.0.1:5432/postgres`).
 * Made empty on first use, dropped when the process that made it is gone.
 */

export const testDatabaseServer = process.env.TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const prefix = 'sy_t_';

function withDatabase(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${name}`;
  return parsed.toString();
}

/** Runs `run` on a client of its own connected to `url`, closed after it. */
export async function onDatabase<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

const admin = <T>(run: (client: pg.Client) => Promise<T>): Promise<T> => onDatabase(testDatabaseServer, run);

let swept = false;
/** Creates (empty) a database `sy_t_<pid>_<name>` and returns its URL. */
export async function freshDatabase(name: string): Promise<string> {
  const database = `${prefix}${process.pid}_${name.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`.slice(0, 63);
  await admin(async (client) => {
    if (!swept) {
      swept = true;
      // Databases of test processes that are gone.
      const { rows } = await client.query<{ datname: string }>(
        `select datname from pg_database where datname like '${prefix}%'`,
      );
      for (const { datname } of rows) {
        const pid = Number(datname.slice(prefix.length).split('_')[0]);
        if (pid !== process.pid && !processAlive(pid))
          await client.query(`drop database if exists "${datname}" with (force)`).catch(() => undefined);
      }
    }
    await client.query(`drop database if exists "${database}" with (force)`);
    await client.query(`create database "${database}"`);
  });
  return withDatabase(testDatabaseServer, database);
}

const byRedis = new Map<string, Promise<string>>();
const opened = new Map<string, Promise<RecordDb>>();

/** Which Redis database a URL or connection is: `port/db`. */
function redisIdentity(target: string | Redis): string {
  if (typeof target === 'string') {
    const parsed = new URL(target.split(',')[0]!.replace(/^redis\+cluster:/, 'redis:'));
    return `${parsed.port || 6379}/${parsed.pathname.replace(/^\//, '') || '0'}`;
  }
  return `${target.options.port ?? 6379}/${target.options.db ?? 0}`;
}

/** Gives a Redis database an empty record of its own, forgetting any it had. */
function makeRecordFor(id: string): Promise<string> {
  const made = freshDatabase(`r${id.replace('/', '_')}`);
  byRedis.set(id, made);
  opened.delete(id);
  return made;
}

/** An empty record for a Redis database (freshRedis calls it as it flushes the database). */
export function resetRecordFor(redisUrl: string): Promise<string> {
  return makeRecordFor(redisIdentity(redisUrl));
}

/** The record's URL that goes with a Redis database (made on first use). */
export function recordUrlFor(redis: string | Redis): Promise<string> {
  const id = redisIdentity(redis);
  return byRedis.get(id) ?? makeRecordFor(id);
}

/** The record that goes with a Redis database, opened (and migrated) once per test process. */
export function testRecord(redis: string | Redis): Promise<RecordDb> {
  const id = redisIdentity(redis);
  let db = opened.get(id);
  if (!db) {
    db = recordUrlFor(redis).then((url) => openRecord(url, { max: 4 }));
    opened.set(id, db);
  }
  return db;
}

/** Empties every table of a record (a test that flushes its Redis between cases empties its record too). */
export async function emptyRecord(db: RecordDb): Promise<void> {
  await sql`truncate accounts, api_keys, ledger, usage, usage_daily, record_meta cascade`.execute(db);
}

/** The usage rows of the record that goes with a Redis database. */
export async function usageRows(redis: string | Redis): Promise<Array<Selectable<UsageTable>>> {
  return (await testRecord(redis)).selectFrom('usage').selectAll().orderBy('created').execute();
}

/**
 * Waits until the usage writer has put a settled row matching `match` in the
 * record (what the worker billed: a row holding only the api's request-log
 * half, which may come first, does not count), and returns it.
 */
export async function waitForUsage(
  redis: string | Redis,
  match: (row: Selectable<UsageTable>) => boolean,
  timeoutMs = 10_000,
): Promise<Selectable<UsageTable>> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const row = (await usageRows(redis)).find((candidate) => candidate.settled && match(candidate));
    if (row) return row;
    if (Date.now() > until) throw new Error(`no matching usage row reached the record within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The key's tool calls (`mcp.tools/call`) settled in the record, once there are `count` (within 10 s). */
export async function settledToolCalls(
  redis: string | Redis,
  keyId: string,
  count: number,
): Promise<Array<Selectable<UsageTable>>> {
  const until = Date.now() + 10_000;
  for (;;) {
    const rows = (await usageRows(redis)).filter(
      (row) => row.endpoint === 'mcp.tools/call' && row.key_id === keyId && row.settled,
    );
    if (rows.length >= count) return rows;
    if (Date.now() > until)
      throw new Error(
        `${count} settled tool calls of ${keyId} did not reach the record within 10 s (${rows.length} did)`,
      );
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
