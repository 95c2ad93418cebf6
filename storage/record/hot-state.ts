import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { defaultAccountId, usageMetrics, type UsageMetric } from '../../shared/accounts.js';
import {
  accountEmailsKey,
  accountKey,
  accountKeysKey,
  accountsIndexKey,
  apiKeyHashesKey,
  apiKeyIdsKey,
  apiKeyRecordKey,
  accessChangedChannel,
  billKey,
  keyBillField,
  keyBillFields,
  legacyUsageStreamKey,
  ledgerKey,
  recordEpochKey,
  recordLoadedKey,
  recordLoadingKey,
  usageDayKey,
  usageSetAsideKey,
  usageStreamKeys,
} from '../../shared/redis-keys.js';
import type { Logger } from '../../shared/logger.js';
import { inOneWrite } from '../../shared/redis.js';
import { as, luaFiles, redisScript } from '../../shared/redis-script.js';
import { balanceMicros, settledMicrosFor } from '../../shared/money/balance.js';
import { sql } from 'kysely';
import { openRecord, type RecordDb, type UsageDailyTable } from './database.js';
import { emptyDayRow, usageGroup, usageRow, writeUsage, type UsageRow } from './usage-writer.js';
import { budgetOf, readPeriodSpend } from './budget-spend.js';
import { budgetText } from '../../shared/money/budgets.js';

/**
 * Redis holds the hot state of accounts and keys (what admission reads in
 * its one script); the record (PostgreSQL) holds the truth. A Redis that lost
 * it (flushed, a new server, a failover that dropped writes) is loaded again
 * from the record — at start, and on first use when `recordLoadedKey` is
 * found missing: accounts and their balances (credits − settled usage),
 * keys with their spend, revoked keys kept out. Fields Redis still has are
 * kept (HSETNX): they are newer than the record's copy, which the usage
 * writer brings up to date a moment later.
 *
 * A balance is exact as of the load: usage still waiting in the stream is
 * subtracted by reading the stream and the record in one snapshot. What a
 * flush takes is the reservations in flight and the usage entries not yet
 * written (docs/operating.md, "What faults cost").
 *
 * The hot state is stamped with the record it came from (`recordLoadedKey`
 * holds the stamp): the record's own random id (`record_identity`, drawn
 * once by the migration that made it), the cluster's system identifier and the
 * database's oid, so a different record, a restore into another cluster and
 * one into another database each show. A restore that keeps all three (a
 * copy of the data folder, `pg_restore --clean` into the same database) shows
 * by the record's high-water mark (`record_identity.epoch`): every process
 * raises it at start, every few seconds and at its stop, and Redis keeps the
 * highest it saw (`recordEpochKey`); a restored record's is the backup's,
 * behind Redis's. The mark lives in the record's data, so every kind of
 * restore brings it back; the WAL position would not (a `pg_restore` moves
 * it forward, a crash that lost unflushed WAL moves it back without a
 * restore). Whatever the stamp says, the record wins: Redis's accounts and
 * keys are dropped and loaded from it, and the usage entries waiting in the
 * streams, which belong to the other timeline, are set aside. The check runs
 * at start and every few seconds; a request costs one EXISTS at most.
 */

const lockMs = 120_000;
const pipelineChunk = 1000;

type PipelineCommand = (p: ReturnType<Redis['pipeline']>) => void;

/**
 * Sends commands a thousand at a time; bills sit in other slots than the directory, which `together` sends apart on a
 * Cluster.
 */
async function sendInChunks(redis: Redis, commands: readonly PipelineCommand[]): Promise<void> {
  for (let i = 0; i < commands.length; i += pipelineChunk) {
    const batch = inOneWrite(redis);
    for (const command of commands.slice(i, i + pipelineChunk)) command(batch);
    for (const [error] of (await batch.exec()) ?? []) if (error) throw error;
  }
}

/**
 * Runs a script once per item, a thousand at a time. A script is called on the connection, not queued in a batch:
 * each thousand is issued in one turn, so the connection's write batching sends it in one write all the same.
 */
async function inChunks<T>(items: readonly T[], run: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += pipelineChunk) await Promise.all(items.slice(i, i + pipelineChunk).map(run));
}
/** How long usage entries set aside from another record's timeline are kept. */
const setAsideSeconds = 30 * 86_400;

