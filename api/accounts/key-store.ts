import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { journalWrite } from '../../shared/redis-journal.js';
import { defaultAccountId, type AccountRole, type KeyAccess } from '../../shared/accounts.js';
import {
  accessChangedChannel,
  accountKey,
  accountKeysKey,
  apiKeyHashesKey,
  apiKeyIdsKey,
  apiKeyRecordKey,
  billKey,
  keyBillField,
  keyBillFields,
} from '../../shared/redis-keys.js';
import { GatewayError } from '../../shared/errors.js';
import { parseToolPatterns } from '../../shared/mcp/tool-rules.js';
import { AccountStore, accountNotFound, microsToUsd } from './account-store.js';
import { claimPlaygroundKeyScript, createKeyScript, updateKeyScript } from './scripts.js';
import { optionalNumber, parseModels, readKeyAccess } from '../../shared/access/index.js';
import type { ApiKeysTable, RecordDb } from '../../storage/record/database.js';
import { ensureDefaultRecord, type HotState } from '../../storage/record/hot-state.js';
import { readKeySpend, type KeySpend } from '../../shared/money/billing.js';
import {
  budgetCounter,
  budgetText,
  parseBudgetText,
  periodStart,
  type BudgetInForce,
  type BudgetPeriod,
} from '../../shared/money/budgets.js';
import { seedBudgetScript } from '../../shared/money/scripts.js';

/**
 * API keys: random, prefixed, shown once, stored only as a SHA-256 hash, in
 * the record (PostgreSQL) first and then in their hot copy in Redis (layout
 * in shared/accounts.ts), which admission reads. Each key belongs to an account (`default` when none
 * is named) and may carry a spending limit, rate limits, a model allow-list,
 * an expiry and a default response-cache TTL. Every change publishes the key id on `accessChangedChannel`, so
 * every api instance drops what it cached.
 *
 * Who sets a limit matters. What an admin sets (the admin API, `npm run keys`,
 * an admin in the console) is in force and is also kept as the key's ceiling
 * (`admin_*` columns of the record); a member may only tighten a key of theirs
 * below those ceilings, and below the operator's `DEFAULT_KEY_RPM` /
 * `DEFAULT_KEY_TPM` where the admin set none. What is in force is always the
 * key's own value, so admission reads only that.
 */

export interface KeyLimits {
  /** The most the key may ever spend, micros. */
  limitMicros?: number;
  rpm?: number;
  tpm?: number;
  models?: readonly string[];
  /** Unix seconds. */
  expiresAt?: number;
}

/**
 * A key's settings: its limits, and its default response-cache TTL. That one is no limit: whoever may change
 * the key sets it (no ceiling, no operator default); its account's cap (`cache_max_ttl_s`) and `CACHE_MAX_TTL_S`
 * bound it when a request is cached.
 */
export interface KeySettings extends KeyLimits {
  /** Seconds: a request of the key without `Cache-Control` is cached as if it sent `max-age=<cacheTtlS>`; 0 = none. */
  cacheTtlS?: number;
  /**
   * What the key may spend per period (shared/money/budgets.ts), beside its lifetime `limitMicros`; no ceiling holds
   * it.
   */
  budget?: { micros: number; period: BudgetPeriod };
  /**
   * The MCP tools it may use, `server/tool` patterns (shared/mcp/tool-rules.ts), within what its account allows;
   * undefined: every tool its account allows. An admin's alone to set: a member may not change it.
   */
  mcpTools?: readonly string[];
}

export interface KeyOptions extends KeySettings {
  accountId?: string;
  /** The person (account id) making it in the console; none for the admin API and the CLI. */
  createdBy?: string;
}

/** Who made a key: a person. */
export interface KeyCreator {
  id: string;
  email: string;
  name: string;
}

/** A change to a key: null clears a limit (or the default cache TTL). */
export type KeyChanges = { name?: string } & { [K in keyof KeySettings]?: KeySettings[K] | null };

/**
 * Who makes or changes a key: an admin sets and lifts anything (and what it sets becomes the key's ceilings);
 * a member only sets limits at or below the key's ceilings and the operator's defaults. A signed-in person's is
 * their account's role.
 */
export type KeyActor = AccountRole;

/** The operator's bounds on keys (shared/config.ts); each unset: none. */
export interface KeyPolicy {
  /** Keys (not revoked) an account may hold, its Playground key aside. */
  maxKeysPerAccount?: number;
  /** Ceilings of a member's `rpm` / `tpm` where an admin set none (a key that sets none runs at these). */
  defaultKeyRpm?: number;
  defaultKeyTpm?: number;
}

