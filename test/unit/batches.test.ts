import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { batchRequestJobId, batchRequestState, batchView, cancelBatch, createBatch, deleteBatch, listBatches, newBatchId, openBatchCount, pendingEntries, queuedIndices, readBatch, readBatchResults, recordAndMoveOn, recordBatchResult, releaseBatchRequests, releasedCount, storeBatchEntries } from '../../shared/batches.js';
import { accountBatchesKey, batchKey, batchPendingKey, batchQueuedKey } from '../../shared/redis-keys.js';
import { freshRedis } from '../support/gateway.js';

// Against a real Redis: the results of one batch are recorded by many workers at once.
describe('a Message Batch’s record', () => {
  let redis: Redis;
  const day = 86_400_000;
  const keepMs = 29 * day;

  before(async () => {
    redis = (await freshRedis(9)).redis;
  });

  after(() => {
    redis?.disconnect();
  });

  const made = async (total: number) => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(redis, { id, accountId: 'acct_1', keyId: 'key_1', created: now, expires: now + day, total }, keepMs);
    return id;
  };
  const succeeded = (text: string) => ({ type: 'succeeded' as const, message: { id: `msg_${text}`, type: 'message', role: 'assistant', content: [{ type: 'text', text }] } });

  it('has Anthropic’s id form, a job id per request, and is listed under its account', async () => {
    const id = await made(2);
    assert.match(id, /^msgbatch_[A-Za-z0-9]{24}$/);
    assert.equal(batchRequestJobId(id, 7), `${id}.7`);
    assert.ok((await redis.zscore(accountBatchesKey('acct_1'), id)) !== null);
    const view = batchView((await readBatch(redis, id))!, `/v1/messages/batches/${id}/results`);
    assert.equal(view.processing_status, 'in_progress');
    assert.deepEqual(view.request_counts, { processing: 2, succeeded: 0, errored: 0, canceled: 0, expired: 0 });
    assert.equal(view.results_url, null, 'no results before it ends');
    assert.equal(view.ended_at, null);
  });

  it('records each request once however often it is recorded, concurrently, and ends when none is processing', async () => {
    const total = 50;
    const id = await made(total);
    // Every request recorded three times at once (a retried attempt, a re-run after a worker died).
    const outcomes = await Promise.all(
      Array.from({ length: total * 3 }, (_, n) => {
        const index = n % total;
        const result = index % 10 === 0 ? { type: 'errored' as const, error: { type: 'error' as const, error: { type: 'api_error', message: 'upstream failed' }, request_id: null } } : succeeded(`answer ${index}`);
        return recordBatchResult(redis, id, index, `req-${index}`, result, keepMs);
      }),
    );
    assert.equal(outcomes.filter((o) => o === 'recorded').length, total);
    assert.equal(outcomes.filter((o) => o === 'already').length, total * 2);
    const batch = (await readBatch(redis, id))!;
    assert.equal(batch.status, 'ended');
    assert.deepEqual(batch.counts, { processing: 0, succeeded: 45, errored: 5, canceled: 0, expired: 0 });
    assert.ok(batch.endedAt !== undefined && batch.endedAt >= batch.created);
    // Kept its results' time past the end, not its expiry's.
    assert.ok((await redis.pttl(batchKey(id))) > keepMs - 60_000);

    // Results read page by page, each line JSON with its custom_id, every request once.
    const lines: string[] = [];
    let after = '0';
    for (;;) {
      const page = await readBatchResults(redis, id, after, 7);
      lines.push(...page.lines);
      if (!page.last) break;
      after = page.last;
    }
    assert.equal(lines.length, total);
    const parsed = lines.map((line) => JSON.parse(line) as { custom_id: string; result: { type: string } });
    assert.deepEqual(new Set(parsed.map((line) => line.custom_id)).size, total);
    assert.deepEqual(parsed.find((line) => line.custom_id === 'req-3')?.result, succeeded('answer 3'));
    assert.equal(parsed.find((line) => line.custom_id === 'req-10')?.result.type, 'errored');
  });

  it('goes canceling when asked, and ends once its last request is settled (canceled or not)', async () => {
    const id = await made(3);
    await recordBatchResult(redis, id, 0, 'a', succeeded('a'), keepMs);
    assert.equal(await cancelBatch(redis, id), 'canceling');
    assert.equal(await cancelBatch(redis, id), 'canceling', 'asked twice: the same');
    const canceling = batchView((await readBatch(redis, id))!, 'url');
    assert.equal(canceling.processing_status, 'canceling');
    assert.ok(typeof canceling.cancel_initiated_at === 'string');
    await recordBatchResult(redis, id, 1, 'b', { type: 'canceled' }, keepMs);
    await recordBatchResult(redis, id, 2, 'c', { type: 'expired' }, keepMs);
    const ended = (await readBatch(redis, id))!;
    assert.equal(ended.status, 'ended');
    assert.deepEqual(ended.counts, { processing: 0, succeeded: 1, errored: 0, canceled: 1, expired: 1 });
    assert.equal(await cancelBatch(redis, id), 'ended', 'an ended batch stays ended');
    assert.equal(batchView(ended, 'url').results_url, 'url');
  });

  it('answers nothing for a batch that is not there, and records nothing into one', async () => {
    assert.equal(await readBatch(redis, 'msgbatch_none'), undefined);
    assert.equal(await cancelBatch(redis, 'msgbatch_none'), undefined);
    assert.equal(await recordBatchResult(redis, 'msgbatch_none', 0, 'x', { type: 'canceled' }, keepMs), 'gone');
  });
});

