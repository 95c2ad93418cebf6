import { createHash, timingSafeEqual } from 'node:crypto';
import Router from '@koa/router';
import { z } from 'zod';
import type { Account } from '../../shared/accounts.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { readJsonObject, toValidationError } from '../request-body.js';
import { accountNotFound, microsToUsd, usdToMicros, type LedgerEntry } from '../account-store.js';
import type { ApiKeyRecord, KeyChanges, KeyStore } from '../key-store.js';
import { readUsage, usageQuerySchema } from './admin-usage.js';

/*
 * Accounts, credits, keys and usage behind `Authorization: Bearer $ADMIN_TOKEN`
 * (compared in constant time). JSON in and out, money as USD numbers (micros
 * in Redis), every body and query checked by a strict schema so a misspelt
 * field is refused rather than silently ignored.
 */

const bodyLimit = 64 * 1024;

const keyName = z.string().trim().min(1).max(200);
const accountName = z.string().trim().max(200);
const email = z.string().trim().max(320).pipe(z.email());
const password = z.string().min(8).max(1024);
const role = z.enum(['admin', 'member']);
const id = z.string().min(1).max(256);
/** Bounded so micros stay exact integers (2^53 is about 9e9 USD). */
const maxUsd = 1e9;
const limitUsd = z.number().min(0).max(maxUsd);
const perMinute = z.number().int().min(1).max(1e9);
const models = z.array(z.string().trim().min(1).max(256)).min(1).max(1000);
const expiresAt = z.number().int().min(0).max(1e11);

const createAccountSchema = z.strictObject({ email, name: accountName.optional(), password: password.optional(), role: role.optional() });
const patchAccountSchema = z.strictObject({ email: email.optional(), name: accountName.optional(), password: password.nullable().optional(), role: role.optional() });
const creditSchema = z.strictObject({
  amount_usd: z
    .number()
    .min(-maxUsd)
    .max(maxUsd)
    .refine((usd) => usdToMicros(usd) !== 0, 'the amount rounds to zero micro-dollars'),
  note: z.string().max(1000).optional(),
});
const ledgerQuerySchema = z.strictObject({ limit: z.coerce.number().int().min(1).max(1000).optional() });
const keyLimits = {
  limit_usd: limitUsd.nullable().optional(),
  rpm: perMinute.nullable().optional(),
  tpm: perMinute.nullable().optional(),
  models: models.nullable().optional(),
  expires_at: expiresAt.nullable().optional(),
};
const createKeySchema = z.strictObject({ name: keyName, account_id: id.optional(), ...keyLimits });
const patchKeySchema = z.strictObject({ name: keyName.optional(), ...keyLimits });
const listKeysSchema = z.strictObject({ account_id: id.optional() });

/** A strict schema's verdict as an OpenAI-shaped 400; unknown fields are named in the message and `param`. */
function parseAdmin<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const result = schema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  const unknown = result.error.issues.find((issue) => issue.code === 'unrecognized_keys');
  if (unknown && unknown.code === 'unrecognized_keys') {
    // Cut long: the names are the client's text, echoed back.
    const names = unknown.keys.map((k) => `'${k.slice(0, 64)}'`).join(', ');
    throw invalidRequest(`Unrecognized request argument supplied: ${names}.`, unknown.keys[0]?.slice(0, 64) || null, 'unknown_parameter');
  }
  throw toValidationError(result.error);
}

const keyNotFound = (keyId: string) => new GatewayError(404, `No API key with id '${keyId}'.`, { code: 'key_not_found' });

function accountView(account: Account) {
  return {
    id: account.id,
    object: 'account',
    email: account.email,
    name: account.name,
    role: account.role,
    // null: the default account's balance is unlimited.
    balance_usd: account.balanceMicros === undefined ? null : microsToUsd(account.balanceMicros),
    created: account.created,
  };
}

function keyView(key: ApiKeyRecord) {
  return {
    id: key.id,
    object: 'api_key',
    name: key.name,
    hint: key.hint,
    created: key.created,
    account_id: key.accountId,
    limit_usd: key.limitMicros === undefined ? null : microsToUsd(key.limitMicros),
    rpm: key.rpm ?? null,
    tpm: key.tpm ?? null,
    models: key.models ?? null,
    expires_at: key.expiresAt ?? null,
    spent_usd: microsToUsd(key.spentMicros),
    last_used_at: key.lastUsedAt ?? null,
  };
}

function ledgerView(entry: LedgerEntry) {
  return {
    id: entry.id,
    object: 'ledger_entry',
    amount_usd: microsToUsd(entry.amountMicros),
    balance_usd: microsToUsd(entry.balanceMicros),
    note: entry.note,
    created: entry.time,
  };
}

