import { sql } from 'kysely';
import { z } from 'zod';
import { utcDay, type Account } from '../../shared/accounts.js';
import { invalidRequest } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import type { PriceList } from '../../shared/money/pricing.js';
import type { RecordDb } from '../../storage/record/database.js';
import { latencyByModel, listRequests, requestHistogram, type RequestFilter } from '../../storage/record/request-log.js';
import { microsToUsd } from '../accounts/account-store.js';
import { parseStrict } from '../accounts/account-requests.js';
import type { KeyStore } from '../accounts/key-store.js';
import type { ModelResolver } from '../requests/model-resolver.js';
import type { KeyUsageTotals, UsageTotals } from '../../shared/money/usage.js';
import type { ActivityRow, RequestHistogram, RequestPage, SessionFacts, UsageReport } from '../../shared/console-api.js';
import { groupUsage, loadUsageDays, type Grouping } from '../accounts/admin-usage.js';
import { requestFilterQuerySchema, requestListQuerySchema } from '../accounts/admin-requests.js';

/*
 * What the console's pricing, usage and activity pages read. Usage is summed
 * by the same code as `GET /admin/usage` (groupUsage over the record's day
 * totals), so the two agree to the micro-dollar; the activity page's list is
 * `GET /admin/requests`'s, read through the same query schema.
 */

const dayMs = 86_400_000;

/** Every model `/v1/models` lists, with the prices a client pays for it (markup included), in the units it is billed in. */
export function pricingList(models: ModelResolver, prices: PriceList) {
  return models.list().map((model) => ({
    id: model.id,
    object: 'model',
    // The vendor that serves it, as Channels and Activity name it (`bfl`), not its maker (`black-forest-labs`).
    vendor: model.routes[0]?.vendor ?? model.owned_by,
    capability: model.capability,
    context_window: model.context_window,
    max_output_tokens: model.max_output_tokens,
    input_modalities: model.input_modalities,
    ...(model.image_sizes ? { image_sizes: model.image_sizes } : {}),
    ...(model.image_qualities ? { image_qualities: model.image_qualities } : {}),
    // A speech model's formats, voices and options (the Playground's Speech tab offers only what it takes).
    ...speechFields(model),
    prices: prices.has(model.id) ? prices.listedPricing(model.id) : null,
  }));
}

const speechFieldNames = ['speech_formats', 'speech_voices', 'speech_options'] as const;

function speechFields(model: Record<string, unknown>): Partial<Record<(typeof speechFieldNames)[number], string[]>> {
  const fields: Partial<Record<(typeof speechFieldNames)[number], string[]>> = {};
  for (const name of speechFieldNames) {
    const value = model[name];
    if (Array.isArray(value) && value.every((item) => typeof item === 'string')) fields[name] = value;
  }
  return fields;
}

export const usageRequestSchema = z.strictObject({
  days: z.enum(['7', '30', '90']).optional(),
  // An admin's usage is every account's (as on the activity page) unless this names one; a member's is always its own.
  account_id: storableText().min(1).max(256).optional(),
  key_id: storableText().min(1).max(256).optional(),
  model: storableText().min(1).max(256).optional(),
});
export type UsageRequest = z.output<typeof usageRequestSchema>;

function daysOf(request: UsageRequest): string[] {
  const count = Number(request.days ?? 30);
  const today = Date.parse(`${utcDay(Date.now())}T00:00:00Z`);
  return Array.from({ length: count }, (_, i) => utcDay(today - (count - 1 - i) * dayMs));
}

/** Whose usage a session reads: a member its own account's, whatever it names; an admin the account it names, or every account's (undefined). */
function usageAccount(account: Account, request: UsageRequest): string | undefined {
  return account.role === 'admin' ? request.account_id : account.id;
}

