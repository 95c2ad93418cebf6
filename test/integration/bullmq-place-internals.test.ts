import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import { bandStart, bandWidth, maxPriorityLead, placeJob } from '../../shared/scheduling/index.js';
import { admitJob, plainJobOptions } from '../../shared/scheduling/admit-job.js';
import { backlogKey, billKey, fairKeys } from '../../shared/redis-keys.js';
import { freshRedis, waitFor } from '../support/gateway.js';

/*
 * shared/scheduling/lua/place-rules.lua shifts a band down by rewriting BullMQ's own state, which BullMQ does not
 * promise: a prioritized job's score (its priority times 2^32 plus a counter), its hash's `priority` field, and the
 * list of jobs taken (`<prefix>active`). The script names the BullMQ version it was checked against; this test holds
 * that name to the lockfile's and to what is installed, and checks each of the three against the BullMQ running here.
 * An upgrade fails here until someone has checked the script again and moved its line. lua/bullmq-add.lua writes a job
 * as BullMQ's own add does (the request's whole admission is one script, lua/admit.lua): the same pin, and a comparison
 * of what it writes with what BullMQ writes, and of what a BullMQ worker then reads.
 */

const root = new URL('../../', import.meta.url);
const placeLua = readFileSync(new URL('shared/scheduling/lua/place-rules.lua', root), 'utf8');
const addLua = readFileSync(new URL('shared/scheduling/lua/bullmq-add.lua', root), 'utf8');
const lockfile = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { version?: string }>;
};
const installed = (
  JSON.parse(readFileSync(new URL('node_modules/bullmq/package.json', root), 'utf8')) as { version: string }
).version;

