import { sql } from 'kysely';
import { z } from 'zod';
import { utcDay, type Account } from '../../shared/accounts.js';
import { invalidRequest } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import type { PriceList } from '../../shared/money/pricing.js';
import type { RecordDb } from '../../storage/record/database.js';
import { filteredRequests, listRequests, type RequestFilter } from '../../storage/record/request-log.js';
import { microsToUsd } from '../accounts/account-store.js';
import { parseStrict } from '../accounts/account-requests.js';
import { playgroundKeyName, playgroundName, type KeyStore } from '../accounts/key-store.js';
import type { ModelResolver } from '../requests/model-resolver.js';
import type {
  ActivityPage,
  HistogramBar,
  KeyName,
  KeyUsageRow,
  ModelLatency,
  RequestCounts,
  RequestHistogram,
  SessionFacts,
  UsageReport,
  UsageRow,
} from '../../shared/console-api.js';
import { groupUsage, loadUsageDays } from '../accounts/admin-usage.js';
import { requestFilterQuerySchema, requestListQuerySchema } from '../accounts/admin-requests.js';

/*
 * What the console's pricing, usage and activity pages read. Usage's amounts
 * (tokens, media, spend) are summed by the same code as `GET /admin/usage`
 * (groupUsage over the record's day totals), so the two agree to the
 * micro-dollar; its request counts are the request log's, counted as
 * Activity counts them (`requestCount` below); the activity page's list is
 * `GET /admin/requests`'s, read through the same query schema.
 */

const dayMs = 86_400_000;

/**
 * Every model `/v1/models` lists, with the prices a client pays for it (markup included), in the units it is billed in.
 */
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

/**
 * Whose usage a session reads: a member its own account's, whatever it names; an admin the account it names, or every
 * account's (undefined).
 */
function usageAccount(account: Account, request: UsageRequest): string | undefined {
  return account.role === 'admin' ? request.account_id : account.id;
}

/**
 * What the console counts as a request, on every page that counts them (Usage's totals, its By model, By key and
 * Latency tables, its CSV, Activity's count line and chart, the Accounts card): every row of the request log (the
 * record's `usage` table), each request once (the api's half and the worker's half of a request are one row),
 * refusals and failures included (a refusal was turned away before any vendor was asked: the api logged it, nothing
 * was settled), but not a Realtime session's own row (endpoint `realtime`), which sums its responses, each a row and
 * a request of its own. The record's day totals count settled requests only, so no request count is read from them.
 * Every count reads its rows through `countedRows`.
 */
const countedRequest = sql<boolean>`(endpoint is null or endpoint <> 'realtime')`;

/** The log's rows a filter keeps, as requests are counted (`countedRequest`). */
function countedRows(record: RecordDb, filter: RequestFilter) {
  return filteredRequests(record, filter).where(countedRequest);
}

/** How many requests the rows hold. */
export const requestCount = sql<number>`count(*)`;
/** Of those, the ones that did not complete (refused, failed or cancelled): Activity's "not completed". */
const notCompletedCount = sql<number>`count(*) filter (where status <> 'completed')`;
/** How a report's requests ended, and what the response cache did: counted over the same rows as `requestCount`. */
const tallies = {
  refused: sql<number>`count(*) filter (where status = 'refused')`,
  failed: sql<number>`count(*) filter (where status = 'failed')`,
  cancelled: sql<number>`count(*) filter (where status = 'cancelled')`,
  completed: sql<number>`count(*) filter (where status = 'completed')`,
  cache_hits: sql<number>`count(*) filter (where cache = 'hit')`,
  saved_micros: sql<number>`coalesce(sum(saved_micros), 0)`,
};
/**
 * The model a report lists a request under: a request refused because it named no model this gateway serves
 * (`model_not_found`) is under `''`, "Unknown model", so a name a client made up is never listed as a model.
 */
const reportedModel = sql<string>`case when error_code = 'model_not_found' then '' else model end`;
const utcDayOf = sql<string>`to_char(to_timestamp(created) at time zone 'UTC', 'YYYY-MM-DD')`;

