import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import {
  batchRequestJobId,
  batchRequestState,
  batchView,
  cancelAbandonedIntake,
  cancelBatch,
  createBatch,
  deleteBatch,
  listBatches,
  newBatchId,
  openBatchCount,
  pendingEntries,
  queuedIndices,
  readBatch,
  readBatchResults,
  recordBatchResult,
  recordInBatch,
  releaseBatchRequests,
  releasedCount,
  seesBatch,
  storeBatchEntries,
} from '../../shared/batches/index.js';
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
    await createBatch(
      redis,
      { id, accountId: 'acct_1', keyId: 'key_1', created: now, expires: now + day, total },
      keepMs,
    );
    return id;
  };
  const succeeded = (text: string) => ({
    type: 'succeeded' as const,
    message: { id: `msg_${text}`, type: 'message', role: 'assistant', content: [{ type: 'text', text }] },
  });

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
        const result =
          index % 10 === 0
            ? {
                type: 'errored' as const,
                error: {
                  type: 'error' as const,
                  error: { type: 'api_error', message: 'upstream failed' },
                  request_id: null,
                },
              }
            : succeeded(`answer ${index}`);
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

  it('is canceled as abandoned only when its intake’s lease ran out with requests not stored', async () => {
    const now = Date.now();
    const batch = (total: number) => ({
      id: newBatchId(),
      accountId: 'acct_1',
      keyId: 'key_1',
      created: now,
      expires: now + day,
      total,
    });
    const entry = (i: number) => JSON.stringify({ queue: '{chat}', attempts: 1, data: { i } });
    const leaseMs = 1_000;
    const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

    // Stored in part: held while the intake renews its lease, canceled once the lease is out.
    const partial = batch(10);
    await createBatch(redis, partial, keepMs, { window: 4, intakeMs: leaseMs });
    await storeBatchEntries(redis, partial.id, 0, [0, 1, 2].map(entry), keepMs, leaseMs);
    await wait(600);
    await storeBatchEntries(redis, partial.id, 3, [3, 4].map(entry), keepMs, leaseMs);
    await wait(600);
    assert.equal(
      await cancelAbandonedIntake(redis, partial.id),
      false,
      'the lease renewed by the last round holds (the first has run out)',
    );
    await wait(leaseMs + 20);
    assert.equal(await cancelAbandonedIntake(redis, partial.id), true);
    const canceled = (await readBatch(redis, partial.id))!;
    assert.equal(canceled.status, 'canceling');
    assert.ok(canceled.cancelAt !== undefined);
    assert.equal(await cancelAbandonedIntake(redis, partial.id), false, 'once');

    // Stored whole: its lease may run out, it runs on.
    const whole = batch(3);
    await createBatch(redis, whole, keepMs, { window: 4, intakeMs: leaseMs });
    await storeBatchEntries(redis, whole.id, 0, [0, 1, 2].map(entry), keepMs, leaseMs);
    await wait(leaseMs + 20);
    assert.equal(await cancelAbandonedIntake(redis, whole.id), false);
    assert.equal((await readBatch(redis, whole.id))!.status, 'in_progress');

    // A record made without an intake (nothing stored, no lease) is not an abandoned intake.
    const alone = batch(3);
    await createBatch(redis, alone, keepMs);
    assert.equal(await cancelAbandonedIntake(redis, alone.id), false);
    assert.equal(await cancelAbandonedIntake(redis, 'msgbatch_none'), false);
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

  it(
    'queues a window of its requests and lets the next in as each is recorded, until it is canceled; adds each ' +
      'result’s cost once',
    async () => {
      const id = newBatchId();
      const now = Date.now();
      await createBatch(
        redis,
        { id, accountId: 'acct_q', keyId: 'key_q', created: now, expires: now + keepMs, total: 6 },
        keepMs,
        { window: 2 },
      );
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
      // A result that frees the window's refill asks for it, once until it is done, however often it is recorded.
      assert.deepEqual(
        await recordInBatch(
          redis,
          id,
          1,
          'c1',
          { type: 'errored', error: { type: 'error', error: { type: 'api_error', message: 'x' }, request_id: null } },
          keepMs,
          100,
        ),
        { state: 'recorded', refill: true, ended: false },
      );
      assert.deepEqual(await recordInBatch(redis, id, 1, 'c1', { type: 'canceled' }, keepMs, 1_000), {
        state: 'already',
        refill: false,
        ended: false,
      });
      assert.deepEqual(
        await recordInBatch(redis, id, 0, 'c0', { type: 'canceled' }, keepMs, 101),
        { state: 'recorded', refill: false, ended: false },
        'asked already',
      );
      assert.deepEqual(await releaseBatchRequests(redis, id), [
        { index: 2, entry: 'e2' },
        { index: 3, entry: 'e3' },
      ]);
      assert.deepEqual(await queuedIndices(redis, id), [2, 3]);
      assert.deepEqual(
        await pendingEntries(redis, id, [0, 1, 2, 5]),
        ['', '', 'e2', 'e5'],
        'a recorded request’s entry is dropped',
      );
      assert.equal(await releasedCount(redis, id), 4);
      // Canceled: nothing more is let in; what is left is recorded by the sweep.
      assert.equal(await cancelBatch(redis, id), 'canceling');
      assert.deepEqual(await recordInBatch(redis, id, 2, 'c2', { type: 'canceled' }, keepMs, 102), {
        state: 'recorded',
        refill: false,
        ended: false,
      });
      assert.deepEqual(await releaseBatchRequests(redis, id), []);
      for (const index of [3, 4, 5])
        assert.equal(
          await recordBatchResult(redis, id, index, `c${index}`, { type: 'canceled' }, keepMs, index === 3 ? 103 : 0),
          'recorded',
        );
      const batch = (await readBatch(redis, id))!;
      assert.equal(batch.costMicros, 100 + 101 + 102 + 103);
      assert.equal(batch.status, 'ended');
      assert.deepEqual(await batchRequestState(redis, id, 2), { status: 'ended', recorded: true });
      assert.equal(
        await redis.exists(batchPendingKey(id), batchQueuedKey(id)),
        0,
        'its pending and queued keys go with the end',
      );
      assert.equal(await openBatchCount(redis, 'acct_q'), 0);
    },
  );

  it('asks for a wide window to be refilled an eighth at a time, and for the last ones however few', async () => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(
      redis,
      { id, accountId: 'acct_r', keyId: 'key_r', created: now, expires: now + keepMs, total: 20 },
      keepMs,
      { window: 16 },
    );
    await storeBatchEntries(
      redis,
      id,
      0,
      Array.from({ length: 20 }, (_, i) => `r${i}`),
      keepMs,
    );
    assert.equal((await releaseBatchRequests(redis, id)).length, 16);
    const canceled = { type: 'canceled' as const };
    const refill = async (index: number) =>
      (await recordInBatch(redis, id, index, `r${index}`, canceled, keepMs)).refill;
    // An eighth of 16 is two.
    assert.equal(await refill(0), false);
    assert.equal(await refill(1), true);
    assert.equal(await refill(2), false, 'asked, not yet done');
    assert.deepEqual(
      (await releaseBatchRequests(redis, id)).map(({ index }) => index),
      [16, 17, 18],
    );
    // One left: one free is enough.
    assert.equal(await refill(3), true);
    assert.deepEqual(await releaseBatchRequests(redis, id), [{ index: 19, entry: 'r19' }]);
    assert.equal(await refill(4), false, 'nothing left to let in');
    assert.deepEqual(await queuedIndices(redis, id), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
  });

  it('lets nothing in past its deadline, nor from a batch recorded alone', async () => {
    const id = newBatchId();
    const now = Date.now();
    await createBatch(
      redis,
      { id, accountId: 'acct_d', keyId: 'key_d', created: now - 10, expires: now - 1, total: 3 },
      keepMs,
      { window: 3 },
    );
    await storeBatchEntries(redis, id, 0, ['a', 'b', 'c'], keepMs);
    assert.deepEqual(await releaseBatchRequests(redis, id), []);
    const alone = newBatchId();
    await createBatch(
      redis,
      { id: alone, accountId: 'acct_d', keyId: 'key_d', created: now, expires: now + keepMs, total: 3 },
      keepMs,
    );
    assert.deepEqual(await releaseBatchRequests(redis, alone), []);
    assert.deepEqual(await recordInBatch(redis, alone, 0, 'a', { type: 'canceled' }, keepMs), {
      state: 'recorded',
      refill: false,
      ended: false,
    });
  });

  it('lists an account’s batches newest first, paged both ways, and drops deleted ones', async () => {
    const ids: string[] = [];
    for (let n = 0; n < 5; n++) {
      const id = newBatchId();
      ids.push(id);
      await createBatch(
        redis,
        { id, accountId: 'acct_list', keyId: 'k', created: 1_000 + n, expires: Date.now() + keepMs, total: 1 },
        keepMs,
      );
    }
    const newest = [...ids].reverse();
    const first = await listBatches(redis, 'acct_list', { limit: 2 });
    assert.deepEqual(
      first.batches.map((b) => b.id),
      newest.slice(0, 2),
    );
    assert.equal(first.hasMore, true);
    const next = await listBatches(redis, 'acct_list', { limit: 2, afterId: newest[1] });
    assert.deepEqual(
      next.batches.map((b) => b.id),
      newest.slice(2, 4),
    );
    const back = await listBatches(redis, 'acct_list', { limit: 2, beforeId: newest[2] });
    assert.deepEqual(
      back.batches.map((b) => b.id),
      newest.slice(0, 2),
    );
    assert.equal(back.hasMore, false);
    const last = await listBatches(redis, 'acct_list', { limit: 2, afterId: newest[3] });
    assert.deepEqual(
      last.batches.map((b) => b.id),
      newest.slice(4),
    );
    assert.equal(last.hasMore, false);
    assert.deepEqual(await listBatches(redis, 'acct_list', { limit: 2, afterId: 'msgbatch_notlisted' }), {
      batches: [],
      hasMore: false,
    });
    // Only the batches made since a time are asked (one older is past its deadline).
    assert.equal(await openBatchCount(redis, 'acct_list'), 5);
    assert.equal(await openBatchCount(redis, 'acct_list', 1_003), 2);
    await deleteBatch(redis, newest[0]!, 'acct_list');
    assert.equal(await readBatch(redis, newest[0]!), undefined);
    assert.deepEqual(
      (await listBatches(redis, 'acct_list', { limit: 10 })).batches.map((b) => b.id),
      newest.slice(1),
    );
  });

  it(
    'keeps the models a batch uses, each once, and shows a key limited to models only the batches whose every ' +
      'model it may use',
    async () => {
      const id = newBatchId();
      await createBatch(
        redis,
        {
          id,
          accountId: 'acct_m',
          keyId: 'k',
          created: 1,
          expires: Date.now() + keepMs,
          total: 3,
          models: ['y', 'x', 'y'],
        },
        keepMs,
      );
      assert.deepEqual((await readBatch(redis, id))!.models, ['x', 'y']);
      assert.equal(seesBatch(undefined, { models: ['x', 'y'] }), true, 'a key with no model limit sees every batch');
      assert.equal(seesBatch(['x', 'y', 'z'], { models: ['x', 'y'] }), true);
      assert.equal(seesBatch(['x'], { models: ['x', 'y'] }), false, 'one model it may not use hides the batch');
      assert.equal(seesBatch([], { models: ['x'] }), false);
      // A batch made before its models were recorded.
      assert.equal(seesBatch(undefined, {}), true);
      assert.equal(seesBatch(['x'], {}), false);
    },
  );

  it('pages a key’s batches as if those it may not see (and gone ones) were not listed', async () => {
    const account = 'acct_seen';
    // Newest first: what a key limited to `x` sees among them, by the model each uses.
    const uses: Array<string[] | undefined> = [
      ['x'],
      ['y'],
      ['y'],
      ['x'],
      ['x', 'y'],
      undefined,
      ['x'],
      ['y'],
      ['y'],
      ['y'],
      ['x'],
      ['x'],
      ['y'],
    ];
    const ids: string[] = [];
    for (const [n, models] of uses.entries()) {
      const id = newBatchId();
      ids.push(id);
      await createBatch(
        redis,
        {
          id,
          accountId: account,
          keyId: 'k',
          created: 10_000 - n,
          expires: Date.now() + keepMs,
          total: 1,
          ...(models ? { models } : {}),
        },
        keepMs,
      );
    }
    const seen = ids.filter((_, n) => uses[n]?.every((model) => model === 'x'));
    assert.equal(seen.length, 5);
    // `models` null: a key with no model limit.
    const page = async (
      cursor: { afterId?: string; beforeId?: string },
      limit = 2,
      models: readonly string[] | null = ['x'],
    ) => {
      const listed = await listBatches(redis, account, { limit, ...cursor }, models ?? undefined);
      return { ids: listed.batches.map((b) => b.id), hasMore: listed.hasMore };
    };

    // Forward, page by page on the last id, as the SDK pages.
    assert.deepEqual(await page({}), { ids: seen.slice(0, 2), hasMore: true });
    assert.deepEqual(await page({ afterId: seen[1] }), { ids: seen.slice(2, 4), hasMore: true });
    assert.deepEqual(
      await page({ afterId: seen[3] }),
      { ids: seen.slice(4), hasMore: false },
      'nothing it sees is left, though other batches are',
    );
    assert.deepEqual(await page({ afterId: seen[4] }), { ids: [], hasMore: false });
    assert.deepEqual(await page({}, 5), { ids: seen, hasMore: false }, 'a page exactly as long as what it sees');
    assert.deepEqual(await page({}, 1000), { ids: seen, hasMore: false });
    // Backward, on the first id, newest first within a page.
    assert.deepEqual(await page({ beforeId: seen[4] }), { ids: seen.slice(2, 4), hasMore: true });
    assert.deepEqual(
      await page({ beforeId: seen[2] }),
      { ids: seen.slice(0, 2), hasMore: false },
      'only batches it may not see are newer',
    );
    assert.deepEqual(await page({ beforeId: seen[0] }), { ids: [], hasMore: false });
    // A cursor on a batch the key may not see still places the page (it learns nothing of that batch from it).
    assert.deepEqual(await page({ afterId: ids[1] }), { ids: seen.slice(1, 3), hasMore: true });

    // A key with no model limit sees every batch, the one made before models were recorded included.
    assert.deepEqual(await page({}, 20, null), { ids, hasMore: false });
    assert.deepEqual(await page({ afterId: ids[4] }, 3, null), { ids: ids.slice(5, 8), hasMore: true });
    // One may use none of them.
    assert.deepEqual(await page({}, 3, ['z']), { ids: [], hasMore: false });

    // A gone batch is dropped from the list, and the page filled past it.
    await redis.del(batchKey(seen[1]!));
    assert.deepEqual(await page({}), { ids: [seen[0], seen[2]], hasMore: true });
    assert.equal(await redis.zscore(accountBatchesKey(account), seen[1]!), null, 'dropped from the account’s list');
    assert.deepEqual(await page({ afterId: seen[2] }, 3), { ids: seen.slice(3), hasMore: false });
  });
});
