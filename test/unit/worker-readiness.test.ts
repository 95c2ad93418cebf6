import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { createLogger } from '../../shared/logger.js';
import { readinessPingTimeoutMs, startMetricsListener } from '../../shared/metrics-process.js';
import { waitFor } from '../support/gateway.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';

/**
 * A worker process's METRICS_PORT listener answers `/readyz` for a health
 * check (docker-compose.yml's worker services probe it): 200 while the worker
 * reaches its Redis, 503 when it cannot, whether Redis is down or stalled.
 */

const log = createLogger('silent', 'test');

const readyz = async (base: string, method = 'GET') => {
  const res = await fetch(`${base}/readyz`, { method });
  return { status: res.status, body: method === 'HEAD' ? '' : await res.text() };
};

describe("a worker's readiness on its metrics listener", () => {
  let redis: PrivateRedis;
  let listener: Awaited<ReturnType<typeof startMetricsListener>>;
  let base = '';
  before(async () => {
    redis = await startPrivateRedis({ aof: false });
    listener = await startMetricsListener(0, '127.0.0.1', log, 'scrape-token', { redis: redis.url });
    base = `http://127.0.0.1:${listener.port}`;
  });
  after(async () => {
    await listener?.close();
    await redis?.remove();
  });

  it('is ready while Redis answers, with no token needed', async () => {
    await waitFor(async () => (await readyz(base)).status === 200, 5000, 'the first ready');
    const { status, body } = await readyz(base);
    assert.equal(status, 200);
    assert.deepEqual(JSON.parse(body), { status: 'ready', redis: true });
    assert.equal((await readyz(base, 'HEAD')).status, 200);
    // The metrics stay behind METRICS_TOKEN.
    assert.equal((await fetch(`${base}/metrics`)).status, 401);
  });

  it('is not ready while Redis is down, and ready again once it is back', async () => {
    await redis.stop();
    await waitFor(async () => (await readyz(base)).status === 503, 5000, '503 with Redis down');
    assert.deepEqual(JSON.parse((await readyz(base)).body), { status: 'not_ready', redis: false });
    await redis.restart();
    // The connection comes back by itself (ioredis's backoff is at most 2 s).
    await waitFor(async () => (await readyz(base)).status === 200, 10_000, 'ready again after Redis restarted');
  });

  it('is not ready while Redis holds the connection and does not answer', async () => {
    const client = new Redis(redis.url);
    const pid = Number(/process_id:(\d+)/.exec(await client.info('server'))?.[1]);
    client.disconnect();
    assert.ok(pid > 0);
    process.kill(pid, 'SIGSTOP');
    try {
      const { status } = await readyz(base);
      assert.equal(status, 503, `a PING unanswered for ${readinessPingTimeoutMs} ms is not ready`);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await waitFor(async () => (await readyz(base)).status === 200, 10_000, 'ready once Redis answers again');
  });

  it('refuses other methods and paths', async () => {
    const post = await fetch(`${base}/readyz`, { method: 'POST' });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get('allow'), 'GET, HEAD');
    assert.equal((await fetch(`${base}/healthz/../readyz%00`)).status, 404);
    assert.equal((await fetch(`${base}/`)).status, 404);
  });

  it('closes its Redis connection with the listener', async () => {
    const own = await startMetricsListener(0, '127.0.0.1', log, undefined, { redis: redis.url });
    const client = new Redis(redis.url);
    try {
      const readinessClients = async () =>
        String(await client.call('CLIENT', 'LIST'))
          .split('\n')
          .filter((line) => / name=worker-readiness /.test(line)).length;
      await waitFor(async () => (await readyz(`http://127.0.0.1:${own.port}`)).status === 200, 5000, 'ready');
      const before = await readinessClients();
      await own.close();
      await waitFor(async () => (await readinessClients()) === before - 1, 5000, 'its connection closed');
    } finally {
      client.disconnect();
    }
  });
});

describe('a metrics listener given no Redis', () => {
  it('serves no /readyz (a 404, not a ready that checks nothing)', async () => {
    const listener = await startMetricsListener(0, '127.0.0.1', log);
    try {
      assert.equal((await readyz(`http://127.0.0.1:${listener.port}`)).status, 404);
    } finally {
      await listener.close();
    }
  });

  it('lets a port already taken fail the start, leaving no Redis connection behind', async () => {
    const taken: Server = createServer((socket: Socket) => socket.destroy());
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      // A Redis that is not there: a connection left open would keep reconnecting (and this test process alive).
      await assert.rejects(
        startMetricsListener(port, '127.0.0.1', log, undefined, { redis: 'redis://127.0.0.1:1' }),
        /EADDRINUSE/,
      );
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });
});