/** API fields → store changes: absent stays absent, null clears. */
function keyChanges(body: z.output<typeof patchKeySchema>): KeyChanges {
  const changes: KeyChanges = {};
  if (body.name !== undefined) changes.name = body.name;
  if (body.limit_usd !== undefined) changes.limitMicros = body.limit_usd === null ? null : usdToMicros(body.limit_usd);
  if (body.rpm !== undefined) changes.rpm = body.rpm;
  if (body.tpm !== undefined) changes.tpm = body.tpm;
  if (body.models !== undefined) changes.models = body.models === null ? null : [...new Set(body.models)];
  if (body.expires_at !== undefined) changes.expiresAt = body.expires_at;
  return changes;
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export function adminRoutes(store: KeyStore, adminToken: string | undefined): Router {
  const router = new Router({ prefix: '/admin' });
  const accounts = store.accounts;
  const expected = adminToken ? digest(adminToken) : undefined;

  router.use(async (ctx, next) => {
    if (!expected) {
      throw new GatewayError(403, 'The admin API is disabled: set ADMIN_TOKEN to enable it.', { code: 'admin_disabled' });
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      throw new GatewayError(401, 'Invalid admin token.', { code: 'invalid_admin_token' });
    }
    await next();
  });

  const existingAccount = async (accountId: string): Promise<Account> => {
    const account = await accounts.get(accountId);
    if (!account) throw accountNotFound(accountId);
    return account;
  };

  // ---- accounts ----

  router.post('/accounts', async (ctx) => {
    const body = parseAdmin(createAccountSchema, await readJsonObject(ctx.req, bodyLimit));
    const account = await accounts.create(body);
    ctx.status = 201;
    ctx.body = accountView(account);
  });

  router.get('/accounts', async (ctx) => {
    ctx.body = { object: 'list', data: (await accounts.list()).map(accountView) };
  });

  router.get('/accounts/:id', async (ctx) => {
    ctx.body = accountView(await existingAccount(ctx.params.id!));
  });

  router.patch('/accounts/:id', async (ctx) => {
    const body = parseAdmin(patchAccountSchema, await readJsonObject(ctx.req, bodyLimit));
    const account = await accounts.update(ctx.params.id!, body);
    if (!account) throw accountNotFound(ctx.params.id!);
    ctx.body = accountView(account);
  });

  router.delete('/accounts/:id', async (ctx) => {
    const revoked = await accounts.delete(ctx.params.id!);
    if (revoked === undefined) throw accountNotFound(ctx.params.id!);
    ctx.body = { id: ctx.params.id!, object: 'account', deleted: true, keys_revoked: revoked };
  });

  router.post('/accounts/:id/credits', async (ctx) => {
    const body = parseAdmin(creditSchema, await readJsonObject(ctx.req, bodyLimit));
    const balance = await accounts.credit(ctx.params.id!, usdToMicros(body.amount_usd), body.note ?? '');
    ctx.body = { object: 'account.balance', account_id: ctx.params.id!, balance_usd: microsToUsd(balance) };
  });

  router.get('/accounts/:id/ledger', async (ctx) => {
    const { limit } = parseAdmin(ledgerQuerySchema, ctx.query);
    await existingAccount(ctx.params.id!);
    ctx.body = { object: 'list', data: (await accounts.ledger(ctx.params.id!, limit ?? 100)).map(ledgerView) };
  });

  // ---- keys ----

  router.post('/keys', async (ctx) => {
    const body = parseAdmin(createKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const created = await store.create(body.name, {
      accountId: body.account_id,
      limitMicros: body.limit_usd == null ? undefined : usdToMicros(body.limit_usd),
      rpm: body.rpm ?? undefined,
      tpm: body.tpm ?? undefined,
      models: body.models ? [...new Set(body.models)] : undefined,
      expiresAt: body.expires_at ?? undefined,
    });
    ctx.status = 201;
    ctx.body = { ...keyView(created), key: created.key };
  });

  router.get('/keys', async (ctx) => {
    const { account_id: accountId } = parseAdmin(listKeysSchema, ctx.query);
    if (accountId) await existingAccount(accountId);
    ctx.body = { object: 'list', data: (await store.list({ accountId })).map(keyView) };
  });

  router.get('/keys/:id', async (ctx) => {
    const key = await store.get(ctx.params.id!);
    if (!key) throw keyNotFound(ctx.params.id!);
    ctx.body = keyView(key);
  });

  router.patch('/keys/:id', async (ctx) => {
    const body = parseAdmin(patchKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const key = await store.update(ctx.params.id!, keyChanges(body));
    if (!key) throw keyNotFound(ctx.params.id!);
    ctx.body = keyView(key);
  });

  router.delete('/keys/:id', async (ctx) => {
    const keyId = ctx.params.id!;
    if (!(await store.revoke(keyId))) throw keyNotFound(keyId);
    ctx.body = { id: keyId, object: 'api_key', deleted: true };
  });

  // ---- usage ----

  router.get('/usage', async (ctx) => {
    const query = parseAdmin(usageQuerySchema, ctx.query);
    ctx.body = { object: 'list', data: await readUsage(store.redis, query) };
  });

  return router;
}
