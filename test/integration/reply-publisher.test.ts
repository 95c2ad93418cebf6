/*
 * The worker's reply publisher against a real Redis: every batch is published
 * live, while the replay log is appended at most every replayLogIntervalMs
 * (the first batch at once), and what the log holds, read back as the api
 * reads it after a gap, is every chunk exactly once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { replayStreamKey } from '../../shared/redis-keys.js';
import { createRedis } from '../../shared/redis.js';
import {
  decodeReply,
  framesAfterBatch,
  parseLogEntry,
  replayLogIntervalMs,
  type LogEntry,
} from '../../shared/reply.js';
import { ReplyPublisher } from '../../workers/reply-publisher.js';
import { startPrivateRedis, type PrivateRedis } from '../support/redis-server.js';

describe('reply publisher and its replay log', () => {
  let server: PrivateRedis;
  let redis: Redis;
  let subscriber: Redis;
  const heard = new Map<string, string[]>();

  before(async () => {
    server = await startPrivateRedis({ aof: false });
    redis = createRedis(server.url);
    subscriber = new Redis(server.url);
    subscriber.on('message', (channel: string, message: string) => {
      const list = heard.get(channel) ?? [];
      list.push(message);
      heard.set(channel, list);
    });
  });

  after(async () => {
    redis?.disconnect();
    subscriber?.disconnect();
    await server?.remove();
  });

  const frame = (n: number) => `id: ${n}\ndata: {"n":${n}}\n\n`;
  const log = async (jobId: string): Promise<LogEntry[]> =>
    (await redis.xrange(replayStreamKey(jobId), '-', '+')).map(([id, fields]) => parseLogEntry(id, fields));
  /** The chunks the log gives a reader that has seen batches up to `afterSeq`, as the api's gap filler takes them. */
  const replayAfter = (entries: LogEntry[], afterSeq: number) => {
    let seen = afterSeq;
    let text = '';
    for (const entry of entries.filter((e) => e.end === undefined)) {
      if (entry.seq <= seen) continue;
      text += framesAfterBatch(entry, seen);
      seen = entry.seq;
    }
    return text;
  };

  it('publishes every batch at once and logs them in fewer entries, the first at once, all of them by the end', async () => {
    const channel = 'replies:test-1';
    await subscriber.subscribe(channel);
    const publisher = new ReplyPublisher(redis, channel, 'job-1', { stream: true, owner: 'key_1' });
    const batches = 30;
    const started = Date.now();
    for (let n = 0; n < batches; n++) {
      publisher.chunk(frame(n), 1);
      // A batch per turn of the loop, 10 ms apart: a model's pace.
      await sleep(10);
      if (n === 0) {
        await sleep(20);
        const first = await log('job-1');
        assert.equal(first.length, 1, 'the first batch is logged as it is published');
        assert.equal(first[0]!.owner, 'key_1');
      }
    }
    const elapsed = Date.now() - started;
    await publisher.endStream('data: [DONE]\n\n');
    // Pub/sub delivers to the subscriber on its own connection: wait for the end to arrive there.
    for (let waited = 0; !(heard.get(channel) ?? []).some((m) => m.startsWith('done ')) && waited < 5000; waited += 10)
      await sleep(10);
    const messages = (heard.get(channel) ?? []).map((m) => decodeReply(m)!);
    const chunks = messages.filter((m) => m.kind === 'chunk');
    assert.equal(chunks.length, batches, 'one live message per batch');
    assert.deepEqual(
      chunks.map((m) => m.seq),
      Array.from({ length: batches }, (_, i) => i + 1),
    );
    assert.equal(messages.at(-1)!.kind, 'done');

    const entries = await log('job-1');
    const logged = entries.filter((e) => e.end === undefined);
    // The first batch, then at most one entry per interval, and the rest with the end: 30 batches over about 300 ms
    // make about five entries (more only on a machine so slow that the batches themselves are an interval apart).
    assert.ok(
      logged.length <= 2 + Math.ceil(elapsed / replayLogIntervalMs),
      `${logged.length} entries for ${batches} batches in ${elapsed} ms`,
    );
    assert.equal(entries.at(-1)!.end, 'done');
    const all = Array.from({ length: batches }, (_, n) => frame(n)).join('');
    assert.equal(replayAfter(entries, 0), all, 'the log holds every frame once, in order');
    // A reader that saw up to any batch gets exactly the rest, whether that batch starts an entry or lies inside one.
    for (let seen = 1; seen < batches; seen++) {
      assert.equal(
        replayAfter(entries, seen),
        Array.from({ length: batches - seen }, (_, i) => frame(seen + i)).join(''),
        `after batch ${seen}`,
      );
    }
    // Entries chain: each starts where the last ended.
    logged.forEach((entry, i) => assert.equal(entry.from, i === 0 ? 1 : logged[i - 1]!.seq + 1));
    assert.ok((await redis.ttl(replayStreamKey('job-1'))) > 0, 'the log expires');
  });

  it('logs the batches of a stream that went quiet within the interval, with no publish to carry them', async () => {
    const publisher = new ReplyPublisher(redis, 'replies:test-2', 'job-2', { stream: true });
    publisher.chunk(frame(0), 1);
    await sleep(1);
    publisher.chunk(frame(1), 1);
    // Nothing more is published: the timer appends the second batch.
    await sleep(replayLogIntervalMs + 100);
    const entries = await log('job-2');
    assert.equal(replayAfter(entries, 0), frame(0) + frame(1));
    assert.equal(entries.at(-1)!.seq, 2);
  });

  it('logs every batch of a stream nobody holds (its readers follow the log live)', async () => {
    const publisher = new ReplyPublisher(redis, 'replies:test-3', 'job-3', { stream: true, logEveryBatch: true });
    for (let n = 0; n < 5; n++) {
      publisher.chunk(frame(n), 1);
      await sleep(5);
    }
    await sleep(10);
    const entries = await log('job-3');
    assert.deepEqual(
      entries.map((e) => e.seq),
      [1, 2, 3, 4, 5],
    );
    await publisher.endStream('data: [DONE]\n\n');
  });
});
