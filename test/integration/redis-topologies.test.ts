import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis, type ClusterOptions } from 'ioredis';
import { clusterSupport, reasonToSkip, startRedisCluster, type RedisClusterHarness } from '../support/redis-cluster.js';
import { sentinelSupport, startRedisSentinel } from '../support/redis-sentinel.js';

// Tests of the harness that starts and breaks Redis Cluster and Sentinel topologies
// (test/support/redis-cluster.ts, redis-sentinel.ts), with plain ioredis as the client.

const failoverBoundMs = 15_000;

/**
 * Retries that outlast a failover (about node-timeout + 1-2 s): with ioredis's
 * defaults (16 redirections, no delay on MOVED) a command to the failed shard
 * gives up after about a second with "Too many Cluster redirections".
 */
const outlastFailover: ClusterOptions = {
  retryDelayOnFailover: 200,
  retryDelayOnClusterDown: 200,
  retryDelayOnMoved: 100,
  maxRedirections: 100,
};

/** Whether something answers on the port (a stopped harness must leave nothing listening). */
async function answers(port: number): Promise<boolean> {
  const probe = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
  });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    return true;
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

async function eventually<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** Keys spread over every primary: `count` keys for each. */
async function keysOnEveryPrimary(cluster: RedisClusterHarness, count: number): Promise<Map<number, string[]>> {
  const byPrimary = new Map<number, string[]>();
  const primaries = await cluster.primaries();
  for (let i = 0; [...byPrimary.values()].filter((k) => k.length >= count).length < primaries.length; i++) {
    const key = `spread:${i}`;
    const owner = await cluster.primaryForKey(key);
    const keys = byPrimary.get(owner.port) ?? [];
    if (keys.length < count) keys.push(key);
    byPrimary.set(owner.port, keys);
  }
  return byPrimary;
}