describe("the BullMQ internals place-rules.lua rewrites and bullmq-add.lua writes, pinned to the lockfile's BullMQ", () => {
  let redis: Redis;
  let url: string;
  const closing: Array<{ close(): Promise<unknown> }> = [];

  before(async () => {
    const fresh = await freshRedis(12);
    fresh.redis.disconnect();
    url = fresh.url;
    redis = createRedis(url, { connectionName: 'place-internals' });
    await redis.ping();
  });

  after(async () => {
    for (const item of closing.reverse()) await item.close().catch(() => undefined);
    redis.disconnect();
  });

  /** A connection of a worker's own, closed with the rest. */
  function workerConnection(name: string): Redis {
    const connection = createRedis(url, { connectionName: name, maxRetriesPerRequest: null });
    closing.push({ close: async () => connection.disconnect() });
    return connection;
  }

  it('names the BullMQ version it was checked against, and that is the one locked and installed', () => {
    for (const [name, lua] of [
      ['place-rules.lua', placeLua],
      ['bullmq-add.lua', addLua],
    ] as const) {
      const checked = /Checked against BullMQ (\d+\.\d+\.\d+)/.exec(lua)?.[1];
      assert.ok(checked, `${name} names the BullMQ version it was checked against`);
      assert.equal(
        lockfile.packages['node_modules/bullmq']?.version,
        checked,
        `the lockfile locks the BullMQ ${name} was checked against`,
      );
      assert.equal(installed, checked, 'and that BullMQ is installed');
    }
  });

  it("keeps a prioritized job's priority in its score's high bits and its hash, and a taken job in <prefix>active", async () => {
    const queue = new Queue('{place-internals}', { connection: redis });
    closing.push(queue);
    await queue.waitUntilReady();
    const prefix = queue.toKey('');
    // Placed as the api places a job, then added with that priority.
    const placed = await placeJob(redis, queue, 'job-a', {
      accountId: 'acct_a',
      weight: 1,
      tokens: 512,
      tier: 'default',
      contended: true,
    });
    assert.ok(
      placed.priority >= bandStart('default') + maxPriorityLead && placed.priority < bandStart('default') + bandWidth,
    );
    await queue.add('chat', { n: 1 }, { jobId: 'job-a', priority: placed.priority });
    const score = Number(await redis.zscore(queue.keys.prioritized!, 'job-a'));
    assert.equal(Math.floor(score / 2 ** 32), placed.priority, "the score's high bits are the priority");
    assert.equal(
      await redis.hget(`${prefix}job-a`, 'priority'),
      String(placed.priority),
      "the job's hash holds its priority",
    );

    // Taken by a worker, the job is in the list place.lua walks for the jobs taken and not yet reported.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const worker = new Worker('{place-internals}', () => held, {
      connection: workerConnection('place-worker'),
      concurrency: 1,
    });
    closing.push(worker);
    await waitFor(
      async () => (await redis.lrange(`${prefix}active`, 0, -1)).includes('job-a'),
      10_000,
      'the job in <prefix>active',
    );
    release();
    await waitFor(
      async () => (await redis.lrange(`${prefix}active`, 0, -1)).length === 0,
      10_000,
      'the active list empty again',
    );
  });

  it('shifts a band by rewriting those three, and BullMQ then serves the jobs in the shifted order', async () => {
    const queue = new Queue('{place-shift}', { connection: redis });
    closing.push(queue);
    await queue.waitUntilReady();
    const prefix = queue.toKey('');
    const [, , clockDefault] = fairKeys(queue.name);
    // Two jobs waiting, then the band's virtual time moved past a quarter of its width: the next place shifts it.
    for (const [id, account] of [
      ['early', 'acct_x'],
      ['late', 'acct_y'],
    ] as const) {
      const placed = await placeJob(redis, queue, id, {
        accountId: account,
        weight: 1,
        tokens: 256 * (id === 'early' ? 1 : 4),
        tier: 'default',
        contended: true,
      });
      await queue.add('chat', { id }, { jobId: id, priority: placed.priority });
    }
    const before = Number(await redis.hget(`${prefix}late`, 'priority'));
    await redis.set(clockDefault!, String(bandWidth / 4 + 10));
    await placeJob(redis, queue, 'trigger', {
      accountId: 'acct_z',
      weight: 1,
      tokens: 256,
      tier: 'default',
      contended: true,
    });
    const after = Number(await redis.hget(`${prefix}late`, 'priority'));
    assert.ok(after < before, 'the waiting job was moved down in its hash');
    assert.equal(
      Math.floor(Number(await redis.zscore(queue.keys.prioritized!, 'late')) / 2 ** 32),
      after,
      'and in its score',
    );
    // BullMQ takes them in their (shifted) priority order.
    const order: string[] = [];
    const worker = new Worker('{place-shift}', async (job) => void order.push(job.id!), {
      connection: workerConnection('shift-worker'),
      concurrency: 1,
    });
    closing.push(worker);
    await waitFor(async () => order.length === 2, 10_000, 'both jobs served');
    assert.deepEqual(order, ['early', 'late']);
  });

  it("adds a job in the admission's one script as BullMQ's own add does, and a BullMQ worker reads it the same", async () => {
    const theirs = new Queue('{add-theirs}', { connection: redis });
    const ours = new Queue('{add-ours}', { connection: redis });
    closing.push(theirs, ours);
    await Promise.all([theirs.waitUntilReady(), ours.waitUntilReady()]);
    await redis.hset(billKey('acct_add'), {
      id: 'acct_add',
      reserved: 0,
      balance: 1_000_000,
      'key_add.spent': 0,
      'key_add.reserved': 0,
    });
    const id = 'req_add_1';
    const data = {
      requestId: id,
      endpoint: 'chat.completions',
      payload: { model: 'm', messages: [{ role: 'user', content: 'héllo "quoted" \\ /' }] },
      n: 1.5,
      none: null,
    };
    // The options the api adds a held request's job with (api/requests/build-job.ts).
    const options = {
      jobId: id,
      attempts: 3,
      backoff: { type: 'gateway' },
      removeOnComplete: { age: 60, count: 1000 },
      removeOnFail: { age: 3600, count: 5000 },
    };
    const claim = { accountId: 'acct_add', weight: 1, tokens: 512, tier: 'default' as const, contended: true };
    const storedOptions = plainJobOptions(id, options);
    assert.ok(storedOptions, "the api's options are plain");
    const admitted = await admitJob(redis, ours, { id, name: 'chat.completions', data, storedOptions }, claim, {
      reservation: {
        requestId: id,
        keyId: 'key_add',
        accountId: 'acct_add',
        micros: 700,
        tokens: 512,
        deadline: Date.now() + 60_000,
      },
      limits: {},
    });
    assert.equal(admitted.outcome?.ok, true);
    assert.equal(admitted.added, true);
    assert.equal(await redis.hget(billKey('acct_add'), 'reserved'), '700', 'reserved in the same script');
    assert.equal(await redis.hget(backlogKey(ours.name), 'default|acct_add'), '1', 'counted in the backlog');
    const priority = admitted.placed!.priority;
    await theirs.add('chat.completions', data, { ...options, priority });

    const hash = (queue: Queue) => redis.hgetall(queue.toKey(id));
    const [mine, bullmqs] = await Promise.all([hash(ours), hash(theirs)]);
    assert.deepEqual(Object.keys(mine).sort(), Object.keys(bullmqs).sort(), 'the same fields');
    for (const field of Object.keys(bullmqs)) {
      if (field === 'timestamp') assert.ok(Math.abs(Number(mine[field]) - Number(bullmqs[field])) < 5_000);
      else if (field === 'opts')
        assert.deepEqual(JSON.parse(mine[field]!), JSON.parse(bullmqs[field]!), 'the same options');
      else assert.equal(mine[field], bullmqs[field], field);
    }
    const score = async (queue: Queue) => Math.floor(Number(await redis.zscore(queue.keys.prioritized!, id)) / 2 ** 32);
    assert.equal(await score(ours), priority);
    assert.equal(await score(theirs), priority);
    assert.deepEqual(
      await redis.zrange(ours.keys.marker!, '0', '-1'),
      await redis.zrange(theirs.keys.marker!, '0', '-1'),
      'the marker a worker waits on',
    );
    const events = async (queue: Queue) =>
      (await redis.xrange(queue.keys.events!, '-', '+')).map(([, fields]) =>
        fields.filter((_, i) => i % 2 === 1).join(' '),
      );
    assert.deepEqual(await events(ours), await events(theirs), 'the same events');
    assert.deepEqual(await ours.getJobCounts(), await theirs.getJobCounts(), 'counted alike');

    // A retried add adds nothing and reserves nothing again.
    const again = await admitJob(redis, ours, { id, name: 'chat.completions', data, storedOptions }, claim, {
      reservation: {
        requestId: id,
        keyId: 'key_add',
        accountId: 'acct_add',
        micros: 700,
        tokens: 512,
        deadline: Date.now() + 60_000,
      },
      limits: {},
    });
    assert.equal(again.added, false);
    assert.equal(await redis.hget(billKey('acct_add'), 'reserved'), '700');

    // A BullMQ worker takes and finishes both alike: the same job as it reads it.
    const seen = new Map<string, { data: unknown; opts: unknown; priority: number; attemptsLeft: number }>();
    for (const queue of [ours, theirs]) {
      const worker = new Worker(
        queue.name,
        async (job) =>
          void seen.set(queue.name, {
            data: job.data,
            opts: job.opts,
            priority: job.priority,
            attemptsLeft: (job.opts.attempts ?? 0) - job.attemptsMade,
          }),
        { connection: workerConnection(`${queue.name}-worker`), concurrency: 1 },
      );
      closing.push(worker);
    }
    await waitFor(
      async () => (await ours.getCompletedCount()) === 1 && (await theirs.getCompletedCount()) === 1,
      10_000,
      'both completed',
    );
    assert.deepEqual(seen.get(ours.name), seen.get(theirs.name));
    assert.deepEqual(seen.get(ours.name)?.data, data);
  });

  it('refuses in the one script with nothing placed or added, and marks a priority job placed behind others', async () => {
    const queue = new Queue('{add-refused}', { connection: redis });
    closing.push(queue);
    await queue.waitUntilReady();
    await redis.hset(billKey('acct_poor'), {
      id: 'acct_poor',
      reserved: 0,
      balance: 100,
      'key_poor.spent': 0,
      'key_poor.reserved': 0,
    });
    const spend = (id: string, micros: number) => ({
      reservation: {
        requestId: id,
        keyId: 'key_poor',
        accountId: 'acct_poor',
        micros,
        tokens: 10,
        deadline: Date.now() + 60_000,
      },
      limits: {},
    });
    const job = (id: string, data: object = { requestId: id, endpoint: 'chat.completions' }) => ({
      id,
      name: 'chat.completions',
      data,
      storedOptions: plainJobOptions(id, { jobId: id, attempts: 1 })!,
    });
    const claim = {
      accountId: 'acct_poor',
      weight: 1,
      tokens: 10,
      tier: 'priority' as const,
      contended: true,
      leadTokens: 1024,
    };
    const refused = await admitJob(redis, queue, job('req_poor'), claim, spend('req_poor', 101));
    assert.equal(refused.outcome?.ok, false);
    assert.equal(refused.added, false);
    assert.equal(await redis.exists(queue.toKey('req_poor')), 0, 'no job');
    assert.equal(await redis.zcard(queue.keys.prioritized!), 0, 'nothing prioritized');
    assert.equal(await redis.hlen(backlogKey(queue.name)), 0, 'nothing counted');
    assert.equal(await redis.hget(billKey('acct_poor'), 'reserved'), '0', 'nothing reserved');

    // Two priority requests: the second is placed behind the first, and its data says so (what its premium bought).
    await admitJob(redis, queue, job('req_first'), claim, spend('req_first', 10));
    const second = await admitJob(redis, queue, job('req_second'), claim, spend('req_second', 10));
    assert.equal(second.placed?.behindOthers, true);
    assert.equal((await queue.getJob('req_first'))?.data.contended, undefined);
    assert.deepEqual((await queue.getJob('req_second'))?.data, {
      contended: true,
      requestId: 'req_second',
      endpoint: 'chat.completions',
    });
    // Options only BullMQ handles are not written by the one script.
    assert.equal(plainJobOptions('req_x', { jobId: 'req_x', delay: 10 }), undefined);
    assert.equal(plainJobOptions('42', { jobId: '42' }), undefined);
    assert.equal(plainJobOptions('a:b', { jobId: 'a:b' }), undefined);
  });
});
