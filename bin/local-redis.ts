import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import { reachRedis, redisProtocol } from '../shared/redis.js';

export interface LocateOptions {
  /** Where the private Redis lives (default ./.data). */
  dataDir?: string;
  defaultUrl?: string;
}

async function answers(url: string): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000, protocol: redisProtocol });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
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

export interface RedisLocation {
  url: string;
  /** How it was found, for the start-up message. */
  source: 'REDIS_URL' | 'default' | 'private' | 'started';
}

/**
 * Finds the Redis the gateway should use: `REDIS_URL` when set; else the
 * default local one; else a private one under ./.data/ (started here when
 * `start` is true and redis-server is installed). The keys CLI calls the same
 * function, so it finds the same Redis `npm start` uses.
 */
export async function locateRedis(
  env: Record<string, string | undefined>,
  start: boolean,
  options: LocateOptions = {},
): Promise<RedisLocation> {
  const dataDir = options.dataDir ?? resolve(process.cwd(), '.data');
  const urlFile = resolve(dataDir, 'redis.url');
  const defaultUrl = options.defaultUrl ?? 'redis://127.0.0.1:6379';
  if (env.REDIS_URL) {
    // Asked for by name: it must answer (a Redis still starting gets a few seconds), or the start ends here, in one line.
    await reachRedis(env.REDIS_URL);
    return { url: env.REDIS_URL, source: 'REDIS_URL' };
  }
  if (await answers(defaultUrl)) return { url: defaultUrl, source: 'default' };
  if (existsSync(urlFile)) {
    const url = readFileSync(urlFile, 'utf8').trim();
    if (url && (await answers(url))) return { url, source: 'private' };
  }
  if (start && hasRedisServer(env)) {
    mkdirSync(dataDir, { recursive: true });
    const port = await freePort();
    const result = spawnSync(
      'redis-server',
      [
        '--port', String(port), '--bind', '127.0.0.1', '--dir', dataDir, '--appendonly', 'yes',
        '--daemonize', 'yes', '--pidfile', resolve(dataDir, 'redis.pid'), '--logfile', resolve(dataDir, 'redis.log'),
      ],
      { stdio: 'inherit', env },
    );
    const url = `redis://127.0.0.1:${port}`;
    for (let i = 0; i < 50 && result.status === 0; i++) {
      if (await answers(url)) {
        writeFileSync(urlFile, `${url}\n`);
        return { url, source: 'started' };
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(
    `No Redis answers at ${defaultUrl}${start ? ' and redis-server is not installed' : ''}: ` +
      'set REDIS_URL to a running Redis, install redis-server (e.g. `apt-get install redis-server`), or run `docker compose up`.',
  );
}
