import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Redis } from 'ioredis';
import pg from 'pg';
import { loadConfig } from '../shared/config.js';
import { createRedis, reachRedis } from '../shared/redis.js';
import { locateRedis } from './local-redis.js';
import { openRecord, type RecordDb } from '../storage/record/database.js';
import { locateRecord } from '../storage/record/embedded.js';
import { HotState } from '../storage/record/hot-state.js';
import { userInfo, hostname } from 'node:os';
import { appendAudit, type AuditEntry } from '../storage/record/audit-log.js';

/**
 * What `npm run keys` and `npm run accounts` share: their command-line
 * mistakes told in one line (exit 2), and the Redis and the record they
 * find the way `npm start` does.
 */

/** A mistake in the command line: one line, then exit 2; `--help` has the rest. */
export class UsageError extends Error {}

/** parseArgs, an unknown or malformed option turned into a usage error. */
export function parseCommandLine<T extends ParseArgsConfig>(config: T) {
  try {
    return parseArgs(config);
  } catch (error) {
    // Its first sentence names the option; the rest advises a `--` that `npm run x -- …` has already used up.
    throw new UsageError((error as Error).message.split(/\.\s/)[0]!.replace(/\.$/, ''));
  }
}

/**
 * The Redis of the gateway: one server found as `npm start` finds it (the same
 * rule, so the same Redis: the private one under DATA_DIR is started for the
 * length of the command when no gateway runs it), a Cluster or Sentinels as
 * named; each must answer. `release` stops a private one nothing else uses.
 */
export async function connectRedis(
  env: Record<string, string | undefined>,
): Promise<{ redis: Redis; release(): Promise<unknown> }> {
  const config = loadConfig(env);
  const configured = config.redis;
  if (configured.kind !== 'single') {
    await reachRedis(configured);
    return { redis: createRedis(configured, { maxRetriesPerRequest: 1 }), release: async () => undefined };
  }
  const located = await locateRedis(env, true, { dataDir: config.dataDir });
  // A Redis nobody named is worth a line on stderr (stdout carries the command's answer).
  if (located.warning) console.error(`switchyard: ${located.described}`);
  return { redis: createRedis(located.url, { maxRetriesPerRequest: 1 }), release: () => located.release() };
}

/** `host:port/db` of a PostgreSQL URL, never its user or password (a socket directory stands for the host). */
export function recordAddress(url: string): string {
  try {
    const parsed = new URL(url);
    const host = parsed.hostname || parsed.searchParams.get('host') || 'localhost';
    return `${host}:${parsed.port || 5432}${parsed.pathname.length > 1 ? parsed.pathname : ''}`;
  } catch {
    return 'an unparsable DATABASE_URL';
  }
}

/**
 * Checked once at start, before the slow work, when DATABASE_URL names a
 * server: one line saying what is wrong and what to do, not a driver's error
 * surfacing later from the migrations. Never the password.
 */
export async function reachRecord(url: string, timeoutMs = 5000): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    throw new Error(recordProblem(url, error as NodeJS.ErrnoException & { code?: string }, timeoutMs));
  } finally {
    await client.end().catch(() => undefined);
  }
}

function recordProblem(url: string, error: NodeJS.ErrnoException, timeoutMs: number): string {
  const where = recordAddress(url);
  const code = error.code ?? '';
  const user = (() => {
    try {
      return decodeURIComponent(new URL(url).username) || 'the default user';
    } catch {
      return 'the user';
    }
  })();
  if (code === 'ECONNREFUSED')
    return `cannot reach PostgreSQL at ${where} (DATABASE_URL): connection refused — is it running?`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return `cannot reach PostgreSQL at ${where} (DATABASE_URL): no such host — check the host in DATABASE_URL`;
  if (code === 'ENOENT') return `cannot reach PostgreSQL at ${where} (DATABASE_URL): no socket there — is it running?`;
  if (code === '28P01' || code === '28000')
    return `PostgreSQL at ${where} refused ${user} (${error.message}): check the user and password in DATABASE_URL`;
  if (code === '3D000')
    return (
      `PostgreSQL at ${where} has no such database (${error.message}): create it (createdb) or fix the name in ` +
      `DATABASE_URL`
    );
  if (/timeout/i.test(error.message) || code === 'ETIMEDOUT')
    return (
      `cannot reach PostgreSQL at ${where} (DATABASE_URL): no answer within ${timeoutMs / 1000} s — is it running, ` +
      `and open to this machine?`
    );
  return `cannot reach PostgreSQL at ${where} (DATABASE_URL): ${error.message}`;
}

export interface Stores {
  redis: Redis;
  record: RecordDb;
  /** Loads Redis from the record first if it lost its hot state. */
  hot: HotState;
  close(): Promise<void>;
}

/**
 * The gateway's Redis and its record: `DATABASE_URL`, else the embedded one
 * under `DATA_DIR` — through the socket of the gateway that serves it when one
 * runs, or opened here for the length of the command when none does.
 */
export async function connectStores(env: Record<string, string | undefined>): Promise<Stores> {
  const config = loadConfig(env);
  if (config.databaseUrl) await reachRecord(config.databaseUrl);
  const { redis, release } = await connectRedis(env);
  let located: Awaited<ReturnType<typeof locateRecord>> | undefined;
  try {
    located = await locateRecord(config.databaseUrl, config.dataDir);
    const record = await openRecord(located.url, { max: 2 });
    const hot = new HotState(redis, record);
    await hot.ensure();
    const embedded = located;
    return {
      redis,
      record,
      hot,
      async close() {
        await record.destroy().catch(() => undefined);
        await embedded.close();
        redis.disconnect();
        await release();
      },
    };
  } catch (error) {
    redis.disconnect();
    await located?.close();
    await release();
    throw error;
  }
}

/**
 * Appends a command line's change to the audit log, after the change: the actor is `cli`, and who ran it is the
 * operating system's user on this host (kept as the row's user agent; there is no address). A failed append fails
 * the command (exit 1, the change made and said so), never passes silently.
 */
export async function auditCli(record: RecordDb, entry: Omit<AuditEntry, 'actor' | 'ip' | 'userAgent'>): Promise<void> {
  let who = 'unknown';
  try {
    who = `${userInfo().username}@${hostname()}`;
  } catch {
    // No passwd entry for this uid (a container): the host alone.
    who = `uid ${process.getuid?.() ?? '?'}@${hostname()}`;
  }
  try {
    await appendAudit(record, {
      ...entry,
      actor: 'cli',
      userAgent: `switchyard-cli ${process.argv[1]?.split('/').pop() ?? ''} (${who})`,
    });
  } catch (error) {
    throw new Error(
      `the change was made, but the audit log could not record it (${entry.action}${entry.target ? ` ${entry.target}` : ''}): ${(error as Error).message}`,
    );
  }
}

/**
 * Runs a CLI's main and exits with its code: 2 and one line for a usage error, 1 and one line for any other failure.
 */
export function runCli(name: string, main: () => Promise<number>): void {
  main().then(
    (code) => process.exit(code),
    (error: Error) => {
      const usage = error instanceof UsageError;
      console.error(`switchyard ${name}: ${error.message}${usage ? ' (see --help)' : ''}`);
      process.exit(usage ? 2 : 1);
    },
  );
}
