import { createHmac } from 'node:crypto';
import { periodEnd, type BudgetPeriod } from './money/budgets.js';

/**
 * Budget alerts: what a crossing the money scripts decided (shared/money/lua/money.lua `crossings`) is, once read
 * from its bucket's alerts stream, and how the webhook hears of it. The scripts decide each crossing once (a mark in
 * the bill) and append it to the stream in the same step; the record's alert writer (storage/record/alerts.ts) turns
 * it into a row of the `alerts` table and a job of the `{alerts}` queue; the worker (workers/alert-delivery.ts)
 * delivers it. The alert's id names the team, the budget, the period and the threshold, so a crossing recorded twice
 * (a stream entry read again) is one row and one job.
 */

/** Whose limit was crossed: the team's budget, a key's budget, a member's cap, or a key's lifetime limit. */
export const alertKinds = ['team', 'key', 'member', 'key_lifetime'] as const;
export type AlertKind = (typeof alertKinds)[number];

/** Where an alert's delivery stands: queued or being tried, delivered, given up, or recorded with no webhook set. */
export const alertStates = ['pending', 'delivered', 'failed', 'no_webhook'] as const;
export type AlertState = (typeof alertStates)[number];

/** An alert as a crossing makes it: everything its row and its webhook body say but the team's name. */
export interface Alert {
  id: string;
  teamId: string;
  kind: AlertKind;
  /** The team's id (`team`), the key's (`key`, `key_lifetime`) or the member's account id (`member`). */
  scopeId: string;
  /** None for a key's lifetime limit. */
  period: BudgetPeriod | null;
  /** Unix seconds; null for a lifetime limit. */
  periodStart: number | null;
  periodEnd: number | null;
  thresholdPercent: number;
  limitMicros: number;
  spentMicros: number;
  /** When the settlement decided it (ms): the stream entry's time. */
  createdMs: number;
}

const periodOfLetter: Readonly<Record<string, BudgetPeriod>> = { d: 'day', w: 'week', m: 'month' };

/**
 * The alert of one alerts stream entry (`account`, `crossing` '<counter or key id>|<percent>|<limit>|<spent>', the
 * entry's id giving its time); undefined for an entry that is not one.
 */
export function readAlertEntry(entryId: string, fields: readonly string[]): Alert | undefined {
  const field = (name: string) => {
    const at = fields.indexOf(name);
    return at >= 0 && at % 2 === 0 ? fields[at + 1] : undefined;
  };
  const teamId = field('account');
  const [mark = '', percent, limit, spent] = (field('crossing') ?? '').split('|');
  const thresholdPercent = Number(percent);
  const limitMicros = Number(limit);
  const spentMicros = Number(spent);
  const createdMs = Number(entryId.split('-')[0]);
  if (
    !teamId ||
    !mark ||
    !Number.isSafeInteger(thresholdPercent) ||
    !Number.isSafeInteger(limitMicros) ||
    !Number.isSafeInteger(spentMicros) ||
    !Number.isSafeInteger(createdMs)
  ) {
    return undefined;
  }
  const base = { teamId, thresholdPercent, limitMicros, spentMicros, createdMs };
  // A budget's counter: 'b:t:<p><start>', 'b:k:<key>:<p><start>', 'b:m:<member>:<p><start>' (shared/money/budgets.ts).
  const budget = /^b:(t|k|m)(?::(.+))?:([dwm])(\d+)$/.exec(mark);
  if (budget) {
    const [, scope, owner, letter, start] = budget;
    const kind: AlertKind = scope === 't' ? 'team' : scope === 'k' ? 'key' : 'member';
    const scopeId = kind === 'team' ? teamId : owner;
    const period = periodOfLetter[letter!]!;
    const periodStart = Number(start);
    if (!scopeId) return undefined;
    const slot = `${letter}${periodStart}`;
    return {
      ...base,
      id: alertId(teamId, kind, scopeId, slot, thresholdPercent),
      kind,
      scopeId,
      period,
      periodStart,
      periodEnd: periodEnd(period, periodStart * 1000),
    };
  }
  if (mark.startsWith('b:')) return undefined;
  // Else the mark is a key's id: its lifetime limit, crossed once ever.
  return {
    ...base,
    id: alertId(teamId, 'key_lifetime', mark, 'lifetime', thresholdPercent),
    kind: 'key_lifetime',
    scopeId: mark,
    period: null,
    periodStart: null,
    periodEnd: null,
  };
}

/** The alert's id: the team, the kind, the scope, the period ('<d|w|m><start>' or 'lifetime'), the threshold. */
function alertId(teamId: string, kind: AlertKind, scopeId: string, period: string, percent: number): string {
  return `${teamId}/${kind}/${scopeId}/${period}/${percent}`;
}

/** Micro-dollars as an exact decimal of USD with six places (`12.345678`, `-0.000001`): no float on the way. */
export function microsToUsdText(micros: number): string {
  const sign = micros < 0 ? '-' : '';
  const digits = String(Math.abs(Math.trunc(micros))).padStart(7, '0');
  return `${sign}${digits.slice(0, -6)}.${digits.slice(-6)}`;
}

/** The webhook's body (docs/budgets.md#alerts): snake_case, amounts as exact decimal strings of USD, times ISO 8601. */
export function alertBody(alert: Alert, teamName: string, scopeName: string): Record<string, unknown> {
  const iso = (seconds: number | null) => (seconds === null ? null : new Date(seconds * 1000).toISOString());
  return {
    id: alert.id,
    type: 'budget.threshold_crossed',
    team_id: alert.teamId,
    team_name: teamName,
    kind: alert.kind,
    scope_id: alert.scopeId,
    scope_name: scopeName,
    period: alert.period,
    period_start: iso(alert.periodStart),
    period_end: iso(alert.periodEnd),
    threshold_percent: alert.thresholdPercent,
    spent_usd: microsToUsdText(alert.spentMicros),
    limit_usd: microsToUsdText(alert.limitMicros),
    created_at: new Date(alert.createdMs).toISOString(),
  };
}

/** The header a delivery carries its signature in. */
export const signatureHeader = 'Switchyard-Signature';

/** `t=<unix s>,v1=<hex HMAC-SHA256 of '<t>.<body>' under the secret>`: what a receiver recomputes to trust a body. */
export function signAlert(secret: string, body: string, unixSeconds: number): string {
  const digest = createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex');
  return `t=${unixSeconds},v1=${digest}`;
}
