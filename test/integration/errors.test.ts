import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { createKey, freshRedis, startGateway, type GatewayProcess } from '../support/gateway.js';
import { testRecord } from '../support/record.js';

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

// Every bad input gets an OpenAI-shaped error with the right status, and the process keeps serving.
describe('bad input', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let apiKey: string;

  before(async () => {
    const fresh = await freshRedis(2);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    // CATALOG_FILE adds a small text-only model, for the modality and context-window rules.
    const catalogFile = join(mkdtempSync(join(tmpdir(), 'sy-catalog-')), 'catalog.json');
    writeFileSync(
      catalogFile,
      JSON.stringify({
        models: [
          {
            id: 'mock-text',
            owned_by: 'mock',
            capability: 'chat',
            created: 0,
            context_window: 1000,
            max_output_tokens: 500,
            input_modalities: ['text'],
            supports_tools: true,
            routes: [{ vendor: 'mock', model: 'mock-chat' }],
          },
        ],
      }),
    );
    gateway = await startGateway({
      env: { REDIS_URL: fresh.url, MAX_BODY_BYTES: String(2 * 1024 * 1024), CATALOG_FILE: catalogFile },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
  });

  async function post(path: string, body: string, headers: Record<string, string> = {}) {
    const res = await fetch(`${gateway.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', ...headers },
      body,
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as ErrorBody };
  }

  function assertError(res: Awaited<ReturnType<typeof post>>, status: number, expected: Partial<ErrorBody['error']>) {
    assert.equal(res.status, status, res.text);
    assert.ok(res.headers.get('x-request-id'), 'x-request-id on errors too');
    const body = res.json();
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    assert.ok(body.error.message.length > 0);
    for (const [field, value] of Object.entries(expected))
      assert.equal(body.error[field as keyof ErrorBody['error']], value, `${field}: ${res.text}`);
  }

  const chat = (extra: Record<string, unknown>) =>
    JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'hi' }], ...extra });

  it('refuses malformed JSON and non-object bodies', async () => {
    assertError(await post('/v1/chat/completions', '{"model": "mock-chat",'), 400, { type: 'invalid_request_error' });
    assertError(await post('/v1/chat/completions', '[1,2]'), 400, { type: 'invalid_request_error' });
    assertError(await post('/v1/chat/completions', '"text"'), 400, { type: 'invalid_request_error' });
    assertError(await post('/v1/chat/completions', 'null'), 400, { type: 'invalid_request_error' });
    assertError(await post('/v1/chat/completions', ''), 400, { type: 'invalid_request_error' });
    assertError(await post('/v1/embeddings', 'not json'), 400, { type: 'invalid_request_error' });
  });

  it('names the param of missing or wrong-typed fields', async () => {
    assertError(
      await post('/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })),
      400,
      { param: 'model' },
    );
    assertError(await post('/v1/chat/completions', JSON.stringify({ model: 'mock-chat' })), 400, { param: 'messages' });
    assertError(await post('/v1/chat/completions', chat({ messages: [] })), 400, { param: 'messages' });
    assertError(await post('/v1/chat/completions', chat({ messages: 'hi' })), 400, { param: 'messages' });
    assertError(await post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: 5 }] })), 400, {
      param: 'messages[0].content',
    });
    assertError(await post('/v1/chat/completions', chat({ stream: 'yes' })), 400, {
      param: 'stream',
      code: 'invalid_type',
    });
    assertError(
      await post('/v1/chat/completions', JSON.stringify({ model: 7, messages: [{ role: 'user', content: 'hi' }] })),
      400,
      { param: 'model', code: 'invalid_type' },
    );
    assertError(
      await post('/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] })),
      400,
      { param: 'model', code: 'missing_required_parameter' },
    );
    assertError(
      await post('/v1/chat/completions', chat({ tools: [{ type: 'function', function: { name: 'bad name!' } }] })),
      400,
      {
        param: 'tools[0].function.name',
      },
    );
    assertError(await post('/v1/completions', JSON.stringify({ model: 'mock-instruct' })), 400, { param: 'prompt' });
    assertError(await post('/v1/embeddings', JSON.stringify({ model: 'mock-embedding', input: '' })), 400, {
      param: 'input',
    });
    assertError(
      await post('/v1/embeddings', JSON.stringify({ model: 'mock-embedding', input: 'x', encoding_format: 'hex' })),
      400,
      {
        param: 'encoding_format',
      },
    );
  });

  it('refuses out-of-range sampling parameters', async () => {
    assertError(await post('/v1/chat/completions', chat({ temperature: 2.5 })), 400, { param: 'temperature' });
    assertError(await post('/v1/chat/completions', chat({ temperature: -1 })), 400, { param: 'temperature' });
    assertError(await post('/v1/chat/completions', chat({ temperature: 'hot' })), 400, { param: 'temperature' });
    assertError(await post('/v1/chat/completions', chat({ top_p: 1.5 })), 400, { param: 'top_p' });
    assertError(await post('/v1/chat/completions', chat({ max_tokens: 0 })), 400, { param: 'max_tokens' });
    assertError(await post('/v1/chat/completions', chat({ max_tokens: 1.5 })), 400, { param: 'max_tokens' });
    assertError(await post('/v1/chat/completions', chat({ max_completion_tokens: -3 })), 400, {
      param: 'max_completion_tokens',
    });
    assertError(await post('/v1/chat/completions', chat({ n: 0 })), 400, { param: 'n' });
    assertError(await post('/v1/chat/completions', chat({ presence_penalty: 3 })), 400, { param: 'presence_penalty' });
    assertError(await post('/v1/chat/completions', chat({ stop: ['a', 'b', 'c', 'd', 'e'] })), 400, { param: 'stop' });
    assertError(await post('/v1/chat/completions', chat({ stream_options: { include_usage: true } })), 400, {
      param: 'stream_options',
    });
  });

  it('refuses unknown roles', async () => {
    const res = await post('/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'hi' }] }));
    assertError(res, 400, { param: 'messages[0].role' });
    assert.match(res.json().error.message, /user/);
  });

  it('answers 404 model_not_found for an unknown model and 400 for a model of another capability', async () => {
    assertError(await post('/v1/chat/completions', chat({ model: 'no-such-model' })), 404, {
      code: 'model_not_found',
      param: 'model',
    });
    assertError(await post('/v1/chat/completions', chat({ model: 'mock-embedding' })), 400, { param: 'model' });
    assertError(await post('/v1/embeddings', JSON.stringify({ model: 'mock-chat', input: 'x' })), 400, {
      param: 'model',
    });
    assertError(await post('/v1/completions', JSON.stringify({ model: 'mock-chat', prompt: 'x' })), 400, {
      param: 'model',
    });
    const res = await fetch(`${gateway.url}/v1/models/no-such-model`, {
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(res.status, 404);
    assert.equal(((await res.json()) as ErrorBody).error.code, 'model_not_found');
  });

  it('answers 401 invalid_api_key without, with an unknown, and with a revoked key', async () => {
    assertError(await post('/v1/chat/completions', chat({}), { authorization: '' }), 401, { code: 'invalid_api_key' });
    assertError(await post('/v1/chat/completions', chat({}), { authorization: 'Bearer sy-nope' }), 401, {
      code: 'invalid_api_key',
    });
    assertError(await post('/v1/chat/completions', chat({}), { authorization: 'Basic abc' }), 401, {
      code: 'invalid_api_key',
    });
    const doomed = await createKey(redis, 'doomed');
    const client = gateway.client(doomed.key);
    await client.models.list();
    const { KeyStore } = await import('../../api/accounts/key-store.js');
    assert.equal(await new KeyStore(redis, await testRecord(redis)).revoke(doomed.id), true);
    // Refused within a second: the revocation reaches every api over pub/sub.
    const until = Date.now() + 1000;
    let refused: unknown;
    while (!refused && Date.now() < until)
      refused = await client.models.list().then(
        () => undefined,
        (error: unknown) => error,
      );
    assert.ok(refused instanceof OpenAI.AuthenticationError && refused.code === 'invalid_api_key', String(refused));
  });

  it('refuses prompts over the context window before any vendor call', async () => {
    const long = 'x '.repeat(70_000);
    const res = await post(
      '/v1/chat/completions',
      chat({ messages: [{ role: 'user', content: long }], max_tokens: 60_000 }),
    );
    assertError(res, 400, { code: 'context_length_exceeded', param: 'messages' });
    assert.match(res.json().error.message, /maximum context length is 128000 tokens/);
    assertError(
      await post('/v1/completions', JSON.stringify({ model: 'mock-instruct', prompt: 'hello '.repeat(17_000) })),
      400,
      {
        code: 'context_length_exceeded',
        param: 'prompt',
      },
    );
    assertError(
      await post('/v1/embeddings', JSON.stringify({ model: 'mock-embedding', input: ['ok', 'word '.repeat(9000)] })),
      400,
      {
        code: 'context_length_exceeded',
        param: 'input',
      },
    );
    // Over the byte bound but under the window once counted: accepted (the tokenizer decides, not the bytes).
    const ok = await post(
      '/v1/chat/completions',
      JSON.stringify({ model: 'mock-text', messages: [{ role: 'user', content: 'a'.repeat(3000) }], max_tokens: 20 }),
    );
    assert.equal(ok.status, 200, ok.text);
    assertError(
      await post(
        '/v1/chat/completions',
        JSON.stringify({ model: 'mock-text', messages: [{ role: 'user', content: 'word '.repeat(1100) }] }),
      ),
      400,
      { code: 'context_length_exceeded' },
    );
  });

  it('refuses image parts for a text-only model', async () => {
    const res = await post(
      '/v1/chat/completions',
      JSON.stringify({
        model: 'mock-text',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'see' },
              { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
            ],
          },
        ],
      }),
    );
    assertError(res, 400, { param: 'messages[0].content[1].type' });
  });

  it('refuses an oversized body with 413 and keeps serving', async () => {
    const big = chat({ messages: [{ role: 'user', content: 'x'.repeat(3 * 1024 * 1024) }] });
    assertError(await post('/v1/chat/completions', big), 413, { type: 'invalid_request_error' });
    const ok = await gateway
      .client(apiKey)
      .chat.completions.create({ model: 'mock-chat', messages: [{ role: 'user', content: 'still there?' }] });
    assert.equal(ok.object, 'chat.completion');
  });

  it('refuses unknown paths with an OpenAI-shaped 404', async () => {
    const res = await fetch(`${gateway.url}/v1/nothing-here`, { headers: { authorization: `Bearer ${apiKey}` } });
    assert.equal(res.status, 404);
    assert.ok(((await res.json()) as ErrorBody).error.message);
  });

  it('passes the mock vendor errors through with their status', async () => {
    const client = gateway.client(apiKey);
    await assert.rejects(
      () =>
        client.chat.completions.create({
          model: 'mock-chat',
          messages: [{ role: 'user', content: 'fail [mock:error:400]' }],
        }),
      (error: unknown) => error instanceof OpenAI.BadRequestError,
    );
  });
});

describe('full queue', () => {
  let api: GatewayProcess;
  let redis: Redis;
  let apiKey: string;

  before(async () => {
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    apiKey = (await createKey(redis)).key;
    // An api with no worker behind it: jobs wait, and the bound is reached.
    api = await startGateway({ role: 'api', env: { REDIS_URL: fresh.url, QUEUE_MAX_WAITING: '2' } });
  });

  after(async () => {
    await api?.stop();
    redis?.disconnect();
  });

  it("answers 429 with retry-after once the account holds its lane's waiting room", async () => {
    const controllers = [new AbortController(), new AbortController()];
    const waiting = controllers.map((c) =>
      fetch(`${api.url}/v1/chat/completions`, {
        method: 'POST',
        signal: c.signal,
        headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'wait' }] }),
      }).catch(() => undefined),
    );
    const { waitFor } = await import('../support/gateway.js');
    await waitFor(async () => (await redis.zcard('bull:{chat}:prioritized')) === 2, 5000, 'two waiting jobs');
    // The api reads queue depth every 200 ms: give it several reads, even on a loaded machine.
    await new Promise((r) => setTimeout(r, 1000));
    const res = await fetch(`${api.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-chat', messages: [{ role: 'user', content: 'one too many' }] }),
    });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get('retry-after'), '1');
    assert.equal(((await res.json()) as ErrorBody).error.code, 'rate_limit_exceeded');

    // Clients that leave take their waiting jobs with them.
    for (const c of controllers) c.abort();
    await Promise.all(waiting);
    await waitFor(async () => (await redis.zcard('bull:{chat}:prioritized')) === 0, 2000, 'waiting jobs removed');
  });
});
