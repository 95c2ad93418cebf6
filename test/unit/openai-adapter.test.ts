import { vendorFixturesDir } from '../support/fixtures.js';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { GatewayError } from '../../shared/errors.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import { mapOpenAIError, openaiAdapter, scrubSecrets } from '../../workers/vendors/openai/index.js';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import type { CallContext, VendorHttp } from '../../workers/vendors/types.js';
import type { AnswerEvent } from '../../workers/answers/events.js';
import { readOpenAIChoice } from '../../workers/vendors/openai/read-openai-answer.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import { withServiceTier } from '../../workers/answers/chat-encoder.js';
import { encodeAnswer, encodeStream } from '../support/answers.js';
import { startFakeOpenAI } from '../support/fake-openai.js';
import type { FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_PIECES, FAKE_USAGE } from '../support/fake-openai-defaults.js';
import { collect, gatewayError } from '../support/assertions.js';

const FIXTURES = vendorFixturesDir('openai');
const FIXTURE_FILES = ['openai-chat-stream-tool-call.sse', 'openai-chat-stream-parallel-tool-calls.sse'];
const KEY = 'sk-test-channel-key-0123456789';
const UPSTREAM_MODEL = 'gpt-4o-2024-08-06';
const log = pino({ level: 'silent' });

const vendorHttp = createVendorHttp(loadConfig({}));
let fake: FakeOpenAI;

function context(signal: AbortSignal = new AbortController().signal, http: VendorHttp = vendorHttp): CallContext {
  return {
    requestId: 'req_test',
    signal,
    channel: { vendor: 'openai', baseUrl: fake.url, apiKey: KEY },
    upstreamModel: UPSTREAM_MODEL,
    model: loadCatalog().get('gpt-4o')!,
    log,
    http,
  };
}

const chatRequest = (extra: Record<string, unknown> = {}): ChatCompletionRequest =>
  ({
    model: 'gpt-4o',
    messages: [{ role: 'user', content: 'Hi' }],
    temperature: 0.2,
    ...extra,
  }) as ChatCompletionRequest;

/** Asserts a rejection with a GatewayError and returns it for closer checks. */

function fixtureData(name: string): string[] {
  return readFileSync(`${FIXTURES}/${name}`, 'utf8')
    .split('\n\n')
    .filter((block) => block.length > 0)
    .map((block) => block.replace(/^data: /, ''));
}

const sseOf = (...payloads: unknown[]) =>
  payloads.map((payload) => `data: ${typeof payload === 'string' ? payload : JSON.stringify(payload)}\n\n`).join('');
/** The vendor chunks a batch of events carries, as the client gets them. */
const wireChunks = (batch: AnswerEvent[]) => batch.flatMap((event) => (event.wire ? [event.wire] : []));
const contentChunk = (content: string) => ({
  id: 'c1',
  object: 'chat.completion.chunk',
  choices: [{ index: 0, delta: { content }, finish_reason: null }],
});

before(async () => {
  fake = await startFakeOpenAI({ apiKey: KEY });
});
after(async () => {
  await vendorHttp.close();
  await fake.close();
});
beforeEach(() => fake.reset());