export interface ApiKeyRecord extends KeySettings {
  id: string;
  name: string;
  created: number;
  /** First characters of the secret, to tell keys apart without revealing them. */
  hint: string;
  accountId: string;
  spentMicros: number;
  /** What it spent in its budget's current period (with a budget). */
  budgetSpentMicros?: number;
  /** Who made it (an account id), when known. */
  createdBy?: string;
  /** Unix seconds of the last admitted request. */
  lastUsedAt?: number;
  /** The limits an admin set on it (the ceilings for its members), when read with them (`withAdminLimits`). */
  adminLimits?: KeyLimits;
}

const adminColumns = ['admin_limit_micros', 'admin_rpm', 'admin_tpm', 'admin_models', 'admin_expires'] as const;

function adminLimitsOf(row: Pick<ApiKeysTable, (typeof adminColumns)[number]>): KeyLimits {
  const limits: KeyLimits = {
    limitMicros: row.admin_limit_micros ?? undefined,
    rpm: row.admin_rpm ?? undefined,
    tpm: row.admin_tpm ?? undefined,
    models: row.admin_models === null ? undefined : parseModels(row.admin_models),
    expiresAt: row.admin_expires ?? undefined,
  };
  return Object.fromEntries(Object.entries(limits).filter(([, value]) => value !== undefined)) as KeyLimits;
}

/** The record's `admin_*` columns for the limits an admin sets: absent stays absent, null lifts. */
function adminRow(changes: KeyChanges) {
  return {
    ...(changes.limitMicros !== undefined ? { admin_limit_micros: changes.limitMicros } : {}),
    ...(changes.rpm !== undefined ? { admin_rpm: changes.rpm } : {}),
    ...(changes.tpm !== undefined ? { admin_tpm: changes.tpm } : {}),
    ...(changes.expiresAt !== undefined ? { admin_expires: changes.expiresAt } : {}),
    ...(changes.models !== undefined
      ? { admin_models: changes.models === null ? null : JSON.stringify(changes.models) }
      : {}),
  };
}

const limitParams = {
  limitMicros: 'limit_usd',
  rpm: 'rpm',
  tpm: 'tpm',
  models: 'models',
  expiresAt: 'expires_at',
} as const;

function ceilingText(field: keyof KeyLimits, value: number | readonly string[]): string {
  if (field === 'models') {
    const models = value as readonly string[];
    return (
      models
        .slice(0, 20)
        .map((m) => `\`${m}\``)
        .join(', ') + (models.length > 20 ? ` and ${models.length - 20} more` : '')
    );
  }
  if (field === 'limitMicros') return `$${microsToUsd(value as number)}`;
  if (field === 'expiresAt') return new Date((value as number) * 1000).toISOString();
  return `${value} per minute`;
}

/**
 * A member's limits against the ceilings: an admin's, else the operator's default rates. A limit may be lowered
 * (a model list narrowed, an expiry brought closer), never raised, widened or removed past a ceiling.
 * Throws 403 `limit_set_by_admin` or `above_default_limit`, naming the field.
 */
export function checkMemberLimits(changes: KeyChanges, admin: KeyLimits, policy: KeyPolicy): void {
  const defaults: KeyLimits = { rpm: policy.defaultKeyRpm, tpm: policy.defaultKeyTpm };
  for (const field of Object.keys(limitParams) as Array<keyof KeyLimits>) {
    const value = changes[field];
    const byAdmin = admin[field] !== undefined;
    const ceiling = admin[field] ?? defaults[field];
    if (value === undefined || ceiling === undefined) continue;
    // No limit of its own: the admin's is lifted, but a key without rpm/tpm runs at the operator's default.
    const outside =
      value === null
        ? byAdmin
        : field === 'models'
          ? (value as readonly string[]).some((model) => !(ceiling as readonly string[]).includes(model))
          : (value as number) > (ceiling as number);
    if (!outside) continue;
    const param = limitParams[field];
    const bound = ceilingText(field, ceiling);
    const message = byAdmin
      ? field === 'models'
        ? `An administrator limited this key to the models ${bound}: you may narrow the list, not widen or remove it.`
        : field === 'expiresAt'
          ? `An administrator set this key to expire at ${bound}: you may make it expire sooner, not later or never.`
          : `An administrator set this key's ${param} to at most ${bound}: you may lower it, not raise or remove it.`
      : `This gateway's keys may have a ${param} of at most ${bound}: set ${param} to that or less, or leave it ` +
        `unset (then that is its limit).`;
    throw new GatewayError(403, message, { code: byAdmin ? 'limit_set_by_admin' : 'above_default_limit', param });
  }
}

/**
 * What a person's own account names its Playground key, and what every Playground key was named before teams had
 * several.
 */
export const playgroundName = 'Playground';

/** Key names are at most this long (the API's `keyName`). */
const keyNameMax = 200;