/** Which record the hot state came from, and its high-water mark. */
interface RecordStamp {
  /** The record's own random id (`record_identity.id`). */
  record: string;
  /** The PostgreSQL cluster's system identifier ('-' where the server does not say). */
  system: string;
  /** The database's oid. */
  database: string;
  epoch: number;
}

/** Why Redis's hot state is loaded anew from the record. */
type Reload =
  | { reason: 'missing' }
  | {
      reason: 'unstamped' | 'different' | 'cluster' | 'database' | 'restored';
      from: Partial<RecordStamp> & { stamp: string };
    };

const stampText = (stamp: Pick<RecordStamp, 'record' | 'system' | 'database'>) =>
  `${stamp.record} ${stamp.system} ${stamp.database}`;

function parseStamp(text: string, epoch: number): (Partial<RecordStamp> & { stamp: string }) | undefined {
  const [record, system, database, ...rest] = text.split(' ');
  if (!record?.startsWith('rec_') || !system || !database || rest.length > 0) return undefined;
  return { stamp: text, record, system, database, epoch };
}

let systemReadable = true;
/**
 * The record's stamp; with `raise`, its high-water mark is raised by one in the same statement (returned: the mark
 * before it, what a comparison with Redis's must use, and after it, what Redis may be raised to).
 */
async function readRecordStamp(record: RecordDb, raise: boolean): Promise<RecordStamp & { raised: number }> {
  const change = raise
    ? sql`update record_identity set epoch = epoch + 1 returning id, epoch - 1 as before, epoch`
    : sql`select id, epoch as before, epoch from record_identity`;
  // pg_control_system() is PostgreSQL's own (9.6 on); a server that refuses it still has the record's id and the oid.
  const system = systemReadable ? sql`(select system_identifier::text from pg_control_system())` : sql`'-'`;
  const query = sql<{ id: string; before: string | number; epoch: string | number; database: string; system: string }>`
    with stamp as (${change})
    select stamp.id, stamp.before, stamp.epoch, (select oid::text from pg_database where datname = current_database()) as database, ${system} as system from stamp`;
  let rows;
  try {
    rows = (await query.execute(record)).rows;
  } catch (error) {
    if (!systemReadable || !/pg_control_system|permission denied/i.test(String((error as Error).message))) throw error;
    systemReadable = false;
    return readRecordStamp(record, raise);
  }
  const row = rows[0];
  if (!row) throw new Error('the record has no identity (record_identity is empty)');
  return {
    record: row.id,
    system: row.system ?? '-',
    database: row.database,
    epoch: Number(row.before),
    raised: Number(row.epoch),
  };
}

/** Raises Redis's high-water mark, only while the hot state carries this record's stamp. */
const raiseEpochScript = redisScript({
  name: 'record_raise_epoch',
  files: luaFiles(import.meta.url, 'raise-epoch'),
  keys: ['loaded', 'epoch'],
  args: ['stamp', 'raised'],
  reply: as<number>(),
});

/** Releases the loading lock, only if it is still this load's. */
const releaseLoadLockScript = redisScript({
  name: 'record_release_load_lock',
  files: luaFiles(import.meta.url, 'release-load-lock'),
  keys: ['lock'],
  args: ['token'],
  reply: as<number>(),
});

/** Removes a revoked key's hash from the key hashes, only while it still names that key. */
const unhashRevokedKeyScript = redisScript({
  name: 'record_unhash_revoked_key',
  files: luaFiles(import.meta.url, 'unhash-revoked-key'),
  keys: ['hashes'],
  args: ['hash', 'keyId'],
  reply: as<number>(),
});

