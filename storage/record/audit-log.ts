import { createHash } from 'node:crypto';
import { sql, type Kysely, type Selectable } from 'kysely';
import type { AuditAction, AuditPage, AuditRowView } from '../../shared/audit-actions.js';
import type { AuditLogTable, RecordDb, RecordTables } from './database.js';

/**
 * The audit log: who changed what, when and from where. Every change an
 * operator, a team owner or a person makes is one row, appended by
 * `appendAudit` and by nothing else. The rows form one chain: each row's
 * `hash` is SHA-256 over its own fields and `prev_hash`, the hash of the row
 * before it, so a row changed, deleted or slipped in between two others
 * breaks the chain where it happened (`verifyAudit`). Appends are serialized
 * by a transaction-scoped advisory lock, under which the chain's head is read:
 * processes appending at once never fork it. The table refuses UPDATE, DELETE
 * and TRUNCATE (migration 0012) except the retention's own deletion of the
 * oldest rows (`pruneAudit`), which leaves the last pruned row's hash in
 * `record_meta` as the chain's new anchor and, in the same commit, appends an
 * `audit.pruned` row naming that anchor: `verifyAudit` takes no anchor that
 * the latest such row does not name.
 *
 * Secrets never enter it: a field named like a secret (password, secret, key
 * secret, token, hash) is kept as `[redacted]`, whoever passes it.
 */

export { auditActions, type AuditAction } from '../../shared/audit-actions.js';

/**
 * Who acted when it was no signed-in person: the admin API's token, a command line, the gateway itself, nobody known.
 */
export type AuditActorKind = 'admin-token' | 'cli' | 'system' | 'anonymous';

export interface AuditEntry {
  /** An account id, or one of `AuditActorKind`. */
  actor: string;
  actorEmail?: string | null;
  /** The team (account) the change concerns: its owners see the row. */
  teamId?: string | null;
  action: AuditAction;
  /** What it concerns: a key id, an account id, a channel id. */
  target?: string | null;
  ip?: string | null;
  userAgent?: string | null;
  /** The changed fields only, as they were and as they are (null: there was none, or there is none now). */
  before?: Record<string, unknown> | null;
  after?: Record<string, unknown> | null;
  /** Unix milliseconds; now when left out. */
  time?: number;
}

/** A row as the console, the export and the CLI show it. */
export type AuditRow = AuditRowView;

/** The record, or a transaction of it (a change and its audit row committed together). */
type Recordable = Kysely<RecordTables>;

/** Held by the transaction that appends (or prunes): the chain's head is read and written by one at a time. */
const auditLockId = 0x5377_6175;
/**
 * Takes the chain's lock for the rest of the transaction `tx` (appendAudit takes it again, which PostgreSQL allows):
 * for a writer that must read something and append in one step, with no other append in between.
 */
export const lockAuditChain = (tx: Recordable) => sql`select pg_advisory_xact_lock(${auditLockId})`.execute(tx);
/** The chain's start before any row was pruned. */
export const genesisHash = '0'.repeat(64);
const anchorName = 'audit_anchor';
const pageRows = 1000;
const pruneBatch = 5000;

// ---- the canonical form of a row, which its hash is over ----

/** Names of fields that hold a secret, whole (`password`, `key`) or as a suffix (`client_secret`, `session_token`). */
const secretName = /^(password|passwd|secret|token|hash|key)$|_(password|secret|token|hash)$/i;

/** A value as the log stores it: plain JSON, keys sorted, no NUL, secrets redacted, nothing undefined. */
/**
 * Text as the record can keep it: no NUL, and no lone surrogate (the driver writes one as U+FFFD in a text column,
 * but jsonb refuses the `\ud800` escape JSON.stringify writes for it), so a name any client may send is recorded, and
 * hashed, as the record holds it.
 */
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const recordable = (value: string): string => value.replace(/\u0000/g, '').replace(loneSurrogate, '\uFFFD');

function canonicalValue(value: unknown, depth = 0): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return recordable(value);
  if (typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (typeof value === 'bigint') return Number(value);
  if (depth > 8) return null;
  if (Array.isArray(value)) return value.map((item) => canonicalValue(item, depth + 1));
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const name of Object.keys(value).sort()) {
      const item = (value as Record<string, unknown>)[name];
      if (item === undefined) continue;
      out[recordable(name)] = secretName.test(name) ? '[redacted]' : canonicalValue(item, depth + 1);
    }
    return out;
  }
  return String(value);
}

