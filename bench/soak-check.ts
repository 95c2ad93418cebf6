/**
 * The soak's check after the run (bench/soak.ts): the clients' own records
 * against the gateway's — the record's usage rows (request log and
 * settlements), accounts, keys and ledger in PostgreSQL, and the hot copy in
 * Redis (bills, reservations, usage streams) — to the micro-dollar.
 */
import pg from 'pg';
import type { Redis } from 'ioredis';
import { readBill, readKeySpend } from '../shared/money/billing.js';
import { reservationDeadlinesKey, billingBuckets, usageDeadLetterKey, usageStreamKeys } from '../shared/redis-keys.js';
import type { ClientRecord } from './soak-traffic.js';

export interface SoakAccount {
  name: string;
  id: string;
  creditsMicros: number;
  keys: Array<{ name: string; id: string; limitMicros: number | null; budgetMicros: number | null }>;
}

export interface CheckResult {
  ok: boolean;
  failures: string[];
  notes: string[];
  figures: Record<string, number>;
}

/** What is still on its way: usage entries in the streams, reservations, per account. */
export async function pending(
  redis: Redis,
  accounts: SoakAccount[],
): Promise<{ streamed: number; reserved: number; deadlines: number }> {
  let streamed = 0;
  for (const key of usageStreamKeys) streamed += await redis.xlen(key);
  let reserved = 0;
  for (const account of accounts) reserved += (await readBill(redis, account.id))?.reservedMicros ?? 0;
  let deadlines = 0;
  for (let bucket = 0; bucket < billingBuckets; bucket += 1)
    deadlines += await redis.zcard(reservationDeadlinesKey(bucket));
  return { streamed, reserved, deadlines };
}

interface UsageRow {
  request_id: string;
  account_id: string;
  key_id: string;
  status: string;
  settled: boolean;
  cost_micros: string;
  http_status: number | null;
  created: string;
  answer_id: string | null;
}

/**
 * `apiKills`: when (ms since the traffic started) each api was SIGKILLed, by its number. The api appends a
 * request's log event just after its answer's last byte: an api killed in between takes it along.
 */
