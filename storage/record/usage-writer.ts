import type { Redis } from 'ioredis';
import { sql, type Transaction } from 'kysely';
import { usageMetrics, utcDay, type UsageMetric } from '../../shared/accounts.js';
import { usageDeadLetterKey, usageStreamKeys } from '../../shared/redis-keys.js';
import { pruneAuditOlderThanDays } from './audit-log.js';
import {
  claimIdle,
  ensureGroup,
  isMissingGroup,
  Pause,
  readGroup,
  type GroupReader,
  type StreamEntry,
  type StreamReply,
} from './stream-group.js';
import { isCluster } from '../../shared/redis.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import type { RecordDb, RecordTables, UsageDailyTable, UsageTable } from './database.js';
import {
  cacheMarks,
  requestStatuses,
  type CacheMark,
  type RequestStatus,
  type RunDetail,
} from '../../shared/money/usage.js';
import { logField, loggedMessageChars, loggedText } from '../../shared/request-log.js';
import { serviceTiers, type ServiceTier } from '../../shared/scheduling/vocabulary.js';

/**
 * Moves settled usage from Redis to the record. Settlement appends one
 * record per request to its account's bucket's usage stream in its own
 * script; this consumer
 * (a Redis Streams consumer group, one consumer per worker process) reads
 * them in batches and writes each batch in one transaction — the usage rows,
 * inserted idempotently by request id, and for the rows that were new, the
 * day totals and the account and key spend — and only after the commit
 * acknowledges and deletes them. Delivery is at least once: a batch whose
 * commit failed stays pending and is written again; one a dead consumer held
 * is claimed by another after `claimIdleMs`; a record written twice is one row.
 * A database outage delays history, never admission or answers: the stream
 * holds what waits (bounded by settlement's MAXLEN, its depth a metric).
 * On one Redis server one blocking read waits on every bucket's stream; on a
 * Cluster (each stream on its own slot) the streams are read one by one,
 * and `blockMs` apart when none had anything.
 *
 * One entry the record cannot take (text PostgreSQL cannot store, a number
 * out of its range: the record refuses the data, not the connection) never
 * holds back the others: its batch is written again entry by entry, each in
 * its own transaction, and the refused entry alone stays pending, tried again
 * alone after a wait that doubles (its stream meanwhile read on, and every
 * other stream too). Refused `deadLetterAfter` times, it is moved to its
 * stream's dead-letter stream (`usageDeadLetterKey`), with an error log naming
 * it and `switchyard_usage_dead_letters_total`, kept there for the operator
 * (docs/operating.md): it is never dropped, and written again it is written
 * once, as every entry (by request id).
 */

export const usageGroup = 'record';

export interface UsageWriterOptions {
  /** A connection of its own: the consumer blocks on it between batches. */
  redis: Redis;
  record: RecordDb;
  log: Logger;
  /** This process's consumer name in the group. */
  consumer: string;
  batch?: number;
  blockMs?: number;
  /**
   * After a batch smaller than `batch`, wait this long before reading again, so light traffic is written a few
   * batches a second rather than one transaction per request (default 250 ms).
   */
  lingerMs?: number;
  /** Records a consumer has held unacknowledged this long are taken over. */
  claimIdleMs?: number;
  /** Usage rows older than this many days are deleted, in small batches. */
  retentionDays?: number;
  /** Audit log rows older than this many days are pruned (storage/record/audit-log.ts); undefined: kept. */
  auditRetentionDays?: number;
  /** Times an entry the record refuses is written alone before it is moved to its dead-letter stream (default 5). */
  deadLetterAfter?: number;
  /** The wait before a refused entry is written alone again, doubled at each refusal up to 10 s (default 1 s). */
  retryMs?: number;
}

const maxBackoffMs = 10_000;
const deadLetterAfterDefault = 5;
const retentionBatch = 5_000;
const retentionEveryMs = 3_600_000;

const int = (value: unknown) => (Number.isFinite(Number(value)) ? Math.round(Number(value)) : 0);
const num = (value: unknown) => (Number.isFinite(Number(value)) ? Number(value) : 0);
const text = (value: unknown) => (typeof value === 'string' && value !== '' ? value.slice(0, 200) : null);
/** An error's message as the log keeps it: its first 500 characters, without NUL (which the record cannot store). */
const message = (value: unknown) =>
  typeof value === 'string' && value !== '' ? loggedText(value, loggedMessageChars) : null;