export class HotState {
  private loading: Promise<boolean> | undefined;
  private checking: Promise<boolean> | undefined;
  /** The record's stamp as this process last found it, once it checked it against Redis's. */
  private checked: RecordStamp | undefined;
  /** A stamp of another record found on Redis while this process's record had not changed: said once per stamp. */
  private foreign: string | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly record: RecordDb,
    private readonly log?: Logger,
  ) {}

  /**
   * Loads the hot state when Redis lost it; cheap (one EXISTS) when it did not. Concurrent calls share one load.
   * A process's first call checks the whole stamp (`check`). True when Redis had lost it (loaded now, here or by
   * another process): what was not found may be there now.
   */
  async ensure(): Promise<boolean> {
    if (!this.checked) return this.check();
    if ((await this.redis.exists(recordLoadedKey)) === 1) return false;
    this.loading ??= this.load({ reason: 'missing' }).finally(() => (this.loading = undefined));
    return this.loading;
  }

  /**
   * Compares Redis's stamp with the record's (raising the record's high-water mark, and Redis's with it) and loads
   * the hot state anew when they differ: at start and every few seconds, never per request. True when it loaded.
   */
  check(): Promise<boolean> {
    this.checking ??= this.compare().finally(() => (this.checking = undefined));
    return this.checking;
  }

  /**
   * Checks every `intervalMs` (a Redis flushed, or a record restored, under a running gateway is loaded again within
   * it).
   */
  watch(intervalMs: number): () => void {
    const timer = setInterval(() => {
      this.check().catch((error: unknown) =>
        this.log?.warn({ err: error }, 'could not check the hot state against the record'),
      );
    }, intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  /**
   * Raises the record's high-water mark and Redis's once more (a process that stops: what it wrote is behind the mark).
   */
  async mark(): Promise<void> {
    const now = await readRecordStamp(this.record, true);
    await raiseEpochScript(this.redis, {
      loaded: recordLoadedKey,
      epoch: recordEpochKey,
      stamp: stampText(now),
      raised: now.raised,
    });
  }

  private async compare(): Promise<boolean> {
    // Redis first, the record after: on one timeline the mark Redis holds is never above the record's read later.
    const [text = null, epochText = null] = await this.redis.mget(recordLoadedKey, recordEpochKey);
    const now = await readRecordStamp(this.record, true);
    const verdict = this.judge(text, Number(epochText ?? 0), now);
    if (verdict === 'foreign') {
      if (this.foreign !== text) {
        this.foreign = text ?? undefined;
        this.log?.error(
          { redis: text, record: stampText(now) },
          "Redis's hot state now comes from another record than this process's: another gateway on the same " +
            'Redis uses another record. Stop it, or give each record its own Redis; this process does not load it ' +
            'back',
        );
      }
      return false;
    }
    this.foreign = undefined;
    const loaded = verdict === 'ok' ? false : await this.load(verdict);
    this.checked = now;
    if (!loaded)
      await raiseEpochScript(this.redis, {
        loaded: recordLoadedKey,
        epoch: recordEpochKey,
        stamp: stampText(now),
        raised: now.raised,
      });
    return loaded;
  }

  /** What Redis's stamp says against the record's now. */
  private judge(text: string | null, epoch: number, now: RecordStamp): 'ok' | 'foreign' | Reload {
    if (text === null) return { reason: 'missing' };
    const from = parseStamp(text, epoch);
    if (!from) return { reason: 'unstamped', from: { stamp: text } };
    if (text === stampText(now)) return epoch > now.epoch ? { reason: 'restored', from } : 'ok';
    // Another stamp while this process's record is as it last found it: another process on another record wrote it.
    const mine = this.checked;
    if (mine && stampText(mine) === stampText(now) && now.epoch >= mine.epoch) return 'foreign';
    return {
      reason: from.record !== now.record ? 'different' : from.system !== now.system ? 'cluster' : 'database',
      from,
    };
  }

  /** True when this process loaded it; false when another process had (its stamp is the record's now). */
  private async load(why: Reload): Promise<boolean> {
    const token = randomBytes(8).toString('hex');
    const deadline = Date.now() + lockMs;
    while ((await this.redis.set(recordLoadingKey, token, 'PX', lockMs, 'NX')) !== 'OK') {
      // Another process loads it: wait for its stamp.
      if (await this.current(why)) return true;
      if (Date.now() > deadline)
        throw new Error('another process has been loading the hot state from the record for too long');
      await new Promise((r) => setTimeout(r, 100));
    }
    try {
      if (await this.current(why)) return true;
      const started = Date.now();
      const now = await readRecordStamp(this.record, false);
      let dropped: { accounts: number; keys: number; usage: number } | undefined;
      if (why.reason !== 'missing') {
        // Unmarked first: another process's first use waits for this load instead of reading a half-dropped state.
        await this.redis.del(recordLoadedKey);
        // Without a stamp (an older version loaded it, most likely from this record) the usage waiting is kept: it is
        // counted as a load counts it.
        dropped = await dropHotState(this.redis, why.from.stamp, why.reason !== 'unstamped');
      }
      const imported = await importRedisOnce(this.redis, this.record);
      const loaded = await loadHotState(this.redis, this.record);
      // The record's mark as of the load, lowered too when a restore had put Redis's ahead.
      await inOneWrite(this.redis).set(recordEpochKey, String(now.raised)).set(recordLoadedKey, stampText(now)).exec();
      const ms = Date.now() - started;
      const to = { record: now.record, system: now.system, database: now.database, epoch: now.raised };
      if (why.reason === 'missing') {
        this.log?.info(
          { ...loaded, ...(imported ? { imported } : {}), record: to, ms },
          'loaded accounts and keys from the record into Redis',
        );
      } else {
        const { stamp: _, ...from } = why.from;
        this.log?.warn({ reason: why.reason, from, to, dropped, ...loaded, ms }, reloadMessages[why.reason]);
      }
      return true;
    } finally {
      await releaseLoadLockScript(this.redis, { lock: recordLoadingKey, token }).catch(() => undefined);
    }
  }

  /** Whether the hot state carries the record's stamp now (another process loaded it meanwhile). */
  private async current(why: Reload): Promise<boolean> {
    const [text = null, epochText = null] = await this.redis.mget(recordLoadedKey, recordEpochKey);
    if (text === null) return false;
    if (why.reason === 'missing') return true;
    const now = await readRecordStamp(this.record, false);
    return text === stampText(now) && Number(epochText ?? 0) <= now.epoch;
  }
}

const reloadMessages: Record<Exclude<Reload['reason'], 'missing'>, string> = {
  unstamped:
    "Redis's hot state carried no record stamp (loaded by an older version): the record wins, accounts and keys " +
    'loaded from it anew',
  different:
    "Redis's hot state came from a different record: the record wins, Redis's accounts and keys were dropped and " +
    'loaded from this one',
  cluster:
    "the record was restored or copied into another PostgreSQL cluster: the record wins, Redis's accounts and " +
    'keys were dropped and loaded from it',
  database:
    "the record was restored or copied into another database: the record wins, Redis's accounts and keys were " +
    'dropped and loaded from it',
  restored:
    "the record was restored from a backup (its high-water mark is behind Redis's): the record wins, Redis's " +
    'accounts and keys were dropped and loaded from it',
};

/**
 * Drops Redis's hot state of accounts and keys (the directory, the bills with their reservations and spend) and,
 * with `setAside`, moves the usage entries waiting in the streams aside: they were settled on the other record's
 * timeline. Every api forgets the keys it cached of the accounts dropped.
 */
async function dropHotState(
  redis: Redis,
  fromStamp: string,
  setAside: boolean,
): Promise<{ accounts: number; keys: number; usage: number }> {
  const accounts = await redis.zrange(accountsIndexKey, '0', '-1');
  const keys = await redis.smembers(apiKeyIdsKey);
  const commands: PipelineCommand[] = [];
  for (const id of accounts) commands.push((p) => p.del(accountKey(id)).del(billKey(id)).del(accountKeysKey(id)));
  for (const id of keys) commands.push((p) => p.del(apiKeyRecordKey(id)));
  commands.push((p) => p.del(accountsIndexKey).del(accountEmailsKey).del(apiKeyHashesKey).del(apiKeyIdsKey));
  await sendInChunks(redis, commands);
  let usage = 0;
  for (const stream of setAside ? usageStreamKeys : []) {
    for (;;) {
      const entries = await redis.xrange(stream, '-', '+', 'COUNT', 1000);
      if (entries.length === 0) break;
      const aside = inOneWrite(redis);
      for (const [id, fields] of entries)
        aside.xadd(usageSetAsideKey, '*', 'record', fromStamp, 'stream', stream, 'id', id, ...fields);
      aside.expire(usageSetAsideKey, setAsideSeconds);
      for (const [error] of (await aside.exec()) ?? []) if (error) throw error;
      const ids = entries.map(([id]) => id);
      await redis
        .multi()
        .xack(stream, usageGroup, ...ids)
        .xdel(stream, ...ids)
        .exec();
      usage += entries.length;
    }
  }
  for (const id of accounts) await redis.publish(accessChangedChannel, `account:${id}`);
  return { accounts: accounts.length, keys: keys.length, usage };
}

/**
 * How often a running process checks that Redis still holds the hot state of its record (a flushed Redis or a restored
 * record is loaded again within it).
 */
const hotStateCheckMs = 5_000;

/**
 * What the api and the workers open at start: the record at `databaseUrl`, and Redis's hot state loaded from
 * it if Redis lost it or holds another record's, checked again every few seconds. `close` raises the record's
 * high-water mark a last time, stops the checks and closes the record.
 */
export async function openHotRecord(
  databaseUrl: string | undefined,
  redis: Redis,
  log: Logger,
  who: string,
): Promise<{ record: RecordDb; hot: HotState; close(): Promise<void> }> {
  if (!databaseUrl)
    throw new Error(`${who} needs the record: DATABASE_URL (bin/start.ts sets it to the embedded one when unset)`);
  const record = await openRecord(databaseUrl);
  const hot = new HotState(redis, record, log);
  await hot.check();
  const stopWatch = hot.watch(hotStateCheckMs);
  return {
    record,
    hot,
    async close() {
      stopWatch();
      await hot
        .mark()
        .catch((error: unknown) =>
          log.warn({ err: error }, "could not raise the record's high-water mark at the stop"),
        );
      await record.destroy();
    },
  };
}

/** The default account in the record (keys made without an account belong to it). */
export async function ensureDefaultRecord(record: RecordDb): Promise<void> {
  await record
    .insertInto('accounts')
    .values({
      id: defaultAccountId,
      email: '',
      name: 'Default',
      role: 'admin',
      created: Math.floor(Date.now() / 1000),
      password: '',
      unlimited: true,
      disabled: false,
      deleted: false,
      credits_micros: 0,
      settled_micros: 0,
      playground_key: null,
    })
    .onConflict((oc) => oc.column('id').doNothing())
    .execute();
}

async function streamRows(redis: Redis, streams: readonly string[], ids: string[] = []): Promise<UsageRow[]> {
  const rows: UsageRow[] = [];
  for (const stream of streams) {
    let start = '-';
    for (;;) {
      const entries = await redis.xrange(stream, start, '+', 'COUNT', 5000);
      for (const [id, fields] of entries) {
        const row = usageRow(fields);
        if (row) rows.push(row);
        ids.push(id);
      }
      if (entries.length < 5000) break;
      start = `(${entries.at(-1)![0]}`;
    }
  }
  return rows;
}

/** Writes the record's accounts and keys into Redis, keeping what Redis still holds. */
export async function loadHotState(redis: Redis, record: RecordDb): Promise<{ accounts: number; keys: number }> {
  await ensureDefaultRecord(record);
  const buffered = await streamRows(redis, usageStreamKeys);
  const { accounts, keys, revoked, deleted, ledgerAt, pendingAccounts, pendingKeys, caps, periodSpend } = await record
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (tx) => {
      const accounts = await tx.selectFrom('accounts').selectAll().where('deleted', '=', false).execute();
      const keys = await tx
        .selectFrom('api_keys')
        .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
        .selectAll('api_keys')
        .where('api_keys.revoked', 'is', null)
        .where('accounts.deleted', '=', false)
        .execute();
      const revoked = await tx
        .selectFrom('api_keys')
        .select(['id', 'hash', 'account_id'])
        .where('revoked', 'is not', null)
        .execute();
      const deleted = await tx.selectFrom('accounts').select('id').where('deleted', '=', true).execute();
      // Which ledger entry each balance includes, so a credit being applied meanwhile is counted once (account-store's
      // credit).
      const ledgerAt = new Map(
        (
          await tx
            .selectFrom('ledger')
            .select((eb) => ['account_id', eb.fn.max('id').as('at')])
            .groupBy('account_id')
            .execute()
        ).map((row) => [row.account_id, String(row.at)]),
      );
      // Usage settled in Redis but not yet in the record counts against the balance now.
      const written = new Set<string>();
      const ids = buffered.map((row) => row.request_id);
      for (let i = 0; i < ids.length; i += 5000) {
        const chunk = ids.slice(i, i + 5000);
        // A row the api's log event made alone is not a settlement: its cost is still to come from the stream.
        for (const row of await tx
          .selectFrom('usage')
          .select('request_id')
          .where('request_id', 'in', chunk)
          .where('settled', '=', true)
          .execute())
          written.add(row.request_id);
      }
      const pendingAccounts = new Map<string, number>();
      const pendingKeys = new Map<string, number>();
      for (const row of buffered) {
        // A rollup (a Realtime session's row) sums responses counted on their own rows.
        if (written.has(row.request_id) || row.rollup) continue;
        pendingAccounts.set(row.account_id, (pendingAccounts.get(row.account_id) ?? 0) + row.cost_micros);
        pendingKeys.set(row.key_id, (pendingKeys.get(row.key_id) ?? 0) + row.cost_micros);
      }
      const caps = await tx
        .selectFrom('team_members')
        .select(['team_id', 'member_id', 'cap_micros', 'cap_period'])
        .where('cap_micros', 'is not', null)
        .execute();
      const periodSpend = await readPeriodSpend(
        tx,
        accounts,
        keys,
        caps,
        buffered.filter((row) => !written.has(row.request_id) && !row.rollup),
      );
      return { accounts, keys, revoked, deleted, ledgerAt, pendingAccounts, pendingKeys, caps, periodSpend };
    });

  const commands: PipelineCommand[] = [];
  for (const a of accounts) {
    const fields: Record<string, string> = {
      id: a.id,
      kind: a.kind,
      email: a.email,
      name: a.name,
      role: a.role,
      created: String(a.created),
      password: a.password,
      unlimited: a.unlimited ? '1' : '0',
      disabled: a.disabled ? '1' : '0',
      weight: String(a.weight),
      // '' : none granted by an admin, the configured default.
      tiers: a.service_tiers ?? '',
      // '' : no cache cap of its own; '0' forbids caching.
      cache_max_ttl: a.cache_max_ttl_s === null ? '' : String(a.cache_max_ttl_s),
      budget: budgetText(budgetOf(a.budget_micros, a.budget_period)),
      // '' : every MCP tool (shared/mcp/tool-rules.ts).
      mcp_tools: a.mcp_tools ?? '',
      ...(a.playground_key ? { playground_key: a.playground_key } : {}),
    };
    const bill: Record<string, string> = {
      id: a.id,
      unlimited: a.unlimited ? '1' : '0',
      balance: String(balanceMicros(a, pendingAccounts.get(a.id) ?? 0)),
      reserved: '0',
      credits: String(a.credits_micros),
      credits_at: ledgerAt.get(a.id) ?? '0',
    };
    commands.push((p) => {
      for (const [field, value] of Object.entries(fields)) p.hsetnx(accountKey(a.id), field, value);
      for (const [field, value] of Object.entries(bill)) p.hsetnx(billKey(a.id), field, value);
      p.zadd(accountsIndexKey, 'NX', a.created, a.id);
      if (a.email) p.hsetnx(accountEmailsKey, a.email.toLowerCase(), a.id);
    });
  }
  for (const k of keys) {
    const fields: Record<string, string> = {
      id: k.id,
      name: k.name,
      created: String(k.created),
      hash: k.hash,
      hint: k.hint,
      account: k.account_id,
      limit: k.limit_micros === null ? '' : String(k.limit_micros),
      rpm: k.rpm === null ? '' : String(k.rpm),
      tpm: k.tpm === null ? '' : String(k.tpm),
      models: k.models ?? '',
      expires: k.expires === null ? '' : String(k.expires),
      cache_ttl: k.cache_ttl_s === null ? '' : String(k.cache_ttl_s),
      budget: budgetText(budgetOf(k.budget_micros, k.budget_period)),
      created_by: k.created_by ?? '',
      mcp_tools: k.mcp_tools ?? '',
    };
    const spend: Record<string, string> = {
      [keyBillField(k.id, 'spent')]: String(k.spent_micros + (pendingKeys.get(k.id) ?? 0)),
      [keyBillField(k.id, 'reserved')]: '0',
      ...(k.last_used ? { [keyBillField(k.id, 'used')]: String(k.last_used) } : {}),
    };
    commands.push((p) => {
      for (const [field, value] of Object.entries(fields)) p.hsetnx(apiKeyRecordKey(k.id), field, value);
      for (const [field, value] of Object.entries(spend)) p.hsetnx(billKey(k.account_id), field, value);
      p.hset(apiKeyHashesKey, k.hash, k.id);
      p.sadd(apiKeyIdsKey, k.id);
      p.sadd(accountKeysKey(k.account_id), k.id);
    });
  }
  for (const c of caps)
    commands.push((p) =>
      p.hsetnx(accountKey(c.team_id), `cap:${c.member_id}`, budgetText(budgetOf(c.cap_micros, c.cap_period))),
    );
  // Each budget's spend this period, so a flush never starts a budget over; a counter Redis still holds is newer.
  for (const { accountId, counter, spent } of periodSpend) {
    commands.push((p) => {
      p.hsetnx(billKey(accountId), `${counter}.spent`, String(spent));
      p.hsetnx(billKey(accountId), `${counter}.reserved`, '0');
      p.hsetnx(billKey(accountId), counter.slice(0, counter.lastIndexOf(':')), counter);
    });
  }
  await sendInChunks(redis, commands);
  // A revoked key stays revoked, whatever a Redis restored from an old snapshot says: its hash first, then the rest of
  // it.
  await inChunks(revoked, (k) => unhashRevokedKeyScript(redis, { hashes: apiKeyHashesKey, hash: k.hash, keyId: k.id }));
  const dropped: PipelineCommand[] = [];
  for (const k of revoked) {
    dropped.push((p) => {
      p.del(apiKeyRecordKey(k.id));
      p.hdel(billKey(k.account_id), ...keyBillFields(k.id));
      p.srem(apiKeyIdsKey, k.id);
      p.srem(accountKeysKey(k.account_id), k.id);
    });
  }
  // A deleted account bills nothing more.
  for (const a of deleted) dropped.push((p) => p.del(billKey(a.id)));
  await sendInChunks(redis, dropped);
  return { accounts: accounts.length, keys: keys.length };
}