/** JSON with every object's keys in sorted order: the same value always gives the same text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const object = value as Record<string, unknown>;
  return `{${Object.keys(object)
    .sort()
    .map((name) => `${JSON.stringify(name)}:${canonicalJson(object[name])}`)
    .join(',')}}`;
}

/** SHA-256 (hex) over the row's fields in a fixed order and its `prev_hash`. */
export function auditRowHash(row: Omit<AuditRow, 'hash'>): string {
  const fields = [
    row.id,
    row.time,
    row.actor,
    row.actor_email,
    row.team_id,
    row.action,
    row.target,
    row.ip,
    row.user_agent,
    row.before ?? null,
    row.after ?? null,
    row.prev_hash,
  ];
  return createHash('sha256').update(canonicalJson(fields)).digest('hex');
}

const text = (value: string | null | undefined, max: number): string | null =>
  value === undefined || value === null || value === '' ? null : recordable(value.slice(0, max));

// ---- appending ----

/**
 * Appends one row to the chain. The one way anything is written to the audit
 * log: every feature that changes something calls it after (or, given a
 * transaction of the record, together with) its change. Given the record,
 * it commits a transaction of its own; given a transaction, it writes in it
 * and holds the chain's lock until that commits. Throws when the row could
 * not be written: the caller must not carry on as if it had been.
 */
export async function appendAudit(record: Recordable, entry: AuditEntry): Promise<AuditRow> {
  if (record.isTransaction) return appendIn(record, entry);
  return record.transaction().execute((tx) => appendIn(tx, entry));
}

async function appendIn(tx: Recordable, entry: AuditEntry): Promise<AuditRow> {
  await lockAuditChain(tx);
  const head = await tx.selectFrom('audit_log').select('hash').orderBy('id', 'desc').limit(1).executeTakeFirst();
  const prev = head?.hash ?? (await readAnchor(tx))?.hash ?? genesisHash;
  const next = await sql<{ id: number }>`select nextval(pg_get_serial_sequence('audit_log', 'id')) as id`.execute(tx);
  const before = entry.before === undefined || entry.before === null ? null : canonicalValue(entry.before);
  const after = entry.after === undefined || entry.after === null ? null : canonicalValue(entry.after);
  const row: Omit<AuditRow, 'hash'> = {
    id: Number(next.rows[0]!.id),
    time: entry.time ?? Date.now(),
    actor: text(entry.actor, 200) ?? 'system',
    actor_email: text(entry.actorEmail, 320),
    team_id: text(entry.teamId, 200),
    action: entry.action,
    target: text(entry.target, 200),
    ip: text(entry.ip, 100),
    user_agent: text(entry.userAgent, 500),
    before,
    after,
    prev_hash: prev,
  };
  const hash = auditRowHash(row);
  await tx
    .insertInto('audit_log')
    .values({
      ...row,
      before: before === null ? null : JSON.stringify(before),
      after: after === null ? null : JSON.stringify(after),
      hash,
    })
    .execute();
  return { ...row, hash };
}

/** What a request says of who made it: enough of a Koa context (its `ip` honours TRUST_PROXY) without importing Koa. */
export interface AuditRequest {
  ip: string;
  get(field: string): string;
}

/**
 * The who and from where of an entry, from a console or admin API request and its actor (a signed-in account, or
 * `admin-token`).
 */
export function auditSource(
  request: AuditRequest,
  actor: { id: string; email?: string } | AuditActorKind,
): Pick<AuditEntry, 'actor' | 'actorEmail' | 'ip' | 'userAgent'> {
  return {
    actor: typeof actor === 'string' ? actor : actor.id,
    actorEmail: typeof actor === 'string' ? null : actor.email || null,
    ip: request.ip || null,
    userAgent: request.get('user-agent') || null,
  };
}

/**
 * The fields that differ between two views of a thing, each side holding only
 * those: what `before` and `after` keep. Fields named in `ignore` (balances,
 * counters that move by themselves) are left out.
 */
export function changedFields(
  before: Record<string, unknown>,
  after: Record<string, unknown>,
  ignore: readonly string[] = [],
): { before: Record<string, unknown>; after: Record<string, unknown> } {
  const changed = { before: {} as Record<string, unknown>, after: {} as Record<string, unknown> };
  for (const name of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (ignore.includes(name)) continue;
    if (canonicalJson(canonicalValue(before[name])) === canonicalJson(canonicalValue(after[name]))) continue;
    changed.before[name] = before[name] ?? null;
    changed.after[name] = after[name] ?? null;
  }
  return changed;
}

// ---- the anchor ----

interface Anchor {
  /** The last pruned row's id and hash: the first row kept links to it. */
  id: number;
  hash: string;
}