/** A tier as the record keeps it: one the gateway serves in, else (a record from before tiers) `default`. */
const tier = (value: unknown): ServiceTier =>
  serviceTiers.includes(value as ServiceTier) ? (value as ServiceTier) : 'default';
/**
 * How the response cache took part, as the record keeps it: one of `cacheMarks`, else (none, or a value this code does
 * not know) null.
 */
const cacheMark = (value: unknown): CacheMark | null =>
  cacheMarks.includes(value as CacheMark) ? (value as CacheMark) : null;
/** Micro-dollars the cache saved: a non-negative safe integer, else 0. */
const savedMicros = (value: unknown): number =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : 0;
/**
 * Micro-dollars the vendor's prompt cache saved: a safe integer, else 0 (an entry from before it was kept has none).
 * Signed, unlike the response cache's: a request that only wrote the cache paid more than plain input would have.
 */
const promptCacheSavedMicros = (value: unknown): number =>
  typeof value === 'number' && Number.isSafeInteger(value) ? value : 0;
/** The most of an MCP call's kept arguments written (characters). */
const keptArgumentChars = 16_384;
const count = (value: unknown) =>
  value === undefined || value === null || !Number.isFinite(Number(value))
    ? null
    : Math.max(0, Math.min(2_147_483_647, Math.round(Number(value))));

/**
 * Whether the record refused the data itself, so that written again it is refused again: SQLSTATE class 22 (a data
 * exception: NUL in text, a number out of range, bad text for a type), 23 (a constraint) or 54 (a limit, such as an
 * index row too large). Anything else (a connection lost, a shutdown, a serialisation failure or a deadlock, no
 * answer) is the record's and not the entry's: the batch waits whole and is written again when it passes.
 */
export function refusedData(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code);
}

