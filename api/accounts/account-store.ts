import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';
import { availableParallelism } from 'node:os';
import type { Redis } from 'ioredis';
import { readBill, type BillState } from '../../shared/money/billing.js';
import {
  defaultAccountId,
  parseServiceTiers,
  serviceTiersText,
  type Account,
  type AccountRole,
} from '../../shared/accounts.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import {
  accessChangedChannel,
  accountEmailsKey,
  accountKey,
  accountKeysKey,
  accountsIndexKey,
  apiKeyHashesKey,
  apiKeyIdsKey,
  apiKeyRecordKey,
  billKey,
  keyBillFields,
} from '../../shared/redis-keys.js';
import { balanceMicros } from '../../shared/money/balance.js';
import { creditScript, openBillScript } from '../../shared/money/scripts.js';
import { journalWrite } from '../../shared/redis-journal.js';
import {
  createAccountScript,
  deleteAccountScript,
  ensureDefaultScript,
  rehashPasswordScript,
  revokeKeyScript,
  updateAccountScript,
} from './scripts.js';
import { parseToolPatterns } from '../../shared/mcp/tool-rules.js';
import { GatewayError } from '../../shared/errors.js';
import { sql } from 'kysely';
import type { RecordDb } from '../../storage/record/database.js';
import { ensureDefaultRecord, type HotState } from '../../storage/record/hot-state.js';

/*
 * Accounts: written to the record (PostgreSQL) first, then to their hot copy
 * in Redis (layout in shared/accounts.ts), which admission and the console
 * read and which is loaded again from the record when Redis loses it. In
 * Redis, every change that must
 * hold together (claiming an email, crediting with its ledger entry, deleting
 * with its keys) is one Lua script (`lua/`, declared in scripts.ts), so two
 * admins racing never leave an email owned twice or a balance without its
 * ledger line.
 */

export const accountNotFound = (id: string) =>
  new GatewayError(404, `No account with id '${id}'.`, { code: 'account_not_found' });
export const unlimitedBalance = (id: string) =>
  new GatewayError(
    400,
    id === defaultAccountId
      ? 'The default account has an unlimited balance: it takes no credits.'
      : `Account '${id}' has an unlimited balance: it takes no credits. Update it with "unlimited": false to give ` +
          `it a balance first.`,
    { code: 'unlimited_balance' },
  );
export const teamExists = (name: string) =>
  new GatewayError(409, `A team named '${name}' already exists.`, { code: 'team_exists', param: 'name' });
export const accountExists = (email: string) =>
  new GatewayError(409, `An account with the email '${email}' already exists.`, {
    code: 'account_exists',
    param: 'email',
  });

// USD as the API takes it ↔ integer micro-dollars as Redis keeps it: the price list's conversion, exact to the decimal
// written.
export { microsToUsd, usdToMicros } from '../../shared/money/pricing.js';

// ---- passwords: scrypt, salted, with its parameters stored so they can be raised later ----

/**
 * N = 2^17, r = 8, p = 1: today's advice for scrypt. Each hash needs 128·N·r = 128 MiB, above Node's default
 * `maxmem` (32 MiB), so it is given room. Hashes made with older parameters (2^14 before) still verify, and are
 * made again with these at the next sign-in that proves the password (`AccountStore.signIn`).
 */
export const scryptParams = { N: 2 ** 17, r: 8, p: 1 };

/**
 * scrypt runs on libuv's thread pool (4 threads unless UV_THREADPOOL_SIZE says otherwise), never on the event
 * loop; but the pool also serves file reads, DNS lookups and zlib, and each hash keeps a core busy. At most
 * `passwordWorkers` hashes run at once in a process (2, or 1 with 2 cores or fewer, so a core is left for the
 * event loop), so the pool keeps threads for the rest and memory stays bounded (128 MiB each); at most
 * `passwordQueue` wait, and past that a check is refused with a 429 rather than queued without end. The
 * sign-in throttle (sessions.ts) bounds each address and email; this bounds the process, whatever the addresses.
 */
const passwordWorkers = Math.max(1, Math.min(2, availableParallelism() - 1));
const passwordQueue = 8;
let passwordRunning = 0;
const passwordWaiting: Array<() => void> = [];