describe('Redis Cluster harness', { skip: reasonToSkip(clusterSupport()) }, () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function cluster(): Promise<RedisClusterHarness> {
    const started = await startRedisCluster({ primaries: 3, replicasPerPrimary: 1 });
    cleanups.push(() => started.stop());
    return started;
  }
  function client(harness: RedisClusterHarness, options: ClusterOptions = {}): Cluster {
    const c = new Cluster(harness.startupNodes, options);
    c.on('error', () => undefined);
    cleanups.push(() => c.disconnect());
    return c;
  }

  it('comes up with 3 primaries and 3 replicas serving all 16384 slots; ioredis Cluster writes keys across them', async (t) => {
    const harness = await cluster();
    t.diagnostic(`cluster started in ${harness.startMs} ms`);
    assert.equal(harness.nodes.split(',').length, 6);
    assert.match(harness.nodes, /^127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){5}$/);
    assert.equal(harness.env.REDIS_CLUSTER_NODES, harness.nodes);

    const primaries = await harness.primaries();
    assert.equal(primaries.length, 3);
    const ranges = primaries.flatMap((p) => p.slots).sort((a, b) => a[0] - b[0]);
    let next = 0;
    for (const [first, last] of ranges) {
      assert.equal(first, next, 'slot ranges neither overlap nor leave a gap');
      next = last + 1;
    }
    assert.equal(next, 16384);
    for (const primary of primaries) {
      assert.equal(primary.replicas.length, 1, `${primary.address} has one replica`);
      const role = (await harness.call(primary.replicas[0]!.port, 'ROLE')) as unknown[];
      assert.deepEqual([role[0], role[2]], ['slave', primary.port]);
      assert.equal((await harness.primaryForSlot(primary.slots[0]![0])).id, primary.id);
    }
    for (const port of harness.ports)
      assert.match(String(await harness.call(port, 'CLUSTER', 'INFO')), /cluster_state:ok/);

    const redis = client(harness);
    const byPrimary = await keysOnEveryPrimary(harness, 5);
    for (const [port, keys] of byPrimary) {
      for (const key of keys) await redis.set(key, `value of ${key}`);
      // each key landed on the primary the harness names for it
      for (const key of keys) assert.equal(await harness.call(port, 'GET', key), `value of ${key}`);
    }
    const all = [...byPrimary.values()].flat();
    assert.deepEqual(
      await Promise.all(all.map((key) => redis.get(key))),
      all.map((key) => `value of ${key}`),
    );
    assert.ok((await harness.infoCpu(primaries[0]!.port)) > 0);

    await harness.stop();
    assert.equal(existsSync(harness.dir), false, 'the data directory is gone');
    for (const port of harness.ports)
      assert.equal(await answers(port), false, `nothing answers on ${port} after stop()`);
  });

  it('a killed primary is replaced by its replica within the bound; the same ioredis Cluster keeps serving its key', async (t) => {
    const harness = await cluster();
    const redis = client(harness, outlastFailover);
    const key = 'failover:key';
    await redis.set(key, 'before');
    await harness.waitReplicasInSync();
    const owner = await harness.primaryForKey(key);

    const killed = await harness.killPrimary({ key });
    assert.equal(killed.node.port, owner.port);
    assert.equal(harness.isRunning(owner.port), false);
    // sent while the shard has no primary: held by the client's retries until the replica took over
    const during = redis.incr('failover:{key}:counter').then(
      (value) => ({ value, at: Date.now() - killed.killedAt }),
      (error: Error) => ({ error: error.message, at: Date.now() - killed.killedAt }),
    );

    const failover = await harness.waitForFailover();
    t.diagnostic(`failover in ${failover.elapsedMs} ms`);
    assert.ok(failover.elapsedMs < failoverBoundMs, `failover took ${failover.elapsedMs} ms`);
    assert.equal(failover.primary.id, owner.replicas[0]!.id, 'the replica of the killed primary took over');
    assert.deepEqual(failover.primary.slots, owner.slots);
    assert.equal((await harness.primaryForKey(key)).port, failover.primary.port);

    const held = await during;
    t.diagnostic(`the command sent during the outage ended after ${held.at} ms`);
    assert.ok('value' in held, `the held command failed: ${'error' in held ? held.error : ''}`);
    assert.equal(held.value, 1);
    // the same client, never restarted
    assert.equal(await redis.get(key), 'before', 'the write acknowledged before the kill survived');
    await redis.set(key, 'after');
    assert.equal(await redis.get(key), 'after');
    assert.equal(await harness.call(failover.primary.port, 'GET', key), 'after');

    // A client with ioredis's defaults, first used after the failover, finds the new primary too.
    assert.equal(await client(harness).get(key), 'after');

    // The killed node comes back as a replica of the node that took over.
    const back = await harness.restart(owner.port);
    assert.equal(back.role, 'replica');
    assert.equal(back.primaryId, failover.primary.id);
    await redis.set(key, 'rejoined');
    await harness.waitReplicasInSync();
    const role = (await harness.call(owner.port, 'ROLE')) as unknown[];
    assert.deepEqual([role[0], role[2]], ['slave', failover.primary.port]);
  });

  it(
    'sharded pub/sub: smessage reaches a shardedSubscribers client, which subscribes again by itself after its ' +
      'shard fails over',
    async (t) => {
      const harness = await cluster();
      const subscriber = new Cluster(harness.startupNodes, { shardedSubscribers: true });
      const subscriberErrors: string[] = [];
      subscriber.on('error', (error: Error) => subscriberErrors.push(error.message));
      cleanups.push(() => subscriber.disconnect());
      const publisher = client(harness, outlastFailover);
      const received: string[] = [];
      subscriber.on('smessage', (channel: string, message: string) => received.push(`${channel} ${message}`));

      const channel = 'replies:{job-1}';
      assert.equal(await subscriber.ssubscribe(channel), 1);
      await assert.rejects(
        () => subscriber.ssubscribe('a', 'b'),
        /CROSSSLOT/,
        'one ssubscribe takes channels of one slot only',
      );
      assert.equal(await publisher.spublish(channel, 'first'), 1, 'one shard subscriber receives it');
      await eventually('the first message', 2000, async () => (received.length > 0 ? true : undefined));
      assert.deepEqual(received, [`${channel} first`]);
      const owner = await harness.primaryForKey(channel);
      assert.deepEqual(await harness.call(owner.port, 'PUBSUB', 'SHARDNUMSUB', channel), [channel, 1]);

      // Without `shardedSubscribers`, ioredis sends SSUBSCRIBE on its one subscriber connection to a
      // random node and never emits 'smessage': the call hangs on a MOVED reply, and even when the
      // node happens to own the slot the message is not passed on.
      const plain = client(harness);
      const plainReceived: string[] = [];
      plain.on('smessage', (_channel: string, message: string) => plainReceived.push(message));
      const plainSubscribe = plain.ssubscribe(channel).then(
        () => 'subscribed',
        () => 'rejected',
      );
      const plainOutcome = await Promise.race([plainSubscribe, sleep(1000, 'still pending after 1 s')]);
      await publisher.spublish(channel, 'to the plain client');
      await sleep(200);
      t.diagnostic(
        `without shardedSubscribers: ssubscribe ${plainOutcome}, smessages received: ${plainReceived.length}`,
      );
      assert.deepEqual(plainReceived, []);
      plain.disconnect();

      const killed = await harness.killPrimary({ key: channel });
      const failover = await harness.waitForFailover();
      received.length = 0;
      let published = 0;
      const recovered = await eventually('a message after the failover', 10_000, async () => {
        await publisher.spublish(channel, `after ${published++}`);
        await sleep(50);
        return received.length > 0 ? Date.now() - killed.killedAt : undefined;
      });
      t.diagnostic(
        `failover in ${failover.elapsedMs} ms; the subscriber received again ${recovered} ms after the kill, ` +
          (`with ${subscriberErrors.length} 'error' events meanwhile (e.g. ` +
            `${JSON.stringify(subscriberErrors[0] ?? null)})`),
      );
      assert.match(received[0]!, /^replies:\{job-1\} after \d+$/);
      assert.deepEqual(
        await harness.call(failover.primary.port, 'PUBSUB', 'SHARDNUMSUB', channel),
        [channel, 1],
        'subscribed on the new primary',
      );
    },
  );
});