/**
 * The name of a person's Playground key in a team: "Playground (ana@example.com)", after the person whose Playground
 * it is (their email, else their name or id), so a team's several tell apart wherever keys are named (Keys, Usage,
 * Activity, Budgets). Cut to a key name's longest, the end of a long email given up first.
 */
export function playgroundKeyName(person: {
  id: string;
  email?: string | undefined;
  name?: string | undefined;
}): string {
  const who = person.email || person.name || person.id;
  const room = keyNameMax - `${playgroundName} ()`.length;
  return `${playgroundName} (${who.length > room ? `${who.slice(0, room - 1)}…` : who})`;
}

const tooManyKeys = (max: number) =>
  new GatewayError(
    409,
    `This account already has ${max} API keys, the most one account may have on this gateway ` +
      `(MAX_KEYS_PER_ACCOUNT): revoke one before making another.`,
    {
      code: 'too_many_keys',
    },
  );

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

// ---- record fields: '' means none, as the billing scripts read them (shared/access) ----

function limitFields(changes: KeyChanges): string[] {
  const fields: string[] = [];
  const put = (field: string, value: number | null | undefined) => {
    if (value !== undefined) fields.push(field, value === null ? '' : String(value));
  };
  put('limit', changes.limitMicros);
  put('rpm', changes.rpm);
  put('tpm', changes.tpm);
  put('expires', changes.expiresAt);
  put('cache_ttl', changes.cacheTtlS);
  if (changes.budget !== undefined) fields.push('budget', budgetText(changes.budget));
  if (changes.models !== undefined)
    fields.push('models', changes.models === null ? '' : JSON.stringify(changes.models));
  if (changes.mcpTools !== undefined)
    fields.push('mcp_tools', changes.mcpTools === null ? '' : JSON.stringify(changes.mcpTools));
  if (changes.name !== undefined) fields.push('name', changes.name);
  return fields;
}

const mcpToolsAdminOnly = () =>
  new GatewayError(403, "A key's MCP tools (mcp_tools) are set by an administrator.", {
    type: 'invalid_request_error',
    code: 'admin_only',
    param: 'mcp_tools',
  });

/** A key from its directory hash and its spend in its account's bill. */
function toRecord(row: Record<string, string>, spend: KeySpend | undefined): ApiKeyRecord | undefined {
  if (!row.id || !row.hash) return undefined;
  return {
    id: row.id,
    name: row.name ?? '',
    created: Number(row.created) || 0,
    hint: row.hint ?? '',
    accountId: row.account || defaultAccountId,
    limitMicros: optionalNumber(row.limit),
    rpm: optionalNumber(row.rpm),
    tpm: optionalNumber(row.tpm),
    models: parseModels(row.models),
    expiresAt: optionalNumber(row.expires),
    cacheTtlS: optionalNumber(row.cache_ttl),
    budget: parseBudgetText(row.budget),
    mcpTools: parseToolPatterns(row.mcp_tools),
    ...(row.created_by ? { createdBy: row.created_by } : {}),
    spentMicros: spend?.spentMicros ?? 0,
    lastUsedAt: spend?.lastUsedAt,
  };
}

export class KeyStore {
  readonly accounts: AccountStore;
  /**
   * Told (with the message `accessChangedChannel` carries) when a key or account changes through this store: this
   * process's own cache drops it at once, before the change is answered, without waiting for the message to come back.
   */
  set onAccessChanged(listener: ((message: string) => void) | undefined) {
    this.changed = listener;
    this.accounts.onAccessChanged = listener;
  }
  private changed: ((message: string) => void) | undefined;

  constructor(
    readonly redis: Redis,
    readonly record: RecordDb,
    /** Loads Redis again from the record when a lookup finds it lost (optional: the CLI runs without one). */
    readonly hot?: HotState,
    /** The operator's bounds: the keys cap and the default rates, ceilings of members' keys. None by default. */
    readonly policy: KeyPolicy = {},
  ) {
    this.accounts = new AccountStore(redis, record, hot);
  }

  /**
   * Throws 404 `account_not_found` for an unknown or deleted account, 409 `too_many_keys` past the policy's cap,
   * and 403 for a member's limit above the operator's defaults. What an admin sets becomes the key's ceilings.
   */
  async create(
    name: string,
    options: KeyOptions = {},
    by: KeyActor = 'admin',
  ): Promise<ApiKeyRecord & { key: string }> {
    return this.make(name, options, by, true);
  }

