import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { Redis } from 'ioredis';
import { loadConfig } from '../shared/config.js';
import { createRedis, reachRedis } from '../shared/redis.js';
import { locateRedis } from './local-redis.js';

/**
 * What `npm run keys` and `npm run accounts` share: their command-line
 * mistakes told in one line (exit 2), and the Redis they find the way
 * `npm start` does.
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
