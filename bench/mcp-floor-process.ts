/**
 * The floor of the MCP benchmark (bench/mcp.ts): the least a gateway that runs every `tools/call` as a BullMQ job
 * must do, in one Node process built only from the project's own dependencies. An HTTP server answers MCP's
 * Streamable HTTP in JSON (`initialize`, notifications, `ping`; no key, no checks); a `tools/call` is enqueued as
 * `{id, replyTo, name, arguments}` on the BullMQ queue `mcp-floor`; a BullMQ worker in the same process calls the tool
 * on the upstream with the official MCP client (one connection, as the gateway's workers keep one) and PUBLISHes the
 * JSON-RPC result on this process's reply channel; one subscriber hands each to the waiting response.
 *
 *   --redis-url=URL        Redis (its database holds the queue)
 *   --upstream-url=URL     the upstream MCP server's endpoint
 *   --upstream-token=T     sent to it as `Authorization: Bearer T`
 *
 * Prints `{"url":"http://127.0.0.1:<port>/mcp"}` on stdout when it listens; exits on SIGTERM/SIGINT or when its
 * parent goes away (stdin closes).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { closeWithParent } from './parent-watch.js';
import { redisProtocol } from '../shared/redis.js';

const option = (name: string) => process.argv.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
const redisUrl = option('redis-url') ?? 'redis://127.0.0.1:6379';
const upstreamUrl = option('upstream-url');
if (!upstreamUrl) throw new Error('--upstream-url is required');
const upstreamToken = option('upstream-token') ?? '';

interface FloorCall {
  id: string;
  replyTo: string;
  rpcId: string | number;
  name: string;
  arguments: Record<string, unknown>;
}

const replyTo = `mcp-floor:reply:${randomUUID()}`;
const producer = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const redis = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const subscriber = new Redis(redisUrl, { maxRetriesPerRequest: null, protocol: redisProtocol });
const queue = new Queue<FloorCall>('mcp-floor', { connection: producer });
const upstream = new Client({ name: 'mcp-floor', version: '1' });
await upstream.connect(
  new StreamableHTTPClientTransport(new URL(upstreamUrl), {
    requestInit: { headers: { authorization: `Bearer ${upstreamToken}` } },
  }),
);

const worker = new Worker<FloorCall>(
  'mcp-floor',
  async (job: Job<FloorCall>) => {
    const { id, replyTo: channel, rpcId, name, arguments: args } = job.data;
    try {
      const result = await upstream.callTool({ name, arguments: args });
      await redis.publish(channel, `${id}\n${JSON.stringify({ jsonrpc: '2.0', id: rpcId, result })}`);
    } catch (error) {
      await redis.publish(
        channel,
        `${id}\n${JSON.stringify({ jsonrpc: '2.0', id: rpcId, error: { code: -32603, message: String(error) } })}`,
      );
    }
  },
  { connection: redis, concurrency: 256 },
);
worker.on('error', (error) => process.stderr.write(`mcp floor worker: ${error.message}\n`));

const waiting = new Map<string, ServerResponse>();
subscriber.on('message', (_channel: string, message: string) => {
  const cut = message.indexOf('\n');
  const id = message.slice(0, cut);
  const res = waiting.get(id);
  if (!res) return;
  waiting.delete(id);
  res.writeHead(200, { 'content-type': 'application/json' }).end(message.slice(cut + 1));
});
await subscriber.subscribe(replyTo);

const json = (res: ServerResponse, body: unknown, headers: Record<string, string> = {}) =>
  res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));

const server = createServer((req, res) => {
  if (req.url !== '/mcp' || req.method !== 'POST') {
    req.resume();
    res.writeHead(req.method === 'DELETE' ? 200 : 405).end();
    return;
  }
  const parts: Buffer[] = [];
  req.on('data', (part: Buffer) => parts.push(part));
  req.on('end', () => {
    const message = JSON.parse(Buffer.concat(parts).toString('utf8')) as {
      id?: string | number;
      method: string;
      params?: Record<string, unknown>;
    };
    if (message.id === undefined) {
      res.writeHead(202).end();
      return;
    }
    if (message.method === 'initialize') {
      const protocolVersion = String(message.params?.protocolVersion ?? '2025-06-18');
      json(
        res,
        {
          jsonrpc: '2.0',
          id: message.id,
          result: { protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'mcp-floor', version: '1' } },
        },
        { 'mcp-session-id': randomUUID() },
      );
      return;
    }
    if (message.method !== 'tools/call') {
      json(res, { jsonrpc: '2.0', id: message.id, result: message.method === 'tools/list' ? { tools: [] } : {} });
      return;
    }
    const id = randomUUID();
    waiting.set(id, res);
    res.on('close', () => waiting.delete(id));
    const params = message.params as { name: string; arguments?: Record<string, unknown> };
    queue
      .add(
        'call',
        { id, replyTo, rpcId: message.id, name: params.name, arguments: params.arguments ?? {} },
        { jobId: id, removeOnComplete: true, removeOnFail: true },
      )
      .catch((error: Error) => {
        waiting.delete(id);
        json(res, { jsonrpc: '2.0', id: message.id, error: { code: -32603, message: error.message } });
      });
  });
});
await worker.waitUntilReady();
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp` })}\n`);

closeWithParent(server, () => [
  Promise.allSettled([worker.close(true), queue.close(), upstream.close()]).then(() => {
    for (const connection of [subscriber, producer, redis]) connection.disconnect();
  }),
]);