/** An account's (or, undefined, every account's) usage over the last 7, 30 or 90 UTC days, read from the record's day totals and summed by `groupUsage`. */
async function usageDays(keyStore: KeyStore, accountId: string | undefined, request: UsageRequest) {
  const days = daysOf(request);
  const loaded = await loadUsageDays(keyStore.record, days, accountId);
  const filter = { accountId, keyId: request.key_id, model: request.model };
  const group = (groupBy: Grouping[]) => groupUsage(loaded, { ...filter, groupBy });
  return { days, group, daily: group(['day', 'model']).filter((row) => row.requests > 0 || row.cost_usd > 0) };
}

/**
 * The names of the keys a report lists, revoked ones too (the record keeps a
 * revoked key's row, name and owner): from the record, or for a key the
 * record does not hold yet (written while it was unreachable), from Redis.
 */
async function keyNames(keyStore: KeyStore, ids: string[]): Promise<Map<string, { name: string; revoked: boolean; accountId: string }>> {
  const names = new Map<string, { name: string; revoked: boolean; accountId: string }>();
  if (ids.length === 0) return names;
  const rows = await keyStore.record.selectFrom('api_keys').select(['id', 'name', 'revoked', 'account_id']).where('id', 'in', ids).execute();
  for (const row of rows) names.set(row.id, { name: row.name, revoked: row.revoked !== null, accountId: row.account_id });
  for (const id of ids.filter((id) => !names.has(id))) {
    const key = await keyStore.get(id);
    if (key) names.set(id, { name: key.name, revoked: false, accountId: key.accountId });
  }
  return names;
}

/**
 * Usage over the last 7, 30 or 90 UTC days: per day and model, per model, per
 * key (its name kept after a revoke, and marked so), and in total; and from
 * the request log, latency, time to first token and error rate per model
 * over the same days. A member's account's; an admin's every account's
 * (`account_id: null`, no balance), or the one `account_id` names.
 */
export async function usageReport(keyStore: KeyStore, account: Account, request: UsageRequest): Promise<UsageReport> {
  const accountId = usageAccount(account, request);
  const { days, group, daily } = await usageDays(keyStore, accountId, request);
  const since = Date.parse(`${days[0]}T00:00:00Z`) / 1000;
  const until = Date.parse(`${days.at(-1)}T00:00:00Z`) / 1000 + 86_400;
  const latency = await latencyByModel(keyStore.record, {
    ...(accountId !== undefined ? { accountId } : {}),
    ...(request.key_id !== undefined ? { keyId: request.key_id } : {}),
    ...(request.model !== undefined ? { model: request.model } : {}),
    since,
    until,
  });
  const byKey = group(['key']);
  const names = await keyNames(keyStore, [...new Set(byKey.map((row) => row.key_id).filter((id): id is string => Boolean(id)))]);
  // Re-read: the balance shown is as of this report, not of the sign-in.
  const current = accountId === undefined ? undefined : accountId === account.id ? ((await keyStore.accounts.get(account.id)) ?? account) : await keyStore.accounts.get(accountId);
  const withName = (row: UsageTotals): KeyUsageTotals => {
    const named = names.get(row.key_id ?? '');
    return { ...row, key_name: named?.name ?? null, key_revoked: named?.revoked ?? false, key_account_id: named?.accountId ?? null };
  };
  return {
    object: 'usage',
    account_id: accountId ?? null,
    from: days[0]!,
    to: days.at(-1)!,
    balance_usd: current?.balanceMicros === undefined ? null : microsToUsd(current.balanceMicros),
    totals: group([])[0],
    daily,
    by_model: group(['model']),
    by_key: byKey.map(withName),
    latency,
  };
}

// ---- the activity page: the request log of an account (of every account, for an admin) ----

/**
 * Whose requests a session reads: a member only its own account's, whatever
 * `account_id` it names (another account's rows are never a filter away); an
 * admin every account's, or the one it names.
 */
function scoped(account: Account, filter: RequestFilter): RequestFilter {
  return account.role === 'admin' ? filter : { ...filter, accountId: account.id };
}

