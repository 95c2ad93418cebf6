import type { Redis } from 'ioredis';
import { sql, type Transaction } from 'kysely';
import { usageMetrics, usageStreamKeys, utcDay, type UsageMetric } from '../../shared/accounts.js';
import { isCluster } from '../../shared/redis.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import type { RecordDb, RecordTables, UsageDailyTable, UsageTable } from './database.js';

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
}

const maxBackoffMs = 10_000;
const retentionBatch = 5_000;
const retentionEveryMs = 3_600_000;


const int = (value: unknown) => (Number.isFinite(Number(value)) ? Math.round(Number(value)) : 0);
const num = (value: unknown) => (Number.isFinite(Number(value)) ? Number(value) : 0);

/** A stream entry's record as a usage row; undefined for an entry that is not one (it is acknowledged and dropped). */
export function usageRow(fields: readonly string[]): UsageTable | undefined {
  const index = fields.indexOf('usage');
  if (index < 0 || index + 1 >= fields.length) return undefined;
  let parsed: Partial<UsageTable>;
  try {
    parsed = JSON.parse(fields[index + 1]!) as Partial<UsageTable>;
  } catch {
    return undefined;
  }
  if (typeof parsed.request_id !== 'string' || !parsed.request_id) return undefined;
  return {
    request_id: parsed.request_id,
    account_id: String(parsed.account_id ?? ''),
    key_id: String(parsed.key_id ?? ''),
    model: String(parsed.model ?? ''),
    vendor: String(parsed.vendor ?? ''),
    input_tokens: int(parsed.input_tokens),
    cached_tokens: int(parsed.cached_tokens),
    output_tokens: int(parsed.output_tokens),
    images: int(parsed.images),
    audio_seconds: num(parsed.audio_seconds),
    video_seconds: num(parsed.video_seconds),
    cost_micros: int(parsed.cost_micros),
    status: String(parsed.status ?? 'completed'),
    created: int(parsed.created) || Math.floor(Date.now() / 1000),
    duration_ms: int(parsed.duration_ms),
  };
}

/** A day-totals row with every metric at 0. */
export function emptyDayRow(day: string, account_id: string, key_id: string, model: string): UsageDailyTable {
  return { day, account_id, key_id, model, ...(Object.fromEntries(usageMetrics.map((m) => [m, 0])) as Record<UsageMetric, number>) };
}

/**
 * Writes usage rows in the caller's transaction: inserts the rows not written
 * before, and adds only those to the day totals and to the account and key
 * spend (`totals`: false when importing history whose totals are imported
 * apart). Returns how many were new.
 */
export async function writeUsage(tx: Transaction<RecordTables>, rows: readonly UsageTable[], totals = true): Promise<number> {
  if (rows.length === 0) return 0;
  // One row per request id within the batch too (a record delivered twice in one read).
  const unique = [...new Map(rows.map((row) => [row.request_id, row])).values()].sort((a, b) => (a.request_id < b.request_id ? -1 : 1));
  const inserted = await tx
    .insertInto('usage')
    .values(unique)
    .onConflict((oc) => oc.column('request_id').doNothing())
    .returning('request_id')
    .execute();
  if (inserted.length === 0 || !totals) return inserted.length;
  const fresh = new Set(inserted.map((row) => row.request_id));
  const days = new Map<string, UsageDailyTable>();
  const accounts = new Map<string, number>();
  const keys = new Map<string, number>();
  const lastUsed = new Map<string, number>();
  for (const row of unique) {
    if (!fresh.has(row.request_id)) continue;
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
    t.output_tokens += row.output_tokens;
    t.images += row.images;
    t.audio_seconds += Math.round(row.audio_seconds);
    t.video_seconds += Math.round(row.video_seconds);
    t.cost_micros += row.cost_micros;
    lastUsed.set(row.key_id, Math.max(lastUsed.get(row.key_id) ?? 0, row.created));
    if (row.cost_micros !== 0) {
      accounts.set(row.account_id, (accounts.get(row.account_id) ?? 0) + row.cost_micros);
      keys.set(row.key_id, (keys.get(row.key_id) ?? 0) + row.cost_micros);
    }
  }
  // Rows in one order in every transaction, so two writers never wait on each other in a circle.
  const dayRows = [...days.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, row]) => row);
  await tx
    .insertInto('usage_daily')
    .values(dayRows)
    .onConflict((oc) =>
      oc.columns(['account_id', 'day', 'key_id', 'model']).doUpdateSet((eb) =>
        Object.fromEntries(usageMetrics.map((m) => [m, eb(`usage_daily.${m}`, '+', eb.ref(`excluded.${m}`))])) as never,
      ),
    )
    .execute();
  if (accounts.size > 0) {
    const values = sql.join([...accounts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, micros]) => sql`(${id}::text, ${micros}::bigint)`));
    await sql`update accounts a set settled_micros = a.settled_micros + v.micros from (values ${values}) as v(id, micros) where a.id = v.id`.execute(tx);
  }
  if (lastUsed.size > 0) {
    const values = sql.join(
      [...lastUsed].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, last]) => sql`(${id}::text, ${keys.get(id) ?? 0}::bigint, ${last}::bigint)`),
    );
    await sql`update api_keys k set spent_micros = k.spent_micros + v.micros, last_used = greatest(coalesce(k.last_used, 0), v.last)
      from (values ${values}) as v(id, micros, last) where k.id = v.id`.execute(tx);
  }
  return fresh.size;
}

