import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { createRedis } from '../../shared/redis.js';
import { bandStart, bandWidth, maxPriorityLead, placeJob } from '../../shared/scheduling/index.js';
import { fairKeys } from '../../shared/redis-keys.js';
import { freshRedis, waitFor } from '../support/gateway.js';

/*
 * shared/scheduling/lua/place.lua shifts a band down by rewriting BullMQ's own state, which BullMQ does not promise:
 * a prioritized job's score (its priority times 2^32 plus a counter), its hash's `priority` field, and the list of
 * jobs taken (`<prefix>active`). The script names the BullMQ version it was checked against; this test holds that
 * name to the lockfile's and to what is installed, and checks each of the three against the BullMQ running here. An
 * upgrade fails here until someone has checked the script again and moved its line.
 */

const root = new URL('../../', import.meta.url);
const placeLua = readFileSync(new URL('shared/scheduling/lua/place.lua', root), 'utf8');
const lockfile = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as { packages: Record<string, { version?: string }> };
const installed = (JSON.parse(readFileSync(new URL('node_modules/bullmq/package.json', root), 'utf8')) as { version: string }).version;

describe("the BullMQ internals place.lua rewrites, pinned to the lockfile's BullMQ", () => {
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
    const checked = /Checked against BullMQ (\d+\.\d+\.\d+)/.exec(placeLua)?.[1];
    assert.ok(checked, 'place.lua names the BullMQ version it was checked against');
    assert.equal(lockfile.packages['node_modules/bullmq']?.version, checked, 'the lockfile locks the BullMQ place.lua was checked against');
    assert.equal(installed, checked, 'and that BullMQ is installed');
  });

  it("keeps a prioritized job's priority in its score's high bits and its hash, and a taken job in <prefix>active", async () => {
    const queue = new Queue('{place-internals}', { connection: redis });
    closing.push(queue);
    await queue.waitUntilReady();
    const prefix = queue.toKey('');
    // Placed as the api places a job, then added with that priority.
    const placed = await placeJob(redis, queue, 'job-a', { accountId: 'acct_a', weight: 1, tokens: 512, tier: 'default', contended: true });
    assert.ok(placed.priority >= bandStart('default') + maxPriorityLead && placed.priority < bandStart('default') + bandWidth);
    await queue.add('chat', { n: 1 }, { jobId: 'job-a', priority: placed.priority });
    const score = Number(await redis.zscore(queue.keys.prioritized!, 'job-a'));
    assert.equal(Math.floor(score / 2 ** 32), placed.priority, "the score's high bits are the priority");
    assert.equal(await redis.hget(`${prefix}job-a`, 'priority'), String(placed.priority), "the job's hash holds its priority");

    // Taken by a worker, the job is in the list place.lua walks for the jobs taken and not yet reported.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const worker = new Worker('{place-internals}', () => held, { connection: workerConnection('place-worker'), concurrency: 1 });
    closing.push(worker);
    await waitFor(async () => (await redis.lrange(`${prefix}active`, 0, -1)).includes('job-a'), 10_000, 'the job in <prefix>active');
    release();
    await waitFor(async () => (await redis.lrange(`${prefix}active`, 0, -1)).length === 0, 10_000, 'the active list empty again');
  });

  it('shifts a band by rewriting those three, and BullMQ then serves the jobs in the shifted order', async () => {
    const queue = new Queue('{place-shift}', { connection: redis });
    closing.push(queue);
    await queue.waitUntilReady();
    const prefix = queue.toKey('');
    const [, , clockDefault] = fairKeys(queue.name);
    // Two jobs waiting, then the band's virtual time moved past a quarter of its width: the next place shifts it.
    for (const [id, account] of [['early', 'acct_x'], ['late', 'acct_y']] as const) {
      const placed = await placeJob(redis, queue, id, { accountId: account, weight: 1, tokens: 256 * (id === 'early' ? 1 : 4), tier: 'default', contended: true });
      await queue.add('chat', { id }, { jobId: id, priority: placed.priority });
    }
    const before = Number(await redis.hget(`${prefix}late`, 'priority'));
    await redis.set(clockDefault!, String(bandWidth / 4 + 10));
    await placeJob(redis, queue, 'trigger', { accountId: 'acct_z', weight: 1, tokens: 256, tier: 'default', contended: true });
    const after = Number(await redis.hget(`${prefix}late`, 'priority'));
    assert.ok(after < before, 'the waiting job was moved down in its hash');
    assert.equal(Math.floor(Number(await redis.zscore(queue.keys.prioritized!, 'late')) / 2 ** 32), after, 'and in its score');
    // BullMQ takes them in their (shifted) priority order.
    const order: string[] = [];
    const worker = new Worker('{place-shift}', async (job) => void order.push(job.id!), { connection: workerConnection('shift-worker'), concurrency: 1 });
    closing.push(worker);
    await waitFor(async () => order.length === 2, 10_000, 'both jobs served');
    assert.deepEqual(order, ['early', 'late']);
  });
});
