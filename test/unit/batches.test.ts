import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { batchRequestJobId, batchRequestState, batchView, cancelBatch, createBatch, deleteBatch, listBatches, newBatchId, openBatchCount, readBatch, readBatchQueues, readBatchResults, recordBatchResult } from '../../shared/batches.js';
import { accountBatchesKey, batchKey } from '../../shared/redis-keys.js';
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

  it('keeps where each request waits in runs, adds each result’s cost once, and forgets its queues when it ends', async () => {
    const id = newBatchId();
    const now = Date.now();
    const names = ['bull:{chat}', 'bull:{chat}', 'bull:{lane:openai}', 'bull:{chat}'];
    await createBatch(redis, { id, accountId: 'acct_q', keyId: 'key_q', created: now, expires: now + keepMs, total: 4 }, keepMs, names);
    assert.deepEqual(await readBatchQueues(redis, id, 4), names);
    assert.equal(await openBatchCount(redis, 'acct_q'), 1);
    assert.deepEqual(await batchRequestState(redis, id, 2), { status: 'in_progress', recorded: false });
    for (let index = 0; index < 4; index++) {
      await recordBatchResult(redis, id, index, `c${index}`, { type: 'canceled' }, keepMs, 100 + index);
      await recordBatchResult(redis, id, index, `c${index}`, { type: 'canceled' }, keepMs, 1_000);
    }
    const batch = (await readBatch(redis, id))!;
    assert.equal(batch.costMicros, 100 + 101 + 102 + 103);
    assert.equal(batch.status, 'ended');
    assert.deepEqual(await batchRequestState(redis, id, 2), { status: 'ended', recorded: true });
    assert.deepEqual(await readBatchQueues(redis, id, 4), [], 'the queue map goes with the end');
    assert.equal(await openBatchCount(redis, 'acct_q'), 0);
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