/**
 * The upgrade from a gateway that kept everything in Redis: on the first
 * start with a record, the accounts, keys, ledgers, usage entries and day
 * totals Redis holds are copied into it, once (marked in `record_meta`).
 * An account already in the record is left as it is. Its credits are the
 * sum of its ledger and its settled usage whatever makes the record's balance
 * equal to the one Redis held, to the micro-dollar.
 */
export async function importRedisOnce(
  redis: Redis,
  record: RecordDb,
): Promise<{ accounts: number; keys: number; usage: number } | undefined> {
  const done = await record
    .selectFrom('record_meta')
    .select('value')
    .where('name', '=', 'redis_import')
    .executeTakeFirst();
  if (done) return undefined;
  await ensureDefaultRecord(record);
  const accountIds = await redis.zrange(accountsIndexKey, '0', '-1');
  const keyIds = await redis.smembers(apiKeyIdsKey);
  let accounts = 0;
  let keys = 0;
  let usage = 0;
  const accountRows: Array<Record<string, string>> = [];
  for (const id of accountIds) {
    const row = await redis.hgetall(accountKey(id));
    if (row.id && row.deleted !== '1') accountRows.push(row);
  }
  const keyRows: Array<Record<string, string>> = [];
  for (const id of keyIds) {
    const row = await redis.hgetall(apiKeyRecordKey(id));
    if (row.id && row.hash) keyRows.push(row);
  }
  const streamIds: string[] = [];
  await record.transaction().execute(async (tx) => {
    for (const row of accountRows) {
      const ledger = await redis.xrange(ledgerKey(row.id!), '-', '+');
      const entries = ledger.map(([, fields]) => {
        const f = new Map<string, string>();
        for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
        return {
          amount: Number(f.get('amount') ?? 0),
          balance: Number(f.get('balance') ?? 0),
          note: f.get('note') ?? '',
          time: Number(f.get('time') ?? 0),
        };
      });
      const credits = entries.reduce((sum, e) => sum + e.amount, 0);
      const unlimited = row.unlimited === '1';
      const balance = Number(row.balance ?? 0);
      const inserted = await tx
        .insertInto('accounts')
        .values({
          id: row.id!,
          email: row.email ?? '',
          name: row.name ?? '',
          role: row.role === 'admin' ? 'admin' : 'member',
          created: Number(row.created) || Math.floor(Date.now() / 1000),
          password: row.password ?? '',
          unlimited,
          disabled: row.disabled === '1',
          deleted: false,
          credits_micros: credits,
          settled_micros: unlimited ? 0 : settledMicrosFor(credits, balance),
          playground_key: row.playground_key || null,
        })
        .onConflict((oc) => oc.column('id').doNothing())
        .returning('id')
        .execute();
      if (inserted.length === 0) continue;
      accounts += 1;
      if (entries.length > 0) {
        await tx
          .insertInto('ledger')
          .values(
            entries.map((e) => ({
              account_id: row.id!,
              amount_micros: e.amount,
              balance_micros: e.balance,
              note: e.note,
              time: e.time,
            })),
          )
          .execute();
      }
    }
    const known = new Set((await tx.selectFrom('accounts').select('id').execute()).map((a) => a.id));
    for (const row of keyRows) {
      const account = row.account || defaultAccountId;
      if (!known.has(account)) continue;
      const optional = (text: string | undefined) => (text === undefined || text === '' ? null : Number(text));
      const inserted = await tx
        .insertInto('api_keys')
        .values({
          id: row.id!,
          account_id: account,
          name: row.name ?? '',
          created: Number(row.created) || Math.floor(Date.now() / 1000),
          hash: row.hash!,
          hint: row.hint ?? '',
          limit_micros: optional(row.limit),
          rpm: optional(row.rpm),
          tpm: optional(row.tpm),
          models: row.models || null,
          expires: optional(row.expires),
          spent_micros: Number(row.spent ?? 0) || 0,
          last_used: Number(row.last_used) || null,
          revoked: null,
        })
        .onConflict((oc) => oc.doNothing())
        .returning('id')
        .execute();
      keys += inserted.length;
    }
    // Usage entries as history: their cost is in the balances and spend above already, their sums in the day totals
    // below.
    usage = await writeUsage(tx, await streamRows(redis, [legacyUsageStreamKey], streamIds), false);
    await importDayTotals(redis, tx as unknown as RecordDb);
    await tx
      .insertInto('record_meta')
      .values({ name: 'redis_import', value: JSON.stringify({ at: new Date().toISOString(), accounts, keys, usage }) })
      .execute();
  });
  // Imported, the records leave the stream: the writer must not count them again (nor count one the retention deleted
  // since).
  for (let i = 0; i < streamIds.length; i += 1000)
    await redis.xdel(legacyUsageStreamKey, ...streamIds.slice(i, i + 1000));
  return accounts + keys + usage > 0 ? { accounts, keys, usage } : undefined;
}

