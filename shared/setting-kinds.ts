import { isIP } from 'node:net';
import { z } from 'zod';
import { workerCapabilities, type QueueName, type WorkerCapability } from './queues.js';

/**
 * The kinds of setting the gateway's environment holds (an integer in a
 * range, a choice, a URL, a list…): each knows its type as a user reads it,
 * its default, and the zod schema that reads a raw value. `config.ts` builds
 * the table of every variable from these.
 */

/**
 * A variable's default as docs/configuration.md's table prints it (`formatDefault`):
 * - `value`: a plain value, what the schema gives for an unset variable (`8080`, `info`, `off`; "empty");
 * - `perQueue`: one number per queue;
 * - `unset`: no value, which means what `note` says;
 * - `derived`: follows from something else (`text`); `instances` gives it for the names docs/configuration.md lists.
 */
export type SettingDefault =
  | { kind: 'value'; value: string | number | boolean | readonly string[] }
  | { kind: 'perQueue'; value: Readonly<Record<QueueName, number>> }
  | { kind: 'unset'; note?: string }
  | { kind: 'derived'; text: string; instances?: Readonly<Record<string, string>> };

/** One variable of the environment, or a patterned family of them. */
export interface EnvironmentVariable {
  /** As docs/configuration.md's table writes it: `PORT`, `<VENDOR>_RPM`, `WORKER_CONCURRENCY_<QUEUE>`. */
  name: string;
  /** A family's members (group 1: the vendor prefix or the queue). Absent: the variable is `name` itself. */
  pattern?: RegExp;
  /** What a value must be: a bad one fails the start with `<NAME> must be <type>, got "<value>"`. */
  type: string;
  default: SettingDefault;
  /** One line, as docs/configuration.md's table has it. */
  description: string;
  /** Reads the raw value (undefined when unset; empty or blank counts as unset). */
  schema: z.ZodType;
}

export interface Kind<T> {
  type: string;
  default: SettingDefault;
  schema: z.ZodType<T>;
}

export interface Setting<T> extends Kind<T> {
  description: string;
}

export interface Family<T> extends Setting<T> {
  name: string;
  pattern: RegExp;
}

/** Unset, empty or blank: the default applies. */
export const unsetIfBlank = (raw: unknown) => (typeof raw === 'string' && raw.trim() === '' ? undefined : raw);

/** Params of an issue whose message quotes the offending part itself: no `got "…"` is added. */
export const quotesValue = { quotesValue: true };

/** The schema's own answer for an unset variable, so that the documented default cannot drift from it. */
export const plainDefault = (schema: z.ZodType): SettingDefault => ({
  kind: 'value',
  value: schema.parse(undefined) as string | number | boolean | string[],
});

export const integerType = (min: number, max?: number) =>
  max === undefined ? `an integer ≥ ${min}` : `an integer from ${min} to ${max}`;

export function integerSchema(min: number, max?: number) {
  const error = `must be ${integerType(min, max)}`;
  const number = z.coerce.number({ error }).int({ error }).min(min, { error });
  return max === undefined ? number : number.max(max, { error });
}

export function integer(min: number, fallback: number, max?: number): Kind<number> {
  const schema = z.preprocess(unsetIfBlank, integerSchema(min, max).default(fallback));
  return { type: integerType(min, max), default: plainDefault(schema), schema };
}

export function optionalInteger(min: number, fallback: SettingDefault, max?: number): Kind<number | undefined> {
  return {
    type: integerType(min, max),
    default: fallback,
    schema: z.preprocess(unsetIfBlank, integerSchema(min, max).optional()),
  };
}

/** A non-negative amount of USD, as written (`5`, `0.25`); kept to the micro-dollar by whoever converts it. */
export function usdAmount(fallback: number, max: number): Kind<number> {
  const error = `must be an amount of USD from 0 to ${max}`;
  const schema = z.preprocess(
    unsetIfBlank,
    z.coerce.number({ error }).finite({ error }).min(0, { error }).max(max, { error }).default(fallback),
  );
  return { type: `USD from 0 to ${max}`, default: plainDefault(schema), schema };
}

/**
 * A non-negative multiplier written as a decimal (`0.5`, `2`, `1.25`): kept
 * as the text, so that whoever reads it takes it as an exact ratio of
 * integers (`0.5` is 5/10), never through a float.
 */
