import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import { loadConfig } from '../../shared/config.js';
import { reserve } from '../../shared/money/billing.js';
import { capabilityLoops, fetchLoopOptions } from '../../workers/worker.js';
import { StartingWorker } from '../../workers/starting-worker.js';
import { isFinalFailure, queueSignal, runsNoMore } from '../../workers/failure-policy.js';
import { decodeAsyncJobFailure } from '../../shared/async-job-failure.js';
import { backToBandHead, bandStart, maxPriorityLead } from '../../shared/scheduling/index.js';
import { freshRedis, waitFor } from '../support/gateway.js';

/*
 * What the gateway takes from BullMQ beyond its documented promises, each
 * checked against the BullMQ installed: an upgrade that changes one of them
 * fails here, not in production.
 */

/** Counts the system-level writes a connection's socket makes (`_write` for one chunk, `_writev` for a batch). */
function countWrites(redis: Redis): () => number {
  const socket = (redis as unknown as { stream: Socket & { _write: Function; _writev?: Function } }).stream;
  let writes = 0;
  const single = socket._write;
  const batch = socket._writev;
  socket._write = function (this: Socket, ...args: unknown[]) {
    writes++;
    return single.apply(this, args);
  };
  if (batch) {
    socket._writev = function (this: Socket, ...args: unknown[]) {
      writes++;
      return batch.apply(this, args);
    };
  }
  return () => writes;
}

/** The socket under a BullMQ client (its adapter forwards what it does not override to the ioredis instance). */
const socketOf = async (client: Promise<unknown> | undefined) =>
  ((await client) as { stream?: Socket } | undefined)?.stream;

