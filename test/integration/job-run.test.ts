/*
 * workers/job-run.ts on its own: the processor built as workers/worker.ts
 * builds it, run by a BullMQ worker on a real Redis against the fake OpenAI.
 * Jobs are built and reserved for as the api does; each case checks the reply
 * on the api's channel, the job's end in the queue, and the money.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { before, beforeEach, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { buildJob } from '../../api/requests/build-job.js';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig, type Config } from '../../shared/config.js';
import { endpoints } from '../../shared/endpoints.js';
import type { WireError } from '../../shared/errors.js';
import type { GatewayJobData, GatewayJobResult } from '../../shared/jobs.js';
import {
  billingBucket,
  billKey,
  replyChannel,
  settledKey,
  usageStreamKey,
  vendorInflightKey,
} from '../../shared/redis-keys.js';
import { readBill, readKeySpend, reserve } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import type { UsageEntry } from '../../shared/money/usage.js';
import { shardQueueName } from '../../shared/queues.js';
import { createRedis } from '../../shared/redis.js';
import { decodeReply, type ReplyMessage } from '../../shared/reply.js';
import { resolveUrlSecret } from '../../storage/blob-urls.js';
import { createBlobStore } from '../../storage/create-blob-store.js';
import { CancelRegistry } from '../../workers/cancel-registry.js';
import { ChannelRouter } from '../../workers/channel-router.js';
import { createProcessor } from '../../workers/job-run.js';
import { OverrunReport } from '../../workers/overrun-report.js';
import { StartingWorker } from '../../workers/starting-worker.js';
import { VendorSlots } from '../../shared/scheduling/vendor-slots.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import { fetchLoopOptions, listenForSignals } from '../../workers/worker.js';
import { CurrentAccess } from '../../shared/access/index.js';
import { cleanupsAfter } from '../support/cleanups.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT, FAKE_USAGE } from '../support/fake-openai-defaults.js';
import { freshRedis, waitFor } from '../support/gateway.js';

const model = 'gpt-4o-mini';
const vendorKey = 'sk-vendor-job-run-0123456789';
const startBalance = 5_000_000;
const reservedMicros = 50_000;

describe('a job run (workers/job-run.ts) on a real queue', () => {
  const cleanups = cleanupsAfter();
  let fake: FakeOpenAI;
  /** The test's own connection: bills, queue state, replay of what the worker wrote. */
  let redis: Redis;
  let url: string;
  let env: Record<string, string>;
  let config: Config;
  let prices: PriceList;
  let queue: Queue<GatewayJobData, GatewayJobResult>;
  /** The api's side of the reply channels. */
  let subscriber: Redis;
  const heard = new Map<string, ReplyMessage[]>();
  let requests = 0;

  before(async () => {
    fake = await startFakeOpenAI({ apiKey: vendorKey });
    cleanups.defer(() => fake.close());
    ({ redis, url } = await freshRedis(10));
    cleanups.defer(() => redis.disconnect());
    env = {
      REDIS_URL: url,
      OPENAI_API_KEY: vendorKey,
      OPENAI_BASE_URL: fake.url,
      // A cap, so every run takes and gives back a vendor slot (a lease in Redis).
      OPENAI_MAX_CONCURRENCY: '2',
      MOCK_VENDOR: 'off',
      RETRY_BASE_MS: '20',
      BLOB_DIR: cleanups.tempDir('job-run-blobs-'),
    };
    config = loadConfig(env);

    // The worker's deps, as startWorkers makes them (no record writer, metrics or tracing: job-run does not use them).
    const log = pino({ level: 'silent' });
    const workerRedis = createRedis(config.redis, { connectionName: 'worker' });
    const cancelSubscriber = createRedis(config.redis, { connectionName: 'worker-cancel' });
    cleanups.defer(() => workerRedis.disconnect());
    cleanups.defer(() => cancelSubscriber.disconnect());
    const vendorHttp = createVendorHttp(config);
    cleanups.defer(() => vendorHttp.close());
    const cancels = new CancelRegistry();
    const limiter = new VendorSlots(workerRedis, config);
    const access = new CurrentAccess(workerRedis);
    await listenForSignals(cancelSubscriber, cancels, limiter, access);
    const catalog = loadCatalog(config.catalogFile);
    const router = new ChannelRouter(workerRedis, catalog, log, config);
    await router.start();
    cleanups.defer(() => router.stop());
    prices = PriceList.load(catalog, config);
    const processor = createProcessor({
      config,
      redis: workerRedis,
      catalog,
      router,
      limiter,
      cancels,
      log,
      vendorHttp,
      access,
      media: {
        config,
        redis: workerRedis,
        blobs: createBlobStore(config),
        urlSecret: await resolveUrlSecret(workerRedis, config.blobUrlSecret),
      },
      settlement: {
        config,
        redis: workerRedis,
        prices,
        policy: { bufferRecords: config.usageBufferRecords },
        log,
        overruns: new OverrunReport(log),
      },
    });

    const name = shardQueueName('chat', 0, 1);
    const apiRedis = createRedis(config.redis, { connectionName: 'api' });
    cleanups.defer(() => apiRedis.disconnect());
    queue = new Queue(name, { connection: apiRedis });
    cleanups.defer(() => queue.close());
    const worker = new StartingWorker<GatewayJobData, GatewayJobResult>(name, processor, {
      connection: workerRedis,
      ...fetchLoopOptions(config, 4, 0),
    });
    worker.on('error', () => undefined);
    cleanups.defer(() => worker.close());
    await worker.waitUntilReady();

    subscriber = createRedis(config.redis, { connectionName: 'api-replies' });
    cleanups.defer(() => subscriber.disconnect());
    subscriber.on('message', (channel: string, message: string) => {
      const reply = decodeReply(message);
      if (reply) heard.set(channel, [...(heard.get(channel) ?? []), reply]);
    });
  });

  beforeEach(() => fake.reset());

  /**
   * A chat request as the api queues it: an account with a balance and a key, the reservation, the job
   * from `buildJob` (its deadline from `deadlineMs`, the api's REQUEST_DEADLINE_MS_CHAT), the reply channel listened
   * to.
   */
  async function submit(options: { deadlineMs?: number } = {}) {
    const n = ++requests;
    const account = `acct_jobrun_${n}`;
    const keyId = `key_jobrun_${n}`;
    const requestId = `req_jobrun_${n}_${randomBytes(4).toString('hex')}`;
    await redis.hset(billKey(account), {
      id: account,
      reserved: 0,
      balance: startBalance,
      [`${keyId}.spent`]: 0,
      [`${keyId}.reserved`]: 0,
    });
    const replyTo = replyChannel(`jobrun-api-${n}`);
    await subscriber.subscribe(replyTo);
    const apiConfig =
      options.deadlineMs === undefined
        ? config
        : loadConfig({ ...env, REQUEST_DEADLINE_MS_CHAT: String(options.deadlineMs) });
    const payload = endpoints['chat.completions'].schema.parse({
      model,
      messages: [{ role: 'user', content: `hello ${n}` }],
    });
    const plan = buildJob(
      'chat.completions',
      { payload, stream: false },
      { requestId, replyTo, keyId, accountId: account, model, baseUrl: 'http://127.0.0.1' },
      'held',
      apiConfig,
    );
    assert.deepEqual(
      await reserve(
        redis,
        { requestId, keyId, accountId: account, micros: reservedMicros, tokens: 100, deadline: plan.deadline },
        {},
      ),
      { ok: true },
    );
    assert.equal((await readBill(redis, account))?.reservedMicros, reservedMicros);
    await queue.add(plan.data.endpoint, plan.data, plan.options);
    return { id: plan.id, account, keyId, requestId, replyTo };
  }

  type Submitted = Awaited<ReturnType<typeof submit>>;

  /** The job once it ran for the last time (completed, or failed for good), and every reply its channel got. */
  async function outcome({ id, replyTo }: Submitted) {
    await waitFor(
      async () => ['completed', 'failed'].includes(await queue.getJobState(id)),
      15_000,
      `job ${id} to end`,
    );
    // The replies were published before the job ended; a round trip on the subscriber's connection has them all
    // delivered.
    await subscriber.ping();
    const job = (await queue.getJob(id))!;
    return { job, state: await queue.getJobState(id), replies: heard.get(replyTo) ?? [] };
  }

  /** The terminal reply (`done` or `error`): exactly one, and the last. */
  function terminal(replies: readonly ReplyMessage[]): ReplyMessage {
    const ends = replies.filter((r) => r.kind === 'done' || r.kind === 'done-ref' || r.kind === 'error');
    assert.equal(ends.length, 1, `one answer, got ${replies.map((r) => r.kind).join(', ')}`);
    assert.equal(replies.at(-1), ends[0]);
    return ends[0]!;
  }

  /** What the request settled: its usage entries in its bucket's stream, the account's and key's money after. */
  async function money({ account, keyId, requestId }: Submitted) {
    const stream = await redis.xrange(usageStreamKey(billingBucket(account)), '-', '+');
    const entries = stream
      .map(([, fields]) => JSON.parse(fields[1]!) as UsageEntry)
      .filter((entry) => entry.request_id === requestId);
    return {
      entries,
      bill: await readBill(redis, account),
      key: await readKeySpend(redis, account, keyId),
      settledMark: await redis.exists(settledKey(account, requestId)),
    };
  }

  /** The settlement moved money once: reservation gone, `cost` spent from key and balance, one entry. */
  async function settledOnce(submitted: Submitted, cost: number): Promise<UsageEntry> {
    const { entries, bill, key, settledMark } = await money(submitted);
    assert.equal(entries.length, 1, 'one usage entry');
    assert.equal(entries[0]!.cost_micros, cost);
    assert.deepEqual(bill, { balanceMicros: startBalance - cost, reservedMicros: 0, unlimited: false });
    assert.equal(key?.spentMicros, cost);
    assert.equal(key?.reservedMicros, 0);
    assert.equal(settledMark, 1);
    return entries[0]!;
  }

  const vendorError = (
    status: number,
    message: string,
    type: string,
    code: string | null,
    param: string | null = null,
  ) => ({ status, json: { error: { message, type, param, code } } });
  const slotsHeld = () => redis.zcard(vendorInflightKey('openai'));
  const fakeCost = () =>
    prices.costMicros(model, {
      inputTokens: FAKE_USAGE.prompt_tokens,
      cachedTokens: 0,
      outputTokens: FAKE_USAGE.completion_tokens,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    });

  it('answers a plain chat job on its reply channel with the chat.completion, and settles it once', async () => {
    const submitted = await submit();
    const { job, state, replies } = await outcome(submitted);
    assert.equal(state, 'completed');
    const done = terminal(replies);
    assert.equal(done.kind, 'done');
    assert.equal(done.jobId, submitted.id);
    const body = JSON.parse(done.payload) as {
      object: string;
      model: string;
      choices: Array<{ message: { role: string; content: string }; finish_reason: string }>;
      usage: typeof FAKE_USAGE;
    };
    assert.equal(body.object, 'chat.completion');
    assert.equal(body.model, model);
    assert.equal(body.choices[0]!.message.role, 'assistant');
    assert.equal(body.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(body.choices[0]!.finish_reason, 'stop');
    assert.deepEqual(body.usage, FAKE_USAGE);
    assert.deepEqual(job.returnvalue, { body: done.payload }, 'the job keeps what it published');
    assert.equal(job.attemptsMade, 1);

    assert.equal(fake.requests.length, 1);
    assert.equal((fake.requests[0]!.body as { model: string }).model, model);
    assert.equal(fake.requests[0]!.headers.authorization, `Bearer ${vendorKey}`);

    const cost = fakeCost();
    assert.ok(cost > 0);
    const entry = await settledOnce(submitted, cost);
    assert.equal(entry.status, 'completed');
    assert.equal(entry.vendor, 'openai');
    assert.equal(entry.input_tokens, FAKE_USAGE.prompt_tokens);
    assert.equal(entry.output_tokens, FAKE_USAGE.completion_tokens);
    assert.equal(entry.attempts, 1);
    assert.equal(entry.answer_id, 'chatcmpl-fake');
    assert.equal(await slotsHeld(), 0, 'the vendor slot is given back');
  });

  it(
    'fails a job the vendor refuses with a 400 at once: the OpenAI error to the client, settled as failed at no ' +
      'cost',
    async () => {
      fake.enqueue(
        vendorError(400, "Invalid value for 'temperature'.", 'invalid_request_error', 'invalid_value', 'temperature'),
      );
      const submitted = await submit();
      const { job, state, replies } = await outcome(submitted);
      assert.equal(state, 'failed');
      assert.equal(job.attemptsMade, 1, 'no retry');
      assert.equal(fake.requests.length, 1, 'the vendor was called once');
      const reply = terminal(replies);
      assert.equal(reply.kind, 'error');
      const wire = JSON.parse(reply.payload) as WireError;
      assert.equal(wire.status, 400);
      assert.deepEqual(wire.error, {
        message: "Invalid value for 'temperature'.",
        type: 'invalid_request_error',
        param: 'temperature',
        code: 'invalid_value',
      });
      assert.equal(job.failedReason, wire.error.message);

      const entry = await settledOnce(submitted, 0);
      assert.equal(entry.status, 'failed');
      assert.equal(entry.error_code, 'invalid_value');
      // Its message too, for the request log (a batch request's only record of it).
      assert.equal(entry.error_message, wire.error.message);
      assert.equal(entry.vendor, 'openai');
      assert.equal(entry.attempts, 1);
      assert.equal(await slotsHeld(), 0);
    },
  );

  it('retries a job after a vendor 5xx and answers and bills it once, from the attempt that succeeded', async () => {
    fake.enqueue(vendorError(503, 'overloaded', 'server_error', null));
    const submitted = await submit();
    const { job, state, replies } = await outcome(submitted);
    assert.equal(state, 'completed');
    assert.equal(job.attemptsMade, 2, 'the failed attempt, then the one that answered');
    assert.equal(fake.requests.length, 2);
    const done = terminal(replies);
    assert.equal(done.kind, 'done');
    assert.equal(
      (JSON.parse(done.payload) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content,
      FAKE_REPLY_TEXT,
    );

    const entry = await settledOnce(submitted, fakeCost());
    assert.equal(entry.status, 'completed');
    assert.equal(entry.attempts, 2);
    assert.equal(await slotsHeld(), 0);
  });

  it('answers a job that waited in the queue past its deadline with the timeout error, without calling the vendor', async () => {
    // Nothing is taken while the queue is paused: the job waits there past its 200 ms.
    await queue.pause();
    let submitted!: Submitted;
    try {
      submitted = await submit({ deadlineMs: 200 });
      await sleep(400);
    } finally {
      await queue.resume();
    }
    const { job, state, replies } = await outcome(submitted);
    assert.equal(state, 'failed');
    assert.equal(job.attemptsMade, 1);
    assert.equal(fake.requests.length, 0, 'the vendor was never called');
    const reply = terminal(replies);
    assert.equal(reply.kind, 'error');
    const wire = JSON.parse(reply.payload) as WireError;
    assert.equal(wire.status, 504);
    assert.equal(wire.error.code, 'timeout');
    assert.equal(wire.error.type, 'server_error');
    assert.match(wire.error.message, /waited in the queue past its deadline/);

    const entry = await settledOnce(submitted, 0);
    assert.equal(entry.status, 'failed');
    assert.equal(entry.error_code, 'timeout');
    assert.equal(entry.vendor, 'none', 'it reached no vendor');
    assert.equal(entry.channel, undefined);
  });

  it('aborts a vendor call still running at the deadline, answers the timeout error, and does not retry', async () => {
    fake.enqueue({ hang: true });
    const started = Date.now();
    const submitted = await submit({ deadlineMs: 700 });
    const { job, state, replies } = await outcome(submitted);
    assert.equal(state, 'failed');
    assert.ok(Date.now() - started >= 600, 'answered at the deadline, not before');
    assert.equal(job.attemptsMade, 1, 'no retry past the deadline');
    assert.equal(fake.requests.length, 1);
    await waitFor(() => fake.abortedRequests === 1, 5000, 'the vendor call aborted');
    const reply = terminal(replies);
    assert.equal(reply.kind, 'error');
    const wire = JSON.parse(reply.payload) as WireError;
    assert.equal(wire.status, 504);
    assert.equal(wire.error.code, 'timeout');
    assert.match(wire.error.message, /timed out before the model answered/);

    const entry = await settledOnce(submitted, 0);
    assert.equal(entry.status, 'failed');
    assert.equal(entry.error_code, 'timeout');
    assert.equal(entry.vendor, 'openai');
    assert.equal(await slotsHeld(), 0);
  });
});