export function decimalMultiplier(fallback: string): Kind<string> {
  const error = 'must be a decimal number from 0 to 1000 with at most 6 decimal places';
  const schema = z.preprocess(
    unsetIfBlank,
    z
      .string()
      .trim()
      .regex(/^\d{1,4}(\.\d{1,6})?$/, { error })
      .refine((value) => Number(value) <= 1000, { error })
      .default(fallback),
  );
  return { type: 'a decimal from 0 to 1000', default: plainDefault(schema), schema };
}

/** A number from 0 to 1 (a sampling ratio). */
export function fraction(fallback: number): Kind<number> {
  const error = 'must be a number from 0 to 1';
  const schema = z.preprocess(
    unsetIfBlank,
    z.coerce.number({ error }).finite({ error }).min(0, { error }).max(1, { error }).default(fallback),
  );
  return { type: 'a number from 0 to 1', default: plainDefault(schema), schema };
}

export function text(fallback: string): Kind<string> {
  const schema = z.preprocess(unsetIfBlank, z.string().default(fallback));
  return { type: 'a string', default: plainDefault(schema), schema };
}

export function optionalText(fallback: SettingDefault = { kind: 'unset' }): Kind<string | undefined> {
  return { type: 'a string', default: fallback, schema: z.preprocess(unsetIfBlank, z.string().optional()) };
}

/** One of `values` (or an alias of one), in any case. */
export function oneOf<T extends string>(values: readonly T[], aliases: Readonly<Record<string, T>> = {}) {
  const type = `${values.slice(0, -1).join(', ')} or ${values.at(-1)}`;
  const schema = z
    .string()
    .trim()
    .toLowerCase()
    .transform((value, ctx) => {
      const found = values.find((v) => v === value) ?? aliases[value];
      if (found !== undefined) return found;
      ctx.addIssue({ code: 'custom', message: `must be ${type}` });
      return z.NEVER;
    });
  return { type, schema };
}

export function choice<const T extends string>(
  values: readonly T[],
  fallback: T,
  aliases?: Readonly<Record<string, T>>,
): Kind<T> {
  const { type, schema: value } = oneOf(values, aliases);
  const schema = z.preprocess(
    unsetIfBlank,
    value.optional().transform((chosen) => chosen ?? fallback),
  ) as z.ZodType<T>;
  return { type, default: plainDefault(schema), schema };
}

export const switchAliases = { true: 'on', '1': 'on', yes: 'on', false: 'off', '0': 'off', no: 'off' } as const;
export const onOff = () => oneOf(['on', 'off'] as const, switchAliases);

export function flag(fallback: boolean): Kind<boolean> {
  const schema = z.preprocess(
    unsetIfBlank,
    onOff()
      .schema.transform((value) => value === 'on')
      .default(fallback),
  );
  return { type: 'on or off', default: { kind: 'value', value: schema.parse(undefined) }, schema };
}

export function optionalFlag(fallback: SettingDefault): Kind<boolean | undefined> {
  return {
    type: 'on or off',
    default: fallback,
    schema: z.preprocess(
      unsetIfBlank,
      onOff()
        .schema.transform((value) => value === 'on')
        .optional(),
    ),
  };
}

export function isHttpUrl(raw: string): boolean {
  try {
    const { protocol } = new URL(raw);
    return protocol === 'http:' || protocol === 'https:';
  } catch {
    return false;
  }
}

/** An absolute http(s) URL; `trimSlashes` drops trailing slashes (base URLs get paths appended). */
export function httpUrl(fallback: SettingDefault, trimSlashes: boolean): Kind<string | undefined> {
  const url = z
    .string()
    .trim()
    .refine(isHttpUrl, { error: 'must be an absolute http(s) URL' })
    .transform((value) => (trimSlashes ? value.replace(/\/+$/, '') : value));
  return { type: 'an absolute http(s) URL', default: fallback, schema: z.preprocess(unsetIfBlank, url.optional()) };
}

export const commaList = (raw: string) =>
  raw
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean);

