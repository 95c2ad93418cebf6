import { z } from 'zod';
import { usageMetrics, utcDay, type UsageMetric } from '../../shared/accounts.js';
import type { UsageTotals } from '../../shared/money/usage.js';
import { storableText } from '../../shared/schemas/common.js';
import type { RecordDb, UsageDailyTable } from '../../storage/record/database.js';

/*
 * `GET /admin/usage`: sums of the record's day totals (`usage_daily`, one row
 * per day, account, key and model, which the usage writer keeps in the same
 * transaction as the usage rows), filtered and grouped as asked.
 */

export const maxUsageDays = 400;
const defaultUsageDays = 30;
const dayMs = 86_400_000;

const groupings = ['day', 'account', 'model', 'key'] as const;
export type Grouping = (typeof groupings)[number];

export interface UsageQuery {
  accountId?: string;
  keyId?: string;
  model?: string;
  /** Every UTC day asked for, oldest first. */
  days: string[];
  groupBy: Grouping[];
}

const day = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}$/, 'expected a UTC day as YYYY-MM-DD')
  .refine(
    (text) => !Number.isNaN(Date.parse(`${text}T00:00:00Z`)) && utcDay(Date.parse(`${text}T00:00:00Z`)) === text,
    'no such day',
  );
const id = storableText().min(1).max(256);

export const usageQuerySchema = z
  .strictObject({
    account_id: id.optional(),
    key_id: id.optional(),
    model: id.optional(),
    from: day.optional(),
    to: day.optional(),
    group_by: z
      .string()
      .regex(
        new RegExp(`^(${groupings.join('|')})(,(${groupings.join('|')}))*$`),
        `expected a comma-separated list of ${groupings.join(', ')}`,
      )
      .optional(),
  })
  .transform((query, ctx): UsageQuery => {
    const to = query.to ?? utcDay(Date.now());
    const from = query.from ?? utcDay(Date.parse(`${to}T00:00:00Z`) - (defaultUsageDays - 1) * dayMs);
    const count = (Date.parse(`${to}T00:00:00Z`) - Date.parse(`${from}T00:00:00Z`)) / dayMs + 1;
    if (count < 1)
      ctx.issues.push({
        code: 'custom',
        message: `'from' (${from}) is after 'to' (${to})`,
        path: ['from'],
        input: query.from,
      });
    else if (count > maxUsageDays)
      ctx.issues.push({
        code: 'custom',
        message: `at most ${maxUsageDays} days may be asked for at once, not ${count}`,
        path: ['from'],
        input: query.from,
      });
    if (ctx.issues.length > 0) return z.NEVER;
    const start = Date.parse(`${from}T00:00:00Z`);
    return {
      accountId: query.account_id,
      keyId: query.key_id,
      model: query.model,
      days: Array.from({ length: count }, (_, i) => utcDay(start + i * dayMs)),
      groupBy: query.group_by ? [...new Set(query.group_by.split(',') as Grouping[])] : [],
    };
  });

type Totals = Record<UsageMetric, number>;
const zero = (): Totals => Object.fromEntries(usageMetrics.map((m) => [m, 0])) as Totals;

/**
 * The day totals of some days from the record; with an account, only its own rows are read (its index leads with the
 * account).
 */
export async function loadUsageDays(
  record: RecordDb,
  days: readonly string[],
  accountId?: string,
): Promise<UsageDailyTable[]> {
  if (days.length === 0) return [];
  let query = record
    .selectFrom('usage_daily')
    .selectAll()
    .where('day', '>=', days[0]!)
    .where('day', '<=', days.at(-1)!);
  if (accountId !== undefined) query = query.where('account_id', '=', accountId);
  return query.execute();
}

export async function readUsage(record: RecordDb, query: UsageQuery): Promise<UsageTotals[]> {
  return groupUsage(await loadUsageDays(record, query.days, query.accountId), query);
}

/** Sums the loaded day rows as the query filters and groups them: integers throughout, USD only at the end. */
export function groupUsage(loaded: readonly UsageDailyTable[], query: Omit<UsageQuery, 'days'>): UsageTotals[] {
  const groups = new Map<string, { dims: Partial<Record<Grouping, string>>; totals: Totals }>();
  const grouped = (dims: Partial<Record<Grouping, string>>) => {
    const key = JSON.stringify(query.groupBy.map((g) => dims[g]));
    let group = groups.get(key);
    if (!group) groups.set(key, (group = { dims, totals: zero() }));
    return group.totals;
  };
  if (query.groupBy.length === 0) grouped({});

  for (const row of loaded) {
    if (
      (query.accountId && row.account_id !== query.accountId) ||
      (query.keyId && row.key_id !== query.keyId) ||
      (query.model && row.model !== query.model)
    )
      continue;
    const totals = grouped({ day: row.day, account: row.account_id, model: row.model, key: row.key_id });
    for (const metric of usageMetrics) totals[metric] += row[metric];
  }

  const rows = [...groups.values()].map(({ dims, totals }) => {
    const row: UsageTotals = {
      ...(query.groupBy.includes('day') ? { day: dims.day } : {}),
      ...(query.groupBy.includes('account') ? { account_id: dims.account } : {}),
      ...(query.groupBy.includes('model') ? { model: dims.model } : {}),
      ...(query.groupBy.includes('key') ? { key_id: dims.key } : {}),
      requests: totals.requests,
      input_tokens: totals.input_tokens,
      cached_tokens: totals.cached_tokens,
      cache_write_tokens: totals.cache_write_tokens,
      output_tokens: totals.output_tokens,
      images: totals.images,
      audio_seconds: totals.audio_seconds,
      video_seconds: totals.video_seconds,
      cost_usd: totals.cost_micros / 1e6,
      saved_micros: totals.saved_micros,
      prompt_cache_saved_micros: totals.prompt_cache_saved_micros,
    };
    return row;
  });
  const order = (row: UsageTotals) =>
    [row.day ?? '', row.account_id ?? '', row.model ?? '', row.key_id ?? ''].join('\u0000');
  return rows.sort((a, b) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
}