type Tally = Pick<UsageRow, 'requests' | 'refused' | 'failed' | 'cancelled' | 'cache_hits' | 'saved_micros'>;
const noTally = (): Tally => ({ requests: 0, refused: 0, failed: 0, cancelled: 0, cache_hits: 0, saved_micros: 0 });

/** The request log's counts of a report's days, by UTC day, model (as `reportedModel`) and key. */
async function requestTallies(record: RecordDb, filter: RequestFilter & { since: number; until: number }) {
  const rows = await countedRows(record, filter)
    .select([
      utcDayOf.as('day'),
      reportedModel.as('model'),
      'key_id',
      requestCount.as('requests'),
      tallies.refused.as('refused'),
      tallies.failed.as('failed'),
      tallies.cancelled.as('cancelled'),
      tallies.cache_hits.as('cache_hits'),
      tallies.saved_micros.as('saved_micros'),
    ])
    .groupBy([sql`1`, sql`2`, 'key_id'])
    .execute();
  return rows.map((row) => ({
    day: row.day,
    model: row.model,
    key_id: row.key_id,
    requests: Number(row.requests),
    refused: Number(row.refused),
    failed: Number(row.failed),
    cancelled: Number(row.cancelled),
    cache_hits: Number(row.cache_hits),
    saved_micros: Number(row.saved_micros),
  }));
}

/**
 * What the day totals hold of a row. What the vendor's prompt cache saved is among them, beside the spend it lowered
 * (the response cache's saving is the log's: it is counted with the hits it came from).
 */
const amountFields = [
  'input_tokens',
  'cached_tokens',
  'cache_write_tokens',
  'output_tokens',
  'images',
  'audio_seconds',
  'video_seconds',
  'cost_usd',
  'prompt_cache_saved_micros',
] as const;
const tallyFields = ['requests', 'refused', 'failed', 'cancelled', 'cache_hits', 'saved_micros'] as const;

/** A row's sums from cells (day, model, key): the amounts the day totals hold, the counts the request log's. */
function sumCells(cells: readonly UsageRow[], dims: Pick<UsageRow, 'day' | 'model' | 'key_id'>): UsageRow {
  const row: UsageRow = {
    ...dims,
    input_tokens: 0,
    cached_tokens: 0,
    cache_write_tokens: 0,
    output_tokens: 0,
    images: 0,
    audio_seconds: 0,
    video_seconds: 0,
    cost_usd: 0,
    prompt_cache_saved_micros: 0,
    ...noTally(),
  };
  let micros = 0;
  for (const cell of cells) {
    for (const field of amountFields) if (field !== 'cost_usd') row[field] += cell[field];
    for (const field of tallyFields) row[field] += cell[field];
    micros += Math.round(cell.cost_usd * 1e6);
  }
  row.cost_usd = micros / 1e6;
  return row;
}

