/**
 * The floor of the overhead benchmark: the least any BullMQ-backed gateway
 * must do for one chat completion, in one Node process built only from the
 * project's own dependencies. An HTTP server takes `POST /v1/chat/completions`
 * (any auth, no checks), enqueues `{id, replyTo, body}` on the BullMQ queue
 * `floor`; a BullMQ worker in the same process POSTs the body to the fake
 * upstream (undici, keep-alive) and PUBLISHes the answer on this process's
 * reply channel; one subscriber connection hands each reply to the waiting
 * response. Non-stream: the whole body in one message. Stream (`"stream":true`
 * in the body): each upstream network read as it arrives, unparsed, then an
 * end message. Messages are `id\nkind\npayload` (kind: an HTTP status for a
 * whole body, `c` a stream piece, `e` the end of a stream).
 *
 *   --redis-url=URL     Redis (its database holds the queue)
 *   --fake-url=URL      the fake OpenAI's base URL (with /v1)
 *   --port=N            0 (default): any free port
 *   --concurrency=N     jobs in flight in the worker (default 256, the gateway's chat default)
 *
 * Prints `{"url":"http://127.0.0.1:<port>"}` on stdout when it listens; exits
 * on SIGTERM/SIGINT or when its parent goes away (stdin closes).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { closeWithParent } from './parent-watch.js';
import { redisProtocol } from '../shared/redis.js';

const option = (name: string) => process.argv.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
const redisUrl = option('redis-url') ?? 'redis://127.0.0.1:6379';
const fakeUrl = option('fake-url');
if (!fakeUrl) throw new Error('--fake-url is required');
const port = Number(option('port') ?? 0);
const concurrency = Number(option('concurrency') ?? 256);

interface FloorJob {
  id: string;
  replyTo: string;
  body: string;
}

const replyTo = `floor:reply:${randomUUID()}`;
const isStream = (body: string) => /"stream"\s*:\s*true/.test(body);
// As a gateway has them: the HTTP side's connection, the worker's (which BullMQ duplicates for its blocking reads), a
// subscriber. They speak the gateway's RESP version, so the two are compared on one protocol.
const producer = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const redis = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const subscriber = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const queue = new Queue<FloorJob>('floor', { connection: producer });
const upstream = new Agent({ keepAliveTimeout: 30_000 });

const frame = (id: string, kind: string, payload?: Buffer) => {
  const head = Buffer.from(`${id}\n${kind}\n`);
  return payload ? Buffer.concat([head, payload]) : head;
};

const worker = new Worker<FloorJob>(
  'floor',
  async (job: Job<FloorJob>) => {
    const { id, replyTo: channel, body } = job.data;
    try {
      const answer = await request(`${fakeUrl}/chat/completions`, {
        method: 'POST',
        dispatcher: upstream,
        headers: { authorization: 'Bearer sk-bench', 'content-type': 'application/json' },
        body,
      });
      if (!isStream(body) || answer.statusCode !== 200) {
        const whole = Buffer.from(await answer.body.arrayBuffer());
        await redis.publish(channel, frame(id, String(answer.statusCode), whole));
        return;
      }
      // One connection: the pieces arrive in the order they were published.
      for await (const piece of answer.body) void redis.publish(channel, frame(id, 'c', piece as Buffer));
      await redis.publish(channel, frame(id, 'e'));
    } catch (error) {
      await redis.publish(
        channel,
        frame(id, '502', Buffer.from(JSON.stringify({ error: { message: String(error) } }))),
      );
    }
  },
  { connection: redis, concurrency },
);
worker.on('error', (error) => process.stderr.write(`floor worker: ${error.message}\n`));

const waiting = new Map<string, ServerResponse>();
subscriber.on('messageBuffer', (_channel: Buffer, message: Buffer) => {
  const first = message.indexOf(10);
  const second = message.indexOf(10, first + 1);
  const id = message.toString('latin1', 0, first);
  const kind = message.toString('latin1', first + 1, second);
  const res = waiting.get(id);
  if (!res) return;
  if (kind === 'c') {
    res.write(message.subarray(second + 1));
  } else if (kind === 'e') {
    waiting.delete(id);
    res.end();
  } else {
    waiting.delete(id);
    if (res.headersSent) res.end(message.subarray(second + 1));
    else res.writeHead(Number(kind), { 'content-type': 'application/json' }).end(message.subarray(second + 1));
  }
});
await subscriber.subscribe(replyTo);

const server = createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    req.resume();
    res.writeHead(404).end();
    return;
  }
  const parts: Buffer[] = [];
  req.on('data', (part: Buffer) => parts.push(part));
  req.on('end', () => {
    const body = Buffer.concat(parts).toString('utf8');
    const id = randomUUID();
    if (isStream(body)) res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    waiting.set(id, res);
    res.on('close', () => waiting.delete(id));
    queue
      .add('chat', { id, replyTo, body }, { jobId: id, removeOnComplete: true, removeOnFail: true })
      .catch((error: Error) => {
        waiting.delete(id);
        if (!res.headersSent) res.writeHead(503, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: error.message } }));
      });
  });
});
await worker.waitUntilReady();
await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })}\n`);

closeWithParent(server, () => [
  Promise.allSettled([worker.close(true), queue.close(), upstream.close()]).then(() => {
    for (const connection of [subscriber, producer, redis]) connection.disconnect();
  }),
]);
