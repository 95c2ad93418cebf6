import type { KeyLimits } from '../../api/accounts/key-store.js';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { networkInterfaces } from 'node:os';
import OpenAI from 'openai';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { chatStreamSse, FAKE_REPLY_TEXT, FAKE_USAGE } from '../support/fake-openai-defaults.js';
import {
  createKey,
  freshRedis,
  paidAccountKey,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';

/**
 * GET /metrics against real gateway processes: a known run of requests moves
 * each metric by exactly what it should; the worker's own listener
 * (METRICS_PORT), the api of `npm start` serving its worker process's metrics
 * too, and labels that stay bounded whatever a client sends.
 */

// Every database from 1 to 15 is some test file's; files run one at a time, each on its own private redis-server by
// default.
const db = 7;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text format, sample lines only (HELP, TYPE and blank lines skipped). */
function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, name, raw] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[name!] = raw!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    const raw = match[3]!;
    samples.push({
      name: match[1]!,
      labels,
      value: raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw),
    });
  }
  return samples;
}

class Scrape {
  constructor(
    readonly text: string,
    readonly samples = parseMetrics(text),
  ) {}

  /** The sum of every series of `name` whose labels include `labels`. */
  value(name: string, labels: Record<string, string> = {}): number {
    let sum = 0;
    for (const sample of this.samples) {
      if (sample.name === name && Object.entries(labels).every(([k, v]) => sample.labels[k] === v)) sum += sample.value;
    }
    return sum;
  }

  series(name: string): Sample[] {
    return this.samples.filter((s) => s.name === name);
  }
}

async function scrape(url: string): Promise<Scrape> {
  const response = await fetch(url);
  assert.equal(response.status, 200);
  assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return new Scrape(await response.text());
}

type Expectation = [name: string, labels: Record<string, string>, delta: number];

/**
 * Waits until every expected metric moved by its delta (some move just after
 * the client's answer: settlement, the end of a job's run), then asserts each
 * moved by exactly that: no more, and the zeros not at all.
 */
async function expectDeltas(url: string, before: Scrape, expected: Expectation[], timeoutMs = 8000): Promise<Scrape> {
  const delta = (now: Scrape, [name, labels]: Expectation) => now.value(name, labels) - before.value(name, labels);
  let now = await scrape(url);
  const until = Date.now() + timeoutMs;
  while (expected.some((e) => delta(now, e) < e[2]) && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 50));
    now = await scrape(url);
  }
  // A moment more: what should not move (or not further) gets the chance to show it did.
  await new Promise((r) => setTimeout(r, 150));
  now = await scrape(url);
  const moved = expected.map((e) => `${e[0]}${JSON.stringify(e[1])} ${delta(now, e)}`);
  assert.deepEqual(
    moved,
    expected.map((e) => `${e[0]}${JSON.stringify(e[1])} ${e[2]}`),
  );
  return now;
}

const model = 'gpt-4o-mini';
const chat = '/v1/chat/completions';
const prices = new PriceList(loadCatalog().all());
const usageCost = prices.costMicros(model, {
  inputTokens: FAKE_USAGE.prompt_tokens,
  cachedTokens: 0,
  outputTokens: FAKE_USAGE.completion_tokens,
  images: 0,
  audioSeconds: 0,
  videoSeconds: 0,
});
const small = { model, messages: [{ role: 'user' as const, content: 'Count me.' }], max_tokens: 16 };