async function readAnchor(db: Recordable): Promise<Anchor | undefined> {
  const row = await db.selectFrom('record_meta').select('value').where('name', '=', anchorName).executeTakeFirst();
  if (!row) return undefined;
  try {
    const parsed = JSON.parse(row.value) as Anchor;
    return typeof parsed.id === 'number' && typeof parsed.hash === 'string' ? parsed : undefined;
  } catch {
    return undefined;
  }
}

// ---- verifying ----

export type AuditBreak =
  /** The row's fields no longer give its hash: it was changed. */
  | { kind: 'changed'; id: number }
  /** Rows between two are gone: `after` (null: the anchor) and `before` no longer link. */
  | { kind: 'deleted'; after: number | null; before: number }
  /** A row that is right for itself but that the chain goes around: it was put in. */
  | { kind: 'inserted'; id: number }
  /**
   * The anchor the chain starts from (after row `id`) is not the one the latest `audit.pruned` row says its prune set:
   * the oldest rows were deleted, and the anchor moved, by something other than a prune. `pruned` is that row (null:
   * none).
   */
  | { kind: 'anchor'; id: number; pruned: number | null; reason: string };

export interface AuditVerdict {
  intact: boolean;
  /** Rows walked. */
  rows: number;
  firstId: number | null;
  lastId: number | null;
  /** The chain's head: an operator may keep it elsewhere to catch the newest rows removed. */
  lastHash: string;
  /** Where the chain starts: the last pruned row (null: nothing pruned). */
  anchor: Anchor | null;
  /**
   * What says the anchor was a prune's: `full` when the latest `audit.pruned` row names its id and hash, `id-only`
   * when that row was written before prune rows named the hash (its id matches; the next prune writes a full one),
   * null when there is no anchor.
   */
  anchorProof: 'full' | 'id-only' | null;
  broken?: AuditBreak & { message: string };
}

function describeBreak(found: AuditBreak): AuditBreak & { message: string } {
  if (found.kind === 'changed')
    return { ...found, message: `row ${found.id} was changed: its fields no longer give its hash` };
  if (found.kind === 'inserted') return { ...found, message: `row ${found.id} was inserted: the chain goes around it` };
  if (found.kind === 'anchor')
    return { ...found, message: `the anchor after row ${found.id} was not set by a prune: ${found.reason}` };
  return {
    ...found,
    message: `rows were deleted ${found.after === null ? 'at the start of the log' : `after row ${found.after}`}: row ${found.before} does not link to ${found.after === null ? 'the anchor' : `row ${found.after}`}`,
  };
}

function auditRow(row: Selectable<AuditLogTable>): AuditRow {
  return {
    id: Number(row.id),
    time: Number(row.time),
    actor: row.actor,
    actor_email: row.actor_email,
    team_id: row.team_id,
    action: row.action,
    target: row.target,
    ip: row.ip,
    user_agent: row.user_agent,
    before: row.before ?? null,
    after: row.after ?? null,
    prev_hash: row.prev_hash,
    hash: row.hash,
  };
}

/**
 * Walks the chain in id order, a page at a time, from the anchor: each row's
 * hash recomputed from its fields, each row's `prev_hash` checked against the
 * row before it. Reports the first break: a row changed, rows deleted (a row
 * that links to none before it), or a row inserted (a row right for itself
 * that the next one links around). What no chain can show, the newest rows
 * removed, the verdict's `lastHash` lets an operator check against a copy kept elsewhere.
 */
