import type { Socket } from 'node:net';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisAddress, RedisTarget } from './config.js';

const reconnect = (times: number) => Math.min(times * 100, 2000);

/**
 * The RESP version every connection speaks: RESP3, ioredis 6's default. It
 * measured the same as RESP2 in client and Redis CPU for GETs, hashes, script
 * replies and pub/sub messages (`bench/resp-protocol.ts`), and end to end
 * within the noise of `npm run bench`; the gateway's replies read the same
 * under both (a script's `false` and nil are null). Needs Redis 6 or later
 * (HELLO), which BullMQ 6 needs anyway; a proxy that cannot speak RESP3 would
 * need this set to 2.
 */
export const redisProtocol: 2 | 3 = 3;

/**
 * A Redis connection for the gateway: one server, a Cluster, or the primary
 * Sentinels name. `maxRetriesPerRequest: null` is what BullMQ requires of the
 * connections it blocks on; ioredis reconnects forever with a capped backoff
 * so a Redis restart (or a failover) heals by itself.
 *
 * A Cluster is typed as a `Redis`: the gateway calls only commands both have,
 * keeps every script, MULTI and pipeline within one hash slot (see
 * `shared/redis-keys.ts`), and asks `isCluster` where the two differ (sharded pub/sub).
 */
export function createRedis(target: RedisTarget | string, options: RedisOptions = {}): Redis {
  const where: RedisTarget = typeof target === 'string' ? { kind: 'single', url: target } : target;
  const base: RedisOptions = {
    maxRetriesPerRequest: null,
    enableReadyCheck: true,
    retryStrategy: reconnect,
    protocol: redisProtocol,
    ...options,
  };
  if (where.kind === 'cluster') {
    const { password, username, tls } = urlOptions(where.url);
    const cluster = new Cluster(where.nodes, {
      redisOptions: { ...base, password, username, ...(tls ? { tls: {} } : {}) },
      clusterRetryStrategy: reconnect,
      // A failover moves slots: commands wait for the new owner rather than fail.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 300,
      retryDelayOnTryAgain: 100,
      // About 10 s of CLUSTERDOWN at 300 ms a try: a failover (node timeout + election) ends within it.
      maxRedirections: 32,
      slotsRefreshTimeout: 2000,
      shardedSubscribers: true,
      enableOfflineQueue: true,
    });
    cluster.on('+node', (node: Redis) =>
      node.on('connect', () => batchWrites((node as unknown as { stream: Socket }).stream)),
    );
    cluster.on('error', reportErrors());
    // Read by `isCluster`; a Cluster answers `duplicate()` with the same options, so BullMQ's own connections are
    // Clusters too.
    return cluster as unknown as Redis;
  }
  const redis =
    where.kind === 'sentinel'
      ? new Redis({
          ...base,
          ...urlOptions(where.url),
          sentinels: where.sentinels,
          name: where.name,
          sentinelRetryStrategy: reconnect,
          // A primary demoted by a failover answers READONLY: reconnect (asking the Sentinels again) and resend.
          reconnectOnError: (error) => (/READONLY/.test(error.message) ? 2 : false),
          // A failover whose old primary still answers (`SENTINEL FAILOVER`, a node drained): the Sentinels demote
          // it only some 10 s later, and every write it takes meanwhile is lost when it resyncs from the new one.
          // Each connection listens for the Sentinels' `+switch-master` and moves to the new primary at once.
          failoverDetector: true,
        })
      : new Redis(where.url, base);
  // Every (re)connection gets a new socket.
  redis.on('connect', () => batchWrites((redis as unknown as { stream: Socket }).stream));
  redis.on('error', reportErrors());
  return redis;
}

/** Where a target is, for messages: addresses only, never credentials. */
export function redisAddresses(target: RedisTarget | string): string {
  const where: RedisTarget = typeof target === 'string' ? { kind: 'single', url: target } : target;
  if (where.kind === 'cluster') return where.nodes.map(hostPort).join(', ');
  if (where.kind === 'sentinel') return where.sentinels.map(hostPort).join(', ');
  try {
    const parsed = new URL(where.url);
    return `${parsed.hostname || '127.0.0.1'}:${parsed.port || 6379}`;
  } catch {
    return 'an unparsable REDIS_URL';
  }
}

