import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/**
 * The one way the gateway calls a Redis script.
 *
 * Every script is a `.lua` file in the `lua/` folder of the module that owns it (the build copies them into dist/),
 * read once, at the module's first import. A module declares each script once with `redisScript()`: the files it is
 * made of (a shared library first, if any), the names of its keys and of its arguments in the order the Lua reads them
 * as `KEYS[n]` and `ARGV[n]`. Callers pass one object naming every value; this file alone turns it into KEYS and
 * ARGV, so no caller counts positions and a script's signature is written in one place, beside its name.
 *
 * A script is registered as a command on each connection the first time it is called there (EVALSHA, falling back to
 * EVAL once after a Redis restart: ioredis's `defineCommand`). A value may be a list where a script takes a variable
 * number of keys or arguments: it is spread in its place.
 */

/** A key or an argument: a Buffer is sent as its bytes (a stored answer, compressed or not). */
export type ScriptValue = string | number | Buffer;
type Value = ScriptValue | readonly ScriptValue[];

export type ScriptInput<K extends string, A extends string> = { readonly [P in K]: string | readonly string[] } & {
  readonly [P in A]: Value;
};

export interface RedisScript<K extends string, A extends string, R> {
  /** Runs the script on this connection with its keys and arguments named. */
  (redis: Redis | Cluster, input: ScriptInput<K, A>): Promise<R>;
  /** The command name it is registered under. */
  readonly command: string;
  /** Its Lua, library included. */
  readonly lua: string;
  readonly keys: readonly K[];
  readonly args: readonly A[];
  /** The positional form (`numkeys, ...KEYS, ...ARGV`) of a call: what reaches Redis. */
  positional(input: ScriptInput<K, A>): ScriptValue[];
}

export interface ScriptSpec<K extends string, A extends string, R> {
  /** Unique among the gateway's scripts: the command's name. */
  name: string;
  /** Its source: the `.lua` files read and joined in order (a library first). */
  files: readonly URL[];
  keys: readonly K[];
  args: readonly A[];
  /** What its reply means (Redis answers a Lua table as an array, a number as an integer, a string as a string). */
  reply: (raw: never) => R;
}

/** The reply as Redis sends it, typed: for scripts whose answer needs no reading. */
export const as =
  <R>() =>
  (raw: never) =>
    raw as R;

/** The `.lua` files in the `lua/` folder beside a module (`import.meta.url`), by name. */
export function luaFiles(moduleUrl: string, ...names: string[]): URL[] {
  return names.map((name) => new URL(`./lua/${name}.lua`, moduleUrl));
}

const registered = new Map<string, RedisScript<string, string, unknown>>();

/** Every script declared so far (by the modules imported): what a test checks the `.lua` files against. */
export function declaredScripts(): ReadonlyArray<RedisScript<string, string, unknown>> {
  return [...registered.values()];
}

/** Declares a script: its files, its keys' and arguments' names, and how its reply is read. */
export function redisScript<const K extends string, const A extends string, R>(
  spec: ScriptSpec<K, A, R>,
): RedisScript<K, A, R> {
  if (registered.has(spec.name)) throw new Error(`redis script ${spec.name} declared twice`);
  const lua = spec.files.map((file) => readFileSync(file, 'utf8')).join('\n');
  const command = `sy_${spec.name}`;
  const flat = (names: readonly string[], input: Record<string, Value>): ScriptValue[] => {
    const out: ScriptValue[] = [];
    for (const name of names) {
      const value = input[name];
      if (value === undefined) throw new TypeError(`redis script ${spec.name}: no value for ${name}`);
      if (Array.isArray(value)) out.push(...(value as readonly ScriptValue[]));
      else out.push(value as ScriptValue);
    }
    return out;
  };
  const positional = (input: ScriptInput<K, A>): ScriptValue[] => {
    const values = input as unknown as Record<string, Value>;
    const keys = flat(spec.keys, values);
    return [keys.length, ...keys, ...flat(spec.args, values)];
  };
  const run = ((redis: Redis | Cluster, input: ScriptInput<K, A>) => {
    const commands = redis as unknown as Record<string, (...args: ScriptValue[]) => Promise<never>>;
    // Without a fixed number of keys, ioredis takes it as the first argument: one definition serves any count.
    if (typeof commands[command] !== 'function') redis.defineCommand(command, { lua });
    return commands[command]!(...positional(input)).then(spec.reply);
  }) as RedisScript<K, A, R>;
  const script = Object.assign(run, { command, lua, keys: spec.keys, args: spec.args, positional });
  registered.set(spec.name, script as unknown as RedisScript<string, string, unknown>);
  return script;
}
