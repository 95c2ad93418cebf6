import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import {
  bandStart,
  bandWidth,
  leaveBacklog,
  maxPriorityLead,
  placeJob,
  readBacklog,
  recount,
  tokensPerUnit,
  type FairClaim,
} from '../../shared/scheduling/index.js';
import { recountLockKey } from '../../shared/redis-keys.js';
import { freshRedis, waitFor } from '../support/gateway.js';

/*
 * The queue's order (shared/scheduling/fair-queue.ts) on a real Redis and real
 * BullMQ workers: jobs added with the priority `placeJob` gives them are served
 * in two bands (interactive, then flex), within a band by weighted fair share
 * between accounts whatever the arrival order, priority a bounded lead; and the
 * backlog count is exact: uncounted once, refunded when a job never ran,
 * repaired by the recount.
 */

describe('the fair queue', () => {
  let url: string;
  let redis: Redis;
  const closing: Array<{ close(): Promise<unknown> }> = [];
  let counter = 0;

  before(async () => {
    const fresh = await freshRedis(12);
    url = fresh.url;
    fresh.redis.disconnect();
    redis = createRedis(url, { connectionName: 'scheduler-test' });
  });

  after(async () => {
    for (const item of closing.reverse()) await item.close().catch(() => undefined);
    redis.disconnect();
  });

  function queue(): Queue {
    const made = new Queue(`{fair-${++counter}}`, { connection: redis });
    closing.push(made);
    return made;
  }

  /** Adds a job as the api does: its priority from the scheduler, then the add. */
  async function add(q: Queue, claim: FairClaim, label: string): Promise<number> {
    const jobId = `${label}-${++counter}`;
    const { priority } = await placeJob(redis, q, jobId, claim);
    await q.add('job', { label, tier: claim.tier, account: claim.accountId }, { priority, jobId });
    return priority;
  }

  /** Serves the queue one job at a time and returns the labels in the order served. */
  async function serve(q: Queue, count: number): Promise<string[]> {
    const served: string[] = [];
    const connection = createRedis(url, { connectionName: 'scheduler-worker' });
    // As the gateway's workers do: a job taken leaves the backlog and moves its band's virtual time to its tag.
    const worker = new Worker(
      q.name,
      async (job: Job<{ label: string; tier: FairClaim['tier']; account: string }>) => {
        served.push(job.data.label);
        await leaveBacklog(redis, q.name, job.id!, q.toKey(job.id!));
      },
      { connection, concurrency: 1 },
    );
    try {
      await waitFor(() => served.length >= count, 20_000, `${count} jobs served`);
    } finally {
      await worker.close();
      connection.disconnect();
    }
    return served;
  }

  const claim = (
    accountId: string,
    tier: FairClaim['tier'] = 'default',
    weight = 1,
    tokens = 1000,
    leadTokens = 0,
  ): FairClaim => ({ accountId, weight, tokens, tier, contended: true, leadTokens });

  it('serves an account that arrives during another account’s flood next, not after the flood', async () => {
    const q = queue();
    for (let i = 0; i < 50; i++) await add(q, claim('acct_flood'), `flood-${i}`);
    await add(q, claim('acct_quiet'), 'quiet');
    const served = await serve(q, 51);
    assert.ok(served.indexOf('quiet') <= 1, `the quiet account's job was served at ${served.indexOf('quiet')} of 51`);
    assert.deepEqual(
      served.filter((label) => label.startsWith('flood-')),
      Array.from({ length: 50 }, (_, i) => `flood-${i}`),
      'an account’s own jobs keep their order',
    );
  });

  it('shares by account, not by key or arrival: two floods added one after the other alternate', async () => {
    const q = queue();
    for (let i = 0; i < 30; i++) await add(q, claim('acct_a'), `a-${i}`);
    for (let i = 0; i < 30; i++) await add(q, claim('acct_b'), `b-${i}`);
    const served = await serve(q, 60);
    const firstHalf = served.slice(0, 30);
    const a = firstHalf.filter((label) => label.startsWith('a-')).length;
    assert.ok(a >= 14 && a <= 16, `account a got ${a} of the first 30 (an even share is 15)`);
  });

  it('honours weights: 3 to 1 over the time both are backlogged', async () => {
    const q = queue();
    for (let i = 0; i < 60; i++) await add(q, claim('acct_heavy', 'default', 3), `h-${i}`);
    for (let i = 0; i < 60; i++) await add(q, claim('acct_light', 'default', 1), `l-${i}`);
    const served = await serve(q, 120);
    const window = served.slice(0, 40);
    const heavy = window.filter((label) => label.startsWith('h-')).length;
    assert.ok(heavy >= 28 && heavy <= 32, `the weight-3 account got ${heavy} of the first 40 (3:1 is 30)`);
  });

  it('counts cost in reserved tokens: one huge request is worth many small ones', async () => {
    const q = queue();
    for (let i = 0; i < 5; i++) await add(q, claim('acct_big', 'default', 1, 64 * tokensPerUnit), `big-${i}`);
    for (let i = 0; i < 40; i++) await add(q, claim('acct_small', 'default', 1, tokensPerUnit), `small-${i}`);
    const served = await serve(q, 45);
    // The big account's second request starts 64 units after its first: every small one fits in between.
    assert.ok(
      served.indexOf('big-1') > served.indexOf('small-39'),
      `the second huge request waited for the small ones: ${served.slice(0, 12).join(' ')}`,
    );
  });

  it("serves flex only when nothing interactive waits, and priority a bounded lead ahead of its account's place", async () => {
    const q = queue();
    for (let i = 0; i < 10; i++) await add(q, claim('acct_flex', 'flex'), `flex-${i}`);
    for (let i = 0; i < 10; i++) await add(q, claim('acct_default', 'default'), `default-${i}`);
    const priorityTag = await add(q, claim('acct_priority', 'priority', 1, 1000, 16 * tokensPerUnit), 'priority-0');
    assert.equal(
      priorityTag,
      bandStart('priority') + maxPriorityLead - 16,
      "an idle account's priority request starts its lead ahead of the band's virtual time",
    );
    const served = await serve(q, 21);
    assert.equal(served[0], 'priority-0');
    assert.deepEqual(
      served.slice(1, 11).every((label) => label.startsWith('default-')),
      true,
      served.join(' '),
    );
    assert.deepEqual(
      served.slice(11).every((label) => label.startsWith('flex-')),
      true,
      served.join(' '),
    );
  });

  it('lets no account starve another with priority: its priority requests count in its share, the lead is bounded', async () => {
    const q = queue();
    // 1,000 tokens cost 4 units; a lead of 16 units lets four of them ahead, then the flooder is behind the quiet one.
    for (let i = 0; i < 40; i++) await add(q, claim('acct_flood', 'priority', 1, 1000, 16 * tokensPerUnit), `p-${i}`);
    await add(q, claim('acct_quiet', 'default'), 'quiet');
    const served = await serve(q, 41);
    assert.ok(
      served.indexOf('quiet') <= 5,
      `the quiet account's default request was served at ${served.indexOf('quiet')} of 41`,
    );
  });

  it('starts every account level once a band is empty: past service is not held against a later burst', async () => {
    const q = queue();
    for (let i = 0; i < 20; i++) await add(q, claim('acct_early'), `early-${i}`);
    await serve(q, 20);
    const first = await add(q, claim('acct_late'), 'late');
    const second = await add(q, claim('acct_early'), 'early-again');
    assert.equal(first, bandStart('default') + maxPriorityLead, 'the empty band starts at its first tagged place');
    assert.equal(
      second,
      bandStart('default') + maxPriorityLead,
      'the account served before starts level with the new one',
    );
  });

  it('shifts a busy band down before its tags outgrow it, keeping the order of what waits', async () => {
    const q = queue();
    // Each of these costs a third of the band's width: the third start is past a quarter of it.
    const huge = Math.ceil(bandWidth / 3) * tokensPerUnit;
    await add(q, claim('acct_huge', 'default', 1, huge), 'huge-0');
    await add(q, claim('acct_huge', 'default', 1, huge), 'huge-1');
    await add(q, claim('acct_huge', 'default', 1, huge), 'huge-2');
    // The first two are taken (as a worker takes them): the band's virtual time is huge-1's tag, a third of the band
    // in.
    const taken = (await q.getJobs(['prioritized']))
      .filter((j) => j.data.label !== 'huge-2')
      .sort((x, y) => x.priority - y.priority);
    for (const job of taken) {
      await leaveBacklog(redis, q.name, job.id!, q.toKey(job.id!));
      await q.remove(job.id!);
    }
    const virtual = taken[1]!.priority - bandStart('default') - maxPriorityLead;
    assert.ok(virtual >= bandWidth / 4, 'the virtual time is past a quarter of the band');
    const waiting = (await q.getJobs(['prioritized']))[0]!;
    assert.equal(waiting.data.label, 'huge-2');
    const next = await add(q, claim('acct_next'), 'next');
    const shifted = (await q.getJob(waiting.id!))!;
    assert.equal(
      shifted.priority,
      waiting.priority - virtual,
      'the waiting job was shifted down by the virtual time, score and job alike',
    );
    assert.equal(
      next,
      bandStart('default') + maxPriorityLead,
      'the newcomer starts at the virtual time, now the band’s start',
    );
    // The huge job starts after the one before it finishes (a third of the band later); the newcomer starts now.
    assert.deepEqual(await serve(q, 2), ['next', 'huge-2'], 'each is served by its start tag after the shift');
  });

  it('a job taken before a shift and started after it moves the virtual time to its shifted tag', async () => {
    const q = queue();
    const cost = Math.ceil(0.3 * bandWidth);
    for (let i = 0; i < 4; i++) await add(q, claim('acct_big', 'default', 1, cost * tokensPerUnit), `big-${i}`);
    const first = bandStart('default') + maxPriorityLead;
    const byLabel = async () =>
      new Map((await q.getJobs(['prioritized', 'active'])).map((job) => [job.data.label as string, job]));
    // big-0 and big-1 taken and started: the virtual time is big-1's tag, past a quarter of the band.
    for (const label of ['big-0', 'big-1']) {
      const job = (await byLabel()).get(label)!;
      await leaveBacklog(redis, q.name, job.id!, q.toKey(job.id!));
      await q.remove(job.id!);
    }
    // big-2 is taken by a worker (BullMQ moves it to active) but not started yet.
    const connection = createRedis(url, { connectionName: 'scheduler-take' });
    const worker = new Worker(q.name, null, { connection, autorun: false });
    try {
      const taken = (await worker.getNextJob('take-token'))!;
      assert.equal(taken.data.label, 'big-2');
      // A newcomer's tag shifts the band down by big-1's tag: the waiting big-3 and the taken big-2 alike.
      await add(q, claim('acct_new'), 'new');
      assert.equal((await byLabel()).get('big-3')!.priority, first + 2 * cost);
      // big-2 starts now: the virtual time is its shifted tag (cost), not the tag it was taken with (2 × cost).
      await leaveBacklog(redis, q.name, taken.id!, q.toKey(taken.id!));
      await add(q, claim('acct_later'), 'later');
      assert.equal(
        (await byLabel()).get('big-3')!.priority,
        first + cost,
        'shifted once more by the started job’s tag, not past it',
      );
    } finally {
      await worker.close();
      connection.disconnect();
    }
  });

  it('counts the backlog by tier and account, and takes a job out of it once, however often its leaving is told', async () => {
    const q = queue();
    await add(q, claim('acct_x', 'flex'), 'x1');
    await add(q, claim('acct_x', 'flex'), 'x2');
    await add(q, claim('acct_y', 'priority'), 'y1');
    const rows = (await readBacklog(redis, q.name)).sort();
    assert.deepEqual(rows, [
      ['flex', 'acct_x', 2],
      ['priority', 'acct_y', 1],
    ]);
    const y1 = (await q.getJobs(['prioritized'])).find((job) => job.data.label === 'y1')!;
    await leaveBacklog(redis, q.name, y1.id!);
    await leaveBacklog(redis, q.name, y1.id!);
    assert.deepEqual(
      (await readBacklog(redis, q.name)).sort(),
      [['flex', 'acct_x', 2]],
      'a count that reaches 0 is removed, and counted down once',
    );
  });

  it('gives an account back the cost of a job that never ran: a refused or cancelled request does not move its tag', async () => {
    const q = queue();
    await add(q, claim('acct_other'), 'other-0');
    const first = await add(q, claim('acct_retry'), 'retry-0');
    // Three more placed, then refused or cancelled before they ran.
    for (let i = 1; i <= 3; i++) await add(q, claim('acct_retry'), `retry-${i}`);
    for (const job of (await q.getJobs(['prioritized'])).filter((j) => /^retry-[123]$/.test(j.data.label))) {
      await q.remove(job.id!);
      await leaveBacklog(redis, q.name, job.id!);
    }
    const next = await add(q, claim('acct_retry'), 'retry-4');
    assert.equal(
      next - first,
      4,
      'the next admitted job starts right after the last one that ran (1,000 tokens: 4 units)',
    );
  });

  it('repairs a count whose job left without saying so (a lost report, a removal that did not tell)', async () => {
    const q = queue();
    await add(q, claim('acct_lost'), 'lost-0');
    await add(q, claim('acct_lost'), 'lost-1');
    const lost = (await q.getJobs(['prioritized'])).find((job) => job.data.label === 'lost-0')!;
    await q.remove(lost.id!);
    assert.deepEqual(await readBacklog(redis, q.name), [['default', 'acct_lost', 2]], 'the count drifted');
    assert.equal(await recount(redis, q, 1000, 0), 1, 'one job uncounted');
    assert.deepEqual(await readBacklog(redis, q.name), [['default', 'acct_lost', 1]]);
    assert.equal(await recount(redis, q, 1000, 0), undefined, 'one worker recounts per interval');
  });

  it('leaves counted a job a worker has taken and not yet reported, and repairs it once it finished unreported', async () => {
    const q = queue();
    await add(q, claim('acct_taken'), 'taken-0');
    const connection = createRedis(url, { connectionName: 'scheduler-taker' });
    const taker = new Worker(q.name, null, { connection, autorun: false });
    try {
      const job = (await taker.getNextJob('token-1'))!;
      assert.equal(job.data.label, 'taken-0');
      assert.equal(await recount(redis, q, 1, 0), 0, 'taken, its report on its way: not drift');
      assert.deepEqual(await readBacklog(redis, q.name), [['default', 'acct_taken', 1]]);
      await job.moveToFailed(new Error('its worker never reported it'), 'token-1', false);
      // The next interval's recount (one per interval: its lock taken off here rather than waited out).
      await redis.del(recountLockKey(q.name));
      assert.equal(await recount(redis, q, 1, 0), 1, 'finished without a report: repaired');
      assert.deepEqual(await readBacklog(redis, q.name), []);
    } finally {
      await taker.close();
      connection.disconnect();
    }
  });
});
