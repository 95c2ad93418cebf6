import type { Socket } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';

/**
 * A Redis connection for the gateway. `maxRetriesPerRequest: null` is what
 * BullMQ requires of the connections it blocks on; ioredis reconnects forever
 * with a capped backoff so a Redis restart heals by itself.
 */
export function createRedis(url: string, options: RedisOptions = {}): Redis {
  const redis = new Redis(url, {
    maxRetriesPerRequest: null,
    enableReadyCheck: true,
    retryStrategy: (times) => Math.min(times * 100, 2000),
    ...options,
  });
  // Every (re)connection gets a new socket.
  redis.on('connect', () => batchWrites((redis as unknown as { stream: Socket }).stream));
  return redis;
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
