import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import Koa from 'koa';
import pino from 'pino';
import { envelope } from '../../api/http/envelope.js';
import { holdForReply } from '../../api/relay/hold-for-reply.js';
import { ReplyHub } from '../../api/relay/reply-hub.js';
import { loadConfig } from '../../shared/config.js';
import { QueueShards } from '../../shared/queue-shards.js';
import type { QueueName } from '../../shared/queues.js';
import { replyChannel } from '../../shared/redis-keys.js';
import { ReplyPublisher } from '../../workers/reply-publisher.js';
import { freshRedis } from '../support/gateway.js';

/**
 * The api's hold (`api/relay/hold-for-reply.ts`): a client held open for its queued job's answer, on a real Redis and a
 * real BullMQ queue, answered by the worker's own publisher. No worker runs: the tests publish as one would.
 */

let redis: Redis;
let subscriber: Redis;
let hub: ReplyHub;
let queue: Queue;
let server: Server;
let base: string;
const config = loadConfig({});
const log = pino({ level: 'silent' });
const abandoned: string[] = [];
const frame = (n: number) => `data: {"n":${n}}\n\n`;

before(async () => {
  let url: string;
  ({ redis, url } = await freshRedis(3));
  subscriber = new Redis(url);
  hub = new ReplyHub(subscriber, redis, replyChannel('hold-test'), log, 0);
  await hub.start();
  queue = new Queue('hold-test', { connection: redis });
  const app = new Koa();
  // The gateway's own envelope: a refusal is answered as OpenAI's error body.
  app.use(envelope(log, { arrived: () => undefined, failed: () => undefined }));
  app.use(async (ctx) => {
    const jobId = String(ctx.query.job);
    const stream = ctx.query.stream === '1';
    const expected = hub.expect(jobId, stream);
    try {
      await queue.add('chat.completions', { requestId: jobId }, { jobId });
      // A worker that answers before the api holds the client: what it published waits in the expected reply.
      if (ctx.query.early === '1') {
        await new ReplyPublisher(redis, hub.channel, jobId, { stream: false }).done('{"early":true}');
        await sleep(100);
      }
      await holdForReply(
        ctx,
        { config, redis, hub, queues: new QueueShards(redis, {} as Record<QueueName, number>, [], []) },
        expected,
        queue,
        {
          stream,
          deadline: Date.now() + Number(ctx.query.ms ?? 10_000),
          notes: { firstChunk: () => undefined, failed: () => undefined },
          abandon: () => abandoned.push(jobId),
        },
      );
    } finally {
      expected.release();
    }
  });
  server = createServer(app.callback()).listen(0, '127.0.0.1');
  await once(server, 'listening');
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  server.closeAllConnections();
  server.close();
  await queue.close();
  hub.stop();
  subscriber.disconnect();
  redis.disconnect();
});

/** Waits until the api holds the job's client (its reply is expected), so what is published next is heard. */
async function held(jobId: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await queue.getJob(jobId)) && hub.size > 0) return;
    await sleep(10);
  }
  assert.fail(`job ${jobId} was never held`);
}

describe('hold', () => {
  it("answers a plain request with its job's body", async () => {
    const answer = fetch(`${base}/?job=plain`);
    await held('plain');
    await new ReplyPublisher(redis, hub.channel, 'plain', { stream: false }).done(
      '{"id":"chatcmpl-1","object":"chat.completion"}',
    );
    const response = await answer;
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { id: 'chatcmpl-1', object: 'chat.completion' });
  });

  it('keeps an answer published before the client was held, and writes it once held', async () => {
    const response = await fetch(`${base}/?job=early&early=1`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { early: true });
  });

  it("relays a stream's chunks as server-sent events, in order, then its end", async () => {
    const answer = fetch(`${base}/?job=streamed&stream=1`);
    await held('streamed');
    const publisher = new ReplyPublisher(redis, hub.channel, 'streamed', { stream: true });
    for (let n = 0; n < 3; n++) {
      publisher.chunk(frame(n), 1);
      await sleep(5);
    }
    await publisher.endStream('data: [DONE]\n\n');
    const response = await answer;
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/);
    const text = await response.text();
    assert.equal(text.replace(/^:.*\n\n/gm, ''), `${frame(0)}${frame(1)}${frame(2)}data: [DONE]\n\n`);
  });

  it('answers 504 when nothing answers before the deadline, and takes back the job that never ran', async () => {
    const response = await fetch(`${base}/?job=late&ms=300`);
    assert.equal(response.status, 504);
    const body = (await response.json()) as { error: { code: string } };
    assert.equal(body.error.code, 'timeout');
    for (let i = 0; i < 200 && !abandoned.includes('late'); i++) await sleep(10);
    assert.ok(abandoned.includes('late'));
    assert.equal(await queue.getJob('late'), undefined);
  });

  it('removes a waiting job whose client left, and gives back what it took', async () => {
    const controller = new AbortController();
    const answer = fetch(`${base}/?job=left`, { signal: controller.signal }).catch(() => undefined);
    await held('left');
    controller.abort();
    await answer;
    for (let i = 0; i < 200 && !abandoned.includes('left'); i++) await sleep(10);
    assert.ok(abandoned.includes('left'));
    assert.equal(await queue.getJob('left'), undefined, 'the job that never ran is gone');
  });
});