const hostPort = ({ host, port }: RedisAddress) => `${host.includes(':') ? `[${host}]` : host}:${port}`;

/** A reply that no retry changes: the server is there and refuses these credentials. */
const refusedCredentials = /^(WRONGPASS|NOAUTH)\b/;

/**
 * The refusal in a few words. A missing password reads differently by
 * protocol (RESP2's first command: "NOAUTH Authentication required."; RESP3's
 * HELLO: a paragraph on HELLO AUTH), so NOAUTH is told in one phrase.
 */
function credentialsProblem(reply: string): string {
  if (reply.startsWith('NOAUTH')) return 'NOAUTH: it requires a password and none was given';
  return reply.split('\n')[0]!.replace(/\.$/, '');
}

/**
 * Checked once at start by every entry point, before anything else uses Redis:
 * left to the connections themselves, an unreachable Redis shows only as
 * ioredis's endless reconnect errors and "max retries per request" failures.
 * A Redis still starting gets `attempts` tries `pauseMs` apart; credentials it
 * refuses end the wait at once. Throws one line naming the addresses and the
 * setting that gave them, never a password.
 */
export async function reachRedis(target: RedisTarget | string, { attempts = 10, pauseMs = 500 } = {}): Promise<void> {
  const where: RedisTarget = typeof target === 'string' ? { kind: 'single', url: target } : target;
  const addresses = redisAddresses(where);
  for (let attempt = 1; ; attempt++) {
    const problem = await probe(where);
    if (problem === undefined) return;
    if (refusedCredentials.test(problem)) {
      throw new Error(
        `Redis at ${addresses} refused the credentials (${credentialsProblem(problem)}): set the user and password in REDIS_URL, redis://USER:PASSWORD@host:port.`,
      );
    }
    if (where.kind === 'cluster' && /cluster support disabled/.test(problem)) {
      throw new Error(
        `Redis at ${addresses} is not a Cluster (cluster support disabled): name it in REDIS_URL alone (redis://host:port), without REDIS_CLUSTER_NODES or redis+cluster://.`,
      );
    }
    if (attempt >= attempts) break;
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
  if (where.kind === 'cluster')
    throw new Error(
      `cannot reach a Redis Cluster at ${addresses} (REDIS_CLUSTER_NODES, or a redis+cluster:// REDIS_URL): start it, or name nodes that run.`,
    );
  if (where.kind === 'sentinel')
    throw new Error(
      `cannot reach Redis through the Sentinels at ${addresses} (REDIS_SENTINELS) for the primary ` +
        `"${where.name}" (REDIS_SENTINEL_NAME): start them, or name Sentinels that run and the primary they ` +
        `monitor.`,
    );
  throw new Error(`cannot reach Redis at ${addresses} (REDIS_URL): start it, or point REDIS_URL at one that runs.`);
}

/** One PING over a connection that never retries; undefined when answered, else the first error it met. */
async function probe(where: RedisTarget): Promise<string | undefined> {
  const once: RedisOptions = {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
    protocol: redisProtocol,
  };
  const client: Redis | Cluster =
    where.kind === 'cluster'
      ? new Cluster(where.nodes, {
          lazyConnect: true,
          clusterRetryStrategy: () => null,
          redisOptions: { ...once, ...urlOptions(where.url) },
        })
      : where.kind === 'sentinel'
        ? new Redis({
            ...once,
            ...urlOptions(where.url),
            sentinels: where.sentinels,
            name: where.name,
            sentinelRetryStrategy: () => null,
          })
        : new Redis(where.url, once);
  // connect() rejects with a bare "Connection is closed."; the cause (refused, WRONGPASS, not a Cluster…) comes as an
  // event.
  let cause: string | undefined;
  const note = (error: Error) => (cause ??= error.message);
  client.on('error', note);
  client.on('node error', note);
  let timer: NodeJS.Timeout | undefined;
  // Something that takes the connection and never answers (a wrong port, a proxy) must not hold the start: 5 s a try.
  const late = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error('no answer within 5 s')), 5000)),
  );
  const answered = client.connect().then(() => client.ping());
  // Lost to the timer, it still settles (rejected by the disconnect below): nobody else awaits it.
  answered.catch(() => undefined);
  try {
    await Promise.race([answered, late]);
    return undefined;
  } catch (error) {
    return cause ?? (error as Error).message;
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/**
 * A connection's errors, one line per 5 s at most: while Redis is away (or a
 * Cluster shard fails over) a client raises dozens a second, and each request
 * that meets one answers for itself (a 503, a retried job).
 */
function reportErrors(): (error: Error) => void {
  let last = 0;
  let quiet = 0;
  return (error) => {
    const now = Date.now();
    if (now - last < 5000) {
      quiet++;
      return;
    }
    process.stderr.write(`redis: ${error.message}${quiet > 0 ? ` (${quiet} more since the last report)` : ''}\n`);
    last = now;
    quiet = 0;
  };
}

/** A connection to a Redis Cluster (sharded pub/sub, no MULTI or pipeline across slots). */
export function isCluster(redis: Redis): boolean {
  return (redis as unknown as { isCluster?: boolean }).isCluster === true;
}

/** Credentials, TLS and database from a `redis://` or `rediss://` URL (the address is taken elsewhere). */
function urlOptions(url: string): { password?: string; username?: string; db?: number; tls?: object } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return {};
  }
  const db = Number(parsed.pathname.slice(1));
  return {
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.pathname.length > 1 && Number.isInteger(db) ? { db } : {}),
    ...(parsed.protocol === 'rediss:' ? { tls: {} } : {}),
  };
}