describe('GET /metrics: one process (WORKER_PROCESS=off), a fake OpenAI vendor', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  let gateway: GatewayProcess;
  let client: OpenAI;
  let metricsUrl: string;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(db);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        WORKER_PROCESS: 'off',
        OPENAI_API_KEY: 'sk-metrics-test-000000',
        OPENAI_BASE_URL: fake.url,
        MOCK_VENDOR: 'off',
        RETRY_BASE_MS: '10',
        STREAM_RESUME_GRACE_MS: '5000',
        // One call at a time to the vendor, across workers: the slot gauges have something to show.
        OPENAI_MAX_CONCURRENCY: '1',
        // Set, yet the api's own /metrics needs no token.
        ADMIN_TOKEN: 'admin-secret-for-metrics',
      },
    });
    client = gateway.client((await createKey(redis)).key);
    metricsUrl = `${gateway.url}/metrics`;
  });

  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  /** A key with `limits` on its own account holding `balance` micros (or unlimited), as billing.test.ts makes them. */
  async function paidKey(balance: number | 'unlimited', limits: KeyLimits = {}): Promise<{ id: string; key: string }> {
    return paidAccountKey(redis, balance, limits);
  }

  const ok = { route: chat, model, status_class: '2xx' };
  const openai = { vendor: 'openai' };
  const chatQueue = { queue: 'chat' };

  it('serves Prometheus text with the process metrics, without an API key', async () => {
    const first = await scrape(metricsUrl);
    assert.ok(first.value('switchyard_process_cpu_seconds_total') > 0);
    assert.ok(first.series('switchyard_nodejs_heap_size_used_bytes').length === 1);
    assert.match(first.text, /# TYPE switchyard_http_requests_total counter/);
    assert.match(first.text, /# TYPE switchyard_job_run_seconds histogram/);
    // Every metric the gateway defines carries the prefix.
    for (const [, name] of first.text.matchAll(/^# TYPE (\S+)/gm)) assert.ok(name!.startsWith('switchyard_'), name);
    // The queue depths are the backpressure's: one series per capability and state.
    for (const queue of ['chat', 'embeddings', 'image', 'audio', 'video']) {
      for (const state of ['waiting', 'active', 'delayed', 'failed'])
        assert.equal(
          first.series('switchyard_queue_jobs').filter((s) => s.labels.queue === queue && s.labels.state === state)
            .length,
          1,
        );
    }
    const second = await scrape(metricsUrl);
    assert.equal(
      second.value('switchyard_http_requests_total', { route: '/metrics', status_class: '2xx' }) -
        first.value('switchyard_http_requests_total', { route: '/metrics', status_class: '2xx' }),
      1,
    );
  });

  it('a plain request: its request, job, vendor call, tokens and cost', async () => {
    const before = await scrape(metricsUrl);
    const completion = await client.chat.completions.create(small);
    assert.equal(completion.usage?.prompt_tokens, FAKE_USAGE.prompt_tokens);
    await expectDeltas(metricsUrl, before, [
      ['switchyard_http_requests_total', ok, 1],
      ['switchyard_http_request_duration_seconds_count', { route: chat, status_class: '2xx' }, 1],
      ['switchyard_http_time_to_first_byte_seconds_count', { route: chat, model }, 1],
      ['switchyard_job_wait_seconds_count', chatQueue, 1],
      ['switchyard_job_run_seconds_count', chatQueue, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'ok' }, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'error' }, 0],
      ['switchyard_vendor_call_duration_seconds_count', openai, 1],
      ['switchyard_vendor_errors_total', {}, 0],
      ['switchyard_tokens_total', { model, direction: 'in' }, FAKE_USAGE.prompt_tokens],
      ['switchyard_tokens_total', { model, direction: 'out' }, FAKE_USAGE.completion_tokens],
      ['switchyard_cost_micros_total', { model }, usageCost],
      // Nothing read from the vendor's prompt cache: nothing it saved.
      ['switchyard_prompt_cache_saved_micros_total', {}, 0],
      ['switchyard_jobs_retried_total', {}, 0],
      ['switchyard_stream_chunks_relayed_total', {}, 0],
    ]);
    assert.ok(usageCost > 0);
  });

  it('names no account by default (METRICS_PER_ACCOUNT off): the queue waits are by queue and tier', async () => {
    await client.chat.completions.create(small);
    let now = await scrape(metricsUrl);
    await waitFor(
      async () => (now = await scrape(metricsUrl)).value('switchyard_queue_wait_seconds_count', chatQueue) > 0,
      5000,
      'a queue wait',
    );
    const waits = now.series('switchyard_queue_wait_seconds_count');
    assert.ok(waits.length > 0);
    for (const sample of [...waits, ...now.series('switchyard_queue_backlog')])
      assert.deepEqual(Object.keys(sample.labels).sort(), ['queue', 'tier'], JSON.stringify(sample));
    // No sample names one (the help texts do say what METRICS_PER_ACCOUNT=on would show: `account="other"`).
    assert.deepEqual(
      now.samples.filter((sample) => 'account' in sample.labels),
      [],
    );
  });

  it('a stream: every chunk the client got, and its first byte', async () => {
    const before = await scrape(metricsUrl);
    const stream = await client.chat.completions.create({
      ...small,
      stream: true,
      stream_options: { include_usage: true },
    });
    let chunks = 0;
    for await (const _chunk of stream) chunks++;
    assert.ok(chunks >= 5, `${chunks} chunks`);
    await expectDeltas(metricsUrl, before, [
      ['switchyard_stream_chunks_relayed_total', {}, chunks],
      ['switchyard_http_requests_total', ok, 1],
      ['switchyard_http_time_to_first_byte_seconds_count', { route: chat, model }, 1],
      ['switchyard_job_run_seconds_count', chatQueue, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'ok' }, 1],
      ['switchyard_tokens_total', { model, direction: 'in' }, FAKE_USAGE.prompt_tokens],
      ['switchyard_tokens_total', { model, direction: 'out' }, FAKE_USAGE.completion_tokens],
      ['switchyard_client_disconnects_total', {}, 0],
    ]);
  });

  it('client errors: counted as 4xx with no model, and nothing queued', async () => {
    const before = await scrape(metricsUrl);
    await assert.rejects(
      client.chat.completions.create({ ...small, model: 'no-such-model' }),
      (e: unknown) => e instanceof OpenAI.NotFoundError,
    );
    await assert.rejects(
      client.chat.completions.create({ model } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming),
      (e: unknown) => e instanceof OpenAI.BadRequestError,
    );
    await expectDeltas(metricsUrl, before, [
      ['switchyard_http_requests_total', { route: chat, model: '', status_class: '4xx' }, 2],
      ['switchyard_http_requests_total', { route: chat, status_class: '2xx' }, 0],
      ['switchyard_job_wait_seconds_count', {}, 0],
      ['switchyard_vendor_calls_total', {}, 0],
    ]);
  });

  it('a vendor 429: an error of kind 429, a rate-limit wait, a channel rest, then the answer', async () => {
    fake.enqueue({
      status: 429,
      headers: { 'retry-after-ms': '1' },
      json: { error: { message: 'Slow down', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
    });
    const before = await scrape(metricsUrl);
    await client.chat.completions.create(small);
    await expectDeltas(metricsUrl, before, [
      ['switchyard_http_requests_total', ok, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'error' }, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'ok' }, 1],
      ['switchyard_vendor_errors_total', { ...openai, kind: '429' }, 1],
      ['switchyard_vendor_errors_total', {}, 1],
      ['switchyard_channel_cooldowns_total', { ...openai, reason: 'rate' }, 1],
      ['switchyard_jobs_retried_total', { queue: 'chat', reason: 'rate_limited' }, 1],
      ['switchyard_jobs_retried_total', { queue: 'chat', reason: 'error' }, 0],
      // Waiting out a rate limit spends no attempt: the job did not fail, so it did not "recover".
      ['switchyard_jobs_recovered_total', {}, 0],
      ['switchyard_job_wait_seconds_count', chatQueue, 1],
      ['switchyard_job_run_seconds_count', chatQueue, 2],
      ['switchyard_tokens_total', { model, direction: 'in' }, FAKE_USAGE.prompt_tokens],
    ]);
  });

  it('a vendor 5xx: an error of kind 5xx, a retry, and the job recovered', async () => {
    fake.enqueue({ status: 500, json: { error: { message: 'boom', type: 'server_error', param: null, code: null } } });
    const before = await scrape(metricsUrl);
    await client.chat.completions.create(small);
    await expectDeltas(metricsUrl, before, [
      ['switchyard_http_requests_total', ok, 1],
      ['switchyard_vendor_errors_total', { ...openai, kind: '5xx' }, 1],
      ['switchyard_vendor_errors_total', {}, 1],
      ['switchyard_vendor_calls_total', { ...openai, outcome: 'ok' }, 1],
      ['switchyard_jobs_retried_total', { queue: 'chat', reason: 'error' }, 1],
      ['switchyard_jobs_retried_total', { queue: 'chat', reason: 'rate_limited' }, 0],
      ['switchyard_jobs_recovered_total', chatQueue, 1],
      // One 5xx is below CHANNEL_FAILURE_THRESHOLD: no rest.
      ['switchyard_channel_cooldowns_total', {}, 0],
      ['switchyard_job_run_seconds_count', chatQueue, 2],
      ['switchyard_job_wait_seconds_count', chatQueue, 1],
      // Billed once, for the attempt that answered.
      ['switchyard_tokens_total', { model, direction: 'out' }, FAKE_USAGE.completion_tokens],
    ]);
  });

  it('admission refusals: a quota refusal and a rate-limit refusal, by reason', async () => {
    const poor = await paidKey(1);
    const limited = await paidKey('unlimited', { rpm: 1 });
    const before = await scrape(metricsUrl);
    await assert.rejects(
      gateway.client(poor.key).chat.completions.create(small),
      (e: unknown) => e instanceof OpenAI.RateLimitError && e.code === 'insufficient_quota',
    );
    const limitedClient = gateway.client(limited.key);
    await limitedClient.chat.completions.create(small);
    await assert.rejects(
      limitedClient.chat.completions.create(small),
      (e: unknown) => e instanceof OpenAI.RateLimitError && e.code === 'rate_limit_exceeded',
    );
    await expectDeltas(metricsUrl, before, [
      ['switchyard_quota_refusals_total', { reason: 'account_balance' }, 1],
      ['switchyard_quota_refusals_total', {}, 1],
      ['switchyard_rate_limit_refusals_total', { reason: 'rpm' }, 1],
      ['switchyard_rate_limit_refusals_total', {}, 1],
      // The model was resolved before admission refused it: it labels the refusal.
      ['switchyard_http_requests_total', { route: chat, model, status_class: '4xx' }, 2],
      ['switchyard_http_requests_total', ok, 1],
      ['switchyard_job_run_seconds_count', chatQueue, 1],
    ]);
    // Key ids only with METRICS_PER_KEY=on.
    assert.ok(!(await scrape(metricsUrl)).text.includes(limited.id));
  });

  it('a client that leaves a stream, then resumes it', async () => {
    const pieces = ['one', ' two', ' three', ' four', ' five', ' six'];
    fake.enqueue({ sse: chatStreamSse(pieces, { model }), chunkDelayMs: 120 });
    const before = await scrape(metricsUrl);
    const { key } = await createKey(redis, 'resumer');
    const abort = new AbortController();
    const response = await fetch(`${gateway.url}${chat}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...small, stream: true }),
      signal: abort.signal,
    });
    assert.equal(response.status, 200);
    const requestId = response.headers.get('x-request-id')!;
    const reader = response.body!.getReader();
    let seen = '';
    while (!seen.includes('\n\n')) seen += new TextDecoder().decode((await reader.read()).value);
    abort.abort();
    await reader.cancel().catch(() => undefined);
    await expectDeltas(metricsUrl, before, [['switchyard_client_disconnects_total', { kind: 'stream' }, 1]]);

    const resumed = await fetch(`${gateway.url}${chat}/${requestId}/stream`, {
      headers: { authorization: `Bearer ${key}`, 'last-event-id': '0' },
    });
    assert.equal(resumed.status, 200);
    const rest = await resumed.text();
    assert.ok(rest.endsWith('data: [DONE]\n\n'), rest);
    await expectDeltas(metricsUrl, before, [
      ['switchyard_stream_resumes_total', { route: '/v1/chat/completions/:id/stream' }, 1],
      [
        'switchyard_http_requests_total',
        { route: '/v1/chat/completions/:id/stream', model: '', status_class: '2xx' },
        1,
      ],
      ['switchyard_client_disconnects_total', {}, 1],
      ['switchyard_job_run_seconds_count', chatQueue, 1],
    ]);

    // A stored response read back as a stream is a replay too.
    const stored = await gateway.client(key).responses.create({ model, input: 'Keep me.' });
    const again = await scrape(metricsUrl);
    const replay = await fetch(`${gateway.url}/v1/responses/${stored.id}?stream=true`, {
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(replay.status, 200);
    assert.match(await replay.text(), /response\.completed/);
    await expectDeltas(metricsUrl, again, [
      ['switchyard_stream_resumes_total', { route: '/v1/responses/:id' }, 1],
      ['switchyard_stream_resumes_total', {}, 1],
    ]);
  });

  it(
    'a vendor cap: the slot held, the jobs past it waiting in the vendor’s lane (none in a worker), then all given ' +
      'back',
    async () => {
      fake.enqueue({ delayMs: 800 }, { delayMs: 800 }, { delayMs: 800 });
      const before = await scrape(metricsUrl);
      const both = Promise.all([
        client.chat.completions.create(small),
        client.chat.completions.create(small),
        client.chat.completions.create(small),
      ]);
      let during = before;
      await waitFor(
        async () => {
          during = await scrape(metricsUrl);
          // The vendor's lane lets exactly its cap run: the other two wait in the queue, in fair order, not in a worker.
          return (
            during.value('switchyard_vendor_slots_in_use', openai) === 1 &&
            during.value('switchyard_queue_backlog', { queue: 'lane@openai', tier: 'default' }) === 2
          );
        },
        5000,
        'the slot held and two jobs in the lane',
      );
      assert.equal(during.value('switchyard_vendor_slot_waiters', openai), 0);
      await both;
      await expectDeltas(metricsUrl, before, [
        ['switchyard_vendor_calls_total', { ...openai, outcome: 'ok' }, 3],
        ['switchyard_vendor_slots_in_use', openai, 0],
        ['switchyard_vendor_slot_waiters', openai, 0],
      ]);
    },
  );

  it('labels stay bounded: bogus models and paths add no label value', async () => {
    const before = await scrape(metricsUrl);
    const { key } = await createKey(redis, 'hostile');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const bogus = Array.from({ length: 40 }, (_, i) => `bogus-model-${i}-${Math.random().toString(36).slice(2)}`);
    for (const name of bogus) {
      const response = await fetch(`${gateway.url}${chat}`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ ...small, model: name }),
      });
      assert.equal(response.status, 404);
    }
    for (let i = 0; i < 10; i++) {
      assert.equal((await fetch(`${gateway.url}/v1/bogus-path-${i}`, { headers })).status, 404);
      assert.equal((await fetch(`${gateway.url}/bogus-top-${i}`)).status, 404);
      assert.equal((await fetch(`${gateway.url}/v1/models/bogus-model-id-${i}`, { headers })).status, 404);
    }
    const after = await expectDeltas(metricsUrl, before, [
      ['switchyard_http_requests_total', { route: chat, model: '', status_class: '4xx' }, 40],
      ['switchyard_http_requests_total', { route: '/v1/{*rest}', model: '', status_class: '4xx' }, 10],
      ['switchyard_http_requests_total', { route: 'other', model: '', status_class: '4xx' }, 10],
      ['switchyard_http_requests_total', { route: '/v1/models/*model', model: '', status_class: '4xx' }, 10],
    ]);
    assert.ok(!after.text.includes('bogus'), 'no client string became a label value');
    const seriesOf = (s: Scrape) =>
      new Set(
        s.samples
          .filter((x) => x.name.startsWith('switchyard_http_'))
          .map((x) => `${x.name}${JSON.stringify(x.labels)}`),
      );
    const added = [...seriesOf(after)].filter((series) => !seriesOf(before).has(series));
    // At most the route templates' own series: three routes, each a counter, a duration and a first-byte histogram.
    assert.ok(
      added.every((series) => /"route":"(\/v1\/\{\*rest\}|other|\/v1\/models\/\*model)"/.test(series)),
      added.join('\n'),
    );
    const distinctModels = new Set(after.series('switchyard_http_requests_total').map((s) => s.labels.model));
    assert.deepEqual([...distinctModels].sort(), ['', model]);
  });

  // After the label bounds above: this one names a second model.
  it(
    "a prompt the vendor read from its cache: the cached tokens, and what its prompt cache saved at the catalog's " +
      'prices',
    async () => {
      // A model whose cached input is priced below its input; the vendor says most of the prompt was read from its cache.
      const cachedModel = 'gpt-5-mini';
      const usage = {
        prompt_tokens: 2000,
        completion_tokens: 5,
        total_tokens: 2005,
        prompt_tokens_details: { cached_tokens: 1500 },
      };
      const metered = {
        inputTokens: 2000,
        cachedTokens: 1500,
        outputTokens: 5,
        images: 0,
        audioSeconds: 0,
        videoSeconds: 0,
      };
      // The prompt at the plain input price, less the prompt as billed (the same rule, so the output cancels out).
      const saved =
        prices.costMicros(cachedModel, { ...metered, cachedTokens: 0 }) - prices.costMicros(cachedModel, metered);
      assert.ok(saved > 0, `${cachedModel}'s cached input is cheaper than its input`);
      const before = await scrape(metricsUrl);
      fake.enqueue({
        json: {
          id: 'chatcmpl-cached',
          object: 'chat.completion',
          created: 1_700_000_000,
          model: cachedModel,
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: 'Counted.', refusal: null },
              logprobs: null,
              finish_reason: 'stop',
            },
          ],
          usage,
        },
      });
      await client.chat.completions.create({ model: cachedModel, messages: small.messages, max_completion_tokens: 16 });
      await expectDeltas(metricsUrl, before, [
        ['switchyard_tokens_total', { model: cachedModel, direction: 'cached' }, 1500],
        ['switchyard_prompt_cache_saved_micros_total', { model: cachedModel }, saved],
        // Not the response cache's saving.
        ['switchyard_cache_saved_micros_total', {}, 0],
      ]);
    },
  );
});

