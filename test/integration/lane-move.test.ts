import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { fallbackCatalogFile, writeJsonFile } from '../support/fallback-catalog.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import {
  createKey,
  freshRedis,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';

// Item 6 of the fair-share issue: a cap is charged to the vendor actually called. A model's requests wait in its
// first route's lane; when that vendor's channel rests and the worker routes to a fallback on another capped
// vendor, the job moves to that vendor's lane instead of holding its first lane's slot while it waits there.
describe('a fallback to another capped vendor waits in that vendor’s lane', () => {
  let primary: FakeOpenAI;
  let backup: FakeOpenAI;
  let gateway: GatewayProcess;
  let redis: Redis;
  let client: OpenAI;
  let key: string;
  let openaiLane: Queue;
  let spareLane: Queue;

  before(async () => {
    primary = await startFakeOpenAI();
    backup = await startFakeOpenAI({ latencyMs: 700 });
    const fresh = await freshRedis(9);
    redis = fresh.redis;
    const channels = writeJsonFile('channels.json', {
      channels: [
        { vendor: 'openai', baseUrl: primary.url, apiKey: 'sk-primary-key-0000' },
        { vendor: 'spare', protocol: 'openai', baseUrl: backup.url, apiKey: 'sk-spare-key-00000' },
      ],
    });
    const catalog = fallbackCatalogFile();
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        CHANNELS_FILE: channels,
        CATALOG_FILE: catalog,
        RETRY_BASE_MS: '10',
        // Both vendors capped: OpenAI at one call, the spare vendor at two.
        OPENAI_MAX_CONCURRENCY: '1',
        SPARE_MAX_CONCURRENCY: '2',
      },
    });
    key = (await createKey(redis)).key;
    client = gateway.client(key);
    openaiLane = new Queue('{lane@openai}', { connection: redis });
    spareLane = new Queue('{lane@spare}', { connection: redis });
  });

  after(async () => {
    await Promise.allSettled([openaiLane?.close(), spareLane?.close()]);
    await gateway?.stop();
    await Promise.all([primary, backup].map((f) => f?.close()));
    redis?.disconnect();
  });

  it('moves the jobs to the spare vendor’s lane, runs them at its cap, bills each once and leaves no stub', async () => {
    // The primary's credentials are refused: its channel rests, and the request that met it is served by the fallback.
    primary.setDefault(() => ({
      status: 401,
      json: { error: { message: 'revoked', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } },
    }));
    const first = await client.chat.completions.create({
      model: 'house-model',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(first.choices[0]!.message.content, FAKE_REPLY_TEXT);
    await new Promise((r) => setTimeout(r, 1100)); // every worker re-reads cooldowns once a second
    backup.reset();

    // Four at once. In OpenAI's lane (cap 1) they would run one by one; in the spare lane, two at a time.
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 4 }, () =>
        client.chat.completions
          .create({ model: 'house-model', messages: [{ role: 'user', content: 'hi' }] })
          .withResponse(),
      ),
    );
    const elapsed = Date.now() - started;
    for (const { data } of answers) assert.equal(data.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(backup.requests.length, 4, 'the spare vendor served all four, once each');
    assert.equal(backup.maxInFlight, 2, 'the spare vendor’s cap, not OpenAI’s, bounded them');
    assert.ok(elapsed < 4 * 700, `served two at a time (${elapsed} ms for four 700 ms calls)`);

    for (const { response } of answers) {
      const requestId = response.headers.get('x-request-id')!;
      const record = await requestRecord(gateway.url, key, requestId);
      assert.equal(record.status, 'completed');
      assert.equal(record.fallback, 'spare-model');
      assert.match(record.channel ?? '', /^spare:/);
      assert.ok((record.input_tokens ?? 0) > 0, 'settled with its usage');
      // Each is in the spare lane's record of completed jobs, and the stub it left in OpenAI's lane is gone.
      await waitFor(
        async () => (await (await spareLane.getJob(requestId))?.getState()) === 'completed',
        5_000,
        'the moved job completed',
      );
      assert.equal(await openaiLane.getJob(requestId), undefined, 'the stub in the first lane was removed');
    }
    // Settled, each: no reservation is left held.
    let held = 0;
    for (const deadlines of await redis.keys('sy:*resv-deadlines')) held += await redis.zcard(deadlines);
    assert.equal(held, 0, 'no reservation left held');
    // Both lanes' backlogs are back to nothing.
    assert.deepEqual(await openaiLane.getJobCounts('wait', 'prioritized', 'active', 'delayed'), {
      wait: 0,
      prioritized: 0,
      active: 0,
      delayed: 0,
    });
    assert.deepEqual(await spareLane.getJobCounts('wait', 'prioritized', 'active', 'delayed'), {
      wait: 0,
      prioritized: 0,
      active: 0,
      delayed: 0,
    });
  });

  it(
    'a held client follows its job to the other lane: a call that outlasts the api’s liveness sweep is still ' +
      'answered',
    async () => {
      // The stub left in OpenAI's lane completes, then goes: the api's sweep (every 5 s) sees both while this call runs.
      backup.enqueue({ delayMs: 7000 });
      const { data, response } = await client.chat.completions
        .create({ model: 'house-model', messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
      assert.equal(data.choices[0]!.message.content, FAKE_REPLY_TEXT);
      const requestId = response.headers.get('x-request-id')!;
      // The answer goes out beside the job's bill: BullMQ records the job completed a moment after the client has it.
      await waitFor(
        async () => (await (await spareLane.getJob(requestId))?.getState()) === 'completed',
        5_000,
        'the moved job completed',
      );
      assert.equal(await openaiLane.getJob(requestId), undefined);
    },
  );

  it('a background response moved to the other lane is still found, read and completed under its id', async () => {
    const created = await client.responses.create({ model: 'house-model', input: 'hello', background: true });
    let latest = created;
    for (let i = 0; i < 50 && (latest.status === 'queued' || latest.status === 'in_progress'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      latest = await client.responses.retrieve(created.id);
    }
    assert.equal(latest.status, 'completed');
    assert.equal(latest.output_text, FAKE_REPLY_TEXT);
    await waitFor(
      async () => (await (await spareLane.getJob(created.id))?.getState()) === 'completed',
      5_000,
      'the moved job completed',
    );
    assert.equal(await openaiLane.getJob(created.id), undefined);
  });
});