describe('what the gateway relies on in BullMQ', () => {
  let url: string;
  let redis: Redis;
  const closing: Array<{ close(): Promise<unknown> }> = [];
  const config = loadConfig({ WORKER_LOCK_MS: '1000' });

  before(async () => {
    const fresh = await freshRedis(13);
    url = fresh.url;
    fresh.redis.disconnect();
    redis = createRedis(url, { connectionName: 'reliances' });
    await redis.ping();
  });

  after(async () => {
    for (const item of closing.reverse()) await item.close().catch(() => undefined);
    redis.disconnect();
  });

  function queue(name: string, connection: Redis = redis): Queue {
    const made = new Queue(name, { connection });
    closing.push(made);
    return made;
  }

  it('adds no job under an id that exists, so a refused reservation sent with the add queues nothing', async () => {
    const chat = queue('{reliance-gate}');
    await chat.waitUntilReady();
    const jobId = 'req_refused';
    // As api/requests/enqueue.ts sends them: the gated reservation and the add in the same turn, on one connection.
    const [outcome, added] = await Promise.all([
      reserve(
        redis,
        {
          requestId: jobId,
          keyId: 'key_missing',
          accountId: 'acct_missing',
          micros: 10,
          tokens: 1,
          deadline: Date.now() + 60_000,
          gate: chat.toKey(jobId),
        },
        {},
      ),
      chat.add('chat', { n: 1 }, { jobId }),
    ]);
    assert.equal(outcome.ok, false);
    assert.equal(added.id, jobId, 'the add answers as for an existing job, without an error');
    assert.deepEqual(await chat.getJobCounts('waiting', 'prioritized', 'delayed', 'active'), {
      waiting: 0,
      prioritized: 0,
      delayed: 0,
      active: 0,
    });
    assert.equal(
      await redis.hget(chat.toKey(jobId), 'refused'),
      '5',
      'what stands under the id is the placeholder, not a job',
    );
    // The api then removes whatever stands there; the id is free again and a later add queues.
    await chat.remove(jobId);
    assert.equal(await redis.exists(chat.toKey(jobId)), 0);
    await chat.add('chat', { n: 2 }, { jobId });
    assert.equal(await chat.getWaitingCount(), 1);
  });

  it(
    'runs commands on the connection it is given and writes a turn of them at once; only the blocking wait has its ' +
      'own',
    async () => {
      const chat = queue('{reliance-batch}');
      await chat.waitUntilReady();
      assert.equal(
        await socketOf(chat.getBackend().client),
        (redis as unknown as { stream: Socket }).stream,
        "the queue's commands use the gateway's connection",
      );
      const writes = countWrites(redis);
      await Promise.all(Array.from({ length: 50 }, (_, i) => chat.add('chat', { i })));
      const batched = writes();
      assert.ok(batched <= 3, `50 adds in one turn took ${batched} writes`);

      // The same adds on a connection without the batching: one write each, so the count above means something.
      const plain = new Redis(url, { maxRetriesPerRequest: null });
      closing.push({ close: async () => plain.disconnect() });
      const plainQueue = queue('{reliance-plain}', plain);
      await plainQueue.waitUntilReady();
      const plainWrites = countWrites(plain);
      await Promise.all(Array.from({ length: 50 }, (_, i) => plainQueue.add('chat', { i })));
      assert.ok(plainWrites() >= 25, `without batching 50 adds took only ${plainWrites()} writes`);

      const worker = new Worker('{reliance-batch}', async () => 'done', {
        connection: redis,
        ...fetchLoopOptions(config, 4, 0),
      });
      closing.push(worker);
      await worker.waitUntilReady();
      assert.equal(
        await socketOf(worker.getBackend().client),
        (redis as unknown as { stream: Socket }).stream,
        "the worker's commands use the gateway's connection",
      );
      const blocking = await socketOf(worker.getBackend().blockingClient);
      assert.ok(
        blocking && blocking !== (redis as unknown as { stream: Socket }).stream,
        'the blocking wait for a job has a connection of its own',
      );
      await waitFor(async () => (await chat.getCompletedCount()) === 50, 10_000, 'the batch processed');
    },
  );

  it('lets several fetch loops serve one queue, sharing its concurrency', async () => {
    const loops = capabilityLoops('chat', 130, 1);
    assert.deepEqual(
      loops.map((loop) => loop.concurrency),
      [44, 43, 43],
    );
    const name = '{reliance-loops}';
    const chat = queue(name);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const running = loops.map(() => 0);
    let inFlight = 0;
    let most = 0;
    for (const [index, loop] of loops.entries()) {
      const worker = new Worker(
        name,
        async () => {
          running[index]!++;
          most = Math.max(most, ++inFlight);
          await released;
          inFlight--;
          running[index]!--;
        },
        { connection: redis, ...fetchLoopOptions(config, loop.concurrency, loop.loop) },
      );
      closing.push(worker);
    }
    await chat.addBulk(Array.from({ length: 200 }, (_, i) => ({ name: 'chat', data: { i } })));
    await waitFor(() => inFlight === 130, 10_000, 'every loop full');
    // Each loop holds its own share, and together never more than the queue's concurrency.
    assert.deepEqual(running, [44, 43, 43]);
    assert.equal(await chat.getWaitingCount(), 70);
    release();
    await waitFor(async () => (await chat.getCompletedCount()) === 200, 15_000, 'all 200 processed');
    assert.equal(most, 130);
  });

  it('checks for stalled jobs only in the first fetch loop of a queue', async () => {
    const name = '{reliance-stalled}';
    const chat = queue(name);
    await chat.add('chat', { n: 1 }, { jobId: 'stalls' });
    // A worker takes the job and dies without a word: the job stays active and its lock runs out.
    const dying = new Worker(name, null, { connection: redis, lockDuration: 1000 });
    const taken = await dying.getNextJob('dead-token');
    assert.equal(taken?.id, 'stalls');
    await dying.close();
    assert.equal(await chat.getJobState('stalls'), 'active');

    const processed: string[] = [];
    const run = async (job: Job) => void processed.push(job.id!);
    // A second loop never looks: after four of its check intervals the job is still where it was.
    const second = new Worker(name, run, { connection: redis, ...fetchLoopOptions(config, 2, 1) });
    closing.push(second);
    let secondSawStall = false;
    second.on('stalled', () => (secondSawStall = true));
    await new Promise((resolve) => setTimeout(resolve, 1000 + 4 * fetchLoopOptions(config, 2, 1).stalledInterval));
    assert.equal(await chat.getJobState('stalls'), 'active');
    assert.equal(secondSawStall, false);

    // The first loop finds it, moves it back, and one of the loops runs it.
    const first = new Worker(name, run, { connection: redis, ...fetchLoopOptions(config, 2, 0) });
    closing.push(first);
    const stalled: string[] = [];
    first.on('stalled', (jobId) => stalled.push(jobId));
    await waitFor(() => processed.includes('stalls'), 10_000, 'the stalled job run again');
    assert.deepEqual(stalled, ['stalls']);
    assert.equal(secondSawStall, false);
  });

  it(
    'hands a stalled job back through the plain wait list, ahead of every prioritized job, until its priority is ' +
      'set again',
    async () => {
      const name = '{reliance-stalled-band}';
      const chat = queue(name);
      // A flex job, taken by a worker that dies without a word.
      await chat.add(
        'chat',
        { serviceTier: 'flex' },
        { jobId: 'flex-stalls', priority: bandStart('flex') + maxPriorityLead },
      );
      const dying = new Worker(name, null, { connection: redis, lockDuration: 1000 });
      assert.equal((await dying.getNextJob('dead-token'))?.id, 'flex-stalls');
      await dying.close();
      // Meanwhile interactive work waits, prioritized.
      await chat.add(
        'chat',
        { serviceTier: 'default' },
        { jobId: 'default-waits', priority: bandStart('default') + maxPriorityLead },
      );
      const checker = new Worker(name, async () => undefined, {
        connection: redis,
        ...fetchLoopOptions(config, 1, 0),
        autorun: false,
      });
      closing.push(checker);
      let stalls = 0;
      checker.on('stalled', () => stalls++);
      await checker.startStalledCheckTimer();
      await waitFor(() => stalls === 1, 10_000, 'the stall found');
      // BullMQ puts it in the wait list (not among the prioritized), which a worker serves first: it jumps every band.
      assert.equal(await chat.getJobState('flex-stalls'), 'waiting');
      assert.deepEqual(await redis.lrange(chat.keys.wait!, 0, -1), ['flex-stalls']);
      const taker = new Worker(name, null, { connection: redis, lockDuration: 5000 });
      closing.push(taker);
      const jumped = (await taker.getNextJob('take-1'))!;
      assert.equal(jumped.id, 'flex-stalls', 'taken before the interactive job');
      // What the gateway's workers do with it (workers/worker.ts inFairOrder): back to its band's head, then to wait.
      assert.equal(await backToBandHead(jumped as Job<{ serviceTier?: 'flex' }>), true);
      await jumped.moveToDelayed(Date.now(), 'take-1');
      assert.equal((await taker.getNextJob('take-2'))?.id, 'default-waits', 'the interactive band first');
      const again = (await taker.getNextJob('take-3'))!;
      assert.equal(again.id, 'flex-stalls');
      assert.equal(again.priority, bandStart('flex'), "at its own band's head");
      assert.equal(await backToBandHead(again as Job<{ serviceTier?: 'flex' }>), false, 'once only');
    },
  );

  it("fails a job whose worker died twice, attempts left or not, with a reason the gateway's classifier knows", async () => {
    const name = '{reliance-stalled-out}';
    const chat = queue(name);
    await chat.add('chat', { n: 1 }, { jobId: 'stalls-out', attempts: 5 });
    // The gateway's first fetch loop, not yet taking jobs: only its stalled check runs.
    let ran = false;
    const worker = new Worker(name, async () => void (ran = true), {
      connection: redis,
      ...fetchLoopOptions(config, 1, 0),
      autorun: false,
    });
    closing.push(worker);
    let stalls = 0;
    worker.on('stalled', () => stalls++);
    const failed = new Promise<[Job | undefined, Error]>((resolve) =>
      worker.on('failed', (job, error) => resolve([job, error])),
    );
    await worker.startStalledCheckTimer();
    // Twice a worker takes the job and dies without a word; each time the check finds it and hands it back.
    for (const take of [1, 2]) {
      const dying = new Worker(name, null, { connection: redis, lockDuration: 1000 });
      assert.equal((await dying.getNextJob(`dead-token-${take}`))?.id, 'stalls-out');
      await dying.close();
      await waitFor(() => stalls === take, 10_000, `stall ${take} found`);
    }
    // The next take fails it for good without running it.
    void worker.run();
    const [job, error] = await failed;
    assert.equal(ran, false);
    assert.equal(queueSignal(error), 'stalled-out', `BullMQ's reason: ${error.message}`);
    assert.ok(job && isFinalFailure(job, error) && job.attemptsMade < 5, 'final with attempts left');
    assert.equal(await runsNoMore(job, error), true);
    assert.equal(await chat.getJobState('stalls-out'), 'failed');
    // The reason kept is the same text, and not an async job's failure: GET /v1/jobs/{id} says the worker was lost.
    const reason = (await chat.getJob('stalls-out'))?.failedReason;
    assert.equal(reason, error.message);
    assert.equal(decodeAsyncJobFailure(reason), undefined);
  });

  it('emits `failed` once the job is moved on, so its state says whether it runs again', async () => {
    const name = '{reliance-failed}';
    const chat = queue(name);
    // A backoff long enough that the retry waits for the test.
    await chat.add('chat', { n: 1 }, { jobId: 'retries', attempts: 2, backoff: { type: 'fixed', delay: 60_000 } });
    const outcomes: Array<{ final: boolean; runsNoMore: boolean; state: string }> = [];
    const worker = new Worker(
      name,
      async () => {
        throw new Error('vendor down');
      },
      { connection: redis },
    );
    closing.push(worker);
    worker.on('failed', (job, error) => {
      if (!job) return;
      void (async () => {
        const state = await job.getState();
        outcomes.push({ final: isFinalFailure(job, error), runsNoMore: await runsNoMore(job, error), state });
      })();
    });
    await waitFor(() => outcomes.length === 1, 10_000, 'the first attempt failed');
    // Attempts left: delayed for its backoff, neither final nor over.
    assert.deepEqual(outcomes[0], { final: false, runsNoMore: false, state: 'delayed' });
    // Removed while it waited (as the api removes a job whose client left): it runs no more.
    const [job] = await chat.getJobs(['delayed']);
    await chat.remove('retries');
    assert.equal(await runsNoMore(job!, new Error('vendor down')), true);
    // The last attempt fails it for good.
    await chat.add('chat', { n: 2 }, { jobId: 'last', attempts: 1 });
    await waitFor(() => outcomes.length === 2, 10_000, 'the only attempt failed');
    assert.deepEqual(outcomes[1], { final: true, runsNoMore: true, state: 'failed' });
  });

  it("takes a backlog's jobs all before it starts one, unless the worker starts each as it takes it (StartingWorker)", async () => {
    /**
     * Fills a queue with a backlog, then starts a worker on it: how many jobs were still waiting when the first one
     * started.
     */
    const waitingAtFirstStart = async (name: string, starting: boolean) => {
      const backlog = queue(name);
      await backlog.addBulk(Array.from({ length: 300 }, (_, i) => ({ name: 'chat', data: { i } })));
      let first: Promise<number> | undefined;
      const run = async () => {
        first ??= backlog.getWaitingCount();
        return 'done';
      };
      const options = { connection: redis, ...fetchLoopOptions(config, 400, 0) };
      const worker = starting ? new StartingWorker(name, run, options) : new Worker(name, run, options);
      closing.push(worker);
      await waitFor(async () => (await backlog.getCompletedCount()) === 300, 20_000, `${name}: the backlog processed`);
      await worker.close();
      return first!;
    };
    // BullMQ's own loop: every job of the backlog is taken before the first starts.
    assert.equal(await waitingAtFirstStart('{reliance-hoard}', false), 0);
    // The gateway's: the first starts as soon as it is taken, most of the backlog still waiting.
    const waiting = await waitingAtFirstStart('{reliance-start}', true);
    assert.ok(waiting > 200, `${waiting} of 300 jobs still waiting when the first started`);
  });
});