describe('openai adapter: outgoing requests', () => {
  it('sends the client request with the upstream model, minus stream_options, to /chat/completions', async () => {
    const request = chatRequest({ reasoning_effort: 'low', stream_options: { include_usage: true } });
    await openaiAdapter.chat!(request, context());
    assert.equal(fake.requests.length, 1);
    const sent = fake.requests[0]!;
    assert.equal(sent.method, 'POST');
    assert.equal(sent.path, '/v1/chat/completions');
    assert.equal(sent.headers.authorization, `Bearer ${KEY}`);
    assert.equal(sent.headers['content-type'], 'application/json');
    assert.equal(sent.headers.accept, 'application/json');
    assert.deepEqual(sent.body, {
      model: UPSTREAM_MODEL,
      messages: [{ role: 'user', content: 'Hi' }],
      temperature: 0.2,
      reasoning_effort: 'low',
    });
  });

  it('forces stream and include_usage upstream, keeping the other stream options', async () => {
    const request = chatRequest({ stream: true, stream_options: { include_obfuscation: false } });
    await collect(openaiAdapter.streamChat!(request, context()));
    const sent = fake.requests[0]!;
    assert.equal(sent.headers.accept, 'text/event-stream');
    assert.deepEqual(sent.body, {
      model: UPSTREAM_MODEL,
      messages: [{ role: 'user', content: 'Hi' }],
      temperature: 0.2,
      stream: true,
      stream_options: { include_obfuscation: false, include_usage: true },
    });
  });

  it('passes embeddings through with encoding_format and dimensions as sent', async () => {
    const request = { model: 'emb', input: ['a', 'b'], encoding_format: 'base64', dimensions: 4 } as EmbeddingRequest;
    const result = await openaiAdapter.embed!(request, context());
    assert.equal(fake.requests[0]!.path, '/v1/embeddings');
    assert.deepEqual(fake.requests[0]!.body, { ...request, model: UPSTREAM_MODEL });
    const body = JSON.parse(result.body) as { data: { embedding: string }[] };
    assert.equal(body.data.length, 2);
    assert.equal(Buffer.from(body.data[0]!.embedding, 'base64').length, 4 * 4);
    assert.deepEqual(result.usage, { prompt_tokens: 2, completion_tokens: 0, total_tokens: 2 });
  });

  it("sends the job's band as service_tier to a vendor that sells tiers, never the client's word (auto, scale, fast)", async () => {
    for (const asked of ['auto', 'scale', 'fast', 'flex', undefined]) {
      fake.reset();
      const request = chatRequest(asked ? { service_tier: asked } : {});
      await openaiAdapter.chat!(request, { ...context(), serviceTier: 'flex' });
      await collect(openaiAdapter.streamChat!({ ...request, stream: true }, { ...context(), serviceTier: 'priority' }));
      assert.deepEqual(
        fake.requests.map((sent) => (sent.body as { service_tier?: unknown }).service_tier),
        ['flex', 'priority'],
        `asked ${asked}`,
      );
    }
  });

  it(
    'sends no service_tier to a vendor that sells none (DeepSeek, xAI, any OpenAI-compatible server), nor on a ' +
      'legacy completion or embeddings',
    async () => {
      const compatible = { ...context(), channel: { vendor: 'vllm', baseUrl: fake.url, apiKey: KEY } };
      await openaiAdapter.chat!(chatRequest({ service_tier: 'flex' }), compatible);
      await collect(openaiAdapter.streamChat!(chatRequest({ service_tier: 'priority', stream: true }), compatible));
      const completion = {
        model: 'instruct',
        prompt: 'Say hi',
        max_tokens: 5,
        service_tier: 'flex',
      } as CompletionRequest;
      await openaiAdapter.complete!(completion, { ...context(), serviceTier: 'flex' });
      await collect(
        openaiAdapter.streamCompletion!({ ...completion, stream: true }, { ...context(), serviceTier: 'flex' }),
      );
      await openaiAdapter.embed!({ model: 'emb', input: 'a', service_tier: 'flex' } as EmbeddingRequest, {
        ...context(),
        serviceTier: 'flex',
      });
      assert.equal(fake.requests.length, 5);
      for (const sent of fake.requests) assert.equal('service_tier' in (sent.body as object), false, sent.path);
    },
  );

  it('reads the service_tier the answer says: the body, and a stream from its first chunk', async () => {
    fake.setServiceTier('default');
    const answer = await openaiAdapter.chat!(chatRequest(), { ...context(), serviceTier: 'priority' });
    assert.equal(answer.serviceTier, 'default');
    fake.setServiceTier(null);
    assert.equal((await openaiAdapter.chat!(chatRequest(), context())).serviceTier, undefined, 'null says none');
    const first = (fields: Record<string, unknown>) => ({
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      ...fields,
    });
    fake.enqueue({
      sse: sseOf(
        first({ service_tier: 'flex', choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] }),
        first({ service_tier: 'default', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
        '[DONE]',
      ),
    });
    const events = (
      await collect(openaiAdapter.streamChat!(chatRequest({ stream: true }), { ...context(), serviceTier: 'flex' }))
    ).flat();
    assert.deepEqual(
      events.filter((event) => event.type === 'start').map((event) => event.type === 'start' && event.serviceTier),
      ['flex'],
    );
  });
});

describe('openai adapter: answers', () => {
  it('returns the non-stream body byte for byte, with usage and what it says', async () => {
    const text =
      '{ "id":"x", ' +
      '"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"caf\\u00e9 ' +
      '☕"},"finish_reason":"stop"}],\n ' +
      '"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":1}} ' +
      '}';
    fake.enqueue({ status: 200, headers: { 'content-type': 'application/json' }, text });
    const answer = await openaiAdapter.chat!(chatRequest(), context());
    assert.equal(answer.wire, text);
    // As it came, saying the tier that served it.
    assert.equal(
      encodeAnswer(answer).body,
      withServiceTier(text, 'default'),
      'the chat encoder sends the vendor body as it came',
    );
    assert.equal(JSON.parse(encodeAnswer(answer).body).service_tier, 'default');
    assert.deepEqual(answer.usage, {
      prompt_tokens: 3,
      completion_tokens: 2,
      total_tokens: 5,
      prompt_tokens_details: { cached_tokens: 1 },
    });
    assert.deepEqual(answer.choices, [{ index: 0, text: 'café ☕', toolCalls: [], finishReason: 'stop' }]);
    assert.equal(answer.id, 'x');
  });

  it('reads tool calls of a plain answer', async () => {
    const message = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
    };
    fake.enqueue({
      status: 200,
      json: {
        id: 'y',
        object: 'chat.completion',
        created: 5,
        model: 'm',
        choices: [{ index: 0, message, finish_reason: 'tool_calls' }],
      },
    });
    const answer = await openaiAdapter.chat!(chatRequest(), context());
    assert.deepEqual(answer.choices, [
      {
        index: 0,
        text: null,
        toolCalls: [{ id: 'call_1', name: 'f', arguments: '{"a":1}' }],
        finishReason: 'tool_calls',
      },
    ]);
    assert.equal(answer.created, 5);
    assert.equal(answer.model, 'm');
  });

  it('streams the default answer; the usage chunk reaches the client only when asked for', async () => {
    const asked = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    assert.equal(asked.chunks.length, 1 + FAKE_REPLY_PIECES.length + 2);
    const content = asked.parsed.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('');
    assert.equal(content, FAKE_REPLY_PIECES.join(''));
    assert.deepEqual(asked.usage, FAKE_USAGE);
    assert.deepEqual(asked.parsed.at(-1)!.choices, []);
    assert.deepEqual(asked.parsed.at(-1)!.usage, FAKE_USAGE);

    const unasked = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()), {
      includeUsage: false,
    });
    assert.deepEqual(unasked.chunks, asked.chunks.slice(0, -1));
    assert.deepEqual(unasked.usage, FAKE_USAGE, 'usage is read for billing either way');
  });

  it('says what the stream means: text pieces, the finish and usage as events', async () => {
    const { batches } = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    const events = batches.flat();
    assert.equal(events[0]!.type, 'start');
    assert.equal(events[0]!.wire, undefined, 'start carries no chunk of its own');
    const text = events.flatMap((event) => (event.type === 'text' ? [event.text] : [])).join('');
    assert.equal(text, FAKE_REPLY_PIECES.join(''));
    assert.deepEqual(
      events.filter((event) => event.type === 'finish').map((event) => event.type === 'finish' && event.reason),
      ['stop'],
    );
    assert.ok(events.some((event) => event.type === 'role' && event.choice === 0));
  });

  for (const file of FIXTURE_FILES) {
    it(`replays ${file}: the client's chunks are the fixture's data lines`, async () => {
      fake.enqueue({ sseFile: `${FIXTURES}/${file}`, chunkSize: 7 });
      const encoded = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
      const expected = fixtureData(file).filter((data) => data !== '[DONE]');
      // Each as it came, saying the tier that served it.
      assert.deepEqual(
        encoded.chunks,
        expected.map((data) => withServiceTier(data, 'default')),
      );
      assert.deepEqual(encoded.usage, JSON.parse(expected.at(-1)!).usage);

      // The tool calls the events describe are the ones the chunks carry.
      const calls = new Map<number, { id?: string; name?: string; arguments: string }>();
      for (const event of encoded.batches.flat()) {
        if (event.type !== 'tool-call') continue;
        const call = calls.get(event.index) ?? { arguments: '' };
        if (event.id !== undefined) call.id = event.id;
        if (event.name !== undefined) call.name = event.name;
        call.arguments += event.arguments;
        calls.set(event.index, call);
      }
      const fromChunks = new Map<number, { id?: string; name?: string; arguments: string }>();
      for (const chunk of encoded.parsed) {
        for (const delta of chunk.choices[0]?.delta?.tool_calls ?? []) {
          const call = fromChunks.get(delta.index) ?? { arguments: '' };
          if (delta.id !== undefined) call.id = delta.id;
          if (delta.function?.name !== undefined) call.name = delta.function.name;
          call.arguments += delta.function?.arguments ?? '';
          fromChunks.set(delta.index, call);
        }
      }
      assert.ok(calls.size > 0);
      assert.deepEqual([...calls.entries()], [...fromChunks.entries()]);
    });
  }

  it('yields the events of one network read as one array', async () => {
    const file = FIXTURE_FILES[0]!;
    fake.enqueue({ sseFile: `${FIXTURES}/${file}`, chunkDelayMs: 5 });
    const spread = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    assert.ok(spread.batches.length > 1);
    assert.ok(spread.batches.every((batch) => batch.length > 0));
    assert.deepEqual(
      spread.chunks,
      fixtureData(file)
        .filter((data) => data !== '[DONE]')
        .map((data) => withServiceTier(data, 'default')),
    );

    fake.enqueue({ sseFile: `${FIXTURES}/${file}` });
    const single = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    assert.equal(single.batches.length, 1, 'one write upstream arrives as one batch');
  });

  it('reuses one keep-alive connection for successive streams', async () => {
    const fresh = createVendorHttp(loadConfig({}));
    fake.reset();
    try {
      for (let round = 0; round < 3; round += 1) {
        await collect(openaiAdapter.streamChat!(chatRequest({ stream: true }), context(undefined, fresh)));
        // The tail of the body after [DONE] is drained in the background before the socket is free again.
        await sleep(20);
      }
      assert.equal(fake.connections, 1);
    } finally {
      await fresh.close();
    }
  });

  it('serves legacy completions in both modes', async () => {
    const request = { model: 'instruct', prompt: 'Say hi', max_tokens: 5 } as CompletionRequest;
    const answer = await openaiAdapter.complete!(request, context());
    assert.equal(fake.requests[0]!.path, '/v1/completions');
    assert.equal(JSON.parse(answer.wire!).object, 'text_completion');
    assert.deepEqual(answer.usage, FAKE_USAGE);
    assert.equal(answer.choices[0]!.text, JSON.parse(answer.wire!).choices[0].text);

    const encoded = await encodeStream(openaiAdapter.streamCompletion!({ ...request, stream: true }, context()), {
      form: 'text_completion',
    });
    assert.equal(encoded.parsed.map((chunk) => chunk.choices[0]?.text ?? '').join(''), FAKE_REPLY_PIECES.join(''));
    assert.deepEqual(encoded.parsed.at(-1)!.choices, []);
    const text = encoded.batches
      .flat()
      .flatMap((event) => (event.type === 'text' ? [event.text] : []))
      .join('');
    assert.equal(text, FAKE_REPLY_PIECES.join(''));
  });

  it('forwards usage reported on an ordinary chunk even when the client did not ask for usage', async () => {
    const finish = {
      id: 'c1',
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    };
    fake.enqueue({ sse: sseOf(contentChunk('a'), finish, '[DONE]') });
    const encoded = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()), {
      includeUsage: false,
    });
    assert.deepEqual(
      encoded.chunks,
      [contentChunk('a'), finish].map((chunk) => JSON.stringify({ ...chunk, service_tier: 'default' })),
    );
    assert.deepEqual(encoded.usage, finish.usage);
  });

  it('passes on a chunk that carries nothing the event model names (logprobs alone)', async () => {
    const logprobsOnly = {
      id: 'c1',
      choices: [{ index: 0, delta: {}, logprobs: { content: [] }, finish_reason: null }],
    };
    const finish = { id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
    fake.enqueue({ sse: sseOf(contentChunk('a'), logprobsOnly, finish, '[DONE]') });
    const encoded = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    assert.deepEqual(
      encoded.chunks,
      [contentChunk('a'), logprobsOnly, finish].map((chunk) => JSON.stringify({ ...chunk, service_tier: 'default' })),
    );
  });
});