describe('a Message Batch’s queues, cost, listing and deletion', () => {
  let redis: Redis;
  const keepMs = 86_400_000;
  before(async () => {
    redis = (await freshRedis(10)).redis;
  });
  after(() => {
    redis?.disconnect();
  });

  it('queues a window of its requests and lets the next in as each is recorded, until it is canceled; adds each result’s cost once', async () => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(redis, { id, accountId: 'acct_q', keyId: 'key_q', created: now, expires: now + keepMs, total: 6 }, keepMs, { window: 2 });
    // Only what is stored is let in.
    await storeBatchEntries(redis, id, 0, ['e0'], keepMs);
    assert.deepEqual(await releaseBatchRequests(redis, id), [{ index: 0, entry: 'e0' }]);
    await storeBatchEntries(redis, id, 1, ['e1', 'e2'], keepMs);
    assert.deepEqual(await releaseBatchRequests(redis, id), [{ index: 1, entry: 'e1' }]);
    assert.deepEqual(await releaseBatchRequests(redis, id), [], 'the window is full');
    await storeBatchEntries(redis, id, 3, ['e3', 'e4', 'e5'], keepMs);
    assert.deepEqual(await queuedIndices(redis, id), [0, 1]);
    assert.equal(await openBatchCount(redis, 'acct_q'), 1);
    assert.deepEqual(await batchRequestState(redis, id, 1), { status: 'in_progress', recorded: false });
    // Each recorded request lets exactly one more in, once however often it is recorded.
    assert.deepEqual(await recordAndMoveOn(redis, id, 1, 'c1', { type: 'errored', error: { type: 'error', error: { type: 'api_error', message: 'x' }, request_id: null } }, keepMs, 100), { state: 'recorded', next: [{ index: 2, entry: 'e2' }] });
    assert.deepEqual(await recordAndMoveOn(redis, id, 1, 'c1', { type: 'canceled' }, keepMs, 1_000), { state: 'already', next: [] });
    assert.deepEqual(await recordAndMoveOn(redis, id, 0, 'c0', { type: 'canceled' }, keepMs, 101), { state: 'recorded', next: [{ index: 3, entry: 'e3' }] });
    assert.deepEqual(await queuedIndices(redis, id), [2, 3]);
    assert.deepEqual(await pendingEntries(redis, id, [0, 1, 2, 5]), ['', '', 'e2', 'e5'], 'a recorded request’s entry is dropped');
    assert.equal(await releasedCount(redis, id), 4);
    // Canceled: nothing more is let in; what is left is recorded by the sweep.
    assert.equal(await cancelBatch(redis, id), 'canceling');
    assert.deepEqual(await recordAndMoveOn(redis, id, 2, 'c2', { type: 'canceled' }, keepMs, 102), { state: 'recorded', next: [] });
    assert.deepEqual(await releaseBatchRequests(redis, id), []);
    for (const index of [3, 4, 5]) assert.equal(await recordBatchResult(redis, id, index, `c${index}`, { type: 'canceled' }, keepMs, index === 3 ? 103 : 0), 'recorded');
    const batch = (await readBatch(redis, id))!;
    assert.equal(batch.costMicros, 100 + 101 + 102 + 103);
    assert.equal(batch.status, 'ended');
    assert.deepEqual(await batchRequestState(redis, id, 2), { status: 'ended', recorded: true });
    assert.equal(await redis.exists(batchPendingKey(id), batchQueuedKey(id)), 0, 'its pending and queued keys go with the end');
    assert.equal(await openBatchCount(redis, 'acct_q'), 0);
  });

  it('refills a wide window an eighth at a time, and lets the last ones in however few', async () => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(redis, { id, accountId: 'acct_r', keyId: 'key_r', created: now, expires: now + keepMs, total: 20 }, keepMs, { window: 16 });
    await storeBatchEntries(redis, id, 0, Array.from({ length: 20 }, (_, i) => `r${i}`), keepMs);
    assert.equal((await releaseBatchRequests(redis, id)).length, 16);
    const canceled = { type: 'canceled' as const };
    // An eighth of 16: every second result lets two in.
    assert.deepEqual((await recordAndMoveOn(redis, id, 0, 'r0', canceled, keepMs)).next, []);
    assert.deepEqual((await recordAndMoveOn(redis, id, 1, 'r1', canceled, keepMs)).next, [{ index: 16, entry: 'r16' }, { index: 17, entry: 'r17' }]);
    // Two left and two free: both in, though fewer than an eighth; then nothing more.
    assert.deepEqual((await recordAndMoveOn(redis, id, 2, 'r2', canceled, keepMs)).next, []);
    assert.deepEqual((await recordAndMoveOn(redis, id, 3, 'r3', canceled, keepMs)).next, [{ index: 18, entry: 'r18' }, { index: 19, entry: 'r19' }]);
    assert.equal(await releasedCount(redis, id), 20);
    assert.deepEqual(await queuedIndices(redis, id), [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    assert.deepEqual((await recordAndMoveOn(redis, id, 4, 'r4', canceled, keepMs)).next, []);
  });

  it('lets nothing in past its deadline, nor from a batch recorded alone', async () => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(redis, { id, accountId: 'acct_d', keyId: 'key_d', created: now - 10, expires: now - 1, total: 3 }, keepMs, { window: 3 });
    await storeBatchEntries(redis, id, 0, ['a', 'b', 'c'], keepMs);
    assert.deepEqual(await releaseBatchRequests(redis, id), []);
    const alone = newBatchId();
    await createBatch(redis, { id: alone, accountId: 'acct_d', keyId: 'key_d', created: now, expires: now + keepMs, total: 3 }, keepMs);
    assert.deepEqual(await releaseBatchRequests(redis, alone), []);
    assert.deepEqual(await recordAndMoveOn(redis, alone, 0, 'a', { type: 'canceled' }, keepMs), { state: 'recorded', next: [] });
  });

  it('lists an account’s batches newest first, paged both ways, and drops deleted ones', async () => {
    const ids: string[] = [];
    for (let n = 0; n < 5; n++) {
      const id = newBatchId();
      ids.push(id);
      await createBatch(redis, { id, accountId: 'acct_list', keyId: 'k', created: 1_000 + n, expires: Date.now() + keepMs, total: 1 }, keepMs);
    }
    const newest = [...ids].reverse();
    const first = await listBatches(redis, 'acct_list', { limit: 2 });
    assert.deepEqual(first.batches.map((b) => b.id), newest.slice(0, 2));
    assert.equal(first.hasMore, true);
    const next = await listBatches(redis, 'acct_list', { limit: 2, afterId: newest[1] });
    assert.deepEqual(next.batches.map((b) => b.id), newest.slice(2, 4));
    const back = await listBatches(redis, 'acct_list', { limit: 2, beforeId: newest[2] });
    assert.deepEqual(back.batches.map((b) => b.id), newest.slice(0, 2));
    assert.equal(back.hasMore, false);
    await deleteBatch(redis, newest[0]!, 'acct_list');
    assert.equal(await readBatch(redis, newest[0]!), undefined);
    assert.deepEqual((await listBatches(redis, 'acct_list', { limit: 10 })).batches.map((b) => b.id), newest.slice(1));
  });
});
