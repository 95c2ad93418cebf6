import { z } from 'zod';
import { maxWeight, minWeight } from '../../shared/scheduling/index.js';
import { serviceTiers as tierNames } from '../../shared/scheduling/vocabulary.js';
import { invalidRequest } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import { toolPatterns } from '../../shared/mcp/tool-rules.js';
import { toValidationError } from '../http/request-body.js';
import { usdToMicros } from './account-store.js';
import type { KeyChanges, KeySettings } from './key-store.js';
import type { AccountChanges } from './account-store.js';
import { budgetPeriodSchema, type BudgetPeriod } from '../../shared/money/budgets.js';

/*
 * The bodies and queries of the account and key endpoints, shared by the
 * admin API and the console: strict, so a misspelt field is refused rather
 * than silently ignored; money as USD numbers bounded so micros stay exact.
 */

// Every text below reaches the record: `storableText` refuses what PostgreSQL cannot store (NUL) with a 400.
export const keyName = storableText().trim().min(1).max(200);
export const accountName = storableText().trim().max(200);
export const email = storableText().trim().max(320).pipe(z.email());
export const password = z.string().min(8).max(1024);
export const role = z.enum(['admin', 'member']);
export const id = storableText().min(1).max(256);
/** A role in a team (team-roles.ts). */
export const teamRole = z.enum(['owner', 'member', 'viewer']);
/** A team's name: an identity provider's group names it, so it is kept short and on one line. */
export const teamName = storableText()
  .trim()
  .min(1)
  .max(200)
  .regex(/^[^\r\n]*$/, 'a team name is one line');
/** A new team (an admin's), with its first owner if one is named. */
export const createTeamSchema = z.strictObject({ name: teamName, owner_email: email.optional() });
/** A team's new name (its owners' or an admin's). */
export const patchTeamSchema = z.strictObject({ name: teamName });
export const addMemberSchema = z.strictObject({ email, role: teamRole });
export const patchMemberSchema = z.strictObject({ role: teamRole });
/** Bounded so micros stay exact integers (2^53 is about 9e9 USD). */
export const maxUsd = 1e9;
export const limitUsd = z.number().min(0).max(maxUsd);
export const perMinute = z.number().int().min(1).max(1e9);
export const models = z.array(storableText().trim().min(1).max(256)).min(1).max(1000);
export const expiresAt = z.number().int().min(0).max(1e11);
/** The most seconds a cache TTL may name here (a year); `CACHE_MAX_TTL_S` bounds what is kept. */
export const maxCacheTtlS = 31_536_000;
/**
 * Seconds of the response cache: a key's default TTL (`cache_ttl_s`, 0 = none) or an account's cap (`cache_max_ttl_s`,
 * 0 = no caching).
 */
export const cacheTtlS = z.number().int().min(0).max(maxCacheTtlS);

/** Whether the account spends without a balance; left out, its role decides (admins unlimited, members not). */
export const unlimited = z.boolean();
/** An account's share of contended capacity against other accounts' (`shared/scheduling`). */
export const weight = z.number().int().min(minWeight).max(maxWeight);
/**
 * The service tiers an account may use, granted by an admin: each of `priority`, `default`, `flex` at most once, at
 * least one; null goes back to the configured default (SERVICE_TIERS_GRANTED).
 */
export const serviceTiers = z
  .array(z.enum(tierNames))
  .min(1)
  .max(tierNames.length)
  .refine((tiers) => new Set(tiers).size === tiers.length, 'each tier may be named only once')
  .nullable();
/**
 * A budget per period as the APIs take it: `budget_usd` (null clears it) and `budget_period` (`day`, `week`, `month`),
 * named together when one is set; a team's, a key's (beside its lifetime `limit_usd`), or a member's cap.
 */
export const budgetFields = {
  budget_usd: limitUsd.nullable().optional(),
  budget_period: budgetPeriodSchema.optional(),
};

/** The budget the fields set: undefined when absent, null when cleared; a 400 when one is named without the other. */
export function budgetChange(body: {
  budget_usd?: number | null | undefined;
  budget_period?: BudgetPeriod | undefined;
}): { micros: number; period: BudgetPeriod } | null | undefined {
  if (body.budget_usd === undefined) {
    if (body.budget_period !== undefined)
      throw invalidRequest(
        'budget_period needs budget_usd beside it (the amount per period; null clears the budget).',
        'budget_usd',
        'missing_required_parameter',
      );
    return undefined;
  }
  if (body.budget_usd === null) return null;
  if (body.budget_period === undefined)
    throw invalidRequest(
      "budget_usd needs budget_period beside it: 'day', 'week' or 'month' (periods start at 00:00 UTC).",
      'budget_period',
      'missing_required_parameter',
    );
  return { micros: usdToMicros(body.budget_usd), period: body.budget_period };
}

