import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { connect, createServer, type Socket } from 'node:net';
import { createInterface } from 'node:readline';
import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { createKey, freshRedis, requestRecord, spawnGateway, waitFor } from '../support/gateway.js';
import { startPrivatePostgres, type PrivatePostgres } from '../support/postgres-server.js';
import { recordUrlFor } from '../support/record.js';

interface Readiness {
  status: number;
  body: { status: string; record?: boolean; workers?: boolean; redis: boolean };
}

const readyz = async (url: string): Promise<Readiness> => {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
};

/** The lines a spawned gateway writes, and the port of its "gateway listening" line once written. */
function follow(proc: ChildProcess): { lines: string[]; url: () => string | undefined } {
  const lines: string[] = [];
  let port: number | undefined;
  for (const stream of [proc.stdout!, proc.stderr!]) {
    createInterface({ input: stream }).on('line', (line) => {
      lines.push(line);
      const match = /"port":(\d+)/.exec(line);
      if (match && line.includes('gateway listening')) port = Number(match[1]);
    });
  }
  return { lines, url: () => (port === undefined ? undefined : `http://127.0.0.1:${port}`) };
}

/** The worker process `npm start` forked, by its command line (tsx may have children of its own). */
function workerProcessOf(parent: number): number | undefined {
  let listing = '';
  try {
    listing = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(parent)], { encoding: 'utf8' });
  } catch {
    return undefined; // no child yet
  }
  const line = listing.split('\n').find((entry) => entry.includes('--worker-of-parent'));
  return line ? Number(line.trim().split(/\s+/)[0]) : undefined;
}

