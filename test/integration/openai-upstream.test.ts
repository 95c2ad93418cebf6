import { wireFixture } from '../support/fixtures.js';
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { FAKE_REPLY_TEXT } from '../support/fake-openai-defaults.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { withServiceTier } from '../../workers/answers/chat-encoder.js';

const toolCallFixture = wireFixture('openai-chat-stream-tool-call.sse');
const parallelFixture = wireFixture('openai-chat-stream-parallel-tool-calls.sse');
const vendorKey = 'sk-vendor-secret-0123456789abcdefghij';

/** The `data:` payloads of an SSE body, in order. */
function dataLines(body: string): string[] {
  return (
    body
      .split(/\n\n/)
      // A chunk's frame starts with its number (`id: N`), for a resume; the error and [DONE] frames have none.
      .map((frame) => frame.trim().replace(/^id: \d+\n/, ''))
      .filter((frame) => frame.startsWith('data: '))
      .map((frame) => frame.slice('data: '.length))
  );
}

describe('gateway in front of an OpenAI-compatible upstream', () => {
  let fake: FakeOpenAI;
  let gateway: GatewayProcess;
  let redis: Redis;
  let apiKey: string;
  let client: OpenAI;

  before(async () => {
    fake = await startFakeOpenAI();
    const fresh = await freshRedis(3);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: vendorKey,
        OPENAI_BASE_URL: fake.url,
        MOCK_VENDOR: 'off',
        RETRY_BASE_MS: '20',
        STREAM_RESUME_GRACE_MS: '0',
      },
    });
    client = gateway.client(apiKey);
  });

  beforeEach(() => fake.reset());

  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  const post = (body: unknown, signal?: AbortSignal) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      signal,
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('lists only the models of configured vendors', async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    assert.ok(
      ids.includes('gpt-4o-mini') && ids.includes('text-embedding-3-small') && ids.includes('gpt-3.5-turbo-instruct'),
    );
    assert.ok(!ids.includes('mock-chat') && !ids.includes('deepseek-chat'));
    assert.equal((await client.models.retrieve('gpt-4o-mini')).owned_by, 'openai');
  });

  it('sends the vendor key (never the client key) and the client body upstream', async () => {
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hello' }],
      temperature: 0.2,
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
      tool_choice: 'none',
      reasoning_effort: 'low',
    } as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming);
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 1);
    const sent = fake.requests[0]!;
    assert.equal(sent.path, '/v1/chat/completions');
    assert.equal(sent.headers.authorization, `Bearer ${vendorKey}`);
    assert.ok(!JSON.stringify(sent.headers).includes(apiKey), 'client key stays at the gateway');
    const body = sent.body as Record<string, unknown>;
    assert.equal(body.model, 'gpt-4o-mini');
    assert.equal(body.temperature, 0.2);
    assert.equal(body.reasoning_effort, 'low', 'fields the gateway does not know pass through');
    assert.deepEqual(body.messages, [{ role: 'user', content: 'Hello' }]);
  });

  it('always asks the upstream stream for usage, and forwards it only when asked', async () => {
    fake.enqueue({ sseFile: toolCallFixture });
    const res = await post({ model: 'gpt-4o', messages: [{ role: 'user', content: 'weather?' }], stream: true });
    const relayed = dataLines(await res.text());
    const sent = fake.requests[0]!.body as { stream: boolean; stream_options: { include_usage: boolean } };
    assert.equal(sent.stream, true);
    assert.equal(sent.stream_options.include_usage, true);
    const recorded = dataLines(readFileSync(toolCallFixture, 'utf8'));
    const withoutUsage = recorded.filter(
      (d) => d === '[DONE]' || (JSON.parse(d) as { choices: unknown[] }).choices.length > 0,
    );
    // Each as it came, saying the tier that served it (default: the request named none).
    const stamped = withoutUsage.map((d) => (d === '[DONE]' ? d : withServiceTier(d, 'default')));
    assert.deepEqual(relayed, stamped, 'chunks relayed byte for byte, minus the usage chunk, with the serving tier');

    fake.enqueue({ sseFile: toolCallFixture });
    const asked = await post({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'weather?' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.deepEqual(
      dataLines(await asked.text()),
      recorded.map((d) => (d === '[DONE]' ? d : withServiceTier(d, 'default'))),
      'with include_usage the stream is the recording exactly, with the serving tier',
    );
  });

  it('relays a recorded parallel tool-call stream to the official client', async () => {
    fake.enqueue({ sseFile: parallelFixture, chunkSize: 97 });
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'two tools please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const calls = new Map<number, { name: string; args: string }>();
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      usage = chunk.usage ?? usage;
      for (const fragment of chunk.choices[0]?.delta.tool_calls ?? []) {
        const call = calls.get(fragment.index) ?? { name: '', args: '' };
        call.name += fragment.function?.name ?? '';
        call.args += fragment.function?.arguments ?? '';
        calls.set(fragment.index, call);
      }
    }
    assert.equal(calls.size, 2);
    for (const call of calls.values()) JSON.parse(call.args);
    assert.ok(usage && usage.total_tokens > 0);
  });

  it('retries a 429 after its retry-after and the client sees success', async () => {
    fake.enqueue({
      status: 429,
      headers: { 'retry-after': '1' },
      json: { error: { message: 'Rate limit reached', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
    });
    const started = Date.now();
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 2);
    assert.ok(Date.now() - started >= 900, 'waited for retry-after');
  });

  it('retries 503s and network errors before output, plain and streamed', async () => {
    fake.enqueue(
      { status: 503, json: { error: { message: 'overloaded', type: 'server_error', param: null, code: null } } },
      { destroy: true },
    );
    const completion = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(completion.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 3);

    fake.reset();
    fake.enqueue({ status: 500, json: { error: { message: 'boom', type: 'server_error', param: null, code: null } } });
    const stream = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(text, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 2);
  });

  it('gives up after the configured attempts with a 502', async () => {
    const failure = {
      status: 503,
      json: { error: { message: 'down', type: 'server_error', param: null, code: null } },
    };
    fake.enqueue(failure, failure, failure, failure);
    await assert.rejects(
      () => client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
      (error: unknown) => error instanceof OpenAI.APIError && error.status === 502,
    );
    assert.equal(fake.requests.length, 4);
  });

  it('maps vendor 4xx to the client with the vendor message, secrets scrubbed', async () => {
    fake.enqueue({
      status: 400,
      json: {
        error: {
          message: `Unsupported parameter: 'max_tokens' (key ${vendorKey})`,
          type: 'invalid_request_error',
          param: 'max_tokens',
          code: 'unsupported_parameter',
        },
      },
    });
    const res = await post({ model: 'o3', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { error: { message: string; param: string; code: string; type: string } };
    assert.match(body.error.message, /Unsupported parameter/);
    assert.ok(!body.error.message.includes(vendorKey));
    assert.equal(body.error.param, 'max_tokens');
    assert.equal(body.error.code, 'unsupported_parameter');
    assert.equal(fake.requests.length, 1, '4xx is not retried');
  });

  it("treats a vendor auth failure as the gateway's fault (5xx, no vendor text)", async () => {
    fake.enqueue({
      status: 401,
      json: {
        error: {
          message: `Incorrect API key provided: ${vendorKey}`,
          type: 'invalid_request_error',
          param: null,
          code: 'invalid_api_key',
        },
      },
    });
    const res = await post({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    assert.ok(res.status >= 500);
    const text = await res.text();
    assert.ok(!text.includes(vendorKey) && !text.includes('sk-vendor'));

    // The only channel is now cooling down, which moves traffic nowhere: the next call still
    // reaches the vendor (fixed key, say) at once instead of waiting out the cooldown.
    const started = Date.now();
    const next = await client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(next.choices[0]!.message.content, FAKE_REPLY_TEXT);
    assert.equal(fake.requests.length, 2);
    assert.ok(Date.now() - started < 5000, 'not held for the cooldown');
  });

  it('ends a stream that broke after output with an error event', async () => {
    const recorded = readFileSync(toolCallFixture, 'utf8');
    const partial = recorded.split('\n\n').slice(0, 3).join('\n\n') + '\n\n';
    fake.enqueue({ sse: partial, destroyAtEnd: true });
    const res = await post({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }], stream: true });
    assert.equal(res.status, 200);
    const frames = dataLines(await res.text());
    assert.equal(frames.length, 4, 'three chunks, then the error');
    const last = JSON.parse(frames.at(-1)!) as { error: { message: string; type: string } };
    assert.ok(last.error.message);
    assert.ok(!frames.includes('[DONE]'));
    assert.equal(fake.requests.length, 1, 'no retry after output started');

    fake.enqueue({ sse: partial, destroyAtEnd: true });
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const chunk of stream) void chunk;
    }, OpenAI.APIError);
  });

  it('aborts the running vendor call within a second when the client leaves', async () => {
    for (const stream of [false, true]) {
      fake.reset();
      fake.enqueue({ hang: true });
      const controller = new AbortController();
      const pending = post(
        { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }], stream },
        controller.signal,
      ).catch(() => undefined);
      await waitFor(() => fake.inFlight === 1, 5000, 'upstream call');
      const left = Date.now();
      controller.abort();
      await pending;
      await waitFor(() => fake.abortedRequests === 1, 1000, 'upstream call aborted');
      assert.ok(Date.now() - left < 1000);
    }
  });

  it('passes legacy completions and embeddings through', async () => {
    const completion = await client.completions.create({
      model: 'gpt-3.5-turbo-instruct',
      prompt: 'Say hi',
      max_tokens: 7,
    });
    assert.equal(completion.object, 'text_completion');
    assert.equal((fake.requests.at(-1)!.body as { max_tokens: number }).max_tokens, 7);

    const embeddings = await client.embeddings.create({
      model: 'text-embedding-3-small',
      input: ['a', 'b'],
      dimensions: 8,
    });
    assert.equal(embeddings.data.length, 2);
    assert.equal(embeddings.data[0]!.embedding.length, 8);
    const sent = fake.requests.at(-1)!.body as { encoding_format: string; dimensions: number };
    assert.equal(sent.encoding_format, 'base64', 'the official client asks for base64 and the gateway passes it on');
    assert.equal(sent.dimensions, 8);
  });
});