/** The JSON of a stream entry's field, or undefined. */
function entryJson(fields: readonly string[], name: string): Record<string, unknown> | undefined {
  const index = fields.indexOf(name);
  if (index < 0 || index + 1 >= fields.length || index % 2 !== 0) return undefined;
  try {
    const parsed = JSON.parse(fields[index + 1]!) as unknown;
    return parsed &&
      typeof parsed === 'object' &&
      typeof (parsed as { request_id?: unknown }).request_id === 'string' &&
      (parsed as { request_id: string }).request_id !== ''
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** A settlement's usage row (a stream entry's `usage` field); undefined for an entry that is not one. */
export function usageRow(fields: readonly string[]): UsageRow | undefined {
  const parsed = entryJson(fields, 'usage');
  if (!parsed) return undefined;
  return {
    request_id: String(parsed.request_id),
    account_id: String(parsed.account_id ?? ''),
    key_id: String(parsed.key_id ?? ''),
    model: String(parsed.model ?? ''),
    vendor: String(parsed.vendor ?? ''),
    input_tokens: int(parsed.input_tokens),
    cached_tokens: int(parsed.cached_tokens),
    // Absent from an entry settled before it was kept: none written, as far as the record knows.
    cache_write_tokens: int(parsed.cache_write_tokens),
    output_tokens: int(parsed.output_tokens),
    images: int(parsed.images),
    audio_seconds: num(parsed.audio_seconds),
    video_seconds: num(parsed.video_seconds),
    cost_micros: int(parsed.cost_micros),
    status: String(parsed.status ?? 'completed'),
    created: int(parsed.created) || Math.floor(Date.now() / 1000),
    duration_ms: int(parsed.duration_ms),
    endpoint: text(parsed.endpoint),
    answer_id: text(parsed.answer_id),
    channel: text(parsed.channel),
    attempts: count(parsed.attempts),
    fallback: text(parsed.fallback),
    finish_reason: text(parsed.finish_reason),
    queue_ms: count(parsed.queue_ms),
    bytes_in: count(parsed.bytes_in),
    bytes_out: count(parsed.bytes_out),
    arguments:
      typeof parsed.arguments === 'string' && parsed.arguments !== ''
        ? loggedText(parsed.arguments, keptArgumentChars)
        : null,
    error_code: text(parsed.error_code),
    error_message: message(parsed.error_message),
    service_tier: tier(parsed.service_tier),
    cache: cacheMark(parsed.cache),
    saved_micros: savedMicros(parsed.saved_micros),
    prompt_cache_saved_micros: promptCacheSavedMicros(parsed.prompt_cache_saved_micros),
    // A Realtime session's own row: its amounts are its responses', each settled on a row of its own
    // (shared/money/realtime.ts).
    ...(parsed.rollup === true ? { rollup: true } : {}),
  };
}

/**
 * The api's log event (a stream entry's `log` field) as the columns it writes; undefined for an entry that is not one.
 */
export function logRow(fields: readonly string[]): LogRow | undefined {
  const parsed = entryJson(fields, logField);
  if (!parsed) return undefined;
  const status = requestStatuses.includes(parsed.status as RequestStatus) ? (parsed.status as RequestStatus) : 'failed';
  return {
    request_id: String(parsed.request_id),
    account_id: String(parsed.account_id ?? ''),
    key_id: String(parsed.key_id ?? ''),
    model: String(parsed.model ?? '').slice(0, 200),
    endpoint: text(parsed.endpoint),
    stream: parsed.stream === true,
    status,
    http_status: count(parsed.http_status),
    error_code: text(parsed.error_code),
    error_message: message(parsed.error_message),
    latency_ms: count(parsed.latency_ms),
    ttft_ms: count(parsed.ttft_ms),
    created: int(parsed.created) || Math.floor(Date.now() / 1000),
    // Known once the request was accepted (a refusal before that has none): the settlement's, when it comes, is the
    // same.
    ...(parsed.service_tier !== undefined ? { service_tier: tier(parsed.service_tier) } : {}),
  };
}

/**
 * A settlement's row: every column but `settled` and the api's own, which it
 * carries too when its request's log event came in the same batch (then
 * `arrived`, the log's `created`, is the row's time; the day totals keep the
 * settlement's). The cache's columns are the worker's alone, as the tier's
 * are (left out: no cache use, nothing saved); so are the vendor's prompt
 * cache's writes and saving (left out: none).
 */
export type UsageRow = Omit<
  UsageTable,
  'settled' | 'service_tier' | 'cache' | 'saved_micros' | PromptCacheColumn | LogOnly | UsageDetailColumn
> &
  Partial<Pick<UsageTable, UsageDetailColumn | LogOnly>> & {
    arrived?: number;
    service_tier?: ServiceTier;
    cache?: CacheMark | null;
    saved_micros?: number;
    cache_write_tokens?: number;
    prompt_cache_saved_micros?: number;
    rollup?: boolean;
  };
type PromptCacheColumn = 'cache_write_tokens' | 'prompt_cache_saved_micros';
type LogOnly = 'stream' | 'http_status' | 'latency_ms' | 'ttft_ms' | 'error_message';
/** The worker's part of the request log, as the settlement's usage entry carries it. */
type UsageDetailColumn = keyof RunDetail;
/** What the api's log event writes. */
export type LogRow = Pick<
  UsageTable,
  | 'request_id'
  | 'account_id'
  | 'key_id'
  | 'model'
  | 'endpoint'
  | 'stream'
  | 'status'
  | 'http_status'
  | 'error_code'
  | 'latency_ms'
  | 'ttft_ms'
  | 'created'
> & {
  service_tier?: ServiceTier;
  error_message?: string | null;
};

/**
 * When the two halves disagree on the status, the one that says more about
 * what the client got wins: a refusal over a cancel over a failure over a
 * completion (a background response the api accepted can still fail; a
 * stream the client left is cancelled however the job ended). The order is
 * `requestStatuses`', for the merge in a batch and the upsert's alike.
 */
const statusRank = sql`array[${sql.join(requestStatuses.map((status) => sql.lit(status)))}]`;
const mergedStatus = sql<string>`case when coalesce(array_position(${statusRank}, excluded.status), 0) > coalesce(array_position(${statusRank}, usage.status), 0) then excluded.status else usage.status end`;

const rank = (status: string) => requestStatuses.indexOf(status as RequestStatus);

/**
 * Folds the api's log events into the settlements of the same requests in a
 * batch, so the usual request (its two halves a few milliseconds apart in one
 * stream) is one row written once, not a row inserted and then updated. The
 * merge is the one the upserts make when the halves come in different
 * batches. Returns the settlements, and the log events left over.
 */
export function mergeHalves(rows: readonly UsageRow[], logs: readonly LogRow[]): { rows: UsageRow[]; logs: LogRow[] } {
  const byRequest = new Map(logs.map((log) => [log.request_id, log]));
  const merged = rows.map((row) => {
    const log = byRequest.get(row.request_id);
    if (!log) return row;
    byRequest.delete(row.request_id);
    return {
      ...row,
      stream: log.stream,
      http_status: log.http_status,
      latency_ms: log.latency_ms,
      ttft_ms: log.ttft_ms,
      arrived: log.created,
      endpoint: log.endpoint ?? row.endpoint ?? null,
      error_code: log.error_code ?? row.error_code ?? null,
      error_message: log.error_message ?? row.error_message ?? null,
      status: rank(log.status) > rank(row.status) ? log.status : row.status,
      model: row.model === '' ? log.model : row.model,
    };
  });
  return { rows: merged, logs: [...byRequest.values()] };
}

/**
 * Writes the api's log events in the caller's transaction: a row for a request
 * not settled yet (its settlement fills in the rest), or the api's columns of
 * one that is. Touches no totals.
 */
export async function writeLog(tx: Transaction<RecordTables>, rows: readonly LogRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  const unique = [...new Map(rows.map((row) => [row.request_id, row])).values()].sort((a, b) =>
    a.request_id < b.request_id ? -1 : 1,
  );
  const written = await tx
    .insertInto('usage')
    .values(
      unique.map((row) => ({
        ...row,
        settled: false,
        vendor: '',
        input_tokens: 0,
        cached_tokens: 0,
        output_tokens: 0,
        images: 0,
        audio_seconds: 0,
        video_seconds: 0,
        cost_micros: 0,
        duration_ms: 0,
      })),
    )
    .onConflict((oc) =>
      oc.column('request_id').doUpdateSet((eb) => ({
        endpoint: eb.ref('excluded.endpoint'),
        stream: eb.ref('excluded.stream'),
        http_status: eb.ref('excluded.http_status'),
        latency_ms: eb.ref('excluded.latency_ms'),
        ttft_ms: eb.ref('excluded.ttft_ms'),
        created: eb.ref('excluded.created'),
        // The error the client saw, else the one the worker noted.
        error_code: sql`coalesce(excluded.error_code, usage.error_code)`,
        error_message: sql`coalesce(excluded.error_message, usage.error_message)`,
        status: mergedStatus,
        model: sql`case when usage.model = '' then excluded.model else usage.model end`,
      })),
    )
    .execute();
  return written.length;
}

/**
 * Taken first in every batch that writes usage rows, and held to its commit: the usage writers of every process take
 * turns. Within a batch the rows go in one order, but two batches do not share one: a batch settling request R and
 * adding to its account's total, beside another batch that holds R's log half and waits on that account, would each
 * wait on the other (PostgreSQL's 40P01, seen 163 times in a 20-minute soak with four worker processes).
 */
export async function lockUsageWriting(tx: Transaction<RecordTables>): Promise<void> {
  await sql`select pg_advisory_xact_lock(${usageWritingLock})`.execute(tx);
}

/** The advisory lock's key, beside the audit chain's and the migrations' (0x5377…, "Sw…"). */
const usageWritingLock = 0x5377_7573;

/** A day-totals row with every metric at 0. */
export function emptyDayRow(day: string, account_id: string, key_id: string, model: string): UsageDailyTable {
  return {
    day,
    account_id,
    key_id,
    model,
    ...(Object.fromEntries(usageMetrics.map((m) => [m, 0])) as Record<UsageMetric, number>),
  };
}

/**
 * Writes usage rows in the caller's transaction: inserts the rows not written
 * before, and adds only those to the day totals and to the account and key
 * spend (`totals`: false when importing history whose totals are imported
 * apart). Returns how many were new.
 */
export async function writeUsage(
  tx: Transaction<RecordTables>,
  rows: readonly UsageRow[],
  totals = true,
): Promise<number> {
  if (rows.length === 0) return 0;
  // One row per request id within the batch too (a record delivered twice in one read).
  const unique = [...new Map(rows.map((row) => [row.request_id, row])).values()].sort((a, b) =>
    a.request_id < b.request_id ? -1 : 1,
  );
  // A new row, or the settlement of a row the api's log event made: returned (and counted) once, as
  // `settled` turns true; a settlement written before changes nothing.
  const inserted = await tx
    .insertInto('usage')
    .values(
      unique.map(({ arrived, rollup: _rollup, ...row }) => ({
        ...row,
        created: arrived ?? row.created,
        settled: true,
      })),
    )
    .onConflict((oc) =>
      oc
        .column('request_id')
        .doUpdateSet((eb) => ({
          settled: true,
          vendor: eb.ref('excluded.vendor'),
          input_tokens: eb.ref('excluded.input_tokens'),
          cached_tokens: eb.ref('excluded.cached_tokens'),
          cache_write_tokens: eb.ref('excluded.cache_write_tokens'),
          output_tokens: eb.ref('excluded.output_tokens'),
          images: eb.ref('excluded.images'),
          audio_seconds: eb.ref('excluded.audio_seconds'),
          video_seconds: eb.ref('excluded.video_seconds'),
          cost_micros: eb.ref('excluded.cost_micros'),
          duration_ms: eb.ref('excluded.duration_ms'),
          answer_id: eb.ref('excluded.answer_id'),
          channel: eb.ref('excluded.channel'),
          attempts: eb.ref('excluded.attempts'),
          fallback: eb.ref('excluded.fallback'),
          finish_reason: eb.ref('excluded.finish_reason'),
          queue_ms: eb.ref('excluded.queue_ms'),
          bytes_in: eb.ref('excluded.bytes_in'),
          bytes_out: eb.ref('excluded.bytes_out'),
          arguments: eb.ref('excluded.arguments'),
          service_tier: eb.ref('excluded.service_tier'),
          cache: eb.ref('excluded.cache'),
          saved_micros: eb.ref('excluded.saved_micros'),
          prompt_cache_saved_micros: eb.ref('excluded.prompt_cache_saved_micros'),
          endpoint: sql`coalesce(usage.endpoint, excluded.endpoint)`,
          error_code: sql`coalesce(usage.error_code, excluded.error_code)`,
          error_message: sql`coalesce(usage.error_message, excluded.error_message)`,
          // A settlement that brought its log event (a delivery again of both, after a log row of an earlier one).
          stream: sql`coalesce(excluded.stream, usage.stream)`,
          http_status: sql`coalesce(excluded.http_status, usage.http_status)`,
          latency_ms: sql`coalesce(excluded.latency_ms, usage.latency_ms)`,
          ttft_ms: sql`coalesce(excluded.ttft_ms, usage.ttft_ms)`,
          status: mergedStatus,
          model: sql`case when usage.model = '' then excluded.model else usage.model end`,
        }))
        .where('usage.settled', '=', false),
    )
    .returning('request_id')
    .execute();
  if (inserted.length === 0 || !totals) return inserted.length;
  const fresh = new Set(inserted.map((row) => row.request_id));
  const days = new Map<string, UsageDailyTable>();
  const accounts = new Map<string, number>();
  const keys = new Map<string, number>();
  const lastUsed = new Map<string, number>();
  for (const row of unique) {
    // A rollup's amounts were counted with the rows it sums.
    if (!fresh.has(row.request_id) || row.rollup) continue;
    const day = utcDay(row.created * 1000);
    const id = [row.account_id, day, row.key_id, row.model].join('\u0000');
    let t = days.get(id);
    if (!t) {
      t = emptyDayRow(day, row.account_id, row.key_id, row.model);
      days.set(id, t);
    }
    t.requests += 1;
    t.input_tokens += row.input_tokens;
    t.cached_tokens += row.cached_tokens;
    t.cache_write_tokens += row.cache_write_tokens ?? 0;
    t.output_tokens += row.output_tokens;
    t.images += row.images;
    t.audio_seconds += Math.round(row.audio_seconds);
    t.video_seconds += Math.round(row.video_seconds);
    t.cost_micros += row.cost_micros;
    t.saved_micros += row.saved_micros ?? 0;
    t.prompt_cache_saved_micros += row.prompt_cache_saved_micros ?? 0;
    lastUsed.set(row.key_id, Math.max(lastUsed.get(row.key_id) ?? 0, row.created));
    if (row.cost_micros !== 0) {
      accounts.set(row.account_id, (accounts.get(row.account_id) ?? 0) + row.cost_micros);
      keys.set(row.key_id, (keys.get(row.key_id) ?? 0) + row.cost_micros);
    }
  }
  // Rows in one order in every transaction, so two writers never wait on each other in a circle.
  const dayRows = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, row]) => row);
  // None when every new row was a rollup.
  if (dayRows.length > 0) {
    await tx
      .insertInto('usage_daily')
      .values(dayRows)
      .onConflict((oc) =>
        oc
          .columns(['account_id', 'day', 'key_id', 'model'])
          .doUpdateSet(
            (eb) =>
              Object.fromEntries(
                usageMetrics.map((m) => [m, eb(`usage_daily.${m}`, '+', eb.ref(`excluded.${m}`))]),
              ) as never,
          ),
      )
      .execute();
  }
  if (accounts.size > 0) {
    const values = sql.join(
      [...accounts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, micros]) => sql`(${id}::text, ${micros}::bigint)`),
    );
    await sql`update accounts a set settled_micros = a.settled_micros + v.micros from (values ${values}) as v(id, micros) where a.id = v.id`.execute(
      tx,
    );
  }
  if (lastUsed.size > 0) {
    const values = sql.join(
      [...lastUsed]
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([id, last]) => sql`(${id}::text, ${keys.get(id) ?? 0}::bigint, ${last}::bigint)`),
    );
    await sql`update api_keys k set spent_micros = k.spent_micros + v.micros, last_used = greatest(coalesce(k.last_used, 0), v.last)
      from (values ${values}) as v(id, micros, last) where k.id = v.id`.execute(tx);
  }
  return fresh.size;
}