describe('queue depths on the api, and a worker process’s own listener (METRICS_PORT)', () => {
  let redis: Redis;
  let url: string;
  let api: GatewayProcess | undefined;
  let worker: GatewayProcess | undefined;

  before(async () => {
    ({ redis, url } = await freshRedis(db));
  });

  after(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    redis?.disconnect();
  });

  it('the api shows waiting jobs from its backpressure; the worker serves its job and vendor metrics on METRICS_PORT', async () => {
    const apiOnly = await startGateway({ role: 'api', env: { REDIS_URL: url, MOCK_STREAM_DELAY_MS: '0' } });
    api = apiOnly;
    const apiMetricsUrl = `${apiOnly.url}/metrics`;
    const { key } = await createKey(redis);
    const jobs = 3;
    for (let i = 0; i < jobs; i++) {
      const response = await fetch(`${apiOnly.url}${chat}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', prefer: 'respond-async' },
        body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: `job ${i}` }] }),
      });
      assert.equal(response.status, 202);
    }
    // No worker yet: the jobs wait, and the next refresh of the backpressure (every 200 ms) shows them.
    let depth = await scrape(apiMetricsUrl);
    await waitFor(
      async () =>
        (depth = await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', { queue: 'chat', state: 'waiting' }) ===
        jobs,
      3000,
      'the waiting jobs',
    );
    assert.equal(depth.value('switchyard_queue_jobs', { queue: 'embeddings', state: 'waiting' }), 0);
    assert.equal(depth.value('switchyard_job_run_seconds_count'), 0, 'an api alone runs no job');

    worker = await startGateway({
      role: 'worker',
      env: { REDIS_URL: url, METRICS_PORT: '0', MOCK_STREAM_DELAY_MS: '0' },
    });
    const w = worker;
    await waitFor(
      () => w.logs.some((line) => line.includes('worker metrics listening')),
      10_000,
      'the metrics listener',
    );
    const port = Number(/"port":(\d+)/.exec(w.logs.find((line) => line.includes('worker metrics listening'))!)![1]);
    const workerMetricsUrl = `http://127.0.0.1:${port}/metrics`;
    const empty = new Scrape('');
    const served = await expectDeltas(workerMetricsUrl, empty, [
      ['switchyard_job_wait_seconds_count', { queue: 'chat' }, jobs],
      ['switchyard_job_run_seconds_count', { queue: 'chat' }, jobs],
      ['switchyard_vendor_calls_total', { vendor: 'mock', outcome: 'ok' }, jobs],
      ['switchyard_vendor_calls_total', {}, jobs],
      ['switchyard_http_requests_total', {}, 0],
      ['switchyard_queue_jobs', {}, 0],
    ]);
    assert.ok(served.value('switchyard_tokens_total', { model: 'mock-chat', direction: 'in' }) > 0);
    assert.ok(served.value('switchyard_process_resident_memory_bytes') > 0);
    assert.ok(served.series('switchyard_queue_jobs').length === 0, 'queue depths are the api’s to show');
    await waitFor(
      async () =>
        (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', { queue: 'chat', state: 'waiting' }) === 0,
      3000,
      'the queue to drain',
    );
    assert.equal((await fetch(`http://127.0.0.1:${port}/other`)).status, 404);
    // The worker's readiness for a health check: it reaches Redis (test/unit/worker-readiness.test.ts has the 503).
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    assert.equal(ready.status, 200);
  });
});

describe('npm start with its workers in a child process (WORKER_PROCESS=on), METRICS_PER_KEY=on', () => {
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    const fresh = await freshRedis(db);
    redis = fresh.redis;
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, WORKER_PROCESS: 'on', METRICS_PER_KEY: 'on', MOCK_STREAM_DELAY_MS: '0' },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('the api’s /metrics includes the worker process’s metrics, and key ids label requests and tokens', async () => {
    const { id, key } = await createKey(redis);
    const url = `${gateway.url}/metrics`;
    const before = await scrape(url);
    assert.equal(before.value('switchyard_worker_process_up'), 1);
    await gateway
      .client(key)
      .chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'two processes' }] });
    const after = await expectDeltas(url, before, [
      // The api's own.
      ['switchyard_http_requests_total', { route: chat, model: 'mock-chat', status_class: '2xx', key_id: id }, 1],
      // The worker process's, merged in.
      ['switchyard_job_run_seconds_count', { queue: 'chat' }, 1],
      ['switchyard_job_wait_seconds_count', { queue: 'chat' }, 1],
      ['switchyard_vendor_calls_total', { vendor: 'mock', outcome: 'ok' }, 1],
      ['switchyard_cost_micros_total', { model: 'mock-chat', key_id: id }, 0],
    ]);
    assert.ok(after.value('switchyard_tokens_total', { model: 'mock-chat', direction: 'out', key_id: id }) > 0);
    assert.equal(after.value('switchyard_worker_process_up'), 1);
    // Node's process metrics of both processes, merged by prom-client's rules.
    assert.ok(after.value('switchyard_process_cpu_seconds_total') > 0);
    assert.equal(after.series('switchyard_nodejs_version_info').length, 1);
  });
});

