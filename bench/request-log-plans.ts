/**
 * `node --import tsx bench/request-log-plans.ts`: the request log's queries at
 * scale. Fills a fresh database on the PostgreSQL server (BENCH_DATABASE_URL,
 * default the tests' server at 127.0.0.1:5432) with BENCH_LOG_ROWS usage rows
 * (default 10 million: 2,000 accounts, 10,000 keys, 40 models, 30 days, 3 % not
 * completed), builds the log's indexes as a start after an upgrade would
 * (timed), then prints each list query's plan and time: the index it uses,
 * and the rows and buffers it reads. Drops the database at the end.
 */
import pg from 'pg';
import { sql } from 'kysely';
import { openRecord } from '../storage/record/database.js';
import { ensureIndexes, requestLogIndexes } from '../storage/record/migrations.js';
import { encodeCursor } from '../storage/record/request-log.js';

const server = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const rows = Number(process.env.BENCH_LOG_ROWS ?? 10_000_000);
const name = `switchyard_plans_${process.pid}`;
const log = (text: string) => process.stdout.write(`${text}\n`);

async function admin(statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: server });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

const url = new URL(server);
url.pathname = `/${name}`;
await admin(`create database ${name}`);
try {
  const db = await openRecord(url.toString(), { max: 2 });
  // The rows go in without the log's indexes, which are then built as the first start after an upgrade builds them.
  for (const [index] of requestLogIndexes) await sql.raw(`drop index if exists ${index}`).execute(db);
  await sql`set statement_timeout = 0`.execute(db);
  const now = Math.floor(Date.now() / 1000);
  let started = performance.now();
  const chunk = 1_000_000;
  for (let from = 0; from < rows; from += chunk) {
    const to = Math.min(rows, from + chunk) - 1;
    await sql`
      insert into usage (request_id, account_id, key_id, model, vendor, input_tokens, output_tokens, cost_micros, status, created, duration_ms,
                         settled, answer_id, endpoint, channel, stream, http_status, error_code, finish_reason, latency_ms, ttft_ms, queue_ms, attempts)
      select 'req_' || md5(i::text), 'acct_' || (i % 2000), 'key_' || (i % 10000), 'model-' || (i % 40), 'openai', 100 + i % 900, i % 500, i % 5000,
             case when i % 100 < 97 then 'completed' when i % 100 < 99 then 'failed' else 'refused' end,
             ${now} - (i::bigint * ${30 * 86_400}) / ${rows}, 0,
             i % 100 < 99, 'chatcmpl-' || md5((i * 7)::text), 'chat.completions', 'openai', i % 3 = 0,
             case when i % 100 < 97 then 200 when i % 100 < 99 then 502 else 429 end,
             case when i % 100 < 97 then null when i % 100 < 99 then 'upstream_error' else 'rate_limit_exceeded' end,
             'stop', 100 + i % 2000, case when i % 3 = 0 then 50 + i % 400 end, i % 20, 1
      from generate_series(${from}::bigint, ${to}::bigint) as i`.execute(db);
    log(`inserted ${(to + 1).toLocaleString('en-US')} rows (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  log(`filled in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  started = performance.now();
  await ensureIndexes(db as never);
  log(
    `the log's ${requestLogIndexes.length} indexes built CONCURRENTLY in ` +
      `${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
  await sql`analyze usage`.execute(db);
  const size = (
    await sql<{
      table: string;
      indexes: string;
    }>`select pg_size_pretty(pg_table_size('usage')) as table, pg_size_pretty(pg_indexes_size('usage')) as indexes`.execute(
      db,
    )
  ).rows[0]!;
  log(`usage: ${rows.toLocaleString('en-US')} rows, table ${size.table}, indexes ${size.indexes}`);

  // A cursor halfway into one account's history (5,000 rows), as its 51st page of 50 would carry.
  const deep = (
    await sql<{
      created: number;
      request_id: string;
    }>`select created, request_id from usage where account_id = 'acct_7' order by created desc, request_id desc offset 2500 limit 1`.execute(
      db,
    )
  ).rows[0]!;
  const cursor = encodeCursor(Number(deep.created), deep.request_id);
  const answer = (
    await sql<{ answer_id: string }>`select answer_id from usage where account_id = 'acct_9' limit 1`.execute(db)
  ).rows[0]!.answer_id;
  const week = now - 7 * 86_400;
  const page = 'order by created desc, request_id desc limit 51';
  const queries: Array<[string, string]> = [
    ['newest 50, whole gateway', `select * from usage ${page}`],
    ['newest 50 of an account', `select * from usage where account_id = 'acct_7' ${page}`],
    [
      `an account's page after a deep cursor (${cursor.slice(0, 12)}…)`,
      `select * from usage where account_id = 'acct_7' and (created, request_id) < (${deep.created}, ` +
        `'${deep.request_id}') ${page}`,
    ],
    ['newest 50 of a key', `select * from usage where key_id = 'key_77' ${page}`],
    ['newest 50 of a model', `select * from usage where model = 'model-3' ${page}`],
    ['newest 50 failed, whole gateway', `select * from usage where status = 'failed' ${page}`],
    [
      'newest 50 refused of an account',
      `select * from usage where account_id = 'acct_7' and status = 'refused' ${page}`,
    ],
    [
      'an account, model and status, last 7 days',
      `select * from usage where account_id = 'acct_7' and model = 'model-7' and status = 'completed' and ` +
        `created >= ${week} ${page}`,
    ],
    [
      'a range a week ago, whole gateway',
      `select * from usage where created >= ${week - 3600} and created < ${week} ${page}`,
    ],
    [
      'GET /v1/generation by request id',
      `select * from usage where request_id = 'req_' || md5('4242') and key_id = 'key_4242'`,
    ],
    [
      'GET /v1/generation by answer id',
      `select * from usage where answer_id = '${answer}' and key_id = 'key_9' order by created desc limit 1`,
    ],
  ];
  log('');
  log('| query | plan (top nodes) | rows read | time |');
  log('|---|---|---:|---:|');
  for (const [label, query] of queries) {
    const plan = (
      await sql.raw<{ 'QUERY PLAN': unknown }>(`explain (analyze, buffers, format json) ${query}`).execute(db)
    ).rows[0]!['QUERY PLAN'] as Array<{ Plan: PlanNode; 'Execution Time': number }>;
    const top = plan[0]!;
    log(
      `| ${label} | ${describe(top.Plan)} | ${readRows(top.Plan).toLocaleString('en-US')} | ${top['Execution Time'].toFixed(2)} ms |`,
    );
  }
  await db.destroy();
} finally {
  await admin(`drop database if exists ${name} with (force)`);
}

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

/** The plan's chain of nodes down its first branch, with the index each scan uses. */
function describe(node: PlanNode): string {
  const here = `${node['Node Type']}${node['Index Name'] ? ` using ${node['Index Name']}` : ''}`;
  return node.Plans?.length ? `${here} → ${node.Plans.map(describe).join(' + ')}` : here;
}

/** Rows the scans produced plus those their filters threw away: what the query read. */
function readRows(node: PlanNode): number {
  const own = node['Node Type'].includes('Scan')
    ? (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops']
    : 0;
  return own + (node.Plans ?? []).reduce((sum, child) => sum + readRows(child), 0);
}