describe('openai adapter: vendor errors', () => {
  const errorBody = (message: string, type: string, code: string | null = null, param: string | null = null) => ({
    error: { message, type, param, code },
  });

  it('keeps a 400 as the client error it is, before any stream event', async () => {
    fake.enqueue({
      status: 400,
      json: errorBody(
        "Unsupported parameter: 'max_tokens'.",
        'invalid_request_error',
        'unsupported_parameter',
        'max_tokens',
      ),
    });
    const error = await gatewayError(collect(openaiAdapter.streamChat!(chatRequest({ stream: true }), context())));
    assert.deepEqual(
      error.toBody(),
      errorBody("Unsupported parameter: 'max_tokens'.", 'invalid_request_error', 'unsupported_parameter', 'max_tokens'),
    );
    assert.equal(error.status, 400);
    assert.equal(error.retryable, false);
  });

  it('maps the fake upstream refusing a bad key (401) to a generic 502 without vendor text', async () => {
    const context401 = {
      ...context(),
      channel: { vendor: 'openai', baseUrl: fake.url, apiKey: 'sk-wrong-key-abcdefghijkl' },
    };
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context401));
    assert.equal(error.status, 502);
    assert.equal(error.code, 'vendor_auth_failed');
    assert.equal(error.retryable, false);
    assert.doesNotMatch(error.message, /sk-|Incorrect/);
  });

  it('maps 404 to model_not_found with the vendor message', async () => {
    fake.enqueue({ status: 404, json: errorBody('The model `gpt-9` does not exist.', 'invalid_request_error', null) });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(error.status, 404);
    assert.equal(error.code, 'model_not_found');
    assert.equal(error.message, 'The model `gpt-9` does not exist.');
  });

  it('makes a 429 retryable and honours retry-after', async () => {
    fake.enqueue({
      status: 429,
      headers: { 'retry-after': '2' },
      json: errorBody('Rate limit reached.', 'requests', 'rate_limit_exceeded'),
    });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(error.status, 429);
    assert.equal(error.retryable, true);
    assert.equal(error.retryAfterMs, 2000);
    assert.equal(error.message, 'Rate limit reached.');

    fake.enqueue({
      status: 429,
      headers: { 'retry-after-ms': '150', 'retry-after': '9' },
      json: errorBody('Slow down.', 'tokens'),
    });
    const precise = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(precise.retryAfterMs, 150);
  });

  it('turns a 429 insufficient_quota into a non-retryable 503 with a generic message', async () => {
    fake.enqueue({
      status: 429,
      json: errorBody('You exceeded your current quota, check your plan.', 'insufficient_quota', 'insufficient_quota'),
    });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(error.status, 503);
    assert.equal(error.type, 'server_error');
    assert.equal(error.retryable, false);
    assert.equal(error.message, 'The upstream vendor refused the request: quota exhausted.');
  });

  for (const status of [500, 503]) {
    it(`makes a ${status} a retryable 502`, async () => {
      fake.enqueue({ status, json: errorBody('The engine is currently overloaded.', 'server_error') });
      const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
      assert.equal(error.status, 502);
      assert.equal(error.type, 'server_error');
      assert.equal(error.retryable, true);
      assert.equal(error.message, 'Upstream vendor error: The engine is currently overloaded.');
    });
  }

  it('makes a non-JSON 200 body a retryable 502', async () => {
    fake.enqueue({ status: 200, text: '<html>gateway</html>' });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
  });

  it('scrubs secrets from vendor messages', async () => {
    const message =
      `Bad request for key ${KEY}, also sk-proj-AbCdEf123456 and Bearer abc.def and token ` +
      `0123456789abcdef0123456789abcdef`;
    fake.enqueue({ status: 400, json: errorBody(message, 'invalid_request_error') });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(
      error.message,
      'Bad request for key [redacted], also [redacted] and Bearer [redacted] and token [redacted]',
    );
  });
});