describe('METRICS_PER_ACCOUNT=on with METRICS_TOP_ACCOUNTS=3: the busiest accounts by name, the rest as other', () => {
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    const fresh = await freshRedis(db);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        WORKER_PROCESS: 'off',
        METRICS_PER_ACCOUNT: 'on',
        METRICS_TOP_ACCOUNTS: '3',
        MOCK_STREAM_DELAY_MS: '0',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  it('eight accounts: at most three named plus other, the busiest among them, every job counted once', async () => {
    const url = `${gateway.url}/metrics`;
    // Each key on an account of its own; the first is the busiest, and sends first.
    const accounts = [];
    for (let i = 0; i < 8; i++) accounts.push(await paidAccountKey(redis, 'unlimited'));
    const busiest = accounts[0]!;
    const sends = [5, 1, 1, 1, 1, 1, 1, 1];
    for (const [i, account] of accounts.entries()) {
      const client = gateway.client(account.key);
      for (let n = 0; n < sends[i]!; n++)
        await client.chat.completions.create({
          model: 'mock-chat',
          messages: [{ role: 'user', content: `account ${i}, request ${n}` }],
        });
    }
    const requests = sends.reduce((a, b) => a + b);
    let now = await scrape(url);
    await waitFor(
      async () => (now = await scrape(url)).value('switchyard_queue_wait_seconds_count') === requests,
      5000,
      'every queue wait',
    );
    const waits = now.series('switchyard_queue_wait_seconds_count');
    const named = new Set(waits.map((sample) => sample.labels.account));
    assert.ok(named.size <= 4, [...named].join());
    assert.ok(named.has('other'), [...named].join());
    assert.ok(named.has(busiest.account), `the busiest account ${busiest.account} named: ${[...named].join()}`);
    assert.equal(now.value('switchyard_queue_wait_seconds_count', { account: busiest.account }), sends[0]);
    assert.equal(now.value('switchyard_queue_wait_seconds_count'), requests);
    // Each account's jobs under one label value: those named have them all, other has the rest.
    for (const account of accounts.slice(1)) {
      const own = now.value('switchyard_queue_wait_seconds_count', { account: account.account });
      assert.ok(own === 0 || own === 1, `${account.account}: ${own}`);
    }
    assert.equal(
      now.value('switchyard_queue_wait_seconds_count', { account: 'other' }),
      requests - waits.filter((s) => s.labels.account !== 'other').reduce((sum, s) => sum + s.value, 0),
    );
    assert.ok(now.value('switchyard_queue_wait_seconds_count', { account: 'other' }) >= sends.length - 3);
  });
});