  private async make(
    name: string,
    options: KeyOptions,
    by: KeyActor,
    counted: boolean,
  ): Promise<ApiKeyRecord & { key: string }> {
    const accountId = options.accountId ?? defaultAccountId;
    const secret = `sy-${randomBytes(32).toString('base64url')}`;
    const id = `key_${randomBytes(8).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const hint = `${secret.slice(0, 7)}…`;
    const hash = hashSecret(secret);
    const fields = [
      'id',
      id,
      'name',
      name,
      'created',
      String(created),
      'hash',
      hash,
      'hint',
      hint,
      'account',
      accountId,
      'created_by',
      options.createdBy ?? '',
    ];
    // Every limit field is written, '' when unset, so the record shows the whole layout.
    const {
      limitMicros = null,
      rpm = null,
      tpm = null,
      models = null,
      expiresAt = null,
      cacheTtlS = null,
      budget = null,
      mcpTools = null,
    } = options;
    const limits = { limitMicros, rpm, tpm, models, expiresAt };
    if (by === 'member') checkMemberLimits(options, {}, this.policy);
    if (by === 'member' && options.mcpTools !== undefined) throw mcpToolsAdminOnly();
    // The default cache TTL beside the limits, but never a ceiling (adminRow takes the limits only).
    fields.push(...limitFields({ ...limits, cacheTtlS, budget, mcpTools }));
    // The default account is made on first use, in the record as in Redis (idempotent).
    if (accountId === defaultAccountId) await ensureDefaultRecord(this.record);
    const max = counted ? this.policy.maxKeysPerAccount : undefined;
    await this.record.transaction().execute(async (tx) => {
      // The account's row locked: two keys made at once are counted one after the other, so the cap holds exactly.
      const owner = await tx
        .selectFrom('accounts')
        .select(['deleted', 'playground_key'])
        .where('id', '=', accountId)
        .forUpdate()
        .executeTakeFirst();
      if (!owner || owner.deleted) throw accountNotFound(accountId);
      if (max !== undefined) {
        const playground = owner.playground_key;
        const { n } = await tx
          .selectFrom('api_keys')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('account_id', '=', accountId)
          .where('revoked', 'is', null)
          .$if(playground !== null, (qb) => qb.where('id', '<>', playground!))
          .executeTakeFirstOrThrow();
        if (Number(n) >= max) throw tooManyKeys(max);
      }
      await tx
        .insertInto('api_keys')
        .values({
          id,
          account_id: accountId,
          name,
          created,
          hash,
          hint,
          limit_micros: limitMicros,
          rpm,
          tpm,
          models: models === null ? null : JSON.stringify(models),
          expires: expiresAt,
          cache_ttl_s: cacheTtlS,
          budget_micros: budget?.micros ?? null,
          budget_period: budget?.period ?? null,
          created_by: options.createdBy ?? null,
          mcp_tools: mcpTools === null ? null : JSON.stringify(mcpTools),
          spent_micros: 0,
          last_used: null,
          revoked: null,
          ...(by === 'admin' ? adminRow(limits) : {}),
        })
        .execute();
    });
    // Keys made without an account need the default account's bill in Redis (ensured cheaply: idempotent).
    if (accountId === defaultAccountId) await this.accounts.ensureDefault();
    // Its spend first: a key admission can find has a bill to count against.
    await this.redis.hset(billKey(accountId), keyBillField(id, 'spent'), '0', keyBillField(id, 'reserved'), '0');
    const made = await createKeyScript(this.redis, {
      account: accountKey(accountId),
      record: apiKeyRecordKey(id),
      hashes: apiKeyHashesKey,
      ids: apiKeyIdsKey,
      accountKeys: accountKeysKey(accountId),
      hash,
      keyId: id,
      fields,
    });
    // Refused because Redis lost the account (flushed): loading it from the record brings this key with it.
    if (made === 0 && !(await this.hot?.ensure())) {
      await this.redis.hdel(billKey(accountId), ...keyBillFields(id));
      await this.record.deleteFrom('api_keys').where('id', '=', id).execute();
      throw accountNotFound(accountId);
    }
    const adminLimits =
      by === 'admin'
        ? adminLimitsOf({
            admin_limit_micros: limitMicros,
            admin_rpm: rpm,
            admin_tpm: tpm,
            admin_models: models && JSON.stringify(models),
            admin_expires: expiresAt,
          })
        : {};
    return {
      ...toRecord(Object.fromEntries(pairs(fields)), { spentMicros: 0, reservedMicros: 0 })!,
      adminLimits,
      key: secret,
    };
  }

  /** The keys with the limits an admin set on each (`adminLimits`), read from the record. */
  async withAdminLimits<T extends ApiKeyRecord>(keys: T[]): Promise<T[]> {
    if (keys.length === 0) return keys;
    const rows = await this.record
      .selectFrom('api_keys')
      .select(['id', ...adminColumns])
      .where(
        'id',
        'in',
        keys.map((key) => key.id),
      )
      .execute();
    const found = new Map(rows.map((row) => [row.id, adminLimitsOf(row)]));
    return keys.map((key) => ({ ...key, adminLimits: found.get(key.id) ?? {} }));
  }

  /**
   * Who made each key: the person `created_by` names, or for a key made before teams (or by the admin API) in a
   * person's own account, that person (it is their account's own); null for such a key of a team.
   */
  async creators(keys: readonly ApiKeyRecord[]): Promise<Map<string, KeyCreator | null>> {
    const found = new Map<string, KeyCreator | null>();
    if (keys.length === 0) return found;
    const rows = await this.record
      .selectFrom('api_keys')
      .innerJoin('accounts as owner', 'owner.id', 'api_keys.account_id')
      .leftJoin('accounts as maker', 'maker.id', 'api_keys.created_by')
      .select([
        'api_keys.id',
        'api_keys.created_by',
        'owner.kind',
        'owner.email as owner_email',
        'owner.name as owner_name',
        'maker.email as maker_email',
        'maker.name as maker_name',
      ])
      .where(
        'api_keys.id',
        'in',
        keys.map((key) => key.id),
      )
      .execute();
    const byId = new Map(rows.map((row) => [row.id, row]));
    for (const key of keys) {
      const row = byId.get(key.id);
      if (row?.created_by)
        found.set(key.id, { id: row.created_by, email: row.maker_email ?? '', name: row.maker_name ?? '' });
      else if (row && row.kind === 'person' && key.accountId !== defaultAccountId)
        found.set(key.id, { id: key.accountId, email: row.owner_email, name: row.owner_name });
      else found.set(key.id, null);
    }
    return found;
  }

  /** The ids of every key (revoked ones too) `person` made in an account: a member's share of a team's usage. */
  async keysMadeBy(accountId: string, person: string): Promise<string[]> {
    const rows = await this.record
      .selectFrom('api_keys')
      .select('id')
      .where('account_id', '=', accountId)
      .where('created_by', '=', person)
      .execute();
    return rows.map((row) => row.id);
  }

  async list(filter: { accountId?: string } = {}): Promise<ApiKeyRecord[]> {
    // One account's keys from its own set (a console page must not read every key of the gateway); the default
    // account's from all, since keys made before accounts existed are in no account's set.
    const own = filter.accountId !== undefined && filter.accountId !== defaultAccountId;
    const ids = await this.redis.smembers(own ? accountKeysKey(filter.accountId!) : apiKeyIdsKey);
    if (ids.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetall(apiKeyRecordKey(id));
    const rows = ((await pipeline.exec()) ?? []).map(([, value]) => value as Record<string, string>);
    // Spend lives in the accounts' bills (other slots): read apart from the directory's pipeline.
    const spends = await Promise.all(
      rows.map((row) => (row.id ? readKeySpend(this.redis, row.account || defaultAccountId, row.id) : undefined)),
    );
    const keys = rows
      .map((row, i) => toRecord(row, spends[i]))
      .filter(
        (key): key is ApiKeyRecord => key !== undefined && (!filter.accountId || key.accountId === filter.accountId),
      )
      .sort((a, b) => a.created - b.created || a.id.localeCompare(b.id));
    return Promise.all(keys.map((key) => this.withBudgetSpend(key)));
  }

  async get(id: string): Promise<ApiKeyRecord | undefined> {
    const row = await this.redis.hgetall(apiKeyRecordKey(id));
    const key = toRecord(row, row.id ? await readKeySpend(this.redis, row.account || defaultAccountId, id) : undefined);
    return key && this.withBudgetSpend(key);
  }

  /** A key with a budget, with what it spent in the budget's current period (its counter in the bill). */
  private async withBudgetSpend(key: ApiKeyRecord): Promise<ApiKeyRecord> {
    if (!key.budget) return key;
    return {
      ...key,
      budgetSpentMicros: await this.periodSpent(key.accountId, { scope: 'key', ownerId: key.id, ...key.budget }),
    };
  }

  /**
   * Undefined when no such key exists; else the key with its ceilings (`adminLimits`, as read or written here). An
   * admin's change sets the ceilings too (null lifts them); a member's is checked against them first (403 when it
   * would raise, widen or remove one), under the key's row lock.
   */
  async update(id: string, changes: KeyChanges, by: KeyActor = 'admin'): Promise<ApiKeyRecord | undefined> {
    const row = {
      ...(changes.name !== undefined ? { name: changes.name } : {}),
      ...(changes.limitMicros !== undefined ? { limit_micros: changes.limitMicros } : {}),
      ...(changes.rpm !== undefined ? { rpm: changes.rpm } : {}),
      ...(changes.tpm !== undefined ? { tpm: changes.tpm } : {}),
      ...(changes.expiresAt !== undefined ? { expires: changes.expiresAt } : {}),
      ...(changes.models !== undefined
        ? { models: changes.models === null ? null : JSON.stringify(changes.models) }
        : {}),
      // Not a limit: no ceiling checks it (checkMemberLimits) and none is kept of it (adminRow).
      ...(changes.cacheTtlS !== undefined ? { cache_ttl_s: changes.cacheTtlS } : {}),
      ...(changes.budget !== undefined
        ? { budget_micros: changes.budget?.micros ?? null, budget_period: changes.budget?.period ?? null }
        : {}),
      ...(changes.mcpTools !== undefined
        ? { mcp_tools: changes.mcpTools === null ? null : JSON.stringify(changes.mcpTools) }
        : {}),
    };
    if (by !== 'admin' && changes.mcpTools !== undefined) throw mcpToolsAdminOnly();
    // The key's ceilings after the change, from the query that makes it (none to make: read), so its answer needs no
    // other.
    let ceilings: Pick<ApiKeysTable, (typeof adminColumns)[number]> | undefined;
    if (Object.keys(row).length === 0) {
      ceilings = await this.record.selectFrom('api_keys').select(adminColumns).where('id', '=', id).executeTakeFirst();
    } else {
      ceilings =
        by === 'admin'
          ? await this.record
              .updateTable('api_keys')
              .set({ ...row, ...adminRow(changes) })
              .where('id', '=', id)
              .where('revoked', 'is', null)
              .returning(adminColumns)
              .executeTakeFirst()
          : await this.record.transaction().execute(async (tx) => {
              const current = await tx
                .selectFrom('api_keys')
                .select(adminColumns)
                .where('id', '=', id)
                .where('revoked', 'is', null)
                .forUpdate()
                .executeTakeFirst();
              if (!current) return undefined;
              checkMemberLimits(changes, adminLimitsOf(current), this.policy);
              await tx.updateTable('api_keys').set(row).where('id', '=', id).execute();
              return current;
            });
      if (!ceilings) return undefined;
    }
    if (changes.budget) {
      const accountId = (await this.redis.hget(apiKeyRecordKey(id), 'account')) || defaultAccountId;
      await this.seedBudget(accountId, { scope: 'key', ownerId: id, ...changes.budget });
    }
    const done = await updateKeyScript(this.redis, {
      record: apiKeyRecordKey(id),
      channel: accessChangedChannel,
      keyId: id,
      fields: limitFields(changes),
    });
    this.changed?.(id);
    const key = done === 1 ? await this.get(id) : undefined;
    return key && { ...key, adminLimits: ceilings ? adminLimitsOf(ceilings) : {} };
  }

  /**
   * The access of an account's Playground key (the console's playground bills through it, as any key),
   * made on first use and again if it was revoked. Its limits are the owner's to set, like any key's; what
   * its account carries (weight, granted service tiers, cache cap) it carries as every key of the account does
   * (`access`). Its access is read as a presented key's (`access`, by its hash), so the budgets that hold it are those
   * of any key the person made in the team: the team's budget, its own, and the person's member cap there
   * (`cap:<person>`).
   */
  async playgroundAccess(accountId: string, person: string = accountId): Promise<KeyAccess> {
    // Each person in a team has a Playground key of their own there (made by them, so a member's Playground usage
    // is theirs): the account's own person's is named by `playground_key` (the record's `accounts.playground_key`),
    // another's by `playground_key:<person>` in Redis only. Redis lost, that one is found again in the record as the
    // newest live key the person made in the team named as their Playground key (or "Playground", as it was before).
    const field = person === accountId ? 'playground_key' : `playground_key:${person}`;
    // Named for the person in a team (their own account holds one Playground key: "Playground" says which); read only
    // when a key is made, found again or renamed, not on every use.
    let named: string | undefined;
    const name = async () =>
      (named ??=
        person === accountId ? playgroundName : playgroundKeyName((await this.accounts.get(person)) ?? { id: person }));
    for (let attempt = 0; attempt < 3; attempt++) {
      let id = await this.redis.hget(accountKey(accountId), field);
      if (!id && person !== accountId) {
        const kept = await this.record
          .selectFrom('api_keys')
          .select('id')
          .where('account_id', '=', accountId)
          .where('created_by', '=', person)
          // Its name now, or the one it had before each was named for its person.
          .where('name', 'in', [await name(), playgroundName])
          .where('revoked', 'is', null)
          .orderBy('created', 'desc')
          .limit(1)
          .executeTakeFirst();
        if (
          kept &&
          (await claimPlaygroundKeyScript(this.redis, {
            account: accountKey(accountId),
            current: '',
            made: kept.id,
            field,
          })) === 1
        )
          id = kept.id;
      }
      const key = id ? await this.get(id) : undefined;
      if (key && key.accountId === accountId) {
        // One made before each was named for its person ("Playground" alone) takes its name on its next use.
        if (key.name === playgroundName && person !== accountId) await this.update(key.id, { name: await name() });
        const access = await this.accessOfKey(key.id);
        if (access) return access;
        continue;
      }
      // Made for the console, not by anyone: no ceilings, and not counted against the account's keys.
      const made = await this.make(
        await name(),
        { accountId, ...(person === accountId ? {} : { createdBy: person }) },
        'member',
        false,
      );
      // Two first uses at once: one key wins, the other is revoked.
      const won = await claimPlaygroundKeyScript(this.redis, {
        account: accountKey(accountId),
        current: id ?? '',
        made: made.id,
        field,
      });
      if (won === 1) {
        if (person === accountId)
          await this.record
            .updateTable('accounts')
            .set({ playground_key: made.id })
            .where('id', '=', accountId)
            .execute();
        const access = await this.accessOfKey(made.id);
        if (access) return access;
        continue;
      }
      await this.revoke(made.id);
    }
    throw new GatewayError(409, 'The Playground key kept changing; retry.', { code: 'conflict' });
  }

  /**
   * A key's access as admission reads it (the same script, by the key's id), budgets and its maker's cap included;
   * undefined when it is gone meanwhile. 403 for a key of a disabled account.
   */
  private async accessOfKey(id: string): Promise<KeyAccess | undefined> {
    const access = await readKeyAccess(this.redis, { keyId: id });
    if (access === 'disabled')
      throw new GatewayError(
        403,
        'The account this Playground key spends is disabled. Ask an administrator to enable it.',
        { code: 'account_disabled' },
      );
    return access;
  }

  /** Returns false when no such key exists. */
  async revoke(id: string): Promise<boolean> {
    const revoked = await this.record
      .updateTable('api_keys')
      .set({ revoked: Math.floor(Date.now() / 1000) })
      .where('id', '=', id)
      .where('revoked', 'is', null)
      .returning('account_id')
      .execute();
    const accountId =
      revoked[0]?.account_id ?? ((await this.redis.hget(apiKeyRecordKey(id), 'account')) || defaultAccountId);
    // Out of its account's bill first, then the directory, announced (the same path as a member's keys revoked with
    // their membership).
    const done = await this.accounts.unlistRevokedKey(accountId, id);
    // Sent again after a reconnection, as a failover may have lost it (shared/redis-journal.ts): a key never comes
    // back.
    journalWrite(this.redis, async () => (await this.accounts.unlistRevokedKey(accountId, id), false));
    return done || revoked.length > 0;
  }

  /**
   * Sets (null clears) a team's budget per period: in the record, then in its account's hash, which the key-access
   * script reads; every api drops what it cached of the team's keys. False when no such account exists.
   */
  async setTeamBudget(teamId: string, budget: { micros: number; period: BudgetPeriod } | null): Promise<boolean> {
    const done = await this.record
      .updateTable('accounts')
      .set({ budget_micros: budget?.micros ?? null, budget_period: budget?.period ?? null })
      .where('id', '=', teamId)
      .where('deleted', '=', false)
      .returning('id')
      .execute();
    if (done.length === 0) return false;
    if (budget) await this.seedBudget(teamId, { scope: 'team', ...budget });
    await this.redis.hset(accountKey(teamId), 'budget', budgetText(budget));
    await this.accessChanged(`account:${teamId}`);
    return true;
  }

  /**
   * Sets (null clears) what the keys `memberId` made in `teamId` may spend per period: the member's row in the
   * record, then the cap field of the team's hash (`cap:<member>`). False when they are not a member of the team.
   */
  async setMemberCap(
    teamId: string,
    memberId: string,
    cap: { micros: number; period: BudgetPeriod } | null,
  ): Promise<boolean> {
    const done = await this.record
      .updateTable('team_members')
      .set({ cap_micros: cap?.micros ?? null, cap_period: cap?.period ?? null })
      .where('team_id', '=', teamId)
      .where('member_id', '=', memberId)
      .returning('member_id')
      .execute();
    if (done.length === 0) return false;
    if (cap) await this.seedBudget(teamId, { scope: 'member', ownerId: memberId, ...cap });
    if (cap) await this.redis.hset(accountKey(teamId), `cap:${memberId}`, budgetText(cap));
    else await this.redis.hdel(accountKey(teamId), `cap:${memberId}`);
    await this.accessChanged(`account:${teamId}`);
    return true;
  }

  /**
   * Before a budget holds, its counter in the current period is raised to what the record has settled in the period
   * for the budget's scope (the team's every key, the keys the member made in the team, the one key), so a budget set
   * on the 20th counts the month's spend from the 1st, as Usage does, and holds it to the amount. A settlement not yet
   * in the record (the writer's second or so) is the one thing it can miss.
   */
  private async seedBudget(accountId: string, budget: BudgetInForce, now = Date.now()): Promise<void> {
    let query = this.record
      .selectFrom('usage')
      .select((eb) => eb.fn.coalesce(eb.fn.sum<string | number>('cost_micros'), eb.lit(0)).as('spent'))
      .where('account_id', '=', accountId)
      .where('settled', '=', true)
      .where('created', '>=', periodStart(budget.period, now));
    if (budget.scope === 'key') query = query.where('key_id', '=', budget.ownerId ?? '');
    if (budget.scope === 'member') {
      query = query.where('key_id', 'in', (eb) =>
        eb
          .selectFrom('api_keys')
          .select('id')
          .where('account_id', '=', accountId)
          .where('created_by', '=', budget.ownerId ?? ''),
      );
    }
    const spent = Number((await query.executeTakeFirstOrThrow()).spent);
    await seedBudgetScript(this.redis, {
      bill: billKey(accountId),
      spentField: `${budgetCounter(budget, now)}.spent`,
      recordedMicros: spent,
    });
  }

  /** What a budget's counter holds as spent in its current period (0 when nothing was spent yet). */
  async periodSpent(accountId: string, budget: BudgetInForce, now = Date.now()): Promise<number> {
    return Number((await this.redis.hget(billKey(accountId), `${budgetCounter(budget, now)}.spent`)) ?? 0);
  }

  private async accessChanged(message: string): Promise<void> {
    await this.redis.publish(accessChangedChannel, message);
    this.changed?.(message);
  }

  /** Key id for a presented secret, or undefined. */
  async lookup(secretHash: string): Promise<string | undefined> {
    return (await this.redis.hget(apiKeyHashesKey, secretHash)) ?? undefined;
  }

  /**
   * What admission needs of a presented key, in one round trip; undefined for an unknown key or one of a deleted
   * account. Expiry is the caller's to check.
   */
  async access(secretHash: string, reloaded = false): Promise<KeyAccess | 'disabled' | undefined> {
    const found = await readKeyAccess(this.redis, { hash: secretHash });
    // Unknown here: perhaps Redis lost its hot state (flushed). Loaded again from the record, asked once more.
    if (found === undefined && !reloaded && (await this.hot?.ensure())) return this.access(secretHash, true);
    return found;
  }
}

function pairs(flat: readonly string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, flat[i + 1]!]);
  return out;
}

/** Why a presented key was refused, so the 401 can say so. */
export type KeyVerdict =
  { access: KeyAccess } | { refused: 'unknown' | 'disabled' } | { refused: 'expired'; expiresAt: number };

/**
 * Per-process cache of valid keys, so the hot path makes no Redis round trip.
 * Entries expire after `ttlMs` and are dropped at once when `accessChangedChannel`
 * names their key or account (`forget`); after a subscriber reconnect (messages
 * may have been missed) everything is dropped. Expiry is checked on every use,
 * so a cached key stops working the second it expires.
 */
export class KeyCache {
  /**
   * Keyed by the secret itself, so a cached key costs no hash on its
   * requests; the hash is kept beside it for the change messages that name it.
   * Only keys that exist are cached: the map holds no more than there are keys.
   */
  private readonly entries = new Map<string, { access: KeyAccess; hash: string; expires: number }>();
  /** Bumped on every change message, so a lookup that raced one does not cache what was just changed. */
  private generation = 0;

  constructor(
    private readonly store: KeyStore,
    private readonly ttlMs: number,
  ) {}

  async check(secret: string): Promise<KeyVerdict> {
    const now = Date.now();
    const hit = this.entries.get(secret);
    let access = hit && hit.expires > now ? hit.access : undefined;
    if (!access) {
      const generation = this.generation;
      const hash = hashSecret(secret);
      const found = await this.store.access(hash);
      if (found === 'disabled') return { refused: 'disabled' };
      access = found;
      if (access && generation === this.generation)
        this.entries.set(secret, { access, hash, expires: now + this.ttlMs });
      else this.entries.delete(secret);
    }
    if (!access) return { refused: 'unknown' };
    if (access.expiresAt !== undefined && access.expiresAt * 1000 <= now)
      return { refused: 'expired', expiresAt: access.expiresAt };
    return { access };
  }

  /** The key's access, or undefined for an unknown, expired or deleted-account key. */
  async resolve(secret: string): Promise<KeyAccess | undefined> {
    const verdict = await this.check(secret);
    return 'access' in verdict ? verdict.access : undefined;
  }

  /** A message of `accessChangedChannel`: a key id, or `account:<id>` for every key of an account. */
  forget(message: string): void {
    this.generation++;
    // A secret hash, as revocations were announced before, names its key too.
    const accountId = message.startsWith('account:') ? message.slice('account:'.length) : undefined;
    for (const [secret, { access, hash }] of this.entries) {
      if (accountId !== undefined ? access.accountId === accountId : access.keyId === message || hash === message)
        this.entries.delete(secret);
    }
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }
}