/**
 * The gateway-wide day hashes (`usage-day:<day>`) into usage_daily, where the record has no totals for that day yet.
 */
async function importDayTotals(redis: Redis, tx: RecordDb): Promise<void> {
  const prefix = usageDayKey('');
  const days = new Set<string>();
  let cursor = '0';
  do {
    const [next, found] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of found) {
      const day = key.slice(prefix.length);
      if (/^\d{4}-\d{2}-\d{2}$/.test(day)) days.add(day);
    }
  } while (cursor !== '0');
  for (const day of days) {
    const existing = await tx.selectFrom('usage_daily').select('day').where('day', '=', day).limit(1).execute();
    if (existing.length > 0) continue;
    const fields = await redis.hgetall(usageDayKey(day));
    const groups = new Map<string, UsageDailyTable>();
    for (const [field, text] of Object.entries(fields)) {
      const parts = field.split('|');
      if (parts.length < 4) continue;
      const metric = parts.at(-1) as UsageMetric;
      if (!usageMetrics.includes(metric)) continue;
      const [account, key] = parts as [string, string];
      const model = parts.slice(2, -1).join('|');
      const id = `${account}\u0000${key}\u0000${model}`;
      let row = groups.get(id);
      if (!row) groups.set(id, (row = emptyDayRow(day, account, key, model)));
      row[metric] = Number(text) || 0;
    }
    if (groups.size > 0)
      await tx
        .insertInto('usage_daily')
        .values([...groups.values()])
        .execute();
  }
}