/**
 * Creates each stream's consumer group if it is missing (a new or flushed Redis): from the stream's start, so nothing
 * settled before is skipped.
 */
export const ensureUsageGroup = (redis: Redis): Promise<void> => ensureGroup(redis, usageStreamKeys, usageGroup);

export class UsageWriter {
  private running = false;
  private loop: Promise<void> | undefined;
  private lastClaim = 0;
  private lastRetention = 0;
  private readonly pause = new Pause();
  private readonly reader: GroupReader;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;
  private readonly lingerMs: number;
  private readonly deadLetterAfter: number;
  private readonly retryMs: number;
  /**
   * Streams whose own pending entries are read (from id 0) before new ones: at the start, after a failure, and while
   * one waits to be tried again.
   */
  private readonly pending = new Set(usageStreamKeys);
  /** When a stream's refused entries are next tried, alone (its new entries are read meanwhile). */
  private readonly retryAt = new Map<string, number>();
  /** How many times the record refused each entry written alone (`stream id`). */
  private readonly refusals = new Map<string, number>();

  constructor(private readonly options: UsageWriterOptions) {
    this.reader = { redis: options.redis, group: usageGroup, consumer: options.consumer, count: options.batch ?? 500 };
    this.deadLetterAfter = Math.max(1, options.deadLetterAfter ?? deadLetterAfterDefault);
    this.retryMs = options.retryMs ?? 1000;
    this.lingerMs = options.lingerMs ?? 250;
    this.blockMs = options.blockMs ?? 1000;
    this.claimIdleMs = options.claimIdleMs ?? 30_000;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  async close(): Promise<void> {
    this.running = false;
    this.pause.cut();
    // The blocked read returns within blockMs; the batch in hand is written (or left pending) first.
    await this.loop;
  }

  private async run(): Promise<void> {
    const { redis, log } = this.options;
    const oneServer = !isCluster(redis);
    const pending = this.pending;
    let backoff = 0;
    // Own pending records first (a batch read before a crash or a failed commit), then new ones; a stream whose
    // refused entry waits for its next try is read for new ones meanwhile.
    const history = (stream: string, now: number) => pending.has(stream) && (this.retryAt.get(stream) ?? 0) <= now;
    while (this.running) {
      try {
        if (backoff > 0) await this.pause.for(backoff);
        await this.housekeeping();
        let read = 0;
        const take = async (reply: StreamReply, fromHistory: ReadonlySet<string>) => {
          for (const [stream, entries] of reply ?? []) {
            // A read of history is the try its refused entries waited for: what they are refused now sets the next
            // wait.
            if (fromHistory.has(stream)) this.retryAt.delete(stream);
            if (entries.length === 0) {
              if (fromHistory.has(stream)) pending.delete(stream);
            } else await this.write(stream, entries);
            read += entries.length;
          }
        };
        const now = Date.now();
        if (oneServer) {
          // A read of history (id 0) never blocks: only a read of new records waits.
          const fromHistory = new Set(usageStreamKeys.filter((s) => history(s, now)));
          await take(
            await readGroup(
              this.reader,
              usageStreamKeys,
              usageStreamKeys.map((s) => (fromHistory.has(s) ? '0' : '>')),
              fromHistory.size === 0 ? this.blockMs : undefined,
            ),
            fromHistory,
          );
        } else {
          for (const stream of usageStreamKeys) {
            const fromHistory = new Set(history(stream, now) ? [stream] : []);
            await take(await readGroup(this.reader, [stream], [fromHistory.size > 0 ? '0' : '>']), fromHistory);
          }
          if (read === 0 && this.running) await this.pause.for(this.blockMs);
        }
        // Light traffic: let records gather rather than spend a transaction on each (the CPU it saves is the
        // gateway's).
        if (read > 0 && read < this.reader.count && pending.size === 0 && this.running)
          await this.pause.for(this.lingerMs);
        backoff = 0;
      } catch (error) {
        for (const stream of usageStreamKeys) pending.add(stream);
        this.retryAt.clear();
        if (isMissingGroup(error)) {
          // A stream or its group is gone (a flushed Redis): made again, from the start of whatever is there now.
          await ensureUsageGroup(redis).catch(() => undefined);
          continue;
        }
        activeMetrics()?.usageWriteFailures.inc();
        backoff = Math.min(maxBackoffMs, Math.max(250, backoff * 2));
        log.warn(
          { err: error, retryMs: backoff },
          'could not write usage to the record; it waits in Redis and is written again',
        );
      }
    }
  }

  /**
   * Writes a batch; when the record refuses its data, writes it again entry by entry, so that only the refused
   * entries stay pending (see `refused`). Throws what is not the data's (the record away): the batch waits whole.
   */
  private async write(stream: string, entries: StreamEntry[]): Promise<void> {
    try {
      await this.writeBatch(stream, entries);
      return;
    } catch (error) {
      if (!refusedData(error)) throw error;
      if (entries.length === 1) return this.refused(stream, entries[0]!, error);
    }
    for (const entry of entries) {
      try {
        await this.writeBatch(stream, [entry]);
      } catch (error) {
        if (!refusedData(error)) throw error;
        await this.refused(stream, entry, error);
      }
    }
  }

  /**
   * An entry the record refused, written alone: left pending and tried again after a wait that doubles, or, refused
   * `deadLetterAfter` times, moved to its stream's dead letters in one transaction (added there, acknowledged and
   * deleted here), the original fields kept as they were with where it came from and why.
   */
  private async refused(stream: string, [id, fields]: StreamEntry, error: unknown): Promise<void> {
    const { redis, log } = this.options;
    const entryKey = `${stream} ${id}`;
    const tries = (this.refusals.get(entryKey) ?? 0) + 1;
    const reason = String((error as Error).message).slice(0, 500);
    const requestId = (entryJson(fields, 'usage') ?? entryJson(fields, logField))?.request_id;
    const named = { stream, entry: id, requestId, tries, code: (error as { code?: string }).code, reason };
    if (tries < this.deadLetterAfter) {
      this.refusals.set(entryKey, tries);
      this.pending.add(stream);
      const waitMs = Math.min(maxBackoffMs, this.retryMs * 2 ** (tries - 1));
      this.retryAt.set(stream, Math.min(this.retryAt.get(stream) ?? Number.POSITIVE_INFINITY, Date.now() + waitMs));
      log.warn(
        { ...named, retryMs: waitMs },
        'the record refused a usage entry; the rest of its batch is written, this one is tried again alone',
      );
      return;
    }
    const deadLetters = usageDeadLetterKey(stream);
    const results = await redis
      .multi()
      .xadd(
        deadLetters,
        '*',
        ...fields,
        'stream',
        stream,
        'entry',
        id,
        'tries',
        String(tries),
        'error',
        reason,
        'moved_at',
        String(Date.now()),
      )
      .xack(stream, usageGroup, id)
      .xdel(stream, id)
      .exec();
    const failed = results?.find(([commandError]) => commandError)?.[0];
    if (!results || failed) throw failed ?? new Error('the move to the dead-letter stream was not run');
    this.refusals.delete(entryKey);
    activeMetrics()?.usageDeadLetters.inc();
    log.error(
      { ...named, deadLetters },
      `a usage entry the record refused ${tries} times was moved to its dead-letter stream; nothing else waits ` +
        `for it (docs/operating.md says how to write it again)`,
    );
  }

  /** Writes entries in one transaction and only then acknowledges and deletes them. */
  private async writeBatch(stream: string, entries: StreamEntry[]): Promise<void> {
    const rows: UsageRow[] = [];
    const logs: LogRow[] = [];
    for (const [, fields] of entries) {
      const row = usageRow(fields);
      if (row) rows.push(row);
      else {
        const log = logRow(fields);
        if (log) logs.push(log);
      }
    }
    const halves = mergeHalves(rows, logs);
    const written = await this.options.record.transaction().execute(async (tx) => {
      await lockUsageWriting(tx);
      const settled = await writeUsage(tx, halves.rows);
      await writeLog(tx, halves.logs);
      return settled;
    });
    const ids = entries.map(([id]) => id);
    await this.options.redis
      .multi()
      .xack(stream, usageGroup, ...ids)
      .xdel(stream, ...ids)
      .exec();
    if (this.refusals.size > 0) for (const id of ids) this.refusals.delete(`${stream} ${id}`);
    activeMetrics()?.usageWritten.inc(written);
  }

  /** Now and then: take over what a dead consumer held, publish the buffer's depth, apply the retention. */
  private async housekeeping(): Promise<void> {
    const now = Date.now();
    if (now - this.lastClaim >= this.claimIdleMs / 2) {
      this.lastClaim = now;
      const { redis } = this.options;
      let depth = 0;
      for (const stream of usageStreamKeys) {
        const entries = await claimIdle(this.reader, stream, this.claimIdleMs);
        if (entries.length > 0) await this.write(stream, entries);
        depth += await redis.xlen(stream);
      }
      activeMetrics()?.usageBuffered.set(depth);
    }
    if (this.options.retentionDays && now - this.lastRetention >= retentionEveryMs) {
      this.lastRetention = now;
      void deleteOldUsage(this.options.record, this.options.retentionDays).catch((error: unknown) =>
        this.options.log.warn({ err: error }, 'could not delete usage rows past their retention'),
      );
      // The audit log's retention rides on the same hourly round: each prune takes the chain's lock, so workers pruning
      // at once take turns.
      if (this.options.auditRetentionDays) {
        void pruneAuditOlderThanDays(this.options.record, this.options.auditRetentionDays).catch((error: unknown) =>
          this.options.log.warn({ err: error }, 'could not prune audit log rows past their retention'),
        );
      }
    }
  }
}

/**
 * Deletes usage rows older than the retention, a few thousand per statement
 * (each its own short transaction through the `created` index), so writes
 * are never held behind one long delete. Day totals stay.
 */
export async function deleteOldUsage(record: RecordDb, retentionDays: number, now = Date.now()): Promise<number> {
  const cutoff = Math.floor(now / 1000) - retentionDays * 86_400;
  let deleted = 0;
  for (;;) {
    const result =
      await sql`delete from usage where request_id in (select request_id from usage where created < ${cutoff} limit ${retentionBatch})`.execute(
        record,
      );
    const count = Number(result.numAffectedRows ?? 0);
    deleted += count;
    if (count < retentionBatch) return deleted;
  }
}