describe('openai adapter: broken transport and streams', () => {
  it('makes a dropped connection a retryable vendor_unreachable', async () => {
    fake.enqueue({ destroy: true });
    const error = await gatewayError(openaiAdapter.chat!(chatRequest(), context()));
    assert.equal(error.status, 502);
    assert.equal(error.code, 'vendor_unreachable');
    assert.equal(error.retryable, true);
  });

  it('makes a connection lost mid-stream a retryable 502 after the events it delivered', async () => {
    fake.enqueue({ sse: sseOf(contentChunk('a')), destroyAtEnd: true });
    const seen: string[] = [];
    const error = await gatewayError(
      (async () => {
        for await (const batch of openaiAdapter.streamChat!(chatRequest({ stream: true }), context()))
          seen.push(...wireChunks(batch));
      })(),
    );
    assert.equal(seen.length, 1);
    assert.equal(error.status, 502);
    assert.equal(error.code, 'vendor_unreachable');
    assert.equal(fake.abortedRequests, 0);
  });

  it('fails a stream that ends early after the events it delivered', async () => {
    fake.enqueue({ sse: sseOf(contentChunk('a'), contentChunk('b')) });
    const seen: string[] = [];
    const error = await gatewayError(
      (async () => {
        for await (const batch of openaiAdapter.streamChat!(chatRequest({ stream: true }), context()))
          seen.push(...wireChunks(batch));
      })(),
    );
    assert.equal(seen.length, 2);
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.match(error.message, /ended early/);
  });

  it('accepts a stream that finished but lost its [DONE]', async () => {
    const finish = { id: 'c1', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] };
    fake.enqueue({ sse: sseOf(contentChunk('a'), finish) });
    const { chunks } = await encodeStream(openaiAdapter.streamChat!(chatRequest({ stream: true }), context()));
    assert.equal(chunks.length, 2);
  });

  it('throws on an error payload mid-stream, scrubbed', async () => {
    fake.enqueue({
      sse: sseOf(contentChunk('a'), { error: { message: `backend failed for ${KEY}`, type: 'server_error' } }),
    });
    const seen: string[] = [];
    const error = await gatewayError(
      (async () => {
        for await (const batch of openaiAdapter.streamChat!(chatRequest({ stream: true }), context()))
          seen.push(...wireChunks(batch));
      })(),
    );
    assert.equal(seen.length, 1);
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.equal(error.message, 'Upstream vendor error: backend failed for [redacted]');
  });

  it('rejects with the abort, not a GatewayError, when the caller aborts mid-stream', async () => {
    fake.enqueue({ sse: sseOf(contentChunk('a')), hang: true });
    const controller = new AbortController();
    const iterator = openaiAdapter.streamChat!(chatRequest({ stream: true }), context(controller.signal))[
      Symbol.asyncIterator
    ]();
    const first = await iterator.next();
    assert.equal(first.done, false);
    const pending = iterator.next();
    controller.abort();
    await assert.rejects(pending, (error: unknown) => {
      assert.ok(!(error instanceof GatewayError));
      assert.equal((error as Error).name, 'AbortError');
      return true;
    });
    for (let attempt = 0; attempt < 50 && fake.abortedRequests === 0; attempt += 1) await sleep(10);
    assert.equal(fake.abortedRequests, 1);
    assert.equal(fake.requests[0]!.aborted, true);
  });

  it('rejects with the abort reason while waiting for headers', async () => {
    fake.enqueue({ hang: true });
    const controller = new AbortController();
    const reason = new Error('client gone');
    setTimeout(() => controller.abort(reason), 30);
    await assert.rejects(openaiAdapter.chat!(chatRequest(), context(controller.signal)), (error) => error === reason);
  });

  it('times out a silent upstream (first byte, then idle) as retryable 504', async () => {
    const impatient = createVendorHttp(
      loadConfig({ VENDOR_FIRST_BYTE_TIMEOUT_MS: '200', VENDOR_IDLE_TIMEOUT_MS: '200' }),
    );
    try {
      fake.enqueue({ hang: true });
      const silent = await gatewayError(openaiAdapter.chat!(chatRequest(), context(undefined, impatient)));
      assert.equal(silent.status, 504);
      assert.equal(silent.code, 'vendor_timeout');
      assert.equal(silent.retryable, true);

      fake.enqueue({ sse: sseOf(contentChunk('a')), hang: true });
      const seen: string[] = [];
      const idle = await gatewayError(
        (async () => {
          for await (const batch of openaiAdapter.streamChat!(
            chatRequest({ stream: true }),
            context(undefined, impatient),
          ))
            seen.push(...wireChunks(batch));
        })(),
      );
      assert.equal(seen.length, 1);
      assert.equal(idle.status, 504);
    } finally {
      await impatient.close();
    }
  });
});

