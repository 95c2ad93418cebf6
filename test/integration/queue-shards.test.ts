import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import slotOf from 'cluster-key-slot';
import { shardOfJob, shardQueueName } from '../../shared/queues.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

const shards = 3;
const chatShards = Array.from({ length: shards }, (_, shard) => shardQueueName('chat', shard, shards));

describe('queue shard names', () => {
  it('give every shard its own hash tag, its slots a third of the ring apart', () => {
    assert.equal(shardQueueName('chat', 0, 1), '{chat}');
    const names = Array.from({ length: 4 }, (_, shard) => shardQueueName('chat', shard, 4));
    assert.equal(new Set(names).size, 4);
    // One shard in each quarter of the 16384 slots: on four primaries with even ranges, four primaries.
    const quarters = names.map((name) => Math.floor(slotOf(name) / 4096));
    assert.deepEqual([...quarters].sort(), [0, 1, 2, 3]);
    // The same names whoever computes them (api and workers must agree).
    assert.deepEqual(
      names,
      Array.from({ length: 4 }, (_, shard) => shardQueueName('chat', shard, 4)),
    );
  });

  it('spreads job ids evenly over the shards', () => {
    const counts = [0, 0, 0];
    for (let i = 0; i < 3000; i++) counts[shardOfJob(`req_${i.toString(16).padStart(32, '0')}`, 3)]!++;
    for (const count of counts) assert.ok(count > 800 && count < 1200, `uneven spread: ${counts.join(', ')}`);
    assert.equal(shardOfJob('anything', 1), 0);
  });
});

// QUEUE_SHARDS_CHAT=3 on one Redis: the same code path a Cluster runs, with three BullMQ queues for chat.
describe('a capability split into queue shards', () => {
  let api: GatewayProcess;
  let worker: GatewayProcess | undefined;
  let redis: Redis;
  let client: OpenAI;
  let apiKey: string;
  let env: Record<string, string>;

  before(async () => {
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    env = { REDIS_URL: fresh.url, QUEUE_SHARDS_CHAT: String(shards), MOCK_STREAM_DELAY_MS: '2' };
    api = await startGateway({ role: 'api', env });
    client = api.client(apiKey);
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    redis?.disconnect();
  });

  it('queues each job in the shard its id names, and a cancel finds it there', async () => {
    // No worker yet: background responses wait in their shards.
    const queued = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        client.responses.create({ model: 'mock-chat', input: `wait ${i}`, background: true }),
      ),
    );
    for (const response of queued) {
      const home = chatShards[shardOfJob(response.id, shards)]!;
      assert.equal(await redis.exists(`bull:${home}:${response.id}`), 1, `${response.id} is in ${home}`);
      for (const other of chatShards.filter((name) => name !== home))
        assert.equal(await redis.exists(`bull:${other}:${response.id}`), 0);
    }
    const waiting = await Promise.all(chatShards.map((name) => redis.zcard(`bull:${name}:prioritized`)));
    assert.equal(
      waiting.reduce((a, b) => a + b, 0),
      6,
    );

    const cancelled = await client.responses.cancel(queued[0]!.id);
    assert.equal(cancelled.status, 'cancelled');
    const home = chatShards[shardOfJob(queued[0]!.id, shards)]!;
    assert.equal(await redis.exists(`bull:${home}:${queued[0]!.id}`), 0, 'the cancel removed the job from its shard');
  });

  it('serves every shard from one worker process: plain, streamed and async requests all complete', async () => {
    worker = await startGateway({ role: 'worker', env });
    const plain = Array.from({ length: 24 }, (_, i) =>
      client.chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: `plain ${i}` }] }),
    );
    const streamed = Array.from({ length: 6 }, async (_, i) => {
      const stream = await client.chat.completions.create({
        model: 'mock-chat',
        stream: true,
        messages: [{ role: 'user', content: `stream ${i}` }],
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      return text;
    });
    for (const completion of await Promise.all(plain))
      assert.match(completion.choices[0]!.message.content ?? '', /Mock reply to: "plain \d+"/);
    for (const text of await Promise.all(streamed)) assert.match(text, /Mock reply to: "stream \d+"/);

    // Each shard ran some of them (30 ids over 3 shards: an empty shard has odds below 1 in 10^5).
    const completed = await Promise.all(chatShards.map((name) => redis.zcard(`bull:${name}:completed`)));
    for (const [i, count] of completed.entries())
      assert.ok(count > 0, `shard ${chatShards[i]} ran nothing: ${completed.join(', ')}`);

    // The background responses queued before the worker came finish too (the cancelled one stays cancelled).
    const async = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', prefer: 'respond-async' },
      body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'later' }] }),
    });
    assert.equal(async.status, 202);
    const { id } = (await async.json()) as { id: string };
    let status = '';
    await waitFor(
      async () => {
        const poll = (await (
          await fetch(`${api.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${apiKey}` } })
        ).json()) as { status: string };
        status = poll.status;
        return status === 'completed';
      },
      10_000,
      'the async job to complete',
    );
    assert.equal(status, 'completed');
  });

  it('resumes a stream by its id whichever shard ran it', async () => {
    const res = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-chat',
        stream: true,
        messages: [{ role: 'user', content: 'resume me please' }],
      }),
    });
    const whole = await res.text();
    const requestId = res.headers.get('x-request-id')!;
    const replay = await fetch(`${api.url}/v1/chat/completions/${requestId}/stream`, {
      headers: { authorization: `Bearer ${apiKey}`, 'last-event-id': '0' },
    });
    assert.equal(replay.status, 200);
    const replayed = await replay.text();
    assert.ok(replayed.endsWith('data: [DONE]\n\n'));
    // Everything after chunk 0, as the first delivery had it.
    assert.ok(whole.endsWith(replayed.slice(replayed.indexOf('id: 1'))), 'the replay is the tail of the stream');
  });
});