/** A page of requests, newest first, as `GET /admin/requests` answers it. */
export async function requestList(record: RecordDb, account: Account, query: unknown): Promise<RequestPage<ActivityRow>> {
  const { filter, limit, cursor } = parseStrict(requestListQuerySchema, query);
  const page = await listRequests(record, scoped(account, filter), limit, cursor);
  const sessions = await sessionFacts(record, page.data.filter((row) => row.endpoint === 'realtime').map((row) => row.id));
  if (sessions.size === 0) return page;
  return { ...page, data: page.data.map((row) => (sessions.has(row.id) ? { ...row, session: sessions.get(row.id)! } : row)) };
}

/**
 * A session's row (endpoint `realtime`, written by its worker at its end) sums its responses, each settled on a row
 * of its own (`<session's request id>:<response id>`, endpoint `realtime.response`): the responses are counted from
 * those, the duration is the worker's.
 */
async function sessionFacts(record: RecordDb, ids: string[]): Promise<Map<string, SessionFacts>> {
  const facts = new Map<string, SessionFacts>();
  if (ids.length === 0) return facts;
  const rows = await record
    .selectFrom('usage as s')
    .select((eb) => [
      's.request_id',
      's.duration_ms',
      eb
        .selectFrom('usage as r')
        .select((inner) => inner.fn.countAll<number>().as('n'))
        .where('r.account_id', '=', eb.ref('s.account_id'))
        .where('r.endpoint', '=', 'realtime.response')
        .where(sql<boolean>`starts_with(r.request_id, s.request_id || ':')`)
        .as('responses'),
    ])
    .where('s.request_id', 'in', ids)
    .execute();
  for (const row of rows) facts.set(row.request_id, { duration_ms: Number(row.duration_ms), responses: Number(row.responses ?? 0) });
  return facts;
}

/** The histogram's bar sizes: round ones, the smallest that keeps a range within `maxHistogramBars`. */
export const histogramBuckets = [60, 300, 900, 3600, 21_600, 86_400] as const;
export const maxHistogramBars = 120;
/** A month and a day. */
export const maxHistogramSeconds = 31 * 86_400;
const defaultHistogramSeconds = 86_400;

/**
 * Whole bars are counted, so a range a second or two longer than 30 days (the
 * page's "last 30 days", ending at the server's now) still gets 6-hour bars;
 * bars start at multiples of their size, so the ragged ends may add one more.
 */
export function bucketSecondsFor(rangeSeconds: number): number {
  return histogramBuckets.find((size) => Math.floor(rangeSeconds / size) <= maxHistogramBars) ?? histogramBuckets.at(-1)!;
}

/**
 * Requests and errors (anything not completed) per bar over a range: the
 * last 24 hours unless `since` or `until` says otherwise, at most 31 days.
 * Bars start at multiples of their size (UTC); bars without a request are
 * left out, for the page to draw as zero.
 */
export async function requestHistogramReport(record: RecordDb, account: Account, query: Record<string, unknown>): Promise<RequestHistogram> {
  const { filter } = parseStrict(requestFilterQuerySchema, query);
  // Exclusive: a request of this very second is in.
  const until = filter.until ?? Math.floor(Date.now() / 1000) + 1;
  const since = filter.since ?? until - defaultHistogramSeconds;
  if (since >= until) throw invalidRequest('`since` must be before `until`.', 'since', 'invalid_value');
  if (until - since > maxHistogramSeconds) throw invalidRequest('The range may span at most 31 days: narrow `since` and `until`.', 'since', 'invalid_value');
  const bucketSeconds = bucketSecondsFor(until - since);
  const data = await requestHistogram(record, { ...scoped(account, filter), since, until }, bucketSeconds);
  return { object: 'histogram', bucket_seconds: bucketSeconds, since, until, data };
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
  // The day totals alone: none of the report's latency, key names or balance.
  const { days, daily } = await usageDays(keyStore, usageAccount(account, request), request);
  const lines = [csvColumns.join(',')];
  for (const row of daily) lines.push(csvColumns.map((column) => csvField(row[column])).join(','));
  return { filename: `usage-${days[0]}-to-${days.at(-1)}.csv`, csv: `${lines.join('\r\n')}\r\n` };
}
