/**
 * Copies one record into another, exactly: every table the migrations made
 * (accounts, keys, the ledger, usage, the daily sums, the record's notes),
 * parents before the tables that reference them, then each sequence set past
 * the highest id copied. Rows travel as PostgreSQL's own JSON text
 * (`json_agg` on the source, `json_populate_recordset` on the target), so a
 * bigint or a float is never a JavaScript number on the way: micro-dollars
 * arrive digit for digit. Both sides must be at the same schema (the caller
 * migrates them first); the target runs it in one transaction, so a copy is
 * whole or absent.
 */

/** What both a `pg` client and PGlite answer: a query with parameters, its rows. */
export interface Queryable {
  query<R = Record<string, unknown>>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** The migrator's own bookkeeping: each side keeps its own. */
const ownTables = new Set(['record_migrations', 'record_migrations_lock']);
/** Where money and keys are: a target holding any row in these is not empty. */
export const recordTables = ['accounts', 'api_keys', 'ledger', 'usage', 'usage_daily', 'audit_log'];
const batchRows = 2000;

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The public tables, each after the tables its foreign keys name. */
async function tablesInOrder(db: Queryable): Promise<string[]> {
  // text[] arrives as an array from both drivers (`pg` and PGlite parse it).
  const { rows } = await db.query<{ name: string; refs: string[] }>(`
    select c.relname as name,
           array(select distinct r.relname::text from pg_constraint k join pg_class r on r.oid = k.confrelid
                 where k.conrelid = c.oid and k.contype = 'f' and r.oid <> c.oid) as refs
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'public' and c.relkind in ('r', 'p')
    order by c.relname`);
  const refs = new Map(rows.filter((row) => !ownTables.has(row.name)).map((row) => [row.name, row.refs]));
  const ordered: string[] = [];
  const visit = (name: string, path: Set<string>) => {
    if (ordered.includes(name) || path.has(name) || !refs.has(name)) return;
    path.add(name);
    for (const parent of refs.get(name)!) visit(parent, path);
    ordered.push(name);
  };
  for (const name of refs.keys()) visit(name, new Set());
  return ordered;
}

async function primaryKey(db: Queryable, table: string): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(
    `select a.attname as name from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any(i.indkey)
     where i.indrelid = $1::regclass and i.indisprimary order by array_position(i.indkey::int2[], a.attnum)`,
    [quote(table)],
  );
  return rows.map((row) => row.name);
}

async function rowCount(db: Queryable, table: string): Promise<number> {
  const { rows } = await db.query<{ n: string | number }>(`select count(*)::text as n from ${quote(table)}`);
  return Number(rows[0]?.n ?? 0);
}

/** Rows in the target's money and key tables (0: a copy may go in). */
export async function recordRows(db: Queryable): Promise<number> {
  let total = 0;
  for (const table of recordTables) total += await rowCount(db, table);
  return total;
}

/**
 * Copies every table of `source` into `target` (call it inside a transaction
 * on the target, whose money and key tables are empty). Rows the target's own
 * migrations wrote in other tables (its identity, its notes) are replaced by
 * the source's. Returns the rows copied per table.
 */
export async function copyRecordTables(source: Queryable, target: Queryable): Promise<Record<string, number>> {
  const sourceTables = new Set(await tablesInOrder(source));
  const tables = (await tablesInOrder(target)).filter((table) => sourceTables.has(table));
  // What the target's migrations wrote (its notes, its identity) gives way to the source's: it is the same record.
  for (const table of [...tables].reverse()) {
    if ((await rowCount(target, table)) === 0) continue;
    if (recordTables.includes(table)) throw new Error(`the target's ${table} is not empty`);
    await target.query(`delete from ${quote(table)}`);
  }
  const copied: Record<string, number> = {};
  for (const table of tables) {
    const key = await primaryKey(target, table);
    const order = key.length > 0 ? key.map(quote).join(', ') : 'ctid';
    let offset = 0;
    for (;;) {
      const { rows } = await source.query<{ batch: string; n: number | string }>(
        `select coalesce(json_agg(t), '[]')::text as batch, count(*)::int as n from (select * from ` +
          `${quote(table)} order by ${order} limit ${batchRows} offset ${offset}) t`,
      );
      const n = Number(rows[0]?.n ?? 0);
      if (n === 0) break;
      await target.query(
        `insert into ${quote(table)} select * from json_populate_recordset(null::${quote(table)}, $1::json)`,
        [rows[0]!.batch],
      );
      offset += n;
      if (n < batchRows) break;
    }
    copied[table] = offset;
  }
  // Sequences (the ledger's ids) go on from the highest id copied.
  const { rows: sequences } = await target.query<{ tbl: string; col: string; seq: string }>(`
    select c.relname as tbl, a.attname as col, pg_get_serial_sequence(quote_ident(c.relname), a.attname) as seq
    from pg_attribute a join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
    where n.nspname = 'public' and c.relkind = 'r' and a.attnum > 0 and not a.attisdropped
      and pg_get_serial_sequence(quote_ident(c.relname), a.attname) is not null`);
  for (const { tbl, col, seq } of sequences) {
    if (!(tbl in copied)) continue;
    await target.query(
      `select setval($1::regclass, coalesce((select max(${quote(col)}) from ${quote(tbl)}), 0) + 1, false)`,
      [seq],
    );
  }
  return copied;
}
