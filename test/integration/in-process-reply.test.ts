import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { defaultAccountId } from '../../shared/accounts.js';
import { readKeySpend } from '../../shared/money/billing.js';
import { keyPrefix } from '../../shared/redis-keys.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * Where the api and the worker that ran a job share one process (`npm start`), the worker hands the reply to the api
 * in memory (shared/reply.ts `repliesHeldHere`): nothing crosses the api's reply channel, while the job is still
 * added, finished and kept by BullMQ and the request billed and recorded. With the workers in a process of their own,
 * the same requests are answered through Redis pub/sub.
 */

describe('replies handed over in memory when the api and the worker share a process', () => {
  let redis: Redis;
  let url: string;
  let listener: Redis;
  let key: { id: string; key: string };
  const heard: string[] = [];
  const started: GatewayProcess[] = [];

  before(async () => {
    const fresh = await freshRedis(14);
    redis = fresh.redis;
    url = fresh.url;
    key = await createKey(redis);
    listener = new Redis(url);
    listener.on('pmessage', (_pattern: string, channel: string) => heard.push(channel));
    await listener.psubscribe(`${keyPrefix}reply:*`);
  });

  after(async () => {
    await Promise.all(started.map((gateway) => gateway.stop('SIGKILL')));
    listener?.disconnect();
    redis?.disconnect();
  });

  /** A plain and a streamed chat, answered in full: the request ids. */
  async function chats(gateway: GatewayProcess): Promise<string[]> {
    const client = gateway.client(key.key);
    const plain = await client.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'one plain' }] })
      .withResponse();
    assert.match(plain.data.choices[0]!.message.content ?? '', /one plain/);
    const stream = await client.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'one streamed' }], stream: true })
      .withResponse();
    let text = '';
    for await (const chunk of stream.data) text += chunk.choices[0]?.delta?.content ?? '';
    assert.match(text, /one streamed/);
    return [plain.response.headers.get('x-request-id')!, stream.response.headers.get('x-request-id')!];
  }

  it('in one process: answered without a message on any reply channel, the jobs finished in BullMQ and billed', async () => {
    const gateway = await startGateway({ env: { REDIS_URL: url } });
    started.push(gateway);
    const spentBefore = (await readKeySpend(redis, defaultAccountId, key.id))?.spentMicros ?? 0;
    const ids = await chats(gateway);
    for (const id of ids) {
      assert.ok(id, 'each answer names its request');
      await waitFor(
        async () => (await redis.zscore('bull:{chat}:completed', id)) !== null,
        5000,
        `job ${id} completed in BullMQ`,
      );
    }
    assert.ok(((await readKeySpend(redis, defaultAccountId, key.id))?.spentMicros ?? 0) > spentBefore, 'both billed');
    assert.deepEqual(heard, [], 'no reply crossed Redis pub/sub');
    await gateway.stop('SIGTERM');
  });

  it('with the workers in their own process: the same requests answered through the reply channel', async () => {
    const gateway = await startGateway({ env: { REDIS_URL: url, WORKER_PROCESS: 'on' } });
    started.push(gateway);
    await waitFor(
      () => gateway.logs.some((line) => line.includes('workers started')),
      20_000,
      'the worker process to start',
    );
    const ids = await chats(gateway);
    for (const id of ids)
      await waitFor(
        async () => (await redis.zscore('bull:{chat}:completed', id)) !== null,
        5000,
        `job ${id} completed in BullMQ`,
      );
    assert.ok(heard.length >= 2, `the replies crossed pub/sub (${heard.length} messages)`);
  });
});
