/**
 * The record's write speed and open time: the embedded record (the
 * PostgreSQL server `npm start` runs under DATA_DIR) against the PostgreSQL
 * server of the tests (TEST_DATABASE_URL, default 127.0.0.1:5432). Writes
 * usage batches of 1, 50 and 500 rows through the usage writer's own
 * transaction, then 40 concurrent day-total reads, and says how long this
 * process's event loop was held meanwhile.
 *
 *   node --import tsx bench/record-writes.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { join } from 'node:path';
import { locateRecord } from '../storage/record/embedded.js';
import { openRecord } from '../storage/record/database.js';
import { writeUsage } from '../storage/record/usage-writer.js';
import { freshDatabase } from '../test/support/record.js';

async function measure(label: string, url: string, close: () => Promise<void>) {
  const db = await openRecord(url, { max: 4, migrate: true });
  // How long this process's event loop is held meanwhile.
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const now = Math.floor(Date.now() / 1000);
  let n = 0;
  const batch = (size: number) =>
    Array.from({ length: size }, () => ({
      request_id: `req_${label}_${n++}`,
      account_id: 'acct_default',
      key_id: `key_${n % 20}`,
      model: 'gpt-4o-mini',
      vendor: 'openai',
      input_tokens: 10,
      cached_tokens: 0,
      output_tokens: 5,
      images: 0,
      audio_seconds: 0,
      video_seconds: 0,
      cost_micros: 7,
      status: 'completed',
      created: now,
      duration_ms: 3,
    }));
  for (const size of [1, 50, 500]) {
    const rounds = size === 1 ? 200 : size === 50 ? 40 : 10;
    const t0 = performance.now();
    for (let i = 0; i < rounds; i++) await db.transaction().execute((tx) => writeUsage(tx, batch(size)));
    const ms = performance.now() - t0;
    console.log(
      `${label}: batches of ${size}: ${(ms / rounds).toFixed(1)} ms per batch, ` +
        `${Math.round((rounds * size) / (ms / 1000))} rows/s`,
    );
  }
  // Readers: 8 concurrent day-total reads while nothing writes.
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: 40 }, () =>
      db.selectFrom('usage_daily').selectAll().where('account_id', '=', 'acct_default').execute(),
    ),
  );
  console.log(`${label}: 40 concurrent report reads: ${(performance.now() - t0).toFixed(0)} ms`);
  delay.disable();
  console.log(
    `${label}: this process's event loop held at most ${(delay.max / 1e6).toFixed(1)} ms (p99 ` +
      `${(delay.percentile(99) / 1e6).toFixed(1)} ms)`,
  );
  await db.destroy();
  await close();
}

const dir = mkdtempSync(join(tmpdir(), 'sy-emb-'));
const t0 = performance.now();
const located = await locateRecord(undefined, dir);
console.log(`embedded: opened (first start, empty) in ${(performance.now() - t0).toFixed(0)} ms`);
await measure('embedded', located.url, () => located.close());
const t1 = performance.now();
const again = await locateRecord(undefined, dir);
console.log(`embedded: opened again (${dir}) in ${(performance.now() - t1).toFixed(0)} ms`);
await again.close();
rmSync(dir, { recursive: true, force: true });
await measure('postgresql', await freshDatabase('bench_embedded'), async () => undefined);
process.exit(0);