async function passwordSlot<T>(work: () => Promise<T>): Promise<T> {
  if (passwordRunning >= passwordWorkers) {
    if (passwordWaiting.length >= passwordQueue) {
      throw new GatewayError(429, 'Too many password checks at once on this server; try again in a moment.', {
        type: 'requests',
        code: 'rate_limit_exceeded',
        headers: { 'retry-after': '1' },
      });
    }
    await new Promise<void>((resolve) => passwordWaiting.push(resolve));
  } else {
    passwordRunning++;
  }
  try {
    return await work();
  } finally {
    // The slot passes straight to the next waiter, so a newcomer cannot overtake the queue.
    const next = passwordWaiting.shift();
    if (next) next();
    else passwordRunning--;
  }
}

function scryptHash(
  password: string,
  salt: Buffer,
  length: number,
  params: { N: number; r: number; p: number },
): Promise<Buffer> {
  const maxmem = 256 * params.N * params.r;
  return passwordSlot(
    () =>
      new Promise((resolve, reject) =>
        scrypt(password, salt, length, { ...params, maxmem }, (error, key) => (error ? reject(error) : resolve(key))),
      ),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scryptHash(password, salt, 64, scryptParams);
  return `scrypt$${scryptParams.N}$${scryptParams.r}$${scryptParams.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scryptHash(password, Buffer.from(salt, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return timingSafeEqual(actual, expected);
}

/** A stored hash made with other parameters than today's: to be made again once its password is proven. */
export function needsRehash(stored: string): boolean {
  const [scheme, n, r, p] = stored.split('$');
  return (
    scheme !== 'scrypt' || Number(n) !== scryptParams.N || Number(r) !== scryptParams.r || Number(p) !== scryptParams.p
  );
}

/**
 * Checked against when a sign-in names no account, so that case takes as long as a wrong password: a hash of
 * today's parameters with a random salt and value (verifying runs the same scrypt whatever the value).
 */
const decoyHash = `scrypt$${scryptParams.N}$${scryptParams.r}$${scryptParams.p}$${randomBytes(16).toString('base64')}$${randomBytes(64).toString('base64')}`;

// ---- the store ----

export interface NewAccount {
  email: string;
  name?: string;
  password?: string;
  role?: AccountRole;
  /** Spends without a balance; undefined: as its role has it (`unlimitedByRole`). */
  unlimited?: boolean;
  /** A person signed in through an OpenID Connect provider: found again by its issuer and its subject there. */
  oidc?: { issuer: string; subject: string };
}

/**
 * An operator's own account spends without a balance unless one is set for
 * it (`unlimited: false`): an admin's first key must work. Members start at
 * $0 (or SIGNUP_CREDIT_USD) and spend what they are credited.
 */
export const unlimitedByRole = (role: AccountRole): boolean => role === 'admin';

export interface AccountChanges {
  email?: string;
  name?: string;
  /** A change of role also sets `unlimited` as the new role has it, unless `unlimited` is given too. */
  role?: AccountRole;
  unlimited?: boolean;
  /** null removes the password. */
  password?: string | null;
  disabled?: boolean;
  /** Its share of contended capacity (1–100): `shared/scheduling`. */
  weight?: number;
  /** The service tiers it may use (at least one); null goes back to the configured default (SERVICE_TIERS_GRANTED). */
  serviceTiers?: readonly ServiceTier[] | null;
  /**
   * The longest its answers stay in the response cache, seconds; 0 forbids caching; null lifts its own cap
   * (CACHE_MAX_TTL_S still holds).
   */
  cacheMaxTtlS?: number | null;
  /** The MCP tools its keys may use (`server/tool` patterns, shared/mcp/tool-rules.ts); null: every tool. */
  mcpTools?: readonly string[] | null;
}

export interface LedgerEntry {
  id: string;
  amountMicros: number;
  balanceMicros: number;
  note: string;
  /** Unix seconds. */
  time: number;
}

const nowSeconds = () => Math.floor(Date.now() / 1000);
const normalizeEmail = (email: string) => email.trim();
const emailIndex = (email: string) => normalizeEmail(email).toLowerCase();
/** How often a script that found the account changed under it is retried before giving up. */
const attempts = 5;

/** An account from its directory hash and its bill (absent: nothing held, no balance yet). */
function toAccount(row: Record<string, string>, bill: BillState | undefined): Account | undefined {
  if (!row.id || row.deleted === '1') return undefined;
  const account: Account = {
    id: row.id,
    // Missing in a hash written before teams: a person.
    kind: row.kind === 'team' ? 'team' : 'person',
    email: row.email ?? '',
    name: row.name ?? '',
    role: row.role === 'admin' ? 'admin' : 'member',
    created: Number(row.created) || 0,
    balanceMicros: row.unlimited === '1' ? undefined : (bill?.balanceMicros ?? 0),
    reservedMicros: bill?.reservedMicros ?? 0,
    disabled: row.disabled === '1',
    weight: Number(row.weight) || 1,
  };
  // Left out when none is set (the configured default), as the account reads without one.
  const serviceTiers = parseServiceTiers(row.tiers);
  if (serviceTiers) account.serviceTiers = serviceTiers;
  // '' (or missing, in a hash older than the field): no cap of its own; '0' forbids caching.
  if (row.cache_max_ttl) account.cacheMaxTtlS = Number(row.cache_max_ttl);
  const mcpTools = parseToolPatterns(row.mcp_tools);
  if (mcpTools) account.mcpTools = mcpTools;
  return account;
}

/** The live team named `name` in any letter case. */
const teamNamed = (record: RecordDb, name: string) =>
  record
    .selectFrom('accounts')
    .select('id')
    .where('kind', '=', 'team')
    .where('deleted', '=', false)
    .where(sql<string>`lower(name)`, '=', name.toLowerCase())
    .executeTakeFirst();

/** Held while a team is named (made or renamed): two admins naming two teams alike at once still make one name. */
const lockTeamNames = (tx: RecordDb) =>
  sql`select pg_advisory_xact_lock(hashtext('switchyard team names'))`.execute(tx);

/** PostgreSQL's unique violation: the email index refused a second live account. */
const isUniqueViolation = (error: unknown) => (error as { code?: string } | null)?.code === '23505';

export class AccountStore {
  private readonly redis: Redis;
  /** See KeyStore.onAccessChanged. */
  onAccessChanged: ((message: string) => void) | undefined;

  constructor(
    redis: Redis,
    readonly record: RecordDb,
    /** Loads Redis again from the record when it finds it lost (optional: the CLI runs without one). */
    private readonly hot?: HotState,
  ) {
    this.redis = redis;
  }

  /**
   * Idempotent: keys made without an account belong to it. Its hot copy only: its row in the
   * record is made where the record needs it (a key for it, a change to it, a load of Redis).
   */
  async ensureDefault(): Promise<void> {
    await ensureDefaultScript(this.redis, {
      account: accountKey(defaultAccountId),
      index: accountsIndexKey,
      accountId: defaultAccountId,
      now: nowSeconds(),
    });
    await openBillScript(this.redis, { bill: billKey(defaultAccountId), accountId: defaultAccountId, unlimited: '1' });
  }

  async create(input: NewAccount): Promise<Account> {
    const id = `acct_${randomBytes(8).toString('hex')}`;
    const email = normalizeEmail(input.email);
    const created = nowSeconds();
    const role = input.role ?? 'member';
    const fields: Record<string, string> = {
      id,
      email,
      name: input.name ?? '',
      role,
      created: String(created),
      unlimited: (input.unlimited ?? unlimitedByRole(role)) ? '1' : '0',
      ...(input.password ? { password: await hashPassword(input.password) } : {}),
    };
    try {
      await this.record
        .insertInto('accounts')
        .values({
          id,
          email,
          name: fields.name!,
          role,
          created,
          password: fields.password ?? '',
          unlimited: fields.unlimited === '1',
          disabled: false,
          deleted: false,
          credits_micros: 0,
          settled_micros: 0,
          playground_key: null,
          ...(input.oidc ? { oidc_issuer: input.oidc.issuer, oidc_subject: input.oidc.subject } : {}),
        })
        .execute();
    } catch (error) {
      if (isUniqueViolation(error)) throw accountExists(email);
      throw error;
    }
    const made = await createAccountScript(this.redis, {
      emails: accountEmailsKey,
      account: accountKey(id),
      index: accountsIndexKey,
      emailIndex: emailIndex(email),
      accountId: id,
      created,
      fields: Object.entries(fields).flat(),
    });
    if (made === 0) {
      // Redis still names the email (a hot copy older than the record): the record decides, so the new row goes.
      await this.record.deleteFrom('accounts').where('id', '=', id).execute();
      throw accountExists(email);
    }
    await openBillScript(this.redis, { bill: billKey(id), accountId: id, unlimited: fields.unlimited! });
    return toAccount(fields, undefined)!;
  }

  /**
   * A team: an account of kind 'team' for several people, holding their money, with no email (it claims none in
   * Redis's email index) and no password (never signed in to). Its name is unique among live teams in any letter
   * case, so an identity provider's group names one team (`findTeamByName`); names are checked under a lock in the
   * record, so two admins naming two teams alike at once still make one. Its members are `TeamStore`'s.
   */
  async createTeam(input: { name: string }): Promise<Account> {
    const id = `acct_${randomBytes(8).toString('hex')}`;
    const name = input.name.trim();
    if (name === '') throw new GatewayError(400, 'A team needs a name.', { code: 'invalid_value', param: 'name' });
    const created = nowSeconds();
    const fields: Record<string, string> = {
      id,
      kind: 'team',
      email: '',
      name,
      role: 'member',
      created: String(created),
      unlimited: '0',
    };
    await this.record.transaction().execute(async (tx) => {
      await lockTeamNames(tx);
      if (await teamNamed(tx, name)) throw teamExists(name);
      await tx
        .insertInto('accounts')
        .values({
          id,
          kind: 'team',
          email: '',
          name,
          role: 'member',
          created,
          password: '',
          unlimited: false,
          disabled: false,
          deleted: false,
          credits_micros: 0,
          settled_micros: 0,
          playground_key: null,
        })
        .execute();
    });
    await createAccountScript(this.redis, {
      emails: accountEmailsKey,
      account: accountKey(id),
      index: accountsIndexKey,
      emailIndex: '',
      accountId: id,
      created,
      fields: Object.entries(fields).flat(),
    });
    await openBillScript(this.redis, { bill: billKey(id), accountId: id, unlimited: '0' });
    return toAccount(fields, undefined)!;
  }

  /** The live team with this name in any letter case (spaces around it ignored), or undefined. */
  async findTeamByName(name: string): Promise<Account | undefined> {
    const row = await teamNamed(this.record, name.trim());
    return row ? this.get(row.id) : undefined;
  }

  /** Undefined for an unknown or deleted account. */
  async get(id: string): Promise<Account | undefined> {
    if (id === defaultAccountId) await this.ensureDefault();
    const [row, bill] = await Promise.all([this.redis.hgetall(accountKey(id)), readBill(this.redis, id)]);
    return toAccount(row, bill);
  }

  /** True when the account exists and is not deleted. */
  async exists(id: string): Promise<boolean> {
    if (id === defaultAccountId) return true;
    const [known, deleted] = await this.redis.hmget(accountKey(id), 'id', 'deleted');
    return Boolean(known) && deleted !== '1';
  }

  async list(): Promise<Account[]> {
    await this.ensureDefault();
    const ids = await this.redis.zrange(accountsIndexKey, '0', '-1');
    if (ids.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetall(accountKey(id));
    const rows = (await pipeline.exec()) ?? [];
    // Bills live in their buckets (other slots): read apart from the directory's pipeline.
    const bills = await Promise.all(ids.map((id) => readBill(this.redis, id)));
    return rows
      .map(([, row], i) => toAccount(row as Record<string, string>, bills[i]))
      .filter((a): a is Account => a !== undefined);
  }

  /** Undefined for an unknown or deleted account; throws 409 when the new email is taken. */
  async update(id: string, changes: AccountChanges): Promise<Account | undefined> {
    const fields: string[] = [];
    if (changes.name !== undefined) fields.push('name', changes.name);
    if (changes.role !== undefined) fields.push('role', changes.role);
    if (changes.email !== undefined) fields.push('email', normalizeEmail(changes.email));
    if (changes.disabled !== undefined) fields.push('disabled', changes.disabled ? '1' : '0');
    if (changes.weight !== undefined) fields.push('weight', String(changes.weight));
    // '' (NULL in the record): none of its own, the configured default.
    if (changes.serviceTiers !== undefined) {
      if (changes.serviceTiers !== null && changes.serviceTiers.length === 0) {
        throw new GatewayError(
          400,
          'An account needs at least one service tier; null gives it the configured default.',
          { code: 'invalid_value', param: 'service_tiers' },
        );
      }
      fields.push('tiers', serviceTiersText(changes.serviceTiers));
    }
    // '' (NULL in the record): no cap of its own.
    if (changes.cacheMaxTtlS !== undefined)
      fields.push('cache_max_ttl', changes.cacheMaxTtlS === null ? '' : String(changes.cacheMaxTtlS));
    // '' (NULL in the record): every tool.
    if (changes.mcpTools !== undefined)
      fields.push('mcp_tools', changes.mcpTools === null ? '' : JSON.stringify(changes.mcpTools));
    if (id === defaultAccountId && changes.unlimited === false) {
      throw new GatewayError(
        400,
        'The default account is always unlimited: give keys that must spend within a balance an account of their own.',
        { code: 'default_account', param: 'unlimited' },
      );
    }
    if (changes.unlimited !== undefined) fields.push('unlimited', changes.unlimited ? '1' : '0');
    else if (changes.role !== undefined && id !== defaultAccountId) {
      // A role change brings the new role's default; so does naming a role for an account that never had the choice
      // made (made before it existed).
      const [role, unlimited] = await this.redis.hmget(accountKey(id), 'role', 'unlimited');
      if (role !== changes.role || unlimited === null)
        fields.push('unlimited', unlimitedByRole(changes.role) ? '1' : '0');
    }
    // '' is "no password": a hash never is.
    if (changes.password !== undefined)
      fields.push('password', changes.password === null ? '' : await hashPassword(changes.password));
    const row: Record<string, string | boolean | number | null> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) {
      const [field, value] = [fields[i]!, fields[i + 1]!];
      // The hash's `tiers` is the record's `service_tiers`, NULL where the hash has ''.
      if (field === 'tiers') row.service_tiers = value === '' ? null : value;
      // And its `cache_max_ttl` is the record's `cache_max_ttl_s`.
      else if (field === 'cache_max_ttl') row.cache_max_ttl_s = value === '' ? null : Number(value);
      else if (field === 'mcp_tools') row.mcp_tools = value === '' ? null : value;
      else
        row[field] =
          field === 'unlimited' || field === 'disabled' ? value === '1' : field === 'weight' ? Number(value) : value;
    }
    if (Object.keys(row).length > 0) {
      if (id === defaultAccountId) await ensureDefaultRecord(this.record);
      try {
        const updated = await this.record.transaction().execute(async (tx) => {
          // A team's name stays unique among live teams in any letter case, checked under createTeam's lock.
          if (
            changes.name !== undefined &&
            (await tx.selectFrom('accounts').select('kind').where('id', '=', id).executeTakeFirst())?.kind === 'team'
          ) {
            const name = changes.name.trim();
            if (name === '')
              throw new GatewayError(400, 'A team needs a name.', { code: 'invalid_value', param: 'name' });
            await lockTeamNames(tx);
            const named = await teamNamed(tx, name);
            if (named && named.id !== id) throw teamExists(name);
          }
          return tx
            .updateTable('accounts')
            .set(row)
            .where('id', '=', id)
            .where('deleted', '=', false)
            .executeTakeFirst();
        });
        if (Number(updated.numUpdatedRows) === 0) return undefined;
      } catch (error) {
        if (isUniqueViolation(error)) throw accountExists(normalizeEmail(changes.email!));
        throw error;
      }
    }
    for (let attempt = 0; attempt < attempts; attempt++) {
      const current = await this.get(id);
      if (!current) return undefined;
      const newIndex = changes.email === undefined ? '' : emailIndex(changes.email);
      const result = await updateAccountScript(this.redis, {
        account: accountKey(id),
        emails: accountEmailsKey,
        accountId: id,
        email: current.email,
        emailIndex: emailIndex(current.email),
        newEmailIndex: newIndex,
        channel: accessChangedChannel,
        fields,
      });
      if (result === 0) return undefined;
      if (result === -1) throw accountExists(normalizeEmail(changes.email!));
      if (result === 1) {
        this.onAccessChanged?.(`account:${id}`);
        const unlimited = fields.indexOf('unlimited');
        if (unlimited >= 0)
          await openBillScript(this.redis, { bill: billKey(id), accountId: id, unlimited: fields[unlimited + 1]! });
        return this.get(id);
      }
    }
    throw new GatewayError(409, 'The account kept changing while it was being updated; retry.', { code: 'conflict' });
  }

  /**
   * Marks the account deleted and revokes its keys. Undefined for an unknown account, else the number of keys revoked.
   */
  async delete(id: string): Promise<number | undefined> {
    if (id === defaultAccountId) {
      throw new GatewayError(400, 'The default account cannot be deleted.', { code: 'default_account' });
    }
    const now = nowSeconds();
    const deleted = await this.record.transaction().execute(async (tx) => {
      const done = await tx
        .updateTable('accounts')
        .set({ deleted: true })
        .where('id', '=', id)
        .where('deleted', '=', false)
        .executeTakeFirst();
      if (Number(done.numUpdatedRows) === 0) return false;
      await tx
        .updateTable('api_keys')
        .set({ revoked: now })
        .where('account_id', '=', id)
        .where('revoked', 'is', null)
        .execute();
      return true;
    });
    if (!deleted) return undefined;
    for (let attempt = 0; attempt < attempts; attempt++) {
      const current = await this.get(id);
      if (!current) return 0;
      const result = await deleteAccountScript(this.redis, {
        account: accountKey(id),
        emails: accountEmailsKey,
        index: accountsIndexKey,
        accountKeys: accountKeysKey(id),
        keyHashes: apiKeyHashesKey,
        keyIds: apiKeyIdsKey,
        accountId: id,
        email: current.email,
        emailIndex: emailIndex(current.email),
        keyRecordPrefix: apiKeyRecordKey(''),
        channel: accessChangedChannel,
      });
      // Its bill goes with it: nothing is admitted for it any more.
      if (result >= -1) await this.redis.del(billKey(id));
      this.onAccessChanged?.(`account:${id}`);
      if (result === -1) return 0;
      if (result >= 0) return result;
    }
    throw new GatewayError(409, 'The account kept changing while it was being deleted; retry.', { code: 'conflict' });
  }

  /**
   * Takes a key the record has revoked already out of Redis, the second half of every revocation (`KeyStore.revoke`,
   * a member's keys revoked with their membership: team-store.ts): out of its account's bill first, so admission
   * refuses it from there on whatever an api still caches, then out of the directory by `revoke-key.lua`, which
   * publishes its id on `accessChangedChannel` so every api instance drops it at once (this one before returning).
   * False when the directory had no such key.
   */
  async unlistRevokedKey(accountId: string, keyId: string): Promise<boolean> {
    await this.redis.hdel(billKey(accountId), ...keyBillFields(keyId));
    const done = await revokeKeyScript(this.redis, {
      record: apiKeyRecordKey(keyId),
      hashes: apiKeyHashesKey,
      ids: apiKeyIdsKey,
      keyId,
      accountKeysPrefix: accountKeysKey(''),
      channel: accessChangedChannel,
      defaultAccountId,
    });
    this.onAccessChanged?.(keyId);
    return done === 1;
  }

  /** Adds (or with a negative amount, takes) credit and records it in the ledger; returns the new balance in micros. */
  async credit(id: string, micros: number, note = ''): Promise<number> {
    if (id === defaultAccountId) throw unlimitedBalance(id);
    const account = await this.record
      .selectFrom('accounts')
      .select(['unlimited', 'deleted'])
      .where('id', '=', id)
      .executeTakeFirst();
    if (!account || account.deleted) throw accountNotFound(id);
    if (account.unlimited) throw unlimitedBalance(id);
    // The record first: the ledger entry and the credits in one transaction; then the hot balance admission reads.
    // The row lock taken by the update orders the ledger ids as the credits: a later entry always counts an earlier
    // one.
    const entry = await this.record.transaction().execute(async (tx) => {
      const updated = await tx
        .updateTable('accounts')
        .set((eb) => ({ credits_micros: eb('credits_micros', '+', micros) }))
        .where('id', '=', id)
        .where('deleted', '=', false)
        .where('unlimited', '=', false)
        .returning('credits_micros')
        .executeTakeFirst();
      if (!updated) return undefined;
      const line = await tx
        .insertInto('ledger')
        .values({ account_id: id, amount_micros: micros, balance_micros: null, note, time: nowSeconds() })
        .returning('id')
        .executeTakeFirstOrThrow();
      return { id: line.id, credits: updated.credits_micros };
    });
    if (!entry) throw accountNotFound(id);
    const balance = await this.applyCredit(id, { id: Number(entry.id), credits: entry.credits }, micros);
    await this.record.updateTable('ledger').set({ balance_micros: balance }).where('id', '=', entry.id).execute();
    return balance;
  }

  /**
   * Brings the hot balance to the record's credits as of a ledger entry: idempotent, so it is retried while Redis is
   * away (about 6 s); a bill Redis lost is loaded again from the record, which holds the entry already.
   */
  private async applyCredit(id: string, entry: { id: number; credits: number }, amount: number): Promise<number> {
    for (let attempt = 1; ; attempt++) {
      try {
        let [status, balance] = await creditScript(this.redis, {
          bill: billKey(id),
          credits: entry.credits,
          ledgerId: entry.id,
          amount,
        });
        if (status === 0 && this.hot) {
          await this.hot.ensure();
          // Loaded again (here or by another process) from a snapshot that may predate the entry: applied once more,
          // idempotently.
          [status, balance] = await creditScript(this.redis, {
            bill: billKey(id),
            credits: entry.credits,
            ledgerId: entry.id,
            amount,
          });
        }
        // Sent again after a reconnection, as a failover may have lost it (shared/redis-journal.ts): idempotent by its
        // ledger id.
        if (status === 1)
          journalWrite(
            this.redis,
            async (on) => (
              await creditScript(on, { bill: billKey(id), credits: entry.credits, ledgerId: entry.id, amount }),
              false
            ),
          );
        if (status !== 1) {
          // No bill to move (the CLI beside no gateway, or one not loaded yet): the balance is the record's.
          return balanceMicros(
            await this.record
              .selectFrom('accounts')
              .select(['credits_micros', 'settled_micros'])
              .where('id', '=', id)
              .executeTakeFirstOrThrow(),
          );
        }
        return Number(balance);
      } catch (error) {
        if (attempt >= 5) {
          throw new GatewayError(
            503,
            `The credit was recorded (ledger entry ${entry.id}) but the balance admission reads could not be ` +
              `updated: Redis is unreachable. ` +
              ("It takes effect with the account's next credit or when Redis is loaded from the record; do not " +
                'repeat this credit.'),
            { code: 'credit_pending' },
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt));
      }
    }
  }

  /** The newest `limit` ledger entries, newest first. */
  async ledger(id: string, limit: number): Promise<LedgerEntry[]> {
    const rows = await this.record
      .selectFrom('ledger')
      .selectAll()
      .where('account_id', '=', id)
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
    return rows.map((row) => ({
      id: String(row.id),
      amountMicros: row.amount_micros,
      balanceMicros: row.balance_micros ?? 0,
      note: row.note,
      time: row.time,
    }));
  }

  /** True when the account exists, has a password and it matches. */
  async checkPassword(id: string, password: string): Promise<boolean> {
    const [stored, deleted] = await this.redis.hmget(accountKey(id), 'password', 'deleted');
    if (!stored || deleted === '1') return false;
    return verifyPassword(password, stored);
  }

  /** The live account owning an email (any letter case), or undefined. */
  async findByEmail(email: string): Promise<Account | undefined> {
    const id = await this.redis.hget(accountEmailsKey, emailIndex(email));
    const account = id ? await this.get(id) : undefined;
    // A team has no email; one given to it by hand still does not make it someone.
    return account?.kind === 'person' ? account : undefined;
  }

  /**
   * The account a sign-in names when its password matches; undefined otherwise. An unknown
   * email costs the same scrypt as a wrong password, so the time taken does not tell which.
   */
  async signIn(email: string, password: string): Promise<Account | undefined> {
    const id = await this.redis.hget(accountEmailsKey, emailIndex(email));
    const [stored, deleted] = id ? await this.redis.hmget(accountKey(id), 'password', 'deleted') : [null, null];
    if (!id || !stored || deleted === '1') {
      await verifyPassword(password, decoyHash);
      return undefined;
    }
    if (!(await verifyPassword(password, stored))) return undefined;
    if (needsRehash(stored)) await this.rehash(id, stored, password);
    const account = await this.get(id);
    return account?.kind === 'person' ? account : undefined;
  }

  /**
   * A proven password whose hash has older parameters, hashed again with today's: in the record first, then in
   * Redis, each only if the hash is still the one proven (a password changed meanwhile is kept). A failure
   * leaves the old hash, which still signs in; the next sign-in tries again.
   */
  private async rehash(id: string, stored: string, password: string): Promise<void> {
    try {
      const fresh = await hashPassword(password);
      const updated = await this.record
        .updateTable('accounts')
        .set({ password: fresh })
        .where('id', '=', id)
        .where('password', '=', stored)
        .executeTakeFirst();
      if (Number(updated.numUpdatedRows) === 0) return;
      await rehashPasswordScript(this.redis, { account: accountKey(id), stored, fresh });
    } catch {
      // Kept as it was: it still verifies.
    }
  }
}
