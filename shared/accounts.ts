import { usageAmounts } from './money/usage.js';
import { serviceTiers, type ServiceTier } from './scheduling/vocabulary.js';
import type { BudgetInForce, BudgetPeriod } from './money/budgets.js';

/**
 * Accounts and keys as both halves (and the admin API, the CLI and the
 * billing scripts) see them. Money is integer micro-dollars (1 USD =
 * 1,000,000) everywhere. Where they live in Redis: `shared/redis-keys.ts`.
 */
export const defaultAccountId = 'acct_default';

export type AccountRole = 'admin' | 'member';

/**
 * 'person': someone who signs in (every account made before teams), the owner of its own team of one; 'team': an
 * account made for several people (`team_members`), with no email or password, never signed in to.
 */
export type AccountKind = 'person' | 'team';

export interface Account {
  id: string;
  kind: AccountKind;
  /** '' for a team. */
  email: string;
  name: string;
  role: AccountRole;
  created: number;
  /** Micro-dollars; undefined for the unlimited default account. */
  balanceMicros?: number;
  reservedMicros: number;
  /** A disabled account cannot sign in to the console and its keys are refused. */
  disabled: boolean;
  /** Its share of contended capacity against other accounts' (1–100; `shared/scheduling`). */
  weight: number;
  /** The service tiers an admin granted it; undefined = the configured default (`config.scheduling.tiersGranted`). */
  serviceTiers?: ServiceTier[];
  /**
   * The longest its answers are kept in the response cache, seconds, set by an admin (below `CACHE_MAX_TTL_S`,
   * which bounds it too); 0: its requests are never cached; undefined: no cap of its own.
   */
  cacheMaxTtlS?: number;
  /** The MCP tools its keys may use, `server/tool` patterns (shared/mcp/tool-rules.ts); undefined: every tool. */
  mcpTools?: readonly string[];
  /** The team's budget per period (shared/money/budgets.ts); undefined: none. */
  budget?: { micros: number; period: BudgetPeriod };
}

/** What admission needs to know about a key, cached per api instance (dropped on `accessChangedChannel`). */
export interface KeyAccess {
  keyId: string;
  accountId: string;
  /** The most the key may ever spend, micros; undefined = no limit. */
  limitMicros?: number;
  rpm?: number;
  tpm?: number;
  /** Allowed model ids; undefined = every model. */
  models?: readonly string[];
  /** Unix seconds; undefined = never. */
  expiresAt?: number;
  /** The account's share of contended capacity against others' (`shared/scheduling`); undefined = 1. */
  weight?: number;
  /**
   * The service tiers the key's account may use (an admin's grant); undefined = the configured default
   * (`config.scheduling.tiersGranted`).
   */
  tiers?: readonly ServiceTier[];
  /**
   * The key's default response-cache TTL, seconds (set by its owner or an admin): a request of the key that sends
   * no `Cache-Control` is cached as if it sent `max-age=<cacheTtlS>`; undefined = none (the key set none, or 0).
   */
  cacheTtlS?: number;
  /**
   * The key's account's cap on the response cache's TTL, seconds (an admin's); 0 = caching forbidden for the
   * account; undefined = no cap of its own (`CACHE_MAX_TTL_S` still bounds every TTL).
   */
  cacheMaxTtlS?: number;
  /**
   * The budgets per period that hold the key's requests, those set: its account's (the team's), its own, and the cap
   * of the member who made it in that team (shared/money/budgets.ts). Undefined: none.
   */
  budgets?: readonly BudgetInForce[];
  /** The account's name, for a refusal that names the team a member's cap is in. */
  accountName?: string;
  /** The MCP tools the key may use (`server/tool` patterns, shared/mcp/tool-rules.ts); undefined = every tool. */
  mcpTools?: readonly string[];
  /** Those its account (team) allows its keys; undefined = every tool. */
  teamMcpTools?: readonly string[];
}

/**
 * An account's granted service tiers as the record (`accounts.service_tiers`) and its Redis hash (`tiers`) keep
 * them: a comma list in the tiers' own order (`priority,default,flex`); '' (NULL in the record) for none set,
 * i.e. the configured default.
 */
export function serviceTiersText(tiers: readonly ServiceTier[] | null | undefined): string {
  return tiers ? serviceTiers.filter((tier) => tiers.includes(tier)).join(',') : '';
}

/**
 * The tiers a `serviceTiersText` names; undefined for '' / NULL (the configured default), or for a list naming no tier
 * at all.
 */
export function parseServiceTiers(text: string | null | undefined): ServiceTier[] | undefined {
  if (!text) return undefined;
  const named = text.split(',').map((name) => name.trim());
  const tiers = serviceTiers.filter((tier) => named.includes(tier));
  return tiers.length > 0 ? tiers : undefined;
}

/**
 * The metrics of one usage entry that the per-day aggregates sum (`saved_micros`: what the response cache saved;
 * `prompt_cache_saved_micros`: what the vendor's prompt cache saved, signed).
 */
export const usageMetrics = [
  'requests',
  ...usageAmounts,
  'cost_micros',
  'saved_micros',
  'prompt_cache_saved_micros',
] as const;
export type UsageMetric = (typeof usageMetrics)[number];

/** UTC day of a time, as the aggregates and `/admin/usage` name it. */
export function utcDay(ms: number): string {
  const day = Math.floor(ms / 86_400_000);
  if (day !== lastDay.number) lastDay = { number: day, text: new Date(ms).toISOString().slice(0, 10) };
  return lastDay.text;
}
/** Every settlement names its day: formatted once a day, not once a request. */
let lastDay = { number: Number.NaN, text: '' };