export const createAccountSchema = z.strictObject({
  email,
  name: accountName.optional(),
  password: password.optional(),
  role: role.optional(),
  unlimited: unlimited.optional(),
});
export const patchAccountSchema = z.strictObject({
  email: email.optional(),
  name: accountName.optional(),
  password: password.nullable().optional(),
  role: role.optional(),
  unlimited: unlimited.optional(),
  disabled: z.boolean().optional(),
  weight: weight.optional(),
  service_tiers: serviceTiers.optional(),
  cache_max_ttl_s: cacheTtlS.nullable().optional(),
  mcp_tools: toolPatterns.nullable().optional(),
  ...budgetFields,
});
export const creditSchema = z.strictObject({
  amount_usd: z
    .number()
    .min(-maxUsd)
    .max(maxUsd)
    // Zod runs a refinement after a failed bound too: past the bound the amount has no micros to count (and only the
    // bound is said).
    .refine((usd) => Math.abs(usd) > maxUsd || usdToMicros(usd) !== 0, 'the amount rounds to zero micro-dollars'),
  note: storableText().max(1000).optional(),
});
export const ledgerQuerySchema = z.strictObject({ limit: z.coerce.number().int().min(1).max(1000).optional() });
export const keyLimits = {
  limit_usd: limitUsd.nullable().optional(),
  rpm: perMinute.nullable().optional(),
  tpm: perMinute.nullable().optional(),
  models: models.nullable().optional(),
  expires_at: expiresAt.nullable().optional(),
};
/** A key's settings: its limits, and its default cache TTL (no limit: no ceiling applies to it). */
export const keySettings = {
  ...keyLimits,
  cache_ttl_s: cacheTtlS.nullable().optional(),
  ...budgetFields,
};
/**
 * A key's MCP tools (shared/mcp/tool-rules.ts): an admin's alone to set, so only the admin API's and the admin
 * console's schemas take it.
 */
export const keyMcpTools = { mcp_tools: toolPatterns.nullable().optional() };
export const createKeySchema = z.strictObject({
  name: keyName,
  account_id: id.optional(),
  ...keySettings,
  ...keyMcpTools,
});
export const patchKeySchema = z.strictObject({ name: keyName.optional(), ...keySettings });
export const listKeysSchema = z.strictObject({ account_id: id.optional() });

/** `GET /admin/alerts`: one team's or all, newest first, `limit` (1–500, default 100) after the alert `before`. */
export const alertsQuerySchema = z.strictObject({
  team_id: id.optional(),
  limit: z
    .string()
    .regex(/^\d{1,4}$/, 'expected a whole number')
    .transform(Number)
    .pipe(z.number().int().min(1).max(500))
    .optional(),
  before: id.optional(),
});

/** A strict schema's verdict as an OpenAI-shaped 400; unknown fields are named in the message and `param`. */
export function parseStrict<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const result = schema.safeParse(input, { reportInput: true });
  if (result.success) return result.data;
  const unknown = result.error.issues.find((issue) => issue.code === 'unrecognized_keys');
  if (unknown && unknown.code === 'unrecognized_keys') {
    // Cut long: the names are the client's text, echoed back.
    const names = unknown.keys.map((k) => `'${k.slice(0, 64)}'`).join(', ');
    throw invalidRequest(
      `Unrecognized request argument supplied: ${names}.`,
      unknown.keys[0]?.slice(0, 64) || null,
      'unknown_parameter',
    );
  }
  throw toValidationError(result.error);
}

/**
 * An account's API fields → store changes: absent stays absent; `service_tiers: null` goes back to the configured
 * default, `cache_max_ttl_s: null` lifts the account's cache cap.
 */
export function accountChanges<
  T extends {
    service_tiers?: z.output<typeof serviceTiers>;
    cache_max_ttl_s?: number | null;
    mcp_tools?: string[] | null;
    budget_usd?: number | null;
    budget_period?: BudgetPeriod;
  },
>(
  body: T,
): Omit<T, 'service_tiers' | 'cache_max_ttl_s' | 'mcp_tools' | 'budget_usd' | 'budget_period'> &
  Pick<AccountChanges, 'serviceTiers' | 'cacheMaxTtlS' | 'mcpTools'> {
  const {
    service_tiers: tiers,
    cache_max_ttl_s: cacheMaxTtlS,
    mcp_tools: mcpTools,
    budget_usd: _usd,
    budget_period: _period,
    ...rest
  } = body;
  return {
    ...rest,
    ...(tiers === undefined ? {} : { serviceTiers: tiers }),
    ...(cacheMaxTtlS === undefined ? {} : { cacheMaxTtlS }),
    ...(mcpTools === undefined ? {} : { mcpTools: mcpTools === null ? null : [...new Set(mcpTools)] }),
  };
}

/** API fields → store changes: absent stays absent, null clears. */
export function keyChanges(body: z.output<typeof patchKeySchema> & { mcp_tools?: string[] | null }): KeyChanges {
  const changes: KeyChanges = {};
  if (body.name !== undefined) changes.name = body.name;
  if (body.limit_usd !== undefined) changes.limitMicros = body.limit_usd === null ? null : usdToMicros(body.limit_usd);
  if (body.rpm !== undefined) changes.rpm = body.rpm;
  if (body.tpm !== undefined) changes.tpm = body.tpm;
  if (body.models !== undefined) changes.models = body.models === null ? null : [...new Set(body.models)];
  if (body.expires_at !== undefined) changes.expiresAt = body.expires_at;
  if (body.cache_ttl_s !== undefined) changes.cacheTtlS = body.cache_ttl_s;
  if (body.mcp_tools !== undefined) changes.mcpTools = body.mcp_tools === null ? null : [...new Set(body.mcp_tools)];
  const budget = budgetChange(body);
  if (budget !== undefined) changes.budget = budget;
  return changes;
}

/** A new key's settings as the key store takes them: USD to micros, a repeated model named once, null as none. */
export function newKeyLimits(
  body: { [K in keyof typeof keySettings]?: z.output<(typeof keySettings)[K]> } & { mcp_tools?: string[] | null },
): KeySettings {
  return {
    limitMicros: body.limit_usd == null ? undefined : usdToMicros(body.limit_usd),
    rpm: body.rpm ?? undefined,
    tpm: body.tpm ?? undefined,
    models: body.models ? [...new Set(body.models)] : undefined,
    expiresAt: body.expires_at ?? undefined,
    cacheTtlS: body.cache_ttl_s ?? undefined,
    budget: budgetChange(body) ?? undefined,
    mcpTools: body.mcp_tools ? [...new Set(body.mcp_tools)] : undefined,
  };
}
