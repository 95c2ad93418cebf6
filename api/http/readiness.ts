import { sql } from 'kysely';
import type { RecordDb } from '../../storage/record/database.js';
import { settledBy } from '../../shared/stop-deadline.js';

/** How long a readiness probe waits for the record's answer, and how long one answer serves the probes after it. */
const recordProbeTimeoutMs = 1000;
const recordProbeReuseMs = 1500;

/**
 * Whether the record answers a `select 1` within a second: the api cannot
 * make keys, accounts or credits without it. One check serves every probe for
 * a second and a half, so a balancer's probes do not load the record.
 */
export function recordProbe(record: RecordDb): () => Promise<boolean> {
  let last: { at: number; reachable: Promise<boolean> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at > recordProbeReuseMs) last = { at: now, reachable: answersWithin(record, recordProbeTimeoutMs) };
    return last.reachable;
  };
}

async function answersWithin(record: RecordDb, timeoutMs: number): Promise<boolean> {
  let answered = false;
  await settledBy(sql`select 1`.execute(record).then(() => (answered = true)), Date.now() + timeoutMs);
  return answered;
}
