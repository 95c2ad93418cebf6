import { Redis, type RedisOptions } from 'ioredis';

/**
 * A Redis connection for the gateway. `maxRetriesPerRequest: null` is what
 * BullMQ requires of the connections it blocks on; ioredis reconnects forever
 * with a capped backoff so a Redis restart heals by itself.
 */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: null,
    enableReadyCheck: true,
    retryStrategy: (times) => Math.min(times * 100, 2000),
    ...options,
  });
}