/** A comma-separated list of some of `values` (blank or unset: `fallback`). */
export function nameList<const T extends string>(values: readonly T[], fallback: readonly T[]): Kind<T[]> {
  const list = z.string().transform((raw, ctx) => {
    const names = commaList(raw.toLowerCase());
    for (const name of names) {
      if (!(values as readonly string[]).includes(name)) {
        ctx.addIssue({ code: 'custom', message: `names "${name}"; known: ${values.join(', ')}`, params: quotesValue });
        return z.NEVER;
      }
    }
    return [...new Set(names)] as T[];
  });
  const schema = z.preprocess(unsetIfBlank, list.default([...fallback]));
  return { type: `a comma-separated list of ${values.join(', ')}`, default: plainDefault(schema), schema };
}

/** A comma-separated list of lower-case names (blank or unset: `fallback`). */
export function wordList(fallback: readonly string[]): Kind<string[]> {
  const schema = z.preprocess(
    unsetIfBlank,
    z
      .string()
      .transform((raw) => commaList(raw.toLowerCase()))
      .default([...fallback]),
  );
  return { type: 'a comma-separated list of names', default: plainDefault(schema), schema };
}

/**
 * A comma-separated list of whole percentages from 1 to 100, each above the one before (`50,80,100`); blank or unset:
 * `fallback`. Written as given, so a typo (`80,50`, `150`) fails the start rather than being sorted or dropped.
 */
export function percentList(fallback: readonly number[]): Kind<number[]> {
  const error = 'must be whole percentages from 1 to 100 in ascending order, comma-separated (such as 50,80,100)';
  const list = z.string().transform((raw, ctx) => {
    const entries = commaList(raw);
    const values = entries.map((entry) => (/^\d{1,3}$/.test(entry) ? Number(entry) : Number.NaN));
    if (
      values.some(
        (value, i) => !Number.isInteger(value) || value < 1 || value > 100 || (i > 0 && value <= values[i - 1]!),
      )
    ) {
      ctx.addIssue({ code: 'custom', message: error });
      return z.NEVER;
    }
    return values;
  });
  const schema = z.preprocess(unsetIfBlank, list.default([...fallback]));
  return {
    type: 'ascending percentages from 1 to 100, comma-separated',
    default: { kind: 'derived', text: `\`${fallback.join(',')}\`` },
    schema,
  };
}

export function keyList(): Kind<string[]> {
  return {
    type: 'comma-separated keys',
    default: { kind: 'unset' },
    schema: z.preprocess(unsetIfBlank, z.string().transform(commaList).default([])),
  };
}

/**
 * What a worker process serves: capabilities' queues, and `mcp` (the upstream MCP servers' tool calls, a queue per
 * server); unset, all of them.
 */
export function queueList(): Kind<WorkerCapability[]> {
  const known: readonly string[] = workerCapabilities;
  const list = z.string().transform((raw, ctx) => {
    const queues = commaList(raw);
    for (const queue of queues) {
      if (!known.includes(queue)) {
        ctx.addIssue({
          code: 'custom',
          message: `names an unknown queue "${queue}"; known: ${workerCapabilities.join(', ')}`,
          params: quotesValue,
        });
        return z.NEVER;
      }
    }
    return queues as WorkerCapability[];
  });
  const schema = z.preprocess(unsetIfBlank, list.default([...workerCapabilities]));
  return { type: `a comma-separated list of ${workerCapabilities.join(', ')}`, default: plainDefault(schema), schema };
}

/** `host:port` pairs, comma-separated (Redis Cluster seed nodes, Sentinels). */
export function addressList(): Kind<Array<{ host: string; port: number }> | undefined> {
  const list = z.string().transform((raw, ctx) => {
    const addresses: Array<{ host: string; port: number }> = [];
    for (const entry of commaList(raw)) {
      const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$/.exec(entry);
      const port = match ? Number(match[2]) : 0;
      if (!match || port < 1 || port > 65_535) {
        ctx.addIssue({ code: 'custom', message: `holds "${entry}", which is not host:port`, params: quotesValue });
        return z.NEVER;
      }
      addresses.push({ host: match[1]!.replace(/^\[(.*)\]$/, '$1'), port });
    }
    return addresses;
  });
  return {
    type: 'comma-separated host:port pairs',
    default: { kind: 'unset' },
    schema: z.preprocess(unsetIfBlank, list.optional()),
  };
}

