import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { billKey } from '../../shared/redis-keys.js';
import { readBill, readKeySpend } from '../../shared/money/billing.js';
import type { RecordDb } from '../../storage/record/database.js';

/** A model the mock serves at a price, so requests reserve and settle money. */
export const paidModel = 'gpt-4o-mini';

/** A request's outcome as the client saw it: its status, and the error code when it failed. */
export interface Outcome {
  status: number;
  code?: string | null;
  ms: number;
}

export async function outcome(run: () => Promise<unknown>): Promise<Outcome> {
  const started = Date.now();
  try {
    await run();
    return { status: 200, ms: Date.now() - started };
  } catch (error) {
    if (error instanceof OpenAI.APIError)
      return { status: error.status ?? 0, code: error.code, ms: Date.now() - started };
    throw error;
  }
}

/**
 * Paid chat requests, plain and streamed, from `lanes` clients one after another,
 * while `during` runs (it breaks Redis somehow) and `settleMs` after it.
 */
export async function loadThrough(
  client: OpenAI,
  during: () => Promise<void>,
  options: { lanes?: number; warmMs?: number; settleMs?: number } = {},
): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  let loading = true;
  const lane = async (n: number) => {
    for (let i = 0; loading; i++) {
      const messages = [{ role: 'user' as const, content: `load ${n}.${i}` }];
      outcomes.push(
        await outcome(async () => {
          if ((n + i) % 2 === 0) return client.chat.completions.create({ model: paidModel, messages, max_tokens: 8 });
          for await (const chunk of await client.chat.completions.create({
            model: paidModel,
            stream: true,
            messages,
            max_tokens: 8,
          }))
            void chunk;
          return undefined;
        }),
      );
    }
  };
  const lanes = Array.from({ length: options.lanes ?? 16 }, (_, n) => lane(n));
  try {
    await new Promise((resolve) => setTimeout(resolve, options.warmMs ?? 1500));
    await during();
    await new Promise((resolve) => setTimeout(resolve, options.settleMs ?? 3000));
  } finally {
    // Whatever happened, the lanes stop after the request each has in flight.
    loading = false;
  }
  await Promise.all(lanes);
  return outcomes;
}

/** `200: 870, 503 queue_unavailable: 2; slowest 3998 ms`. */
export function tally(outcomes: readonly Outcome[]): string {
  const counts = new Map<string, number>();
  for (const o of outcomes) {
    const label = `${o.status}${o.code ? ` ${o.code}` : ''}`;
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  return `${[...counts].map(([label, n]) => `${label}: ${n}`).join(', ')}; slowest ${Math.max(...outcomes.map((o) => o.ms))} ms`;
}

/** Every request succeeded or ended with a server-side error that names its cause; none came near waiting forever. */
export function assertEveryRequestEnded(outcomes: readonly Outcome[], minimumServed: number): void {
  const failed = outcomes.filter((o) => o.status !== 200);
  for (const o of failed) {
    // Status 0: an error event after the stream began (its 200 was sent), e.g. stream_incomplete when chunks
    // published as a shard failed over were lost with it.
    assert.ok(o.status >= 500 || o.status === 429 || o.status === 0, `unexpected status ${o.status}`);
    assert.ok(typeof o.code === 'string' && o.code.length > 0, `a failure names its code (status ${o.status})`);
    assert.notEqual(
      o.code,
      'server_error',
      'a failure says what failed (a Redis outage is queue_unavailable, a lost job job_lost)',
    );
  }
  assert.ok(
    outcomes.every((o) => o.ms < 45_000),
    'no request waited anywhere near forever',
  );
  assert.ok(outcomes.length - failed.length >= minimumServed, `${outcomes.length} requests, ${failed.length} failed`);
}

/**
 * The money of one paid key adds up: what it spent is what its usage records
 * say, its account paid exactly that, and what it holds reserved is exactly
 * what its open reservations (in its account's bill) hold.
 */
export async function assertMoneyAddsUp(
  redis: Redis,
  record: RecordDb,
  payer: { id: string; account: string },
  startBalance: number,
): Promise<number> {
  const openReservations = async () => {
    let total = 0;
    for (const [field, value] of Object.entries(await redis.hgetall(billKey(payer.account)))) {
      const [key, micros] = value.split(' ');
      if (field.startsWith('r:') && key === payer.id) total += Number(micros ?? 0);
    }
    return total;
  };
  const until = Date.now() + 15_000;
  let reserved = -1;
  let open = -2;
  while (Date.now() < until) {
    reserved = (await readKeySpend(redis, payer.account, payer.id))?.reservedMicros ?? -1;
    open = await openReservations();
    if (reserved === open) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.equal(reserved, open, 'what the key holds reserved is what its open reservations hold');
  const spent = (await readKeySpend(redis, payer.account, payer.id))?.spentMicros ?? 0;
  assert.ok(spent > 0);
  assert.equal(
    (await readBill(redis, payer.account))?.balanceMicros,
    startBalance - spent,
    'the account paid what the key spent',
  );
  // The usage rows the writer moved to the record (it may be a moment behind the settlements).
  const recordedSum = async () =>
    Number(
      (
        await record
          .selectFrom('usage')
          .select((eb) => eb.fn.sum('cost_micros').as('sum'))
          .where('key_id', '=', payer.id)
          .executeTakeFirstOrThrow()
      ).sum ?? 0,
    );
  const writtenBy = Date.now() + 10_000;
  let recorded = await recordedSum();
  while (recorded !== spent && Date.now() < writtenBy) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    recorded = await recordedSum();
  }
  assert.equal(recorded, spent, 'the usage records add up to what the key spent');
  return spent;
}
