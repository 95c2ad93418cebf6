import { z } from 'zod';
import { utcDay, type Account } from '../../shared/accounts.js';
import type { PriceList } from '../../shared/pricing.js';
import { microsToUsd } from '../account-store.js';
import type { KeyStore } from '../key-store.js';
import type { ModelResolver } from '../model-resolver.js';
import { groupUsage, loadUsageDays, type UsageRow } from '../routes/admin-usage.js';

/*
 * What the console's pricing and usage pages read. Usage is summed by the
 * same code as `GET /admin/usage` (groupUsage over the record's day totals),
 * so the two agree to the micro-dollar.
 */

const dayMs = 86_400_000;

/** Every model `/v1/models` lists, with the prices a client pays for it (markup included), in the units it is billed in. */
export function pricingList(models: ModelResolver, prices: PriceList) {
  return models.list().map((model) => ({
    id: model.id,
    object: 'model',
    vendor: model.owned_by,
    capability: model.capability,
    context_window: model.context_window,
    max_output_tokens: model.max_output_tokens,
    input_modalities: model.input_modalities,
    ...(model.image_sizes ? { image_sizes: model.image_sizes } : {}),
    ...(model.image_qualities ? { image_qualities: model.image_qualities } : {}),
    prices: prices.has(model.id) ? prices.listedPricing(model.id) : null,
  }));
}

export const usageRequestSchema = z.strictObject({
  days: z.enum(['7', '30', '90']).optional(),
  key_id: z.string().min(1).max(256).optional(),
  model: z.string().min(1).max(256).optional(),
});
export type UsageRequest = z.output<typeof usageRequestSchema>;

function daysOf(request: UsageRequest): string[] {
  const count = Number(request.days ?? 30);
  const today = Date.parse(`${utcDay(Date.now())}T00:00:00Z`);
  return Array.from({ length: count }, (_, i) => utcDay(today - (count - 1 - i) * dayMs));
}

/** One account's usage over the last 7, 30 or 90 UTC days: per day and model, per model, per key, and in total. */
export async function usageReport(keyStore: KeyStore, account: Account, request: UsageRequest) {
  const days = daysOf(request);
  const loaded = await loadUsageDays(keyStore.record, days, account.id);
  const filter = { accountId: account.id, keyId: request.key_id, model: request.model };
  const names = new Map((await keyStore.list({ accountId: account.id })).map((key) => [key.id, key.name]));
  // Re-read: the balance shown is as of this report, not of the sign-in.
  const current = (await keyStore.accounts.get(account.id)) ?? account;
  const withName = (row: UsageRow) => ({ ...row, key_name: names.get(row.key_id ?? '') ?? null });
  return {
    object: 'usage',
    from: days[0],
    to: days.at(-1),
    balance_usd: current.balanceMicros === undefined ? null : microsToUsd(current.balanceMicros),
    totals: groupUsage(loaded, { ...filter, groupBy: [] })[0],
    daily: groupUsage(loaded, { ...filter, groupBy: ['day', 'model'] }).filter((row) => row.requests > 0 || row.cost_usd > 0),
    by_model: groupUsage(loaded, { ...filter, groupBy: ['model'] }),
    by_key: groupUsage(loaded, { ...filter, groupBy: ['key'] }).map(withName),
  };
}

const csvColumns = ['day', 'model', 'requests', 'input_tokens', 'cached_tokens', 'output_tokens', 'images', 'audio_seconds', 'video_seconds', 'cost_usd'] as const;

/** A field as CSV writes it; a leading =, +, - or @ is quoted with a ' so a spreadsheet does not run it as a formula. */
function csvField(value: string | number | undefined): string {
  let text = value === undefined ? '' : String(value);
  if (/^[=+\-@\t\r]/.test(text) && typeof value === 'string') text = `'${text}`;
  return /[",\r\n']/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** The daily rows of the usage page as CSV. */
export async function usageCsv(keyStore: KeyStore, account: Account, request: UsageRequest) {
  const report = await usageReport(keyStore, account, request);
  const lines = [csvColumns.join(',')];
  for (const row of report.daily) lines.push(csvColumns.map((column) => csvField(row[column])).join(','));
  return { filename: `usage-${report.from}-to-${report.to}.csv`, csv: `${lines.join('\r\n')}\r\n` };
}