export async function verifyAudit(record: RecordDb): Promise<AuditVerdict> {
  const anchor = (await readAnchor(record)) ?? null;
  let afterId = anchor?.id ?? 0;
  const verdict: AuditVerdict = {
    intact: true,
    rows: 0,
    firstId: null,
    lastId: null,
    lastHash: anchor?.hash ?? genesisHash,
    anchor,
    anchorProof: null,
  };
  // The newest `audit.pruned` row of the chain walked: what must name the anchor in force.
  let lastPrune: AuditRow | undefined;
  // The two rows before the one looked at, and the one looked at held back a row, to look one row ahead.
  let previous: AuditRow | undefined;
  let pending: AuditRow | undefined;
  const fail = (found: AuditBreak): AuditVerdict => ({ ...verdict, intact: false, broken: describeBreak(found) });
  const check = (row: AuditRow, next: AuditRow | undefined): AuditBreak | undefined => {
    if (auditRowHash(row) !== row.hash) return { kind: 'changed', id: row.id };
    const expected = previous?.hash ?? anchor?.hash ?? genesisHash;
    if (row.prev_hash === expected) return undefined;
    // The row before was slipped in: this one links to what came before it.
    if (previous && row.prev_hash === previous.prev_hash) return { kind: 'inserted', id: previous.id };
    // This row was slipped in: the next links to the row before it.
    if (next && next.prev_hash === expected) return { kind: 'inserted', id: row.id };
    return { kind: 'deleted', after: previous?.id ?? null, before: row.id };
  };
  for (;;) {
    const page = (
      await record.selectFrom('audit_log').selectAll().where('id', '>', afterId).orderBy('id').limit(pageRows).execute()
    ).map(auditRow);
    for (const row of page) {
      if (pending) {
        const found = check(pending, row);
        if (found) return fail(found);
        previous = pending;
      }
      pending = row;
      if (row.action === 'audit.pruned') lastPrune = row;
      verdict.rows++;
      verdict.firstId ??= row.id;
    }
    if (page.length < pageRows) break;
    afterId = page.at(-1)!.id;
  }
  if (pending) {
    const found = check(pending, undefined);
    if (found) return fail(found);
    verdict.lastId = pending.id;
    verdict.lastHash = pending.hash;
  }
  // The chain is whole from the anchor; the anchor itself must be a prune's, as the latest prune row (in that chain)
  // says.
  if (anchor) {
    const proof = anchorProof(anchor, lastPrune);
    if (typeof proof === 'object') return fail(proof);
    verdict.anchorProof = proof;
  }
  return verdict;
}

/**
 * Whether the latest `audit.pruned` row explains the anchor in force: it names the anchor's id (`through_id`) and,
 * from prune rows written since they carry it, its hash (`anchor_sha256`). A prune row written before then has the
 * id only: it is taken on its id (`id-only`), weaker, and the next prune writes a full one. No prune row, or one
 * naming another anchor, is a break: the oldest rows were deleted and the anchor moved by something else.
 */
function anchorProof(anchor: Anchor, pruned: AuditRow | undefined): 'full' | 'id-only' | AuditBreak {
  const broken = (reason: string): AuditBreak => ({
    kind: 'anchor',
    id: anchor.id,
    pruned: pruned?.id ?? null,
    reason,
  });
  if (!pruned) return broken('no audit.pruned row explains it (rows before it were deleted outside a prune)');
  const after = (pruned.after ?? {}) as Record<string, unknown>;
  if (after.through_id !== anchor.id) {
    return broken(
      `the latest audit.pruned row ${pruned.id} names the anchor after row ${typeof after.through_id === 'number' ? after.through_id : 'none'}`,
    );
  }
  if (after.anchor_sha256 === undefined) return 'id-only';
  if (after.anchor_sha256 !== anchor.hash)
    return broken(`the latest audit.pruned row ${pruned.id} names another hash for row ${anchor.id}`);
  return 'full';
}

// ---- reading ----

export interface AuditFilter {
  action?: string;
  actor?: string;
  /** One team's rows. */
  teamId?: string;
  /** Only rows of these teams (a team owner's view); an empty list reads nothing. */
  teamIds?: readonly string[];
  /** Unix milliseconds, inclusive. */
  since?: number;
  /** Unix milliseconds, exclusive. */
  until?: number;
}

function filtered(record: RecordDb, filter: AuditFilter) {
  let query = record.selectFrom('audit_log');
  if (filter.action !== undefined) query = query.where('action', '=', filter.action);
  if (filter.actor !== undefined)
    query = query.where((eb) => eb.or([eb('actor', '=', filter.actor!), eb('actor_email', '=', filter.actor!)]));
  if (filter.teamId !== undefined) query = query.where('team_id', '=', filter.teamId);
  if (filter.teamIds !== undefined)
    query =
      filter.teamIds.length === 0
        ? query.where(sql<boolean>`false`)
        : query.where('team_id', 'in', [...filter.teamIds]);
  if (filter.since !== undefined) query = query.where('time', '>=', filter.since);
  if (filter.until !== undefined) query = query.where('time', '<', filter.until);
  return query;
}

/** A page's position: the last row's id, as an opaque string. */
export const encodeAuditCursor = (id: number): string => Buffer.from(`a:${id}`).toString('base64url');
/** The id a cursor names; undefined for one this code did not make. */
export function decodeAuditCursor(cursor: string): number | undefined {
  const match = /^a:(\d{1,15})$/.exec(Buffer.from(cursor, 'base64url').toString());
  return match ? Number(match[1]) : undefined;
}