export async function check(
  databaseUrl: string,
  redis: Redis,
  accounts: SoakAccount[],
  records: ClientRecord[],
  apiKills: Array<{ api: number; atMs: number }> = [],
): Promise<CheckResult> {
  const failures: string[] = [];
  const notes: string[] = [];
  const figures: Record<string, number> = {};
  const client = new pg.Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 10_000,
    statement_timeout: 60_000,
  });
  await client.connect();
  try {
    // A Realtime session's own row (`endpoint` 'realtime') sums its responses, each of which has its row: a rollup,
    // counted in no total (as the console counts it), so left out here.
    const rows = (
      await client.query<UsageRow>(
        `select request_id, account_id, key_id, status, settled, cost_micros, http_status, created, answer_id ` +
          `from usage where endpoint is null or endpoint <> 'realtime'`,
      )
    ).rows;
    const byId = new Map(rows.map((row) => [row.request_id, row]));
    // A Message Batch line's result names its message, not its request: its row is found by the answer's id.
    const byAnswer = new Map(rows.filter((row) => row.answer_id).map((row) => [row.answer_id!, row]));
    figures.usageRows = rows.length;

    // Each request as its client saw it: once, and in the record as it was answered.
    const seen = new Map<string, number>();
    for (const record of records)
      if (record.requestId) seen.set(record.requestId, (seen.get(record.requestId) ?? 0) + 1);
    const doubled = [...seen].filter(([, n]) => n > 1);
    figures.doubled = doubled.length + records.filter((r) => r.detail === 'answered twice').length;
    if (figures.doubled > 0)
      failures.push(
        `${figures.doubled} request ids seen by more than one client answer (or an answer twice): ${doubled
          .slice(0, 5)
          .map(([id]) => id)
          .join(', ')}`,
      );

    let lost = 0;
    let wrongStatus = 0;
    let unloggedRefusals = 0;
    let unloggedFailures = 0;
    const killedWithApi: string[] = [];
    const unloggedIds: string[] = [];
    let unbilledCutOffs = 0;
    const unbilledIds: string[] = [];
    const lostIds: string[] = [];
    const wrongIds: string[] = [];
    for (const record of records) {
      if (record.outcome === 'answered') {
        const row = record.requestId
          ? byId.get(record.requestId)
          : record.answerId
            ? byAnswer.get(record.answerId)
            : undefined;
        if (!row) {
          lost += 1;
          if (lostIds.length < 10) lostIds.push(`${record.kind}:${record.requestId}`);
        } else if (row.status !== 'completed' || !row.settled) {
          wrongStatus += 1;
          if (wrongIds.length < 10)
            wrongIds.push(`${record.kind}:${record.requestId}=${row.status}/${row.settled ? 'settled' : 'unsettled'}`);
        }
      } else if (record.outcome === 'refused' && record.requestId) {
        const row = byId.get(record.requestId);
        const endedMs = record.startedMs + record.latencyMs;
        if (!row && apiKills.some((k) => k.api === record.api && k.atMs >= endedMs - 50 && k.atMs - endedMs < 1000)) {
          killedWithApi.push(
            `${record.kind}:${record.requestId} ` +
              `(${Math.round(apiKills.find((k) => k.api === record.api && k.atMs >= endedMs - 50)!.atMs - endedMs)} ` +
              `ms before api-${record.api} was killed)`,
          );
        } else if (!row) {
          unloggedRefusals += 1;
          if (unloggedIds.length < 10)
            unloggedIds.push(
              `${record.kind}:${record.requestId} at ${Math.round(record.startedMs)} ms on api-${record.api}`,
            );
        } else if (row.status === 'completed') {
          wrongStatus += 1;
          if (wrongIds.length < 10)
            wrongIds.push(`${record.kind}:${record.requestId} refused to its client, completed in the record`);
        }
      } else if (record.detail === 'batch line missing') {
        // A batch line whose result was missing from its batch's results (the client kept a record of the gap).
        lost += 1;
        if (lostIds.length < 10) lostIds.push(`${record.kind}:${record.batch} missing from its results`);
      } else if (
        (record.kind === 'realtime-left' || record.kind === 'stream-left') &&
        record.outcome === 'left' &&
        record.requestId
      ) {
        // An answer its client cut off is billed for what ran: a Realtime response as OpenAI bills a cancelled one, a
        // stream for the tokens the vendor produced before it was stopped.
        const row = byId.get(record.requestId);
        if (!row || !row.settled) {
          unbilledCutOffs += 1;
          if (unbilledIds.length < 10)
            unbilledIds.push(`${record.requestId}${row ? ` (${row.status}, unsettled)` : ''}`);
        }
      } else if ((record.outcome === 'failed' || record.outcome === 'left') && record.requestId) {
        if (!byId.has(record.requestId)) unloggedFailures += 1;
      }
    }
    figures.wrongStatus = wrongStatus;
    figures.unloggedRefusals = unloggedRefusals;
    figures.unloggedFailures = unloggedFailures;
    figures.unbilledCutOffs = unbilledCutOffs;
    if (unbilledCutOffs > 0)
      failures.push(
        `${unbilledCutOffs} answers cut off by their client have no settled usage row: ${unbilledIds.join(', ')}`,
      );
    figures.lost = lost;
    if (lost > 0) failures.push(`${lost} answers the clients got have no usage row: ${lostIds.join(', ')}`);
    if (wrongStatus > 0)
      failures.push(`${wrongStatus} requests whose record disagrees with what the client saw: ${wrongIds.join(', ')}`);
    figures.refusalsLostWithApi = killedWithApi.length;
    if (unloggedRefusals > 0)
      failures.push(`${unloggedRefusals} refusals the clients got have no request-log row: ${unloggedIds.join(', ')}`);
    if (killedWithApi.length > 0)
      notes.push(
        `${killedWithApi.length} refusals have no request-log row: their api was SIGKILLed within a second of answering them, before its log event was appended: ${killedWithApi.slice(0, 5).join(', ')}`,
      );
    if (unloggedFailures > 0)
      notes.push(`${unloggedFailures} failed or left requests (with a request id) have no request-log row`);
    const clientIds = new Set(seen.keys());
    figures.rowsNoClientSaw = rows.filter((row) => !clientIds.has(row.request_id)).length;

    // Money: per account and per key, Redis, the record's totals and its usage rows agree to the micro-dollar.
    let driftMicros = 0;
    const soakAccountIds = new Set(accounts.map((a) => a.id));
    const stray = rows.filter((row) => !soakAccountIds.has(row.account_id));
    if (stray.length > 0) notes.push(`${stray.length} usage rows of accounts the soak did not make`);
    for (const account of accounts) {
      const {
        rows: [stored],
      } = await client.query<{ credits_micros: string; settled_micros: string }>(
        'select credits_micros, settled_micros from accounts where id = $1',
        [account.id],
      );
      const {
        rows: [ledger],
      } = await client.query<{ sum: string | null }>(
        'select sum(amount_micros) as sum from ledger where account_id = $1',
        [account.id],
      );
      const used = rows
        .filter((row) => row.account_id === account.id && row.settled)
        .reduce((sum, row) => sum + Number(row.cost_micros), 0);
      const credits = Number(stored?.credits_micros ?? NaN);
      const settled = Number(stored?.settled_micros ?? NaN);
      const bill = await readBill(redis, account.id);
      const balance = bill?.balanceMicros ?? NaN;
      const reserved = bill?.reservedMicros ?? NaN;
      figures[`spent.${account.name}`] = used;
      const say = (what: string) => failures.push(`account ${account.name} (${account.id}): ${what}`);
      if (credits !== account.creditsMicros)
        say(`credits ${credits} µ$ in the record, ${account.creditsMicros} µ$ given`);
      if (Number(ledger?.sum ?? 0) !== credits) say(`ledger sums to ${ledger?.sum} µ$, credits say ${credits}`);
      if (settled !== used) {
        say(`settled_micros ${settled} but its settled usage rows sum to ${used}`);
        driftMicros += Math.abs(settled - used);
      }
      if (balance !== credits - used) {
        say(`balance in Redis ${balance} µ$ ≠ credits ${credits} − usage ${used} = ${credits - used}`);
        driftMicros += Math.abs(balance - (credits - used));
      }
      if (reserved !== 0) say(`${reserved} µ$ still reserved`);
      if (balance < 0) say(`balance ${balance} µ$ below zero`);
      for (const key of account.keys) {
        const keyUsed = rows
          .filter((row) => row.key_id === key.id && row.settled)
          .reduce((sum, row) => sum + Number(row.cost_micros), 0);
        const {
          rows: [keyRow],
        } = await client.query<{ spent_micros: string }>('select spent_micros from api_keys where id = $1', [key.id]);
        const spend = await readKeySpend(redis, account.id, key.id);
        const sayKey = (what: string) => failures.push(`key ${key.name} (${key.id}): ${what}`);
        if (Number(keyRow?.spent_micros) !== keyUsed) {
          sayKey(`spent_micros ${keyRow?.spent_micros} in the record, its usage rows sum to ${keyUsed}`);
          driftMicros += Math.abs(Number(keyRow?.spent_micros) - keyUsed);
        }
        if (spend && spend.spentMicros !== keyUsed) {
          sayKey(`spent ${spend.spentMicros} µ$ in Redis, its usage rows sum to ${keyUsed}`);
          driftMicros += Math.abs(spend.spentMicros - keyUsed);
        }
        if (spend && spend.reservedMicros !== 0) sayKey(`${spend.reservedMicros} µ$ still reserved`);
        if (key.limitMicros !== null && keyUsed > key.limitMicros)
          sayKey(`spent ${keyUsed} µ$ past its limit of ${key.limitMicros}`);
        // The soak runs within one UTC day or two: a daily budget holds per day.
        if (key.budgetMicros !== null) {
          const perDay = new Map<number, number>();
          for (const row of rows) {
            if (row.key_id !== key.id || !row.settled) continue;
            const day = Math.floor(Number(row.created) / 86_400);
            perDay.set(day, (perDay.get(day) ?? 0) + Number(row.cost_micros));
          }
          for (const [day, spent] of perDay)
            if (spent > key.budgetMicros)
              sayKey(`spent ${spent} µ$ on day ${day}, past its daily budget of ${key.budgetMicros}`);
        }
        figures[`spent.${account.name}.${key.name}`] = keyUsed;
      }
    }
    figures.driftMicros = driftMicros;

    const left = await pending(redis, accounts);
    if (left.streamed > 0) failures.push(`${left.streamed} usage entries still in the Redis streams`);
    if (left.deadlines > 0) failures.push(`${left.deadlines} reservation deadlines still in Redis`);
    let dead = 0;
    for (const key of usageStreamKeys) dead += await redis.xlen(usageDeadLetterKey(key));
    figures.deadLetters = dead;
    if (dead > 0) failures.push(`${dead} usage entries in the dead-letter streams`);
  } finally {
    await client.end();
  }
  return { ok: failures.length === 0, failures, notes, figures };
}

/** Least-squares slope of (x, y) points, per unit of x; null with fewer than 3 points. */
export function slope(points: Array<[number, number]>): number | null {
  if (points.length < 3) return null;
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? null : num / den;
}

export function percentile(values: number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}
