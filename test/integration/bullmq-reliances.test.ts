import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import { loadConfig } from '../../shared/config.js';
import { reserve } from '../../shared/billing.js';
import { capabilityLoops, fetchLoopOptions } from '../../workers/worker.js';
import { StartingWorker } from '../../workers/starting-worker.js';
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
const socketOf = async (client: Promise<unknown> | undefined) => ((await client) as { stream?: Socket } | undefined)?.stream;

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
    // As api/relay/enqueue.ts sends them: the gated reservation and the add in the same turn, on one connection.
    const [outcome, added] = await Promise.all([
      reserve(redis, { requestId: jobId, keyId: 'key_missing', accountId: 'acct_missing', micros: 10, tokens: 1, deadline: Date.now() + 60_000, gate: chat.toKey(jobId) }, {}),
      chat.add('chat', { n: 1 }, { jobId }),
    ]);
    assert.equal(outcome.ok, false);
    assert.equal(added.id, jobId, 'the add answers as for an existing job, without an error');
    assert.deepEqual(await chat.getJobCounts('waiting', 'prioritized', 'delayed', 'active'), { waiting: 0, prioritized: 0, delayed: 0, active: 0 });
    assert.equal(await redis.hget(chat.toKey(jobId), 'refused'), '5', 'what stands under the id is the placeholder, not a job');
    // The api then removes whatever stands there; the id is free again and a later add queues.
    await chat.remove(jobId);
    assert.equal(await redis.exists(chat.toKey(jobId)), 0);
    await chat.add('chat', { n: 2 }, { jobId });
    assert.equal(await chat.getWaitingCount(), 1);
  });

  it('runs commands on the connection it is given and writes a turn of them at once; only the blocking wait has its own', async () => {
    const chat = queue('{reliance-batch}');
    await chat.waitUntilReady();
    assert.equal(await socketOf(chat.getBackend().client), (redis as unknown as { stream: Socket }).stream, "the queue's commands use the gateway's connection");
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

    const worker = new Worker('{reliance-batch}', async () => 'done', { connection: redis, ...fetchLoopOptions(config, 4, 0) });
    closing.push(worker);
    await worker.waitUntilReady();
    assert.equal(await socketOf(worker.getBackend().client), (redis as unknown as { stream: Socket }).stream, "the worker's commands use the gateway's connection");
    const blocking = await socketOf(worker.getBackend().blockingClient);
    assert.ok(blocking && blocking !== (redis as unknown as { stream: Socket }).stream, 'the blocking wait for a job has a connection of its own');
    await waitFor(async () => (await chat.getCompletedCount()) === 50, 10_000, 'the batch processed');
  });

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

  it("takes a backlog's jobs all before it starts one, unless the worker starts each as it takes it (StartingWorker)", async () => {
    /** Fills a queue with a backlog, then starts a worker on it: how many jobs were still waiting when the first one started. */
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

