import type { Selectable } from 'kysely';
import { budgetCounter, periodStart, type BudgetInForce, type BudgetPeriod } from '../../shared/money/budgets.js';
import type { AccountsTable, ApiKeysTable, RecordDb, TeamMembersTable } from './database.js';
import type { UsageRow } from './usage-writer.js';

/**
 * What each budget has spent in its current period, summed from the record's usage rows (and the usage settled in
 * Redis the record has not written yet): the counters Redis holds, made again when Redis lost them, so a flush
 * never starts a budget over. A row counts in the period of its `created` (its arrival), as admission counted it.
 */

/** A budget as the record keeps it (both columns set, or none). */
export function budgetOf(
  micros: number | null,
  period: BudgetPeriod | null,
): { micros: number; period: BudgetPeriod } | undefined {
  return micros === null || period === null ? undefined : { micros: Number(micros), period };
}

export interface PeriodSpend {
  accountId: string;
  counter: string;
  spent: number;
}

type Tx = Pick<RecordDb, 'selectFrom'>;

export async function readPeriodSpend(
  tx: Tx,
  accounts: ReadonlyArray<Pick<Selectable<AccountsTable>, 'id' | 'budget_micros' | 'budget_period'>>,
  keys: ReadonlyArray<Pick<Selectable<ApiKeysTable>, 'id' | 'account_id' | 'budget_micros' | 'budget_period'>>,
  caps: ReadonlyArray<Pick<TeamMembersTable, 'team_id' | 'member_id' | 'cap_micros' | 'cap_period'>>,
  unwritten: readonly UsageRow[],
  now = Date.now(),
): Promise<PeriodSpend[]> {
  const out: PeriodSpend[] = [];
  const pending = (since: number, match: (row: UsageRow) => boolean) =>
    unwritten.filter((row) => row.created >= since && match(row)).reduce((sum, row) => sum + row.cost_micros, 0);
  const settledSince = (since: number) =>
    tx
      .selectFrom('usage')
      .select((eb) => eb.fn.coalesce(eb.fn.sum<number>('cost_micros'), eb.lit(0)).as('spent'))
      .where('settled', '=', true)
      .where('created', '>=', since);

  for (const a of accounts) {
    const budget = budgetOf(a.budget_micros, a.budget_period);
    if (!budget) continue;
    const since = periodStart(budget.period, now);
    const row = await settledSince(since).where('account_id', '=', a.id).executeTakeFirst();
    out.push({
      accountId: a.id,
      counter: budgetCounter({ scope: 'team', period: budget.period }, now),
      spent: Number(row?.spent ?? 0) + pending(since, (r) => r.account_id === a.id),
    });
  }
  for (const k of keys) {
    const budget = budgetOf(k.budget_micros, k.budget_period);
    if (!budget) continue;
    const since = periodStart(budget.period, now);
    const row = await settledSince(since).where('key_id', '=', k.id).executeTakeFirst();
    out.push({
      accountId: k.account_id,
      counter: budgetCounter({ scope: 'key', ownerId: k.id, period: budget.period }, now),
      spent: Number(row?.spent ?? 0) + pending(since, (r) => r.key_id === k.id),
    });
  }
  for (const c of caps) {
    const budget = budgetOf(c.cap_micros, c.cap_period);
    if (!budget) continue;
    const since = periodStart(budget.period, now);
    const made = await tx
      .selectFrom('api_keys')
      .select('id')
      .where('account_id', '=', c.team_id)
      .where('created_by', '=', c.member_id)
      .execute();
    const ids = made.map((key) => key.id);
    const member: BudgetInForce = {
      scope: 'member',
      ownerId: c.member_id,
      period: budget.period,
      micros: budget.micros,
    };
    const row =
      ids.length === 0
        ? undefined
        : await settledSince(since).where('account_id', '=', c.team_id).where('key_id', 'in', ids).executeTakeFirst();
    out.push({
      accountId: c.team_id,
      counter: budgetCounter(member, now),
      spent: Number(row?.spent ?? 0) + pending(since, (r) => r.account_id === c.team_id && ids.includes(r.key_id)),
    });
  }
  return out;
}
