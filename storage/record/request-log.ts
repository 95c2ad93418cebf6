import { sql, type Selectable } from 'kysely';
import { cacheMarks, type CacheMark, type RequestView } from '../../shared/money/usage.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import type { RequestPage } from '../../shared/console-api.js';
import type { RecordDb, UsageTable } from './database.js';

/**
 * Reads of the request log (the record's usage rows): one request by id, a
 * page of them newest first (the console's counts of them are in
 * api/console/reports.ts). Every list is ordered by (created, request_id) descending and
 * paged by keyset (the last row's pair is the cursor), which the indexes
 * `usage_log_*` serve for each filter that narrows it alone.
 */

export interface RequestFilter {
  accountId?: string;
  keyId?: string;
  /** Only the requests of these keys (a team member's own); none at all when empty. */
  keyIds?: readonly string[];
  model?: string;
  status?: string;
  /** The tier that served it. */
  serviceTier?: ServiceTier;
  /** Unix seconds, inclusive. */
  since?: number;
  /** Unix seconds, exclusive. */
  until?: number;
  /** How the response cache took part (`none`: it did not). */
  cache?: CacheMark | 'none';
  /** The batch it was part of (its request id is the batch's id, a dot and its index). */
  batch?: string;
}

export function requestView(row: Selectable<UsageTable>): RequestView {
  return {
    id: row.request_id,
    answer_id: row.answer_id,
    created: row.created,
    account_id: row.account_id,
    key_id: row.key_id,
    endpoint: row.endpoint,
    model: row.model,
    vendor: row.vendor === '' || row.vendor === 'none' ? null : row.vendor,
    channel: row.channel,
    stream: row.stream,
    status: row.status,
    http_status: row.http_status,
    error_code: row.error_code,
    error_message: row.error_message ?? null,
    finish_reason: row.finish_reason,
    latency_ms: row.latency_ms,
    ttft_ms: row.ttft_ms,
    queue_ms: row.queue_ms,
    attempts: row.attempts,
    fallback: row.fallback,
    bytes_in: row.bytes_in === null ? null : Number(row.bytes_in),
    bytes_out: row.bytes_out === null ? null : Number(row.bytes_out),
    arguments: row.arguments,
    service_tier: row.service_tier,
    input_tokens: row.input_tokens,
    cached_tokens: row.cached_tokens,
    cache_write_tokens: row.cache_write_tokens,
    output_tokens: row.output_tokens,
    images: row.images,
    audio_seconds: row.audio_seconds,
    video_seconds: row.video_seconds,
    cost_usd: row.cost_micros / 1_000_000,
    cost_micros: row.cost_micros,
    cache: cacheMarks.includes(row.cache as CacheMark) ? (row.cache as CacheMark) : null,
    saved_micros: row.saved_micros,
    prompt_cache_saved_micros: row.prompt_cache_saved_micros,
    batch_id: batchOfRequest(row.request_id),
    duration_ms: Number(row.duration_ms),
    settled: row.settled,
  };
}

/**
 * The batch a request belongs to: its request id is its batch's id and its index there (`msgbatch_….7`, `batch_….7`).
 */
export function batchOfRequest(requestId: string): string | null {
  const dot = requestId.lastIndexOf('.');
  return (requestId.startsWith('msgbatch_') || requestId.startsWith('batch_')) && dot > 0
    ? requestId.slice(0, dot)
    : null;
}

/**
 * One request by its request id or its answer's id, only if `keyId` made it (undefined otherwise, as for an unknown
 * id).
 */
export async function findRequest(db: RecordDb, id: string, keyId: string): Promise<RequestView | undefined> {
  const byRequest = await db
    .selectFrom('usage')
    .selectAll()
    .where('request_id', '=', id)
    .where('key_id', '=', keyId)
    .executeTakeFirst();
  if (byRequest) return requestView(byRequest);
  const byAnswer = await db
    .selectFrom('usage')
    .selectAll()
    .where('answer_id', '=', id)
    .where('key_id', '=', keyId)
    .orderBy('created', 'desc')
    .limit(1)
    .executeTakeFirst();
  return byAnswer ? requestView(byAnswer) : undefined;
}

/** A page's position: the last row's created and request id, as an opaque string. */
export function encodeCursor(created: number, requestId: string): string {
  return Buffer.from(`${created}:${requestId}`).toString('base64url');
}

/** The position a cursor names; undefined for a cursor this code did not make. */
export function decodeCursor(cursor: string): { created: number; requestId: string } | undefined {
  const text = Buffer.from(cursor, 'base64url').toString();
  const match = /^(\d{1,15}):([\w.-]{1,128})$/.exec(text);
  return match ? { created: Number(match[1]), requestId: match[2]! } : undefined;
}

/** The request log's rows a filter picks: what every list and count of requests reads. */
export function filteredRequests(db: RecordDb, filter: RequestFilter) {
  let query = db.selectFrom('usage');
  if (filter.accountId !== undefined) query = query.where('account_id', '=', filter.accountId);
  if (filter.keyId !== undefined) query = query.where('key_id', '=', filter.keyId);
  if (filter.keyIds !== undefined)
    query = filter.keyIds.length === 0 ? query.where(sql<boolean>`false`) : query.where('key_id', 'in', filter.keyIds);
  if (filter.model !== undefined) query = query.where('model', '=', filter.model);
  if (filter.status !== undefined) query = query.where('status', '=', filter.status);
  if (filter.serviceTier !== undefined) query = query.where('service_tier', '=', filter.serviceTier);
  if (filter.since !== undefined) query = query.where('created', '>=', filter.since);
  if (filter.until !== undefined) query = query.where('created', '<', filter.until);
  if (filter.cache === 'none') query = query.where('cache', 'is', null);
  else if (filter.cache !== undefined) query = query.where('cache', '=', filter.cache);
  if (filter.batch !== undefined) query = query.where(sql<boolean>`starts_with(request_id, ${`${filter.batch}.`})`);
  return query;
}

/** Newest first, `limit` at a time, after `cursor` when given. */
export async function listRequests(
  db: RecordDb,
  filter: RequestFilter,
  limit: number,
  cursor?: { created: number; requestId: string },
): Promise<RequestPage> {
  let query = filteredRequests(db, filter).selectAll();
  if (cursor) query = query.where(sql<boolean>`(created, request_id) < (${cursor.created}, ${cursor.requestId})`);
  const rows = await query
    .orderBy('created', 'desc')
    .orderBy('request_id', 'desc')
    .limit(limit + 1)
    .execute();
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  const hasMore = rows.length > limit;
  return {
    object: 'list',
    data: page.map(requestView),
    has_more: hasMore,
    next_cursor: hasMore && last ? encodeCursor(last.created, last.request_id) : null,
  };
}