/** Creates each stream's consumer group if it is missing (a new or flushed Redis): from the stream's start, so nothing settled before is skipped. */
export async function ensureUsageGroup(redis: Redis): Promise<void> {
  for (const stream of usageStreamKeys) {
    try {
      await redis.xgroup('CREATE', stream, usageGroup, '0', 'MKSTREAM');
    } catch (error) {
      if (!String((error as Error).message).includes('BUSYGROUP')) throw error;
    }
  }
}

type StreamReply = Array<[string, Array<[string, string[]]>]> | null;

export class UsageWriter {
  private running = false;
  private loop: Promise<void> | undefined;
  private lastClaim = 0;
  private lastRetention = 0;
  private readonly batch: number;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;
  private readonly lingerMs: number;

  constructor(private readonly options: UsageWriterOptions) {
    this.batch = options.batch ?? 500;
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
    this.wake?.();
    // The blocked read returns within blockMs; the batch in hand is written (or left pending) first.
    await this.loop;
  }

  private read(streams: readonly string[], ids: readonly string[], block: boolean): Promise<StreamReply> {
    const { redis, consumer } = this.options;
    const xreadgroup = redis.xreadgroup as unknown as (...args: Array<string | number>) => Promise<StreamReply>;
    return xreadgroup.call(redis, 'GROUP', usageGroup, consumer, 'COUNT', this.batch, ...(block ? ['BLOCK', this.blockMs] : []), 'STREAMS', ...streams, ...ids);
  }

  private async run(): Promise<void> {
    const { redis, log } = this.options;
    const oneServer = !isCluster(redis);
    let backoff = 0;
    // Own pending records first (a batch read before a crash or a failed commit), then new ones.
    const pending = new Set(usageStreamKeys);
    while (this.running) {
      try {
        if (backoff > 0) await this.pause(backoff);
        await this.housekeeping();
        let read = 0;
        const take = async (reply: StreamReply) => {
          for (const [stream, entries] of reply ?? []) {
            if (entries.length === 0) pending.delete(stream);
            else await this.write(stream, entries);
            read += entries.length;
          }
        };
        if (oneServer) {
          // A read of history (id 0) never blocks: only a read of new records waits.
          await take(await this.read(usageStreamKeys, usageStreamKeys.map((s) => (pending.has(s) ? '0' : '>')), pending.size === 0));
        } else {
          for (const stream of usageStreamKeys) await take(await this.read([stream], [pending.has(stream) ? '0' : '>'], false));
          if (read === 0 && this.running) await this.pause(this.blockMs);
        }
        // Light traffic: let records gather rather than spend a transaction on each (the CPU it saves is the gateway's).
        if (read > 0 && read < this.batch && pending.size === 0 && this.running) await this.pause(this.lingerMs);
        backoff = 0;
      } catch (error) {
        const message = String((error as Error).message);
        for (const stream of usageStreamKeys) pending.add(stream);
        if (message.includes('NOGROUP')) {
          // A stream or its group is gone (a flushed Redis): made again, from the start of whatever is there now.
          await ensureUsageGroup(redis).catch(() => undefined);
          continue;
        }
        activeMetrics()?.usageWriteFailures.inc();
        backoff = Math.min(maxBackoffMs, Math.max(250, backoff * 2));
        log.warn({ err: error, retryMs: backoff }, 'could not write usage to the record; it waits in Redis and is written again');
      }
    }
  }

  /** Sleeps, cut short by close(). */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  private wake: (() => void) | undefined;

  /** Writes one batch and only then acknowledges and deletes it. */
  private async write(stream: string, entries: Array<[string, string[]]>): Promise<void> {
    const rows: UsageTable[] = [];
    for (const [, fields] of entries) {
      const row = usageRow(fields);
      if (row) rows.push(row);
    }
    const written = await this.options.record.transaction().execute((tx) => writeUsage(tx, rows));
    const ids = entries.map(([id]) => id);
    await this.options.redis.multi().xack(stream, usageGroup, ...ids).xdel(stream, ...ids).exec();
    activeMetrics()?.usageWritten.inc(written);
  }

  /** Now and then: take over what a dead consumer held, publish the buffer's depth, apply the retention. */
  private async housekeeping(): Promise<void> {
    const now = Date.now();
    if (now - this.lastClaim >= this.claimIdleMs / 2) {
      this.lastClaim = now;
      const { redis, consumer } = this.options;
      let depth = 0;
      for (const stream of usageStreamKeys) {
        const claimed = (await redis.xautoclaim(stream, usageGroup, consumer, this.claimIdleMs, '0-0', 'COUNT', this.batch)) as [string, Array<[string, string[]] | null>];
        const entries = (claimed?.[1] ?? []).filter((entry): entry is [string, string[]] => Array.isArray(entry));
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
    const result = await sql`delete from usage where request_id in (select request_id from usage where created < ${cutoff} limit ${retentionBatch})`.execute(record);
    const count = Number(result.numAffectedRows ?? 0);
    deleted += count;
    if (count < retentionBatch) return deleted;
  }
}
