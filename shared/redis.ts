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

/** A Lua script registered as a command: its number of keys and its source. */
export interface ScriptDefinition {
  keys: number;
  lua: string;
}

/**
 * The connection with these scripts as commands (EVALSHA, falling back to
 * EVAL once after a Redis restart), each registered once per connection.
 * `T` names the commands with their argument and result types.
 */
export function withScripts<T extends Redis>(redis: Redis, scripts: Readonly<Record<string, ScriptDefinition>>): T {
  const commands = redis as unknown as Record<string, unknown>;
  for (const [name, script] of Object.entries(scripts)) {
    if (typeof commands[name] !== 'function') redis.defineCommand(name, { numberOfKeys: script.keys, lua: script.lua });
  }
  return redis as T;
}