/** `name=model` pairs, comma-separated: names a client may send, each for a catalog model id. */
export function aliasList(): Kind<Array<[string, string]>> {
  const list = z.string().transform((raw, ctx) => {
    const pairs: Array<[string, string]> = [];
    for (const entry of commaList(raw)) {
      const match = /^([^=\s]+)=([^=\s]+)$/.exec(entry);
      if (!match) {
        ctx.addIssue({ code: 'custom', message: `holds "${entry}", which is not name=model`, params: quotesValue });
        return z.NEVER;
      }
      pairs.push([match[1]!, match[2]!]);
    }
    return pairs;
  });
  return {
    type: 'comma-separated name=model pairs',
    default: { kind: 'unset' },
    schema: z.preprocess(unsetIfBlank, list.default([])),
  };
}

/** Host names, `*.` wildcards, IP addresses and CIDR ranges; a range that cannot be a range fails at startup. */
export function hostList(): Kind<string[]> {
  const list = z.string().transform((raw, ctx) => {
    const entries = commaList(raw.toLowerCase());
    for (const entry of entries) {
      const [network = '', bits, extra] = entry.replace(/^\[(.*?)\]/, '$1').split('/');
      const family = isIP(network);
      const max = family === 6 ? 128 : 32;
      const validName = family !== 0 || /^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(network);
      if (
        !validName ||
        extra !== undefined ||
        (bits !== undefined && (family === 0 || !/^\d+$/.test(bits) || Number(bits) > max))
      ) {
        ctx.addIssue({
          code: 'custom',
          message: `holds "${entry}", which is neither a host name (no port), an IP address nor a CIDR range`,
          params: quotesValue,
        });
        return z.NEVER;
      }
    }
    return entries;
  });
  const schema = z.preprocess(unsetIfBlank, list.default([]));
  return { type: 'comma-separated host names, IP addresses or CIDR ranges', default: plainDefault(schema), schema };
}

export const setting = <T>(kind: Kind<T>, description: string): Setting<T> => ({ ...kind, description });
export const family = <T>(name: string, pattern: RegExp, kind: Kind<T>, description: string): Family<T> => ({
  name,
  pattern,
  ...kind,
  description,
});

/** Comma-separated values kept as written (an identity provider's group names are case-sensitive). */
export function textList(type: string): Kind<string[]> {
  const schema = z.preprocess(unsetIfBlank, z.string().transform(commaList).default([]));
  return { type, default: plainDefault(schema), schema };
}

/** The roles a group may give in a team (the record's `team_members.role`). */
export const teamMapRoles = ['owner', 'member', 'viewer'] as const;
export type TeamMapRole = (typeof teamMapRoles)[number];

/** One entry of OIDC_TEAM_MAP: people in `group` at the provider are `role` in the team named `team`. */
export interface TeamMapEntry {
  group: string;
  team: string;
  role: TeamMapRole;
}

/**
 * `group=Team name:role` entries, comma-separated (`eng=Engineering:member,eng-leads=Engineering:owner`). The role
 * is after the last colon, so a team's name may hold colons but no comma; a group's name holds neither `=` nor a
 * comma. A bad entry fails the start, quoted.
 */
export function teamMap(): Kind<TeamMapEntry[]> {
  const list = z.string().transform((raw, ctx) => {
    const entries: TeamMapEntry[] = [];
    for (const entry of commaList(raw)) {
      const match = /^([^=]+)=(.+):([^:]*)$/.exec(entry);
      const group = match?.[1]!.trim() ?? '';
      const team = match?.[2]!.trim() ?? '';
      const role = match?.[3]!.trim().toLowerCase() ?? '';
      if (!match || group === '' || team === '' || !(teamMapRoles as readonly string[]).includes(role)) {
        ctx.addIssue({
          code: 'custom',
          message: `holds "${entry}", which is not group=Team name:role (role: ${teamMapRoles.join(', ')})`,
          params: quotesValue,
        });
        return z.NEVER;
      }
      entries.push({ group, team, role: role as TeamMapRole });
    }
    return entries;
  });
  const schema = z.preprocess(unsetIfBlank, list.default([]));
  return { type: 'comma-separated group=Team name:role entries', default: plainDefault(schema), schema };
}
