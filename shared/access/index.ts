import type { Redis } from 'ioredis';
import { defaultAccountId, parseServiceTiers, type KeyAccess } from '../accounts.js';
import { GatewayError } from '../errors.js';
import { parseBudgetText, type BudgetInForce } from '../money/budgets.js';
import { accountKey, accountsIndexKey, apiKeyHashesKey, apiKeyRecordKey } from '../redis-keys.js';
import { as, luaFiles, redisScript } from '../redis-script.js';
import { parseToolPatterns } from '../mcp/tool-rules.js';

/**
 * What a key may do now: the one rule, read from the directory in Redis (`lua/key-access.lua`), by every check of a
 * key. At the door the api reads it by the presented secret's hash (api/accounts/key-store.ts, cached per api and
 * dropped on `accessChangedChannel`); wherever admitted work goes on (each request of a running batch as it is
 * reserved, each response of an open Realtime session) the worker reads it again by the key's id (`CurrentAccess`),
 * so a key revoked, an account disabled or deleted, a key's limit, models or expiry changed, a team's budget or a
 * member's cap lowered, takes effect at that work's next step: within a second of the change, since every change
 * publishes on `accessChangedChannel` and `CurrentAccess` keeps nothing longer than `accessFreshMs`.
 */

/** The `.lua` that makes the default account where it is missing: put before the scripts that may find it so. */
export const defaultAccountLua = luaFiles(import.meta.url, 'default-account')[0]!;

/**
 * What admission needs of a key, by its secret's hash or its id: null for an unknown or revoked key or one of a deleted
 * account, 0 for a key of a disabled one, else its fields and its account's (key-access.lua names them).
 */
export const keyAccessScript = redisScript({
  name: 'api_key_access',
  files: [defaultAccountLua, ...luaFiles(import.meta.url, 'key-access')],
  keys: ['hashes', 'defaultAccount', 'index'],
  args: ['hash', 'keyRecordPrefix', 'accountPrefix', 'defaultAccountId', 'now', 'keyId'],
  reply: as<string[] | number | null>(),
});

// ---- the directory's fields: '' means none, as the billing scripts read them ----

export const optionalNumber = (text: string | undefined): number | undefined =>
  text === undefined || text === '' ? undefined : Number(text);
/** A key's default cache TTL as its access carries it: left out where it sets none ('') or 0 (no default either). */
export const cacheTtlOf = (text: string | null | undefined): number | undefined =>
  optionalNumber(text ?? undefined) || undefined;

/** A key's model allow-list from its JSON; one that cannot be read allows nothing rather than everything. */
export function parseModels(text: string | undefined): readonly string[] | undefined {
  if (text === undefined || text === '') return undefined;
  try {
    const models: unknown = JSON.parse(text);
    if (Array.isArray(models) && models.every((m) => typeof m === 'string')) return models;
  } catch {
    // fall through
  }
  return [];
}

/**
 * The budgets that hold a key's requests, from the directory's fields ('<micros> <period>', '' none): the team's, the
 * key's, its maker's cap.
 */
function budgetsOf(
  keyId: string,
  team: string | undefined,
  key: string | undefined,
  maker: string | undefined,
  cap: string | undefined,
): BudgetInForce[] {
  const budgets: BudgetInForce[] = [];
  const teamBudget = parseBudgetText(team);
  if (teamBudget) budgets.push({ scope: 'team', ...teamBudget });
  const keyBudget = parseBudgetText(key);
  if (keyBudget) budgets.push({ scope: 'key', ownerId: keyId, ...keyBudget });
  const makerCap = parseBudgetText(cap);
  if (makerCap && maker) budgets.push({ scope: 'member', ownerId: maker, ...makerCap });
  return budgets;
}

/**
 * A key's access, 'disabled' (its account is), or undefined (unknown, revoked, its account deleted); expiry is the
 * caller's to check.
 */
export async function readKeyAccess(
  redis: Redis,
  which: { hash: string } | { keyId: string },
): Promise<KeyAccess | 'disabled' | undefined> {
  const row = await keyAccessScript(redis, {
    hashes: apiKeyHashesKey,
    defaultAccount: accountKey(defaultAccountId),
    index: accountsIndexKey,
    hash: 'hash' in which ? which.hash : '',
    keyId: 'keyId' in which ? which.keyId : '',
    keyRecordPrefix: apiKeyRecordKey(''),
    accountPrefix: accountKey(''),
    defaultAccountId,
    now: Math.floor(Date.now() / 1000),
  });
  if (typeof row === 'number') return 'disabled';
  if (!row) return undefined;
  const [
    keyId,
    accountId,
    limit,
    rpm,
    tpm,
    models,
    expires,
    weight,
    tiers,
    cacheTtl,
    cacheMaxTtl,
    keyBudget,
    teamBudget,
    makerCap,
    accountName,
    maker,
    mcpTools,
    teamMcpTools,
  ] = row;
  const budgets = budgetsOf(keyId!, teamBudget, keyBudget, maker, makerCap);
  const optional: Omit<KeyAccess, 'keyId' | 'accountId'> = {
    weight: optionalNumber(weight),
    // The account's granted tiers ('': none of its own, the configured default).
    tiers: parseServiceTiers(tiers),
    // The account's cache cap ('': none of its own; '0': caching forbidden, kept as 0).
    cacheMaxTtlS: optionalNumber(cacheMaxTtl),
    cacheTtlS: cacheTtlOf(cacheTtl),
    limitMicros: optionalNumber(limit),
    rpm: optionalNumber(rpm),
    tpm: optionalNumber(tpm),
    models: parseModels(models),
    expiresAt: optionalNumber(expires),
    mcpTools: parseToolPatterns(mcpTools),
    teamMcpTools: parseToolPatterns(teamMcpTools),
  };
  // Unset limits are left out rather than undefined, so an access reads (and compares) as what the key sets.
  const set = Object.entries(optional).filter(([, value]) => value !== undefined);
  return {
    keyId: keyId!,
    accountId: accountId!,
    ...Object.fromEntries(set),
    ...(budgets.length > 0 ? { budgets, accountName: accountName ?? '' } : {}),
  };
}

