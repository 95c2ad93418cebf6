import { z } from 'zod';

/**
 * Budgets that start again each period, beside the balance and a key's lifetime limit: a team's (its account's),
 * a key's, and a member's cap (what the keys a member made in a team may spend). Periods are UTC: a day from 00:00,
 * a week from Monday 00:00, a month from its 1st 00:00. The api computes the period's start from its clock and
 * sends it with `now` to the money scripts, which count each budget's spend and holds in the account's bill under
 * a counter named after the budget and the period's start (`budgetCounter`): the period a request was admitted in
 * is the one its cost counts in, whenever it is settled.
 */

export const budgetPeriods = ['day', 'week', 'month'] as const;
export type BudgetPeriod = (typeof budgetPeriods)[number];
export const budgetPeriodSchema = z.enum(budgetPeriods);

/** Whose budget: the team's (the account's), one key's, or one member's cap in the team. */
export type BudgetScope = 'team' | 'key' | 'member';

/** A budget as admission applies it; `ownerId` is the key's id for `key`, the member's account id for `member`. */
export interface BudgetInForce {
  scope: BudgetScope;
  micros: number;
  period: BudgetPeriod;
  ownerId?: string;
}

/** Unix seconds at which the period holding `nowMs` started. */
export function periodStart(period: BudgetPeriod, nowMs: number): number {
  const now = new Date(nowMs);
  const day = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  if (period === 'day') return day / 1000;
  if (period === 'month') return Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1) / 1000;
  // getUTCDay: Sunday 0 … Saturday 6; the week starts on Monday.
  const sinceMonday = (now.getUTCDay() + 6) % 7;
  return day / 1000 - sinceMonday * 86_400;
}

/** Unix seconds at which the period holding `nowMs` ends (the next one starts): when its budget resets. */
export function periodEnd(period: BudgetPeriod, nowMs: number): number {
  const start = new Date(periodStart(period, nowMs) * 1000);
  if (period === 'day') return start.getTime() / 1000 + 86_400;
  if (period === 'week') return start.getTime() / 1000 + 7 * 86_400;
  return Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1) / 1000;
}

const periodLetter = { day: 'd', week: 'w', month: 'm' } as const;

/** The budget's own name in the bill, the same in every period: `b:t`, `b:k:<key>`, `b:m:<member>`. */
export function budgetName(budget: Pick<BudgetInForce, 'scope' | 'ownerId'>): string {
  if (budget.scope === 'team') return 'b:t';
  return `b:${budget.scope === 'key' ? 'k' : 'm'}:${budget.ownerId ?? ''}`;
}

/**
 * The counter of one budget in one period: `<budget name>:<d|w|m><period start, unix s>`. Its fields in the bill
 * are `<counter>.spent`, `<counter>.reserved` and `<counter>.alerted` (the highest alert threshold sent). The period's
 * kind is part of it, so a budget changed from daily to monthly on the 1st does not take over the day's counter.
 */
export function budgetCounter(budget: Pick<BudgetInForce, 'scope' | 'ownerId' | 'period'>, nowMs: number): string {
  return `${budgetName(budget)}:${periodLetter[budget.period]}${periodStart(budget.period, nowMs)}`;
}

/** The budgets as the money scripts take them: `<counter>=<micros>` joined by commas ('' for none). */
export function budgetsArgument(budgets: readonly BudgetInForce[], nowMs: number): string {
  return budgets.map((budget) => `${budgetCounter(budget, nowMs)}=${budget.micros}`).join(',');
}

const periodAdjective = { day: 'daily', week: 'weekly', month: 'monthly' } as const;

/**
 * How a refusal names a budget: "the team's daily budget", "this API key's monthly budget", "your weekly cap in team
 * X".
 */
export function describeBudget(budget: BudgetInForce, teamName?: string): string {
  const adjective = periodAdjective[budget.period];
  if (budget.scope === 'team') return `the team's ${adjective} budget`;
  if (budget.scope === 'key') return `this API key's ${adjective} budget`;
  return `your ${adjective} cap in team ${teamName ? `"${teamName}"` : 'this key belongs to'}`;
}

/** The 429's message when a budget refused a request: which budget, and when it resets. */
export function budgetRefusal(budget: BudgetInForce, nowMs: number, teamName?: string): string {
  const resets = new Date(periodEnd(budget.period, nowMs) * 1000).toISOString();
  const usd = (budget.micros / 1_000_000).toFixed(2);
  return (
    `You exceeded ${describeBudget(budget, teamName)} ($${usd}): the request could cost more than is left of it ` +
    `this period. It resets at ${resets}.`
  );
}

/**
 * A budget as the directory keeps it (a key's or an account's `budget` field, a member cap field): '<micros> <period>'.
 */
export function budgetText(budget: { micros: number; period: BudgetPeriod } | null | undefined): string {
  return budget ? `${budget.micros} ${budget.period}` : '';
}

/** The budget a `budgetText` names; undefined for '' or anything else. */
export function parseBudgetText(text: string | null | undefined): { micros: number; period: BudgetPeriod } | undefined {
  const match = /^(\d+) (day|week|month)$/.exec(text ?? '');
  if (!match) return undefined;
  return { micros: Number(match[1]), period: match[2] as BudgetPeriod };
}