describe('what goes wrong, as the api’s queue gauges and the workers’ own metrics show it', () => {
  let fake: FakeOpenAI;
  let redis: Redis;
  let api: GatewayProcess | undefined;
  const workers: GatewayProcess[] = [];
  let client: OpenAI;
  let env: Record<string, string>;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(db);
    redis = fresh.redis;
    env = {
      REDIS_URL: fresh.url,
      OPENAI_API_KEY: 'sk-metrics-test-000000',
      OPENAI_BASE_URL: fake.url,
      MOCK_VENDOR: 'off',
      RETRY_BASE_MS: '10',
      // A dead worker's job is found stalled within a second or two.
      WORKER_LOCK_MS: '2000',
      METRICS_PORT: '0',
    };
    api = await startGateway({ role: 'api', env });
    client = api.client((await createKey(redis)).key);
  });

  after(async () => {
    await Promise.all([api?.stop(), ...workers.map((w) => w.stop())]);
    await fake?.close();
    redis?.disconnect();
  });

  /** A worker process, and the URL of its own /metrics (METRICS_PORT=0: a free port it logs). */
  async function startWorker(): Promise<{ worker: GatewayProcess; metricsUrl: string }> {
    const worker = await startGateway({ role: 'worker', env });
    workers.push(worker);
    await waitFor(
      () => worker.logs.some((line) => line.includes('worker metrics listening')),
      10_000,
      'the metrics listener',
    );
    const port = Number(
      /"port":(\d+)/.exec(worker.logs.find((line) => line.includes('worker metrics listening'))!)![1],
    );
    return { worker, metricsUrl: `http://127.0.0.1:${port}/metrics` };
  }

  const chatGauge = (state: string) => ({ queue: 'chat', state });

  it('a rate-limit wait shows as a delayed job and a channel at rest; a job failed for good stays counted as failed', async () => {
    const apiMetricsUrl = `${api!.url}/metrics`;
    const { metricsUrl } = await startWorker();
    const channel = { vendor: 'openai' };
    assert.equal(
      (await scrape(metricsUrl)).value('switchyard_channel_cooling_down', channel),
      0,
      'no rest at the start',
    );
    assert.ok(
      (await scrape(metricsUrl)).series('switchyard_channel_cooling_down').length > 0,
      'every configured channel is listed, resting or not',
    );

    // The vendor asks for 4 s: the job waits them out (delayed, no attempt spent) and the channel rests as long.
    fake.enqueue({
      status: 429,
      headers: { 'retry-after': '4' },
      json: { error: { message: 'Slow down', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
    });
    const answer = client.chat.completions.create(small);
    await waitFor(
      async () => (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', chatGauge('delayed')) === 1,
      3000,
      'the delayed job on the api',
    );
    await waitFor(
      async () => (await scrape(metricsUrl)).value('switchyard_channel_cooling_down', channel) === 1,
      3000,
      'the channel at rest on the worker',
    );
    assert.equal(
      (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', chatGauge('active')),
      0,
      'a delayed job is not active',
    );
    assert.equal((await answer).choices[0]!.message.content, FAKE_REPLY_TEXT);
    await waitFor(
      async () => (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', chatGauge('delayed')) === 0,
      3000,
      'no delayed job once answered',
    );
    await waitFor(
      async () => (await scrape(metricsUrl)).value('switchyard_channel_cooling_down', channel) === 0,
      5000,
      'the rest over',
    );

    // A vendor 400 fails the job at once, for good: BullMQ keeps it among the failed (an hour), and the gauge says so.
    const failedBefore = (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', chatGauge('failed'));
    fake.enqueue({
      status: 400,
      json: { error: { message: 'Bad messages', type: 'invalid_request_error', param: 'messages', code: null } },
    });
    await assert.rejects(client.chat.completions.create(small), (e: unknown) => e instanceof OpenAI.BadRequestError);
    await waitFor(
      async () =>
        (await scrape(apiMetricsUrl)).value('switchyard_queue_jobs', chatGauge('failed')) === failedBefore + 1,
      3000,
      'the failed job on the api',
    );
  });

  it(
    'a worker killed mid-call: another worker’s stall check hands the job back, counts it stalled, and its ' +
      'completion recovered',
    async () => {
      for (const worker of workers.splice(0)) await worker.stop();
      const doomed = await startWorker();
      // The first call hangs at the vendor: the worker holding it dies there.
      fake.enqueue({ hang: true });
      const answer = client.chat.completions.create(small);
      await waitFor(() => fake.inFlight === 1, 10_000, 'the call under way on the doomed worker');
      await doomed.worker.stop('SIGKILL');

      const { metricsUrl } = await startWorker();
      assert.equal((await answer).choices[0]!.message.content, FAKE_REPLY_TEXT);
      const empty = new Scrape('');
      await expectDeltas(metricsUrl, empty, [
        ['switchyard_jobs_stalled_total', { queue: 'chat' }, 1],
        ['switchyard_jobs_recovered_total', { queue: 'chat' }, 1],
        ['switchyard_job_run_seconds_count', { queue: 'chat' }, 1],
        // Its wait was measured by the worker that first ran it (now gone).
        ['switchyard_job_wait_seconds_count', { queue: 'chat' }, 0],
        ['switchyard_vendor_calls_total', { vendor: 'openai', outcome: 'ok' }, 1],
      ]);
    },
  );
});

/** An address of this machine that is not loopback, to reach a server from off loopback; undefined when it has none. */
function offLoopbackAddress(): string | undefined {
  return Object.values(networkInterfaces())
    .flat()
    .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;
}

describe(
  'who may read /metrics (issue 45)',
  { skip: offLoopbackAddress() ? false : 'no address off loopback on this machine' },
  () => {
    let redis: Redis;
    let url: string;
    let api: GatewayProcess | undefined;
    const token = 'metrics-scrape-token';
    const external = offLoopbackAddress()!;

    before(async () => {
      ({ redis, url } = await freshRedis(db));
    });

    after(async () => {
      await api?.stop();
      redis?.disconnect();
    });

    /** An api on every interface, believing X-Forwarded-For (TRUST_PROXY), with `env` on top. */
    async function openApi(env: Record<string, string>): Promise<{ loopback: string; offLoopback: string }> {
      await api?.stop();
      api = await startGateway({ role: 'api', env: { REDIS_URL: url, HOST: '0.0.0.0', TRUST_PROXY: 'on', ...env } });
      const port = new URL(api.url).port;
      return { loopback: `http://127.0.0.1:${port}/metrics`, offLoopback: `http://${external}:${port}/metrics` };
    }

    const errorOf = async (response: Response) =>
      ((await response.json()) as { error: { message: string; type: string; code: string } }).error;

    it('without METRICS_TOKEN: answered on loopback only, whatever X-Forwarded-For says', async () => {
      const { loopback, offLoopback } = await openApi({});
      await scrape(loopback);
      const forged: Array<Record<string, string>> = [
        {},
        { 'x-forwarded-for': '127.0.0.1' },
        { 'x-forwarded-for': '::1', 'x-real-ip': '127.0.0.1' },
      ];
      for (const headers of forged) {
        const refused = await fetch(offLoopback, { headers });
        assert.equal(refused.status, 403, JSON.stringify(headers));
        const error = await errorOf(refused);
        assert.equal(error.code, 'metrics_loopback_only');
        assert.match(error.message, /set METRICS_TOKEN/);
        assert.equal(typeof error.type, 'string');
      }
      // The API itself is still served off loopback.
      assert.equal((await fetch(offLoopback.replace('/metrics', '/healthz'))).status, 200);
    });

    it('with METRICS_TOKEN: its bearer token from everyone, loopback included', async () => {
      const { loopback, offLoopback } = await openApi({ METRICS_TOKEN: token });
      for (const target of [loopback, offLoopback]) {
        const refused = await fetch(target);
        assert.equal(refused.status, 401, target);
        assert.equal((await errorOf(refused)).code, 'invalid_metrics_token');
        assert.equal((await fetch(target, { headers: { authorization: 'Bearer wrong' } })).status, 401, target);
        const served = await fetch(target, { headers: { authorization: `Bearer ${token}` } });
        assert.equal(served.status, 200, target);
        assert.match(await served.text(), /^# HELP switchyard_/m);
      }
    });
  },
);