/** What a key may do now, as admitted work reads it at each step. */
export type AccessNow = { access: KeyAccess } | { refused: AccessRefusal };
/**
 * Why admitted work of a key stops: the key revoked (or unknown), its account disabled (or deleted), the key expired.
 */
export type AccessRefusal = 'revoked' | 'disabled' | 'expired';

/** The longest a worker acts on what it read of a key without reading it again, whatever it heard. */
export const accessFreshMs = 500;

/** The refusal's words, as the client of a stopped session or a batch's failed request reads them. */
export function accessRefusalMessage(refusal: AccessRefusal): string {
  if (refusal === 'disabled')
    return 'The account this API key belongs to is disabled. Ask an administrator to enable it.';
  if (refusal === 'expired') return 'The API key expired. Create a new key or extend this one.';
  return (
    'The API key was revoked. Create keys in the console (/console), with `npm run keys -- create`, or with the ' +
    'admin API.'
  );
}

/** Whether the key may use the model now (an allow-list that names it, or none). */
export function mayUseModel(access: Pick<KeyAccess, 'models'>, model: string): boolean {
  return access.models === undefined || access.models.includes(model);
}

/** The 403 a key limited to other models gets, at the door or at a later step of its work. */
export function modelNotAllowed(model: string): GatewayError {
  return new GatewayError(403, `This API key may not use the model \`${model}\`.`, {
    type: 'invalid_request_error',
    code: 'model_not_allowed',
    param: 'model',
  });
}

/**
 * A worker's reading of keys' access: each key read at most once per `accessFreshMs`, dropped at once when a change
 * to it (a key id, or `account:<id>` for every key of an account) is heard on `accessChangedChannel`, when listeners
 * (an open Realtime session of the key) are told so they can stop or re-admit their next step.
 */
export class CurrentAccess {
  private readonly entries = new Map<string, { read: Promise<AccessNow>; at: number; accountId?: string }>();
  private readonly listeners = new Set<(message: string) => void>();
  /** Bumped on every change heard, so a read that raced one is not kept. */
  private generation = 0;

  constructor(
    private readonly redis: Redis,
    private readonly freshMs = accessFreshMs,
  ) {}

  /** What the key may do now. */
  of(keyId: string): Promise<AccessNow> {
    const now = Date.now();
    const hit = this.entries.get(keyId);
    if (hit && now - hit.at < this.freshMs) return hit.read;
    const generation = this.generation;
    const read = readKeyAccess(this.redis, { keyId }).then((found): AccessNow => {
      if (found === 'disabled') return { refused: 'disabled' };
      if (found === undefined) return { refused: 'revoked' };
      if (found.expiresAt !== undefined && found.expiresAt * 1000 <= Date.now()) return { refused: 'expired' };
      return { access: found };
    });
    const entry = { read, at: now } as { read: Promise<AccessNow>; at: number; accountId?: string };
    this.entries.set(keyId, entry);
    read.then(
      (verdict) => {
        if ('access' in verdict) entry.accountId = verdict.access.accountId;
        if (generation !== this.generation && this.entries.get(keyId) === entry) this.entries.delete(keyId);
      },
      () => {
        if (this.entries.get(keyId) === entry) this.entries.delete(keyId);
      },
    );
    // Nothing read is kept past its freshness: the map holds only keys in use.
    if (this.entries.size > 10_000) this.prune(now);
    return read;
  }

  /** A message of `accessChangedChannel`: what it names is read again next time, and the listeners are told. */
  changed(message: string): void {
    this.generation++;
    const accountId = message.startsWith('account:') ? message.slice('account:'.length) : undefined;
    if (accountId === undefined) this.entries.delete(message);
    else
      for (const [keyId, entry] of this.entries)
        if (entry.accountId === accountId || entry.accountId === undefined) this.entries.delete(keyId);
    for (const listener of this.listeners) listener(message);
  }

  /** Everything read again (the subscription was lost: changes may have been missed). */
  clear(): void {
    this.generation++;
    this.entries.clear();
    for (const listener of this.listeners) listener('*');
  }

  /** Told each change heard (a key id, `account:<id>`, or `*` for anything); returns the unsubscribe. */
  listen(listener: (message: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private prune(now: number): void {
    for (const [keyId, entry] of this.entries) if (now - entry.at >= this.freshMs) this.entries.delete(keyId);
  }
}

/** Whether a change message (`CurrentAccess.listen`) names this key or its account. */
export function namesKey(message: string, keyId: string, accountId: string): boolean {
  return message === '*' || message === keyId || message === `account:${accountId}`;
}