describe('mapOpenAIError and scrubSecrets', () => {
  it('reads retry-after as an HTTP date', () => {
    const now = Date.now();
    const date = new Date(now + 5_000).toUTCString();
    const error = mapOpenAIError({ status: 429, headers: { 'retry-after': date }, bodyText: '{}' });
    assert.ok(error.retryAfterMs !== undefined && error.retryAfterMs > 3_000 && error.retryAfterMs <= 5_000);
  });

  it('keeps 409 and 422 as client errors and 529 as a retryable vendor error', () => {
    assert.equal(mapOpenAIError({ status: 422, headers: {}, bodyText: 'nope' }).status, 422);
    assert.equal(mapOpenAIError({ status: 409, headers: {}, bodyText: '' }).retryable, false);
    const overloaded = mapOpenAIError({ status: 529, headers: {}, bodyText: '' });
    assert.equal(overloaded.status, 502);
    assert.equal(overloaded.retryable, true);
  });

  it('leaves ordinary text alone and redacts key-like tokens', () => {
    assert.equal(
      scrubSecrets('The model `gpt-4o-2024-08-06` does not exist'),
      'The model `gpt-4o-2024-08-06` does not exist',
    );
    assert.equal(scrubSecrets('key xai-AbCdEfGhIjKl12 here'), 'key [redacted] here');
    assert.equal(
      scrubSecrets('Incorrect API key provided: sk-abc***********wxyz.'),
      'Incorrect API key provided: [redacted].',
    );
    assert.equal(scrubSecrets('secret=mysecretvalue!', ['mysecretvalue!']), 'secret=[redacted]');
  });
});

describe('readOpenAIChoice: a vendor’s visible reasoning', () => {
  it('reads reasoning_content (DeepSeek, xAI) and reasoning as reasoning events, before the text of the same delta', () => {
    for (const field of ['reasoning_content', 'reasoning']) {
      const out: AnswerEvent[] = [];
      readOpenAIChoice({ index: 0, delta: { [field]: 'Thinking…', content: 'Hi' }, finish_reason: null }, out);
      assert.deepEqual(
        out,
        [
          { type: 'reasoning', choice: 0, text: 'Thinking…' },
          { type: 'text', choice: 0, text: 'Hi' },
        ],
        field,
      );
    }
    const none: AnswerEvent[] = [];
    readOpenAIChoice({ index: 0, delta: { reasoning_content: null, content: 'Hi' } }, none);
    assert.deepEqual(none, [{ type: 'text', choice: 0, text: 'Hi' }]);
  });
});