describe('ready means ready: /readyz waits for the workers and the record', () => {
  let redis: Redis;
  let redisUrl: string;
  const spawned: ChildProcess[] = [];
  let postgres: PrivatePostgres | undefined;

  before(async () => {
    ({ redis, url: redisUrl } = await freshRedis(12));
  });

  after(async () => {
    for (const proc of spawned) proc.kill('SIGKILL');
    redis?.disconnect();
    await postgres?.remove();
  });

  it(
    'npm start: 503 while its worker process is not taking jobs, 200 once it is, and the first chat after that ' +
      'does not wait in the queue',
    async () => {
      const { key } = await createKey(redis);
      const proc = await spawnGateway('all', { REDIS_URL: redisUrl, WORKER_PROCESS: 'on' });
      spawned.push(proc);
      const gateway = follow(proc);
      // The workers are held where they are (stopped) so the api is seen before they run, whatever the machine's speed.
      let worker: number | undefined;
      await waitFor(() => (worker = workerProcessOf(proc.pid!)) !== undefined, 60_000, 'the worker process').catch(
        (error: Error) => {
          throw new Error(`${error.message}:\n${gateway.lines.join('\n')}`);
        },
      );
      process.kill(worker!, 'SIGSTOP');
      try {
        await waitFor(() => gateway.url() !== undefined, 60_000, 'the api to listen');
        const url = gateway.url()!;
        const early = await readyz(url);
        assert.equal(early.status, 503, JSON.stringify(early.body));
        assert.equal(early.body.workers, false);
        assert.equal(early.body.redis, true);
        assert.ok(!gateway.lines.some((line) => line.includes('gateway ready')), 'not announced as ready');
        assert.match(
          gateway.lines.find((line) => line.includes('gateway listening'))!,
          /ready once its workers take jobs/,
        );
      } finally {
        process.kill(worker!, 'SIGCONT');
      }
      const url = gateway.url()!;
      let ready: Readiness | undefined;
      // A probe that fails to connect counts as not ready, as a balancer counts it.
      await waitFor(
        async () => (ready = await readyz(url).catch(() => undefined))?.status === 200,
        60_000,
        '/readyz to say ready',
      );
      assert.equal(ready!.body.workers, true);
      assert.equal(ready!.body.record, true);
      // Each process writes its lines asynchronously (pino's stdout), so the pipe may carry the worker process's line
      // after the api's: the order is read from the times they were logged at, not from the order they arrived in.
      const loggedAt = (text: string) => {
        const line = gateway.lines.find((entry) => entry.includes(text));
        return line === undefined ? undefined : Number((JSON.parse(line) as { time: number }).time);
      };
      await waitFor(
        () => loggedAt('gateway ready') !== undefined && loggedAt('workers started') !== undefined,
        5000,
        'the ready line and the workers line',
      );
      assert.ok(
        loggedAt('workers started')! <= loggedAt('gateway ready')!,
        `ready is said after the workers started:\n${gateway.lines.join('\n')}`,
      );

      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'first' }] }),
      });
      assert.equal(res.status, 200);
      await res.arrayBuffer();
      const record = await requestRecord(url, key, res.headers.get('x-request-id')!);
      // It waited 2.2–4.6 s for the worker process's start before; now a worker is there to take it.
      assert.ok(record.queue_ms !== null && record.queue_ms < 1500, `queue_ms ${record.queue_ms}`);
    },
  );

  it('503 while the record cannot be reached, 200 again once it can', async () => {
    postgres = await startPrivatePostgres();
    const proc = await spawnGateway('api', { REDIS_URL: redisUrl, DATABASE_URL: postgres.url });
    spawned.push(proc);
    const gateway = follow(proc);
    await waitFor(() => gateway.url() !== undefined, 60_000, 'the api to listen');
    const url = gateway.url()!;
    const up = await readyz(url);
    assert.equal(up.status, 200, JSON.stringify(up.body));
    assert.equal(up.body.record, true);
    assert.equal(up.body.workers, true, '--role=api: the workers are elsewhere, it is ready once up');

    await postgres.stop();
    let down: Readiness | undefined;
    await waitFor(
      async () => (down = await readyz(url).catch(() => undefined))?.status === 503,
      10_000,
      '/readyz to say not ready',
    );
    assert.equal(down!.body.record, false);
    assert.equal(down!.body.redis, true);
    // Alive though not ready.
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
    // A request that reads the record is told the record is away (not the queue), in its dialect, with a retry.
    const { key } = await createKey(redis, 'record-away');
    const openai = await fetch(`${url}/v1/batches`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(openai.status, 503);
    assert.equal(openai.headers.get('retry-after'), '2');
    const openaiBody = (await openai.json()) as { error: { code: string; type: string; message: string } };
    assert.equal(openaiBody.error.code, 'record_unavailable', JSON.stringify(openaiBody));
    assert.equal(openaiBody.error.type, 'server_error');
    assert.match(openaiBody.error.message, /record/);
    const anthropic = await fetch(`${url}/v1/messages/batches`, {
      headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    });
    // Anthropic's dialect answers a 503 as its own overloaded 529, which its clients retry.
    assert.equal(anthropic.status, 529);
    assert.equal(anthropic.headers.get('retry-after'), '2');
    const anthropicBody = (await anthropic.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(anthropicBody.type, 'error');
    assert.match(anthropicBody.error.message, /record/, JSON.stringify(anthropicBody));

    await postgres.start();
    await waitFor(
      async () => (await readyz(url).catch(() => undefined))?.status === 200,
      20_000,
      '/readyz to say ready again',
    );
  });
  it(
    '503 record_unavailable when the record’s connection is lost in the middle of a statement, not the queue’s ' +
      'error',
    async () => {
      // The api reaches the record through a proxy that can hold what the api sends, then cut every connection: the
      // statement under way is lost with its connection (a PostgreSQL restarted, a network cut), not refused.
      const direct = new URL(await recordUrlFor(redisUrl));
      const sockets = new Set<Socket>();
      let holding = false;
      const proxy = createServer((inbound) => {
        const outbound = connect(Number(direct.port || 5432), direct.hostname);
        for (const socket of [inbound, outbound]) {
          sockets.add(socket);
          socket.on('error', () => undefined);
          socket.on('close', () => sockets.delete(socket));
        }
        inbound.on('data', (chunk) => void (holding || outbound.write(chunk)));
        outbound.pipe(inbound);
        inbound.on('close', () => outbound.destroy());
        outbound.on('close', () => inbound.destroy());
      });
      await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
      try {
        const proxied = new URL(direct);
        proxied.host = `127.0.0.1:${(proxy.address() as { port: number }).port}`;
        const proc = await spawnGateway('api', { REDIS_URL: redisUrl, DATABASE_URL: proxied.toString() });
        spawned.push(proc);
        const gateway = follow(proc);
        await waitFor(() => gateway.url() !== undefined, 60_000, 'the api to listen');
        const url = gateway.url()!;
        const { key } = await createKey(redis, 'record-cut');
        assert.equal((await fetch(`${url}/v1/batches`, { headers: { authorization: `Bearer ${key}` } })).status, 200);

        holding = true;
        const answer = fetch(`${url}/v1/batches`, { headers: { authorization: `Bearer ${key}` } });
        await new Promise((resolve) => setTimeout(resolve, 300));
        for (const socket of sockets) socket.destroy();
        holding = false;
        const cut = await answer;
        const body = (await cut.json()) as { error?: { code: string } };
        assert.equal(cut.status, 503, JSON.stringify(body));
        assert.equal(body.error?.code, 'record_unavailable');
        assert.equal(cut.headers.get('retry-after'), '2');
        // The next statement takes a new connection.
        assert.equal((await fetch(`${url}/v1/batches`, { headers: { authorization: `Bearer ${key}` } })).status, 200);
      } finally {
        proxy.close();
        for (const socket of sockets) socket.destroy();
      }
    },
  );
});