function groupCells(cells: readonly UsageRow[], by: ReadonlyArray<'day' | 'model' | 'key_id'>): UsageRow[] {
  const groups = new Map<string, UsageRow[]>();
  for (const cell of cells) {
    const id = JSON.stringify(by.map((dim) => cell[dim] ?? ''));
    const group = groups.get(id);
    if (group) group.push(cell);
    else groups.set(id, [cell]);
  }
  const rows = [...groups.values()].map((group) =>
    sumCells(
      group,
      Object.fromEntries(by.map((dim) => [dim, group[0]![dim] ?? ''])) as Pick<UsageRow, 'day' | 'model' | 'key_id'>,
    ),
  );
  const order = (row: UsageRow) => [row.day ?? '', row.model ?? '', row.key_id ?? ''].join('\u0000');
  return rows.sort((a, b) => (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
}

/** The first second of a report's days and the first after them. */
function rangeOf(days: readonly string[]) {
  return {
    since: Date.parse(`${days[0]}T00:00:00Z`) / 1000,
    until: Date.parse(`${days.at(-1)}T00:00:00Z`) / 1000 + 86_400,
  };
}

function logFilter(
  accountId: string | undefined,
  request: UsageRequest,
  days: readonly string[],
  keyIds?: readonly string[],
): RequestFilter & { since: number; until: number } {
  return {
    ...(accountId !== undefined ? { accountId } : {}),
    ...(keyIds !== undefined ? { keyIds } : {}),
    ...(request.key_id !== undefined ? { keyId: request.key_id } : {}),
    ...(request.model !== undefined ? { model: request.model } : {}),
    ...rangeOf(days),
  };
}

/**
 * An account's (or, undefined, every account's) usage over the last 7, 30 or 90 UTC days, as cells of a day, model
 * and key: the amounts from the record's day totals (summed by `groupUsage`), the request counts from the request
 * log (`requestTallies`); a cell only one of them has is zero in the other.
 */
async function usageCells(
  keyStore: KeyStore,
  accountId: string | undefined,
  request: UsageRequest,
  keyIds?: readonly string[],
) {
  const days = daysOf(request);
  const loaded = await loadUsageDays(keyStore.record, days, accountId);
  // A team member's share: the day totals of the keys they made only.
  const mine = keyIds === undefined ? loaded : loaded.filter((row) => keyIds.includes(row.key_id));
  const amounts = groupUsage(mine, {
    accountId,
    keyId: request.key_id,
    model: request.model,
    groupBy: ['day', 'model', 'key'],
  });
  const counted = await requestTallies(keyStore.record, logFilter(accountId, request, days, keyIds));
  const cells = new Map<string, UsageRow>();
  const cellOf = (day: string, model: string, keyId: string) => {
    const id = [day, model, keyId].join('\u0000');
    let cell = cells.get(id);
    if (!cell) cells.set(id, (cell = sumCells([], { day, model, key_id: keyId })));
    return cell;
  };
  for (const row of amounts) {
    const cell = cellOf(row.day ?? '', row.model ?? '', row.key_id ?? '');
    for (const field of amountFields) cell[field] = row[field];
  }
  for (const row of counted) {
    const cell = cellOf(row.day, row.model, row.key_id);
    for (const field of tallyFields) cell[field] = row[field];
  }
  const all = [...cells.values()];
  const group = (by: ReadonlyArray<'day' | 'model' | 'key_id'>) => groupCells(all, by);
  return { days, group, daily: group(['day', 'model']).filter((row) => row.requests > 0 || row.cost_usd > 0) };
}

/**
 * Latency, time to first token and error rate per model (as `reportedModel`), counting requests as `requestCount`
 * does (so each model's count is By model's); the percentiles are over completed requests only.
 */
async function latencyByModel(
  record: RecordDb,
  filter: RequestFilter & { since: number; until: number },
): Promise<ModelLatency[]> {
  const answered = (column: 'latency_ms' | 'ttft_ms', fraction: number) =>
    sql<
      number | null
    >`percentile_cont(${sql.lit(fraction)}) within group (order by ${sql.ref(column)}) filter (where status = 'completed')`;
  const rows = await countedRows(record, filter)
    .select([
      reportedModel.as('model'),
      requestCount.as('requests'),
      notCompletedCount.as('errors'),
      tallies.refused.as('refused'),
      answered('latency_ms', 0.5).as('latency_p50_ms'),
      answered('latency_ms', 0.95).as('latency_p95_ms'),
      answered('ttft_ms', 0.5).as('ttft_p50_ms'),
      answered('ttft_ms', 0.95).as('ttft_p95_ms'),
    ])
    .groupBy(sql`1`)
    .orderBy(sql`1`)
    .execute();
  const round = (value: number | null) => (value === null || value === undefined ? null : Math.round(Number(value)));
  return rows.map((row) => ({
    model: row.model,
    requests: Number(row.requests),
    errors: Number(row.errors),
    refused: Number(row.refused),
    error_rate: Number(row.requests) > 0 ? Number(row.errors) / Number(row.requests) : 0,
    latency_p50_ms: round(row.latency_p50_ms),
    latency_p95_ms: round(row.latency_p95_ms),
    ttft_p50_ms: round(row.ttft_p50_ms),
    ttft_p95_ms: round(row.ttft_p95_ms),
  }));
}

/** Every account, and those that made a request (as `requestCount` counts them) over a report's days. */
async function accountCounts(keyStore: KeyStore, days: readonly string[]) {
  const { since, until } = rangeOf(days);
  const [all, active] = await Promise.all([
    keyStore.accounts.list(),
    countedRows(keyStore.record, { since, until })
      .select(sql<number>`count(distinct account_id)`.as('n'))
      .executeTakeFirst(),
  ]);
  return { total: all.length, active: Number(active?.n ?? 0) };
}

/**
 * The names of keys as Usage and Activity name their rows and filters, live and revoked (the record keeps a revoked
 * key's row, name and owner): the keys `ids` names, or a team's (`teamId`; only `keyIds` of it when given). Read from
 * the record, and a key it does not hold yet (made a moment ago, or written while it was unreachable) from Redis. A
 * team's Playground key made before each was named for its person ("Playground" alone, its maker another than the
 * team) is named as one made now is, "Playground (their email)", so a team's several are never rows of one name.
 */
async function namedKeys(
  keyStore: KeyStore,
  which: { ids: readonly string[] } | { teamId: string; keyIds?: readonly string[] | undefined },
): Promise<KeyName[]> {
  const only = 'ids' in which ? which.ids : which.keyIds;
  if (only?.length === 0) return [];
  let query = keyStore.record
    .selectFrom('api_keys')
    .leftJoin('accounts as maker', 'maker.id', 'api_keys.created_by')
    .select([
      'api_keys.id',
      'api_keys.name',
      'api_keys.revoked',
      'api_keys.account_id',
      'api_keys.created_by',
      'maker.email as maker_email',
      'maker.name as maker_name',
    ]);
  if ('teamId' in which) query = query.where('api_keys.account_id', '=', which.teamId);
  if (only) query = query.where('api_keys.id', 'in', only);
  const names = new Map<string, KeyName>();
  for (const row of await query.execute()) {
    const playground = row.name === playgroundName && row.created_by !== null && row.created_by !== row.account_id;
    const name = playground
      ? playgroundKeyName({
          id: row.created_by!,
          email: row.maker_email ?? undefined,
          name: row.maker_name ?? undefined,
        })
      : row.name;
    names.set(row.id, {
      id: row.id,
      object: 'key_name',
      name,
      account_id: row.account_id,
      revoked: row.revoked !== null,
    });
  }
  const live =
    'teamId' in which
      ? await keyStore.list({ accountId: which.teamId })
      : await Promise.all(which.ids.filter((id) => !names.has(id)).map((id) => keyStore.get(id)));
  for (const key of live) {
    if (!key || names.has(key.id) || (only && !only.includes(key.id))) continue;
    names.set(key.id, { id: key.id, object: 'key_name', name: key.name, account_id: key.accountId, revoked: false });
  }
  return [...names.values()];
}

/**
 * The names of a team's keys whose usage a reader sees (`keyIds`: a member's own; else every key of the team), live
 * and revoked, live ones first, by name: what Usage and Activity name their rows and filters by, for every role that
 * reads them (a viewer lists no keys, but sees their names in the usage report already).
 */
export async function teamKeyNames(keyStore: KeyStore, teamId: string, keyIds?: readonly string[]): Promise<KeyName[]> {
  return (await namedKeys(keyStore, { teamId, keyIds })).sort(
    (a, b) => Number(a.revoked) - Number(b.revoked) || a.name.localeCompare(b.name),
  );
}

/**
 * Usage over the last 7, 30 or 90 UTC days: per day and model, per model, per
 * key (its name kept after a revoke, and marked so), and in total; and from
 * the request log, latency, time to first token and error rate per model
 * over the same days. A member's account's; an admin's every account's
 * (`account_id: null`, no balance), or the one `account_id` names.
 */
export async function usageReport(
  keyStore: KeyStore,
  account: Account,
  request: UsageRequest,
  keyIds?: readonly string[],
): Promise<UsageReport> {
  const accountId = usageAccount(account, request);
  const { days, group, daily } = await usageCells(keyStore, accountId, request, keyIds);
  const latency = await latencyByModel(keyStore.record, logFilter(accountId, request, days, keyIds));
  const byKey = group(['key_id']);
  const names = new Map(
    (
      await namedKeys(keyStore, {
        ids: [...new Set(byKey.map((row) => row.key_id).filter((id): id is string => Boolean(id)))],
      })
    ).map((key) => [key.id, key]),
  );
  // Re-read: the balance shown is as of this report, not of the sign-in.
  const current =
    accountId === undefined
      ? undefined
      : accountId === account.id
        ? ((await keyStore.accounts.get(account.id)) ?? account)
        : await keyStore.accounts.get(accountId);
  const withName = (row: UsageRow): KeyUsageRow => {
    const named = names.get(row.key_id ?? '');
    return {
      ...row,
      key_name: named?.name ?? null,
      key_revoked: named?.revoked ?? false,
      key_account_id: named?.account_id ?? null,
    };
  };
  const { day: _day, model: _model, key_id: _key, ...totals } = sumCells(group([]), {});
  return {
    object: 'usage',
    account_id: accountId ?? null,
    from: days[0]!,
    to: days.at(-1)!,
    balance_usd: current?.balanceMicros === undefined ? null : microsToUsd(current.balanceMicros),
    totals,
    daily,
    by_model: group(['model']).map(({ day: _d, key_id: _k, ...row }) => row),
    by_key: byKey.map(({ day: _d, model: _m, ...row }) => withName(row)),
    latency,
    accounts: account.role === 'admin' && accountId === undefined ? await accountCounts(keyStore, days) : null,
  };
}

// ---- the activity page: the request log of an account (of every account, for an admin) ----

/**
 * Whose requests a session reads: a member only its own account's, whatever
 * `account_id` it names (another account's rows are never a filter away); an
 * admin every account's, or the one it names.
 */
function scoped(account: Account, filter: RequestFilter, keyIds?: readonly string[]): RequestFilter {
  const whose = account.role === 'admin' ? filter : { ...filter, accountId: account.id };
  // A team member: the requests of the keys they made only.
  return keyIds === undefined ? whose : { ...whose, keyIds };
}

/** The requests a filter of the log holds (as `countedRequest` counts them), by how each ended. */
export async function requestCounts(record: RecordDb, filter: RequestFilter): Promise<RequestCounts> {
  const row = await countedRows(record, filter)
    .select([
      requestCount.as('requests'),
      tallies.completed.as('completed'),
      tallies.failed.as('failed'),
      tallies.cancelled.as('cancelled'),
      tallies.refused.as('refused'),
    ])
    .executeTakeFirstOrThrow();
  return {
    requests: Number(row.requests),
    completed: Number(row.completed),
    failed: Number(row.failed),
    cancelled: Number(row.cancelled),
    refused: Number(row.refused),
  };
}

/**
 * A page of requests, newest first, as `GET /admin/requests` answers it; the first page with the counts of the whole
 * filter.
 */
export async function requestList(
  record: RecordDb,
  account: Account,
  query: unknown,
  keyIds?: readonly string[],
): Promise<ActivityPage> {
  const { filter, limit, cursor } = parseStrict(requestListQuerySchema, query);
  const whose = scoped(account, filter, keyIds);
  const [page, counts] = await Promise.all([
    listRequests(record, whose, limit, cursor),
    cursor ? undefined : requestCounts(record, whose),
  ]);
  const sessions = await sessionFacts(
    record,
    page.data.filter((row) => row.endpoint === 'realtime').map((row) => row.id),
  );
  const data =
    sessions.size === 0
      ? page.data
      : page.data.map((row) => (sessions.has(row.id) ? { ...row, session: sessions.get(row.id)! } : row));
  return { ...page, data, ...(counts ? { counts } : {}) };
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
  for (const row of rows)
    facts.set(row.request_id, { duration_ms: Number(row.duration_ms), responses: Number(row.responses ?? 0) });
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
  return (
    histogramBuckets.find((size) => Math.floor(rangeSeconds / size) <= maxHistogramBars) ?? histogramBuckets.at(-1)!
  );
}

/**
 * Requests and errors (anything not completed) per bar over a range: the
 * last 24 hours unless `since` or `until` says otherwise, at most 31 days.
 * Bars start at multiples of their size (UTC); bars without a request are
 * left out, for the page to draw as zero.
 */
export async function requestHistogramReport(
  record: RecordDb,
  account: Account,
  query: Record<string, unknown>,
  keyIds?: readonly string[],
): Promise<RequestHistogram> {
  const { filter } = parseStrict(requestFilterQuerySchema, query);
  // Exclusive: a request of this very second is in.
  const until = filter.until ?? Math.floor(Date.now() / 1000) + 1;
  const since = filter.since ?? until - defaultHistogramSeconds;
  if (since >= until) throw invalidRequest('`since` must be before `until`.', 'since', 'invalid_value');
  if (until - since > maxHistogramSeconds)
    throw invalidRequest('The range may span at most 31 days: narrow `since` and `until`.', 'since', 'invalid_value');
  const bucketSeconds = bucketSecondsFor(until - since);
  const data = await histogramBars(record, { ...scoped(account, filter, keyIds), since, until }, bucketSeconds);
  return { object: 'histogram', bucket_seconds: bucketSeconds, since, until, data };
}

/**
 * The requests of a range (as `requestCount` counts them) per bar of `bucketSeconds`, and how many did not complete;
 * bars without a request left out.
 */
async function histogramBars(
  record: RecordDb,
  filter: RequestFilter & { since: number; until: number },
  bucketSeconds: number,
): Promise<HistogramBar[]> {
  const rows = await countedRows(record, filter)
    .select([
      sql<number>`(created / ${bucketSeconds}) * ${bucketSeconds}`.as('start'),
      requestCount.as('requests'),
      notCompletedCount.as('errors'),
    ])
    .groupBy(sql`1`)
    .orderBy(sql`1`)
    .execute();
  return rows.map((row) => ({ start: Number(row.start), requests: Number(row.requests), errors: Number(row.errors) }));
}

/**
 * The CSV's columns. Those added later come last, so a sheet that reads the earlier ones by position reads them still:
 * the prompt tokens the vendor's cache wrote, and what that cache saved in USD (net, so it may be below zero).
 */
const csvColumns = [
  'day',
  'model',
  'requests',
  'input_tokens',
  'cached_tokens',
  'output_tokens',
  'images',
  'audio_seconds',
  'video_seconds',
  'cost_usd',
  'cache_write_tokens',
  'prompt_cache_saved_usd',
] as const;
type CsvColumn = (typeof csvColumns)[number];

/** A daily row's value in a CSV column: its own field, or a saving in micro-dollars as USD. */
function csvValue(row: UsageRow, column: CsvColumn): string | number | undefined {
  return column === 'prompt_cache_saved_usd' ? row.prompt_cache_saved_micros / 1e6 : row[column];
}

/**
 * A field as CSV writes it; a leading =, +, - or @ is quoted with a ' so a spreadsheet does not run it as a formula.
 */
function csvField(value: string | number | undefined): string {
  let text = value === undefined ? '' : String(value);
  if (/^[=+\-@\t\r]/.test(text) && typeof value === 'string') text = `'${text}`;
  return /[",\r\n']/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** The daily rows of the usage page as CSV. */
export async function usageCsv(
  keyStore: KeyStore,
  account: Account,
  request: UsageRequest,
  keyIds?: readonly string[],
) {
  // The day totals alone: none of the report's latency, key names or balance.
  const { days, daily } = await usageCells(keyStore, usageAccount(account, request), request, keyIds);
  const lines = [csvColumns.join(',')];
  for (const row of daily) lines.push(csvColumns.map((column) => csvField(csvValue(row, column))).join(','));
  return { filename: `usage-${days[0]}-to-${days.at(-1)}.csv`, csv: `${lines.join('\r\n')}\r\n` };
}
