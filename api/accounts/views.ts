import type { Account } from '../../shared/accounts.js';
import type { AccountView, AlertView, BudgetValues, KeyLimitValues, KeyView } from '../../shared/console-api.js';
import { microsToUsdText } from '../../shared/alerts.js';
import type { ListedAlert } from '../../storage/record/alerts.js';
import { periodEnd, type BudgetPeriod } from '../../shared/money/budgets.js';
import { microsToUsd, type LedgerEntry } from './account-store.js';
import type { ApiKeyRecord, KeyLimits } from './key-store.js';

/**
 * Accounts, keys and ledger entries as the admin API and the console answer them: USD numbers, unix seconds, null for
 * "none".
 */

/**
 * What an account (a team) has left to spend, in USD; null: it spends without a balance (the default account, and
 * admins unless one is set for them).
 */
export const balanceUsd = (account: Account): number | null =>
  account.balanceMicros === undefined ? null : microsToUsd(account.balanceMicros);

export function accountView(account: Account): AccountView {
  return {
    id: account.id,
    object: 'account',
    kind: account.kind,
    email: account.email,
    name: account.name,
    role: account.role,
    balance_usd: balanceUsd(account),
    unlimited: account.balanceMicros === undefined,
    disabled: account.disabled,
    weight: account.weight,
    // The service tiers an admin granted it; null: the configured default (SERVICE_TIERS_GRANTED).
    service_tiers: account.serviceTiers ?? null,
    // The longest its answers stay in the response cache, seconds (an admin's cap); 0: never cached; null: no cap of
    // its own.
    cache_max_ttl_s: account.cacheMaxTtlS ?? null,
    // The MCP tools its keys may use (shared/mcp/tool-rules.ts); null: every tool.
    mcp_tools: account.mcpTools ?? null,
    created: account.created,
  };
}

export function keyView(key: ApiKeyRecord): KeyView {
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
    // Its default response-cache TTL, seconds: a request without Cache-Control is cached as with max-age=<this> (null,
    // 0: none).
    cache_ttl_s: key.cacheTtlS ?? null,
    // The MCP tools it may use within its account's; null: every tool its account allows.
    mcp_tools: key.mcpTools ?? null,
    spent_usd: microsToUsd(key.spentMicros),
    last_used_at: key.lastUsedAt ?? null,
    ...budgetView(key.budget, key.budgetSpentMicros),
    // The limits an admin set: ceilings the account's members may lower a limit below, never raise or remove (null:
    // none).
    ...(key.adminLimits ? { admin_limits: adminLimitsView(key.adminLimits) } : {}),
  };
}

/**
 * A budget per period as every view shows it (a key's, a team's, a member's cap): the amount, the period, what was
 * spent in the current one and when it ends (ISO, UTC); all null when there is none.
 */
export function budgetView(
  budget: { micros: number; period: BudgetPeriod } | undefined | null,
  spentMicros: number | undefined,
  now = Date.now(),
): BudgetValues {
  if (!budget) return { budget_usd: null, budget_period: null, budget_spent_usd: null, budget_resets_at: null };
  return {
    budget_usd: microsToUsd(budget.micros),
    budget_period: budget.period,
    budget_spent_usd: microsToUsd(spentMicros ?? 0),
    budget_resets_at: new Date(periodEnd(budget.period, now) * 1000).toISOString(),
  };
}

function adminLimitsView(limits: KeyLimits): KeyLimitValues {
  return {
    limit_usd: limits.limitMicros === undefined ? null : microsToUsd(limits.limitMicros),
    rpm: limits.rpm ?? null,
    tpm: limits.tpm ?? null,
    models: limits.models ?? null,
    expires_at: limits.expiresAt ?? null,
  };
}

export function ledgerView(entry: LedgerEntry) {
  return {
    id: entry.id,
    object: 'ledger_entry',
    amount_usd: microsToUsd(entry.amountMicros),
    balance_usd: microsToUsd(entry.balanceMicros),
    note: entry.note,
    created: entry.time,
  };
}

/**
 * An account as the audit log compares it before and after a change: its settings, not its balance (which moves by
 * itself).
 */
export function accountAuditFields(account: Account): Record<string, unknown> {
  const { balance_usd: _balance, object: _object, ...fields } = accountView(account);
  return fields;
}

/**
 * A key as the audit log compares it: its settings and limits, not what it spent or when it was last used, never its
 * secret.
 */
export function keyAuditFields(key: ApiKeyRecord): Record<string, unknown> {
  const { spent_usd: _spent, last_used_at: _used, object: _object, ...fields } = keyView(key);
  return fields;
}

export function alertView(alert: ListedAlert): AlertView {
  return {
    id: alert.id,
    object: 'budget_alert',
    team_id: alert.team_id,
    team_name: alert.team_name,
    kind: alert.kind,
    scope_id: alert.scope_id,
    scope_name: alert.scope_name,
    period: alert.period,
    period_start: alert.period_start,
    period_end: alert.period_end,
    threshold_percent: alert.threshold_percent,
    spent_usd: microsToUsdText(alert.spent_micros),
    limit_usd: microsToUsdText(alert.limit_micros),
    created: Math.floor(alert.created / 1000),
    state: alert.state,
    attempts: alert.attempts,
    last_status: alert.last_status,
    last_error: alert.last_error,
    delivered_at: alert.delivered_at === null ? null : Math.floor(alert.delivered_at / 1000),
  };
}