const batched = new WeakSet<Socket>();

/**
 * Commands written in one turn of the event loop leave in one write: the
 * socket is corked at the turn's first command and uncorked once the turn's
 * I/O callbacks and their promise continuations have run (`setImmediate`).
 * Under load that is dozens of commands (enqueues, BullMQ's job moves,
 * publishes, billing scripts) per system call instead of one each; a lone
 * command waits only for the end of the turn it was issued in.
 */
function batchWrites(socket: Socket): void {
  if (batched.has(socket) || typeof socket.cork !== 'function') return;
  batched.add(socket);
  let corked = false;
  const uncork = () => {
    corked = false;
    socket.uncork();
  };
  const write = socket.write;
  socket.write = function (this: Socket, ...args: Parameters<Socket['write']>) {
    if (!corked) {
      corked = true;
      socket.cork();
      setImmediate(uncork);
    }
    return write.apply(this, args);
  } as Socket['write'];
}

type Pipeline = ReturnType<Redis['pipeline']>;

/**
 * Commands sent together: issued one after another in the same turn, so the
 * connection's write batching (`batchWrites`) sends them in one write, and
 * Redis runs them in order. `exec` answers as a pipeline does, `[error,
 * result]` per command in order. Not an ioredis pipeline: its constructor
 * copies every script defined on the connection (BullMQ's and the gateway's)
 * into each pipeline, which cost more CPU than the commands it sent. On a
 * Cluster each command goes to its own shard (a pipeline may not span shards):
 * commands to one shard keep their order; across shards there is none.
 */
export function inOneWrite(redis: Redis): Pipeline {
  const calls: Array<() => Promise<unknown>> = [];
  const commands = redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const batch: Pipeline = new Proxy({} as Pipeline, {
    get(_target, name: string) {
      if (name === 'exec') {
        return () =>
          Promise.all(
            calls.map((call) =>
              call().then(
                (result) => [null, result] as [null, unknown],
                (error: Error) => [error, null] as [Error, null],
              ),
            ),
          );
      }
      if (name === 'then') return undefined;
      return (...args: unknown[]) => {
        calls.push(() => commands[name]!(...args));
        return batch;
      };
    },
  });
  return batch;
}
