import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Redis } from 'ioredis';
import { loadConfig } from '../shared/config.js';
import { createRedis, reachRedis } from '../shared/redis.js';
import { locateRedis } from './local-redis.js';
import { openRecord, type RecordDb } from '../storage/record/database.js';
import { locateRecord } from '../storage/record/embedded.js';
import { HotState } from '../storage/record/hot-state.js';

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

/** The Redis of the gateway: one server as `npm start` finds it (never starting one), a Cluster or Sentinels as named; each must answer. */
export async function connectRedis(env: Record<string, string | undefined>): Promise<Redis> {
  const configured = loadConfig(env).redis;
  const target = configured.kind === 'single' ? (await locateRedis(env, false)).url : configured;
  if (typeof target !== 'string') await reachRedis(target);
  return createRedis(target, { maxRetriesPerRequest: 1 });
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
  const redis = await connectRedis(env);
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
      },
    };
  } catch (error) {
    redis.disconnect();
    await located?.close();
    throw error;
  }
}

/** Runs a CLI's main and exits with its code: 2 and one line for a usage error, 1 and one line for any other failure. */
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
