import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type OpenAI from 'openai';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { startOtlpCollector, type CollectedSpan, type OtlpCollector } from '../support/otlp-collector.js';

/**
 * Tracing for real, across processes: the gateway runs as an api process and
 * a worker process, each exporting over OTLP/HTTP to a collector started
 * here; one request's spans from both must form one tree under the client's
 * own span (its `traceparent`).
 */

const SERVER = 2;
const CLIENT = 3;
const CONSUMER = 5;
const ERROR = 2;

const vendorKey = 'sk-tracing-vendor-key-0123456789';

/** How far apart two spans' clocks may read for one instant (see the timing checks below). */
const CLOCK_GRAIN_NS = 2_000_000n;

/** The spans of one chat request served at the first attempt, each once. */
const oneChatRequest = {
  'POST /v1/chat/completions': 1,
  admission: 1,
  relay: 1,
  'queue wait': 1,
  'process chat': 1,
  'vendor attempt': 1,
};

/** A client span of our own: the `traceparent` the gateway must continue. */
function clientSpan(sampled = true) {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${sampled ? '01' : '00'}` };
}

const named = (spans: CollectedSpan[], name: string) => spans.filter((span) => span.name === name);
const one = (spans: CollectedSpan[], name: string) => {
  const found = named(spans, name);
  assert.equal(found.length, 1, `one "${name}" span, got ${found.length}: ${spans.map((s) => s.name).join(', ')}`);
  return found[0]!;
};

/**
 * The spans of a trace form one tree: unique ids, every parent present but
 * the root's, and the root's parent is the client's span.
 */
function assertOneTree(spans: CollectedSpan[], client: { traceId: string; spanId: string }): CollectedSpan {
  for (const span of spans) assert.equal(span.traceId, client.traceId);
  const ids = new Set(spans.map((span) => span.spanId));
  assert.equal(ids.size, spans.length, 'span ids are unique');
  const roots = spans.filter((span) => !ids.has(span.parentSpanId));
  assert.equal(roots.length, 1, `one root, got ${roots.map((s) => `${s.name} (parent ${s.parentSpanId})`).join(', ')}`);
  const root = roots[0]!;
  assert.equal(root.parentSpanId, client.spanId, "the root is the client's span's child");
  assert.equal(root.kind, SERVER);
  return root;
}

/** Waits until the trace holds at least these spans (by name and count). */
async function traceWith(
  collector: OtlpCollector,
  traceId: string,
  wanted: Record<string, number>,
): Promise<CollectedSpan[]> {
  const complete = () => {
    const spans = collector.trace(traceId);
    return Object.entries(wanted).every(([name, count]) => named(spans, name).length >= count);
  };
  await waitFor(
    complete,
    10_000,
    `spans ${JSON.stringify(wanted)} of trace ${traceId} (have: ${collector
      .trace(traceId)
      .map((s) => s.name)
      .join(', ')})`,
  ).catch((error: Error) => {
    throw new Error(
      `${error.message}; collected: ${
        collector
          .trace(traceId)
          .map((s) => `${s.service}/${s.name}`)
          .join(', ') || 'nothing'
      }`,
    );
  });
  // Anything of the trace still on its way (it should not be: the counts are exact below).
  await new Promise((r) => setTimeout(r, 300));
  return collector.trace(traceId);
}

const ask = (client: OpenAI, traceparent: string) =>
  client.chat.completions.create(
    { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] },
    { headers: { traceparent } },
  );

describe('tracing across the api and worker processes', () => {
  let fake: FakeOpenAI;
  let collector: OtlpCollector;
  let redis: Redis;
  let api: GatewayProcess;
  let worker: GatewayProcess;
  let client: OpenAI;
  let apiKey: string;

  before(async () => {
    [fake, collector] = await Promise.all([startFakeOpenAI(), startOtlpCollector()]);
    const fresh = await freshRedis(4);
    redis = fresh.redis;
    const env = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: vendorKey,
      OPENAI_BASE_URL: fake.url,
      RETRY_BASE_MS: '10',
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_BSP_SCHEDULE_DELAY: '50',
    };
    [api, worker] = await Promise.all([startGateway({ role: 'api', env }), startGateway({ role: 'worker', env })]);
    apiKey = (await createKey(redis)).key;
    client = api.client(apiKey);
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await Promise.all([fake?.close(), collector?.close()]);
    redis?.disconnect();
  });

  it('a plain request: spans of both processes form one tree under the client span', async () => {
    const span = clientSpan();
    const completion = await ask(client, span.traceparent);
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);

    const spans = await traceWith(collector, span.traceId, oneChatRequest);
    assert.equal(spans.length, 6, spans.map((s) => s.name).join(', '));
    const root = assertOneTree(spans, span);
    assert.equal(root.name, 'POST /v1/chat/completions');
    assert.equal(root.service, 'switchyard-api');
    assert.equal(root.attributes['http.route'], '/v1/chat/completions');
    assert.equal(root.attributes['http.request.method'], 'POST');
    assert.equal(root.attributes['http.response.status_code'], 200);
    assert.match(String(root.attributes['switchyard.request_id']), /^req_/);

    const admission = one(spans, 'admission');
    const relay = one(spans, 'relay');
    const waited = one(spans, 'queue wait');
    const processed = one(spans, 'process chat');
    const attempt = one(spans, 'vendor attempt');
    for (const child of [admission, relay, waited, processed])
      assert.equal(child.parentSpanId, root.spanId, `${child.name} is the request's child`);
    assert.equal(attempt.parentSpanId, processed.spanId, 'the vendor attempt runs inside the processing');
    assert.deepEqual(
      [admission, relay].map((s) => s.service),
      ['switchyard-api', 'switchyard-api'],
    );
    assert.deepEqual(
      [waited, processed, attempt].map((s) => s.service),
      ['switchyard-worker', 'switchyard-worker', 'switchyard-worker'],
    );

    assert.equal(admission.attributes['switchyard.endpoint'], 'chat.completions');
    assert.equal(admission.attributes['switchyard.model'], 'gpt-4o-mini');
    assert.equal(admission.attributes['switchyard.mode'], 'held');
    assert.equal(processed.kind, CONSUMER);
    assert.equal(processed.attributes['switchyard.outcome'], 'completed');
    assert.equal(processed.attributes['switchyard.attempt'], 1);
    assert.equal(attempt.kind, CLIENT);
    assert.equal(attempt.attributes['switchyard.vendor'], 'openai');
    assert.match(String(attempt.attributes['switchyard.channel.id']), /^openai:[0-9a-f]{12}$/);
    assert.equal(attempt.attributes['gen_ai.request.model'], 'gpt-4o-mini');
    // What the call was billed for, as the GenAI conventions name it: the vendor's usage, cached tokens included.
    assert.equal(attempt.attributes['gen_ai.usage.input_tokens'], completion.usage!.prompt_tokens);
    assert.equal(attempt.attributes['gen_ai.usage.output_tokens'], completion.usage!.completion_tokens);
    assert.equal(
      attempt.attributes['gen_ai.usage.cache_read.input_tokens'],
      completion.usage!.prompt_tokens_details?.cached_tokens ?? 0,
    );
    assert.equal(attempt.attributes['gen_ai.usage.cache_creation.input_tokens'], 0);
    assert.ok(Number(attempt.attributes['switchyard.cost_micros']) > 0, 'the call cost something');
    assert.equal(
      attempt.attributes['switchyard.prompt_cache.saved_micros'],
      0,
      'nothing read from the vendor cache, nothing saved',
    );
    assert.equal(attempt.attributes['switchyard.attempt'], 1);
    assert.equal(attempt.attributes['switchyard.outcome'], 'ok');
    assert.equal(attempt.attributes['server.address'], new URL(fake.url).host);
    assert.ok(Number(relay.attributes['switchyard.replies']) >= 1);

    // In time, only what causality fixes (a loaded machine can delay any process between two steps): admitted,
    // waiting in the queue from the enqueue, processed; the relay holds the client until the vendor's answer is in.
    // A worker may take (even finish) the job before the api has read the enqueue's reply, so admission may
    // overlap the queue wait and the run. Span times are the wall clock at the span's start (to the millisecond)
    // plus a monotonic duration, so two spans' instants compare within a clock grain.
    const before = (a: bigint, b: bigint) => a <= b + CLOCK_GRAIN_NS;
    const times = () =>
      spans
        .map((s) => `${s.name} ${Number(s.startNs - root.startNs) / 1e6}..${Number(s.endNs - root.startNs) / 1e6} ms`)
        .join('; ');
    const inOrder = (a: bigint, b: bigint, what: string) => assert.ok(before(a, b), `${what} (${times()})`);
    inOrder(root.startNs, admission.startNs, 'the admission starts within the request');
    inOrder(admission.endNs, relay.endNs, 'admission ends before the relay does');
    inOrder(admission.startNs, waited.startNs, 'the job is enqueued during admission');
    inOrder(waited.startNs, admission.endNs, 'the job waits from its enqueue, within admission');
    assert.equal(waited.endNs, processed.startNs, `the queue wait ends as the run starts (${times()})`);
    inOrder(processed.startNs, attempt.startNs, 'the vendor attempt starts inside the run');
    inOrder(attempt.endNs, processed.endNs, 'the vendor attempt ends inside the run');
    inOrder(relay.endNs, root.endNs, 'the relay ends within the request');
    inOrder(attempt.endNs, relay.endNs, 'the relay lasts until the vendor has answered');

    // No secret reaches the traces, and the vendor saw no trace context.
    assert.ok(!JSON.stringify(collector.spans.map((s) => s.attributes)).includes(vendorKey));
    assert.ok(!JSON.stringify(collector.spans.map((s) => s.attributes)).includes(apiKey));
    assert.equal(fake.requests.at(-1)!.headers.traceparent, undefined);
  });

  it('a stream: the relay span carries the stream to the end, in the same tree', async () => {
    const span = clientSpan();
    const stream = await client.chat.completions.create(
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true },
      { headers: { traceparent: span.traceparent } },
    );
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, FAKE_REPLY_TEXT);

    const spans = await traceWith(collector, span.traceId, oneChatRequest);
    assert.equal(spans.length, 6, spans.map((s) => s.name).join(', '));
    const root = assertOneTree(spans, span);
    const relay = one(spans, 'relay');
    assert.equal(relay.parentSpanId, root.spanId);
    assert.equal(relay.attributes['switchyard.stream'], true);
    assert.ok(
      Number(relay.attributes['switchyard.replies']) >= 2,
      `a stream is relayed in several messages: ${relay.attributes['switchyard.replies']}`,
    );
    assert.equal(one(spans, 'admission').attributes['switchyard.stream'], true);
    assert.equal(one(spans, 'vendor attempt').parentSpanId, one(spans, 'process chat').spanId);
  });

  it('a vendor 500 then 200: two runs of the job, two vendor attempts, the first in error', async () => {
    fake.enqueue({ status: 500, json: { error: { message: 'boom', type: 'server_error', param: null, code: null } } });
    const span = clientSpan();
    const completion = await ask(client, span.traceparent);
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);

    const spans = await traceWith(collector, span.traceId, {
      'POST /v1/chat/completions': 1,
      relay: 1,
      'process chat': 2,
      'vendor attempt': 2,
    });
    const root = assertOneTree(spans, span);
    assert.equal(named(spans, 'queue wait').length, 1, 'the enqueue is waited for once');
    const runs = named(spans, 'process chat').sort(
      (a, b) => Number(a.attributes['switchyard.attempt']) - Number(b.attributes['switchyard.attempt']),
    );
    assert.deepEqual(
      runs.map((s) => s.attributes['switchyard.attempt']),
      [1, 2],
    );
    assert.deepEqual(
      runs.map((s) => s.attributes['switchyard.outcome']),
      ['retry', 'completed'],
    );
    assert.equal(runs[0]!.status, ERROR);
    for (const run of runs) assert.equal(run.parentSpanId, root.spanId);

    const attempts = named(spans, 'vendor attempt').sort(
      (a, b) => Number(a.attributes['switchyard.attempt']) - Number(b.attributes['switchyard.attempt']),
    );
    assert.deepEqual(
      attempts.map((s) => s.attributes['switchyard.attempt']),
      [1, 2],
    );
    assert.deepEqual(
      attempts.map((s) => s.parentSpanId),
      runs.map((s) => s.spanId),
      'each attempt inside its own run',
    );
    assert.equal(attempts[0]!.status, ERROR);
    assert.equal(attempts[0]!.attributes['switchyard.outcome'], 'error');
    assert.equal(attempts[0]!.attributes['switchyard.error.retryable'], true);
    assert.ok(Number(attempts[0]!.attributes['switchyard.error.status']) >= 500);
    assert.equal(typeof attempts[0]!.attributes['error.type'], 'string');
    assert.equal(attempts[1]!.attributes['switchyard.outcome'], 'ok');
    assert.notEqual(attempts[1]!.status, ERROR);
    for (const attempt of attempts) {
      assert.equal(attempt.attributes['switchyard.vendor'], 'openai');
      assert.match(String(attempt.attributes['switchyard.channel.id']), /^openai:/);
    }
    assert.ok(attempts[0]!.endNs <= attempts[1]!.startNs, 'the retry comes after the failure');
  });

  it('an async job carries the trace context to its worker; the api answers 202 without a relay', async () => {
    const span = clientSpan();
    const res = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${apiKey}`,
        'content-type': 'application/json',
        prefer: 'respond-async',
        traceparent: span.traceparent,
      },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 202);
    const { id } = (await res.json()) as { id: string };
    await waitFor(
      async () => {
        const job = (await (
          await fetch(`${api.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${apiKey}` } })
        ).json()) as { status: string };
        return job.status === 'completed';
      },
      10_000,
      'the async job to complete',
    );

    const spans = await traceWith(collector, span.traceId, {
      'POST /v1/chat/completions': 1,
      admission: 1,
      'queue wait': 1,
      'process chat': 1,
      'vendor attempt': 1,
    });
    const root = assertOneTree(spans, span);
    assert.equal(root.attributes['http.response.status_code'], 202);
    assert.equal(named(spans, 'relay').length, 0);
    assert.equal(one(spans, 'admission').attributes['switchyard.mode'], 'async');
    assert.equal(one(spans, 'process chat').attributes['switchyard.mode'], 'async');
    assert.equal(one(spans, 'process chat').parentSpanId, root.spanId);
  });

  it('a background response carries the trace context to its worker', async () => {
    const span = clientSpan();
    const queued = await client.responses.create(
      { model: 'gpt-4o-mini', input: 'hi', background: true },
      { headers: { traceparent: span.traceparent } },
    );
    assert.equal(queued.status, 'queued');
    let polled = queued;
    while (polled.status === 'queued' || polled.status === 'in_progress') {
      await new Promise((resolve) => setTimeout(resolve, 50));
      polled = await client.responses.retrieve(queued.id);
    }
    assert.equal(polled.status, 'completed');

    const spans = await traceWith(collector, span.traceId, {
      'POST /v1/responses': 1,
      admission: 1,
      'queue wait': 1,
      'process chat': 1,
      'vendor attempt': 1,
    });
    const root = assertOneTree(spans, span);
    assert.equal(root.name, 'POST /v1/responses');
    assert.equal(one(spans, 'admission').attributes['switchyard.mode'], 'background');
    assert.equal(one(spans, 'process chat').attributes['switchyard.endpoint'], 'responses');
    assert.equal(one(spans, 'process chat').parentSpanId, root.spanId);
    assert.equal(one(spans, 'vendor attempt').attributes['switchyard.outcome'], 'ok');
  });

  it("a refused request ends its admission in error; a client's unsampled traceparent is followed (nothing recorded)", async () => {
    const refused = clientSpan();
    await assert.rejects(() =>
      client.chat.completions.create(
        { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] },
        { headers: { traceparent: refused.traceparent } },
      ),
    );
    const unsampled = clientSpan(false);
    await ask(client, unsampled.traceparent);

    const spans = await traceWith(collector, refused.traceId, { 'POST /v1/chat/completions': 1, admission: 1 });
    assertOneTree(spans, refused);
    const admission = one(spans, 'admission');
    assert.equal(admission.status, ERROR);
    assert.equal(admission.attributes['error.type'], 'model_not_found');
    assert.equal(one(spans, 'POST /v1/chat/completions').attributes['http.response.status_code'], 404);
    assert.equal(named(spans, 'process chat').length, 0, 'never queued');

    // A later sampled request's spans arrive; the unsampled one left none, in either process.
    const later = clientSpan();
    await ask(client, later.traceparent);
    await traceWith(collector, later.traceId, { 'POST /v1/chat/completions': 1, 'vendor attempt': 1 });
    assert.deepEqual(collector.trace(unsampled.traceId), []);
    assert.deepEqual(collector.refused, []);
  });
});

describe('tracing at shutdown', () => {
  it('exports the spans still buffered when the gateway stops (api and its worker process)', async () => {
    const [fake, collector] = await Promise.all([startFakeOpenAI(), startOtlpCollector()]);
    const { url, redis } = await freshRedis(6);
    try {
      const gateway = await startGateway({
        // The default export delay (5 s): only the shutdown's flush can send these spans in time.
        env: {
          REDIS_URL: url,
          OPENAI_API_KEY: vendorKey,
          OPENAI_BASE_URL: fake.url,
          WORKER_PROCESS: 'on',
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        },
      });
      const span = clientSpan();
      await ask(gateway.client((await createKey(redis)).key), span.traceparent);
      assert.equal(await gateway.stop(), 0);
      const spans = collector.trace(span.traceId);
      assert.deepEqual(spans.map((s) => s.name).sort(), [
        'POST /v1/chat/completions',
        'admission',
        'process chat',
        'queue wait',
        'relay',
        'vendor attempt',
      ]);
      assertOneTree(spans, span);
      assert.deepEqual(
        [...new Set(spans.map((s) => s.service))].sort(),
        ['switchyard-api', 'switchyard-worker'],
        'npm start: the api and its worker process, each by its role',
      );
    } finally {
      await Promise.all([fake.close(), collector.close()]);
      redis.disconnect();
    }
  });
});

describe('tracing off (OTEL_EXPORTER_OTLP_ENDPOINT unset)', () => {
  let fake: FakeOpenAI;
  let collector: OtlpCollector;
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    [fake, collector] = await Promise.all([startFakeOpenAI(), startOtlpCollector()]);
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: vendorKey,
        OPENAI_BASE_URL: fake.url,
        // Workers in a process of their own too: neither half may export.
        WORKER_PROCESS: 'on',
        // What the exporter would read by itself, were one made: it must not be.
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${collector.url}/v1/traces`,
        OTEL_BSP_SCHEDULE_DELAY: '50',
        OTEL_SERVICE_NAME: 'should-not-appear',
      },
    });
  });

  after(async () => {
    await fake?.close();
    await collector?.close();
    redis?.disconnect();
  });

  it('exports nothing, from either process, up to and including the shutdown', async () => {
    const client = gateway.client((await createKey(redis)).key);
    const span = clientSpan();
    assert.equal((await ask(client, span.traceparent)).choices[0]!.message.content, FAKE_REPLY_TEXT);
    const stream = await client.chat.completions.create(
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream: true },
      { headers: { traceparent: span.traceparent } },
    );
    for await (const _ of stream) {
      // drained
    }
    assert.ok(!gateway.logs.some((line) => line.includes('tracing on')), 'no tracing start is logged');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await gateway.stop(), 0);
    assert.equal(collector.exports, 0);
    assert.equal(fake.requests.at(-1)!.headers.traceparent, undefined);
  });
});
