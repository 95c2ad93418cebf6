import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import { reachRedis, redisAddresses, redisProtocol } from '../shared/redis.js';
import { processAlive } from '../storage/record/embedded-engine.js';

export interface LocateOptions {
  /** Where the private Redis lives: DATA_DIR (default ./.data). */
  dataDir?: string;
  /** The Redis a machine usually has, used only when no private one can run (default redis://127.0.0.1:6379). */
  defaultUrl?: string;
}

/** A short-lived connection that never retries: for a PING, a CLIENT LIST or a SHUTDOWN. */
function connection(url: string): Redis {
  const client = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
    protocol: redisProtocol,
  });
  client.on('error', () => undefined);
  return client;
}

async function answers(url: string): Promise<boolean> {
  const client = connection(url);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

/** How many connections other than the one asking a Redis holds (undefined: it does not answer). */
async function otherClients(url: string): Promise<number | undefined> {
  const client = connection(url);
  try {
    await client.connect();
    const list = (await client.call('client', 'list')) as string;
    return list.split('\n').filter((line) => line.trim() !== '').length - 1;
  } catch {
    return undefined;
  } finally {
    client.disconnect();
  }
}

/** A TCP port nobody listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

function hasRedisServer(env: Record<string, string | undefined>): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore', env }).status === 0;
}

function readPid(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

export interface RedisLocation {
  url: string;
  /**
   * How it was found: named by REDIS_URL; the private redis-server under
   * DATA_DIR, started by this process or found running; or the Redis at the
   * default address, used only when no private one can run.
   */
  source: 'REDIS_URL' | 'default' | 'private' | 'started';
  /** One sentence for the log: which Redis, and who started it. */
  described: string;
  /** The sentence is a warning: a Redis nobody named, which this gateway did not start. */
  warning?: boolean;
  /**
   * The private redis-server is stopped when no other connection uses it
   * (another gateway, worker or CLI of the same DATA_DIR keeps it running,
   * and the last of them stops it). Nothing for a Redis named or not started here.
   * Says what it did.
   */
  release(): Promise<'stopped' | 'kept' | 'not ours'>;
}

const notOurs = async () => 'not ours' as const;

/**
 * Finds the Redis the gateway should use, the one rule for `npm start` and
 * the CLIs, so both always find the same one:
 * 1. `REDIS_URL` when set (it must answer);
 * 2. else the private redis-server under DATA_DIR (`redis.url`) when it runs,
 *    whoever started it;
 * 3. else, with `start` and redis-server installed, a new private one there;
 * 4. else the Redis at the default address, said loudly, since nobody named it;
 * 5. else one line naming the ways out.
 * A Redis that happens to answer on 6379 (another project's, a container) is
 * never used quietly: its database 0 may hold someone else's keys.
 */
export async function locateRedis(
  env: Record<string, string | undefined>,
  start: boolean,
  options: LocateOptions = {},
): Promise<RedisLocation> {
  const dataDir = resolve(options.dataDir ?? '.data');
  const urlFile = resolve(dataDir, 'redis.url');
  const pidFile = resolve(dataDir, 'redis.pid');
  const defaultUrl = options.defaultUrl ?? 'redis://127.0.0.1:6379';
  if (env.REDIS_URL) {
    // Asked for by name: it must answer (a Redis still starting gets a few seconds), or the start ends here, in one
    // line.
    await reachRedis(env.REDIS_URL);
    return {
      url: env.REDIS_URL,
      source: 'REDIS_URL',
      described: `Redis at ${redisAddresses(env.REDIS_URL)} (REDIS_URL)`,
      release: notOurs,
    };
  }
  const release = async (url: string): Promise<'stopped' | 'kept'> => stopIfUnused(url, urlFile, pidFile);
  if (existsSync(urlFile)) {
    const url = readFileSync(urlFile, 'utf8').trim();
    const others = url ? await otherClients(url) : undefined;
    if (url && others !== undefined) {
      const pid = readPid(pidFile);
      const who =
        others > 0
          ? `already running and in use (${others} other connection${others === 1 ? '' : 's'}: another gateway or command of this DATA_DIR)`
          : 'left running by an earlier start';
      return {
        url,
        source: 'private',
        described: `Redis: the private redis-server under ${dataDir} at ${redisAddresses(url)}${pid ? ` (pid ${pid})` : ''}, ${who}; the last process using it stops it`,
        release: () => release(url),
      };
    }
  }
  if (start && hasRedisServer(env)) {
    mkdirSync(dataDir, { recursive: true });
    const port = await freePort();
    const result = spawnSync(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dataDir,
        '--appendonly',
        'yes',
        '--daemonize',
        'yes',
        '--pidfile',
        pidFile,
        '--logfile',
        resolve(dataDir, 'redis.log'),
      ],
      { stdio: 'inherit', env },
    );
    const url = `redis://127.0.0.1:${port}`;
    for (let i = 0; i < 50 && result.status === 0; i++) {
      if (await answers(url)) {
        writeFileSync(urlFile, `${url}\n`);
        const pid = readPid(pidFile);
        const elsewhere = (await answers(defaultUrl))
          ? ` (a Redis also answers at ${redisAddresses(defaultUrl)}: set REDIS_URL to use that one instead)`
          : '';
        return {
          url,
          source: 'started',
          described: `Redis: started a private redis-server under ${dataDir} at ${redisAddresses(url)}${pid ? ` (pid ${pid})` : ''}; it stops when this process stops, unless another still uses it${elsewhere}`,
          release: () => release(url),
        };
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  if (await answers(defaultUrl)) {
    return {
      url: defaultUrl,
      source: 'default',
      warning: true,
      described:
        `Redis: using the Redis that answers at ${redisAddresses(defaultUrl)} (its database 0), which no setting ` +
        `names and switchyard did not start` +
        `${start ? ' (redis-server is not installed, so no private one can run)' : ''}: set REDIS_URL to name the Redis to use`,
      release: notOurs,
    };
  }
  throw new Error(
    `No Redis answers at ${redisAddresses(defaultUrl)}${start ? ' and redis-server is not installed' : ''}: ` +
      ('set REDIS_URL to a running Redis, install redis-server (e.g. `apt-get install redis-server`), or run ' +
        '`docker compose up`.'),
  );
}

/**
 * Stops the private redis-server at `url` when nothing else is connected to
 * it. A connection still closing gets a moment to go: the caller's own
 * (BullMQ's, a worker process's) may not be gone the instant they closed.
 */
async function stopIfUnused(url: string, urlFile: string, pidFile: string): Promise<'stopped' | 'kept'> {
  for (let i = 0; i < 10; i++) {
    const others = await otherClients(url);
    if (others === undefined) return 'stopped';
    if (others === 0) break;
    if (i === 9) return 'kept';
    await new Promise((r) => setTimeout(r, 100));
  }
  const pid = readPid(pidFile);
  const client = connection(url);
  try {
    await client.connect();
    // The append-only file is written out first; the server closes the connection as it ends.
    await client.call('shutdown').catch(() => undefined);
  } catch {
    // gone already
  } finally {
    client.disconnect();
  }
  for (let i = 0; i < 50 && pid !== undefined && processAlive(pid); i++) await new Promise((r) => setTimeout(r, 50));
  if (!(await answers(url))) rmSync(urlFile, { force: true });
  return 'stopped';
}