/** Newest first, `limit` at a time, before the row `cursor` names when given (ids follow the chain, so time). */
export async function listAudit(
  record: RecordDb,
  filter: AuditFilter,
  limit: number,
  cursor?: number,
): Promise<AuditPage> {
  let query = filtered(record, filter).selectAll();
  if (cursor !== undefined) query = query.where('id', '<', cursor);
  const rows = (
    await query
      .orderBy('id', 'desc')
      .limit(limit + 1)
      .execute()
  ).map(auditRow);
  const page = rows.slice(0, limit);
  const hasMore = rows.length > limit;
  return {
    object: 'list',
    data: page,
    has_more: hasMore,
    next_cursor: hasMore && page.length > 0 ? encodeAuditCursor(page.at(-1)!.id) : null,
  };
}

/** The rows a filter picks, oldest first, as JSON Lines (one row and its hashes a line), read a page at a time. */
export async function* exportAudit(record: RecordDb, filter: AuditFilter = {}): AsyncGenerator<string> {
  let afterId = 0;
  for (;;) {
    const page = (
      await filtered(record, filter).selectAll().where('id', '>', afterId).orderBy('id').limit(pageRows).execute()
    ).map(auditRow);
    for (const row of page) yield `${JSON.stringify(row)}\n`;
    if (page.length < pageRows) return;
    afterId = page.at(-1)!.id;
  }
}

// ---- retention ----

/**
 * Deletes the rows older than `olderThan` (unix milliseconds), oldest first,
 * a few thousand per transaction. Each transaction takes the chain's lock,
 * names the newest id it deletes in a setting of its own (the only DELETE
 * the table's trigger lets through, and only of rows up to that id), and
 * records that row's hash as the chain's anchor in the same commit: `verifyAudit`
 * starts there, so a prune is no break, and a deletion anywhere else is one.
 * The same commit appends the prune's `audit.pruned` row, naming the anchor it
 * set (`through_id`, `anchor_sha256`) and how many rows went: `verifyAudit`
 * refuses an anchor the latest such row does not name, so one moved by hand is
 * a break, and a prune that stops half way (a crash between transactions)
 * leaves every anchor it set explained. One row per transaction: a prune of
 * more than a few thousand rows writes several.
 * Returns the number of rows deleted.
 */
export async function pruneAudit(
  record: RecordDb,
  olderThan: number,
  actor: 'system' | 'cli' = 'system',
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const count = await record.transaction().execute(async (tx) => {
      await lockAuditChain(tx);
      const last = await tx
        .selectFrom(
          tx.selectFrom('audit_log').select(['id', 'hash', 'time']).orderBy('id').limit(pruneBatch).as('oldest'),
        )
        .select(['id', 'hash'])
        .where('time', '<', olderThan)
        .orderBy('id', 'desc')
        .limit(1)
        .executeTakeFirst();
      if (!last) return 0;
      // Oldest rows only: a row kept older than one pruned would be cut off the chain, so the prefix stops at the first
      // young row.
      const young = await tx
        .selectFrom('audit_log')
        .select('id')
        .where('id', '<=', Number(last.id))
        .where('time', '>=', olderThan)
        .orderBy('id')
        .limit(1)
        .executeTakeFirst();
      const through = young
        ? await tx
            .selectFrom('audit_log')
            .select(['id', 'hash'])
            .where('id', '<', Number(young.id))
            .orderBy('id', 'desc')
            .limit(1)
            .executeTakeFirst()
        : last;
      if (!through) return 0;
      await sql`select set_config('switchyard.audit_prune_through', ${String(through.id)}, true)`.execute(tx);
      const result = await tx.deleteFrom('audit_log').where('id', '<=', Number(through.id)).executeTakeFirst();
      const anchor: Anchor = { id: Number(through.id), hash: through.hash };
      await tx
        .insertInto('record_meta')
        .values({ name: anchorName, value: JSON.stringify(anchor) })
        .onConflict((oc) => oc.column('name').doUpdateSet({ value: JSON.stringify(anchor) }))
        .execute();
      const rows = Number(result.numDeletedRows);
      // The prune itself is a change the log keeps, committed with it: the anchor it set and how many rows went.
      // (`anchor_sha256`, not a name ending in `hash`: such a field is kept as `[redacted]`.)
      await appendAudit(tx, {
        actor,
        action: 'audit.pruned',
        after: { rows, through_id: anchor.id, anchor_sha256: anchor.hash, older_than: olderThan },
      });
      return rows;
    });
    deleted += count;
    if (count < pruneBatch) break;
  }
  return deleted;
}

/** Deletes the rows older than the retention, in days (the workers' housekeeping and `npm run audit -- prune`). */
export function pruneAuditOlderThanDays(
  record: RecordDb,
  retentionDays: number,
  actor: 'system' | 'cli' = 'system',
  now = Date.now(),
): Promise<number> {
  return pruneAudit(record, now - retentionDays * 86_400_000, actor);
}