describe('Redis Sentinel harness', { skip: reasonToSkip(sentinelSupport()) }, () => {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('ioredis with sentinels writes to the primary and, after it is killed, to the promoted replica by itself', async (t) => {
    const harness = await startRedisSentinel({ sentinels: 3 });
    cleanups.push(() => harness.stop());
    t.diagnostic(`sentinel setup started in ${harness.startMs} ms`);
    assert.match(harness.sentinels, /^127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/);
    assert.deepEqual(harness.env, { REDIS_SENTINELS: harness.sentinels, REDIS_SENTINEL_NAME: harness.name });
    const primary = await harness.primary();
    assert.equal(primary.port, harness.dataPorts[0]);

    const redis = new Redis({ sentinels: harness.sentinelNodes, name: harness.name });
    redis.on('error', () => undefined);
    cleanups.push(() => redis.disconnect());
    await redis.set('sentinel:key', 'before');
    assert.equal(await harness.call(primary.port, 'GET', 'sentinel:key'), 'before', 'the client writes to the primary');
    await harness.waitReplicasInSync();

    const killed = await harness.killPrimary();
    assert.equal(killed.port, primary.port);
    const during = redis.set('sentinel:during', 'x').then(
      () => ({ ok: true, at: Date.now() }),
      (error: Error) => ({ ok: false, error: error.message, at: Date.now() }),
    );
    const failover = await harness.waitForFailover();
    t.diagnostic(`sentinel failover in ${failover.elapsedMs} ms`);
    assert.ok(failover.elapsedMs < failoverBoundMs, `failover took ${failover.elapsedMs} ms`);
    assert.equal(failover.primary.port, harness.dataPorts[1], 'the replica was promoted');
    assert.deepEqual(await harness.primary(), failover.primary);

    const held = await during;
    assert.ok(held.ok, `the write sent during the outage failed: ${'error' in held ? held.error : ''}`);
    assert.equal(await redis.get('sentinel:key'), 'before');
    await redis.set('sentinel:key', 'after');
    assert.equal(
      await harness.call(failover.primary.port, 'GET', 'sentinel:key'),
      'after',
      'the same client writes to the new primary',
    );

    // the old primary comes back as a replica of the new one
    await harness.restart(killed.port);
    const role = (await harness.call(killed.port, 'ROLE')) as unknown[];
    assert.deepEqual([role[0], role[2]], ['slave', failover.primary.port]);

    await harness.stop();
    assert.equal(existsSync(harness.dir), false);
    for (const port of [...harness.dataPorts, ...harness.sentinelPorts])
      assert.equal(await answers(port), false, `nothing answers on ${port}`);
  });
});
