import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startVendorFakes } from '../support/vendor-fakes.js';
import { assertMatchesSchema, sseEvents } from '../support/openapi-schemas.js';
import { createKey, freshRedis, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';

/*
 * What the gateway writes, byte for byte (read with fetch, not through a
 * client that would forgive a wrong shape), against the OpenAI OpenAPI
 * spec's own schemas: every /v1 JSON body and every stream event, for the
 * mock and for each vendor behind its strict fake.
 */

type Closer = { close(): Promise<void> };
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const responsesTool = { type: 'function', name: 'get_weather', description: 'Current weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false };
const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

/** The schema the spec gives each Responses stream event type (the union's members, by their `type`). */
const responseEventSchema: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.queued': 'ResponseQueuedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.completed': 'ResponseCompletedEvent',
  'response.incomplete': 'ResponseIncompleteEvent',
  'response.failed': 'ResponseFailedEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.refusal.delta': 'ResponseRefusalDeltaEvent',
  'response.refusal.done': 'ResponseRefusalDoneEvent',
  'response.function_call_arguments.delta': 'ResponseFunctionCallArgumentsDeltaEvent',
  'response.function_call_arguments.done': 'ResponseFunctionCallArgumentsDoneEvent',
  error: 'ResponseErrorEvent',
};

function gatewayCalls(gateway: () => GatewayProcess, key: () => string) {
  const headers = () => ({ authorization: `Bearer ${key()}`, 'content-type': 'application/json' });
  return {
    async post(path: string, body: unknown): Promise<{ status: number; text: string }> {
      const res = await fetch(`${gateway().url}${path}`, { method: 'POST', headers: headers(), body: JSON.stringify(body) });
      return { status: res.status, text: await res.text() };
    },
    async get(path: string, auth = true): Promise<{ status: number; text: string }> {
      const res = await fetch(`${gateway().url}${path}`, { headers: auth ? headers() : {} });
      return { status: res.status, text: await res.text() };
    },
    async del(path: string): Promise<{ status: number; text: string }> {
      const res = await fetch(`${gateway().url}${path}`, { method: 'DELETE', headers: headers() });
      return { status: res.status, text: await res.text() };
    },
  };
}

function json(answer: { status: number; text: string }, status: number, where: string): unknown {
  assert.equal(answer.status, status, `${where}: ${answer.text.slice(0, 500)}`);
  return JSON.parse(answer.text);
}

/** Every chunk of a chat completions stream, and the usage chunk when asked for. */
function checkChatStream(text: string, where: string): void {
  const events = sseEvents(text);
  assert.ok(events.length > 0, `${where}: no chunks`);
  events.forEach(({ data }, i) => assertMatchesSchema('CreateChatCompletionStreamResponse', data, `${where} chunk ${i}`));
  assert.ok(text.trimEnd().endsWith('data: [DONE]'), `${where}: ends with [DONE]`);
}

function checkResponseStream(text: string, where: string): void {
  const events = sseEvents(text);
  assert.ok(events.length > 0, `${where}: no events`);
  for (const [i, { event, data }] of events.entries()) {
    const type = (data as { type: string }).type;
    assert.equal(event, type, `${where} event ${i}: the event: line names its type`);
    const schema = responseEventSchema[type];
    assert.ok(schema, `${where} event ${i}: a type this test knows (${type})`);
    assertMatchesSchema(schema, data, `${where} event ${i} (${type})`);
    assertMatchesSchema('ResponseStreamEvent', data, `${where} event ${i} (${type}) as the union`);
  }
}

async function checkChat(call: ReturnType<typeof gatewayCalls>, model: string, where: string): Promise<void> {
  const plain = json(await call.post('/v1/chat/completions', { model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }], max_tokens: 50 }), 200, `${where} chat`);
  assertMatchesSchema('CreateChatCompletionResponse', plain, `${where} chat`);
  const streamed = await call.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hello' }], stream: true, stream_options: { include_usage: true } });
  assert.equal(streamed.status, 200, streamed.text);
  checkChatStream(streamed.text, `${where} chat stream`);
  const tools = json(await call.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools: [weatherTool] }), 200, `${where} tool call`);
  assertMatchesSchema('CreateChatCompletionResponse', tools, `${where} tool call`);
  const toolStream = await call.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'What is the weather in Oslo?' }], tools: [weatherTool], stream: true });
  checkChatStream(toolStream.text, `${where} tool call stream`);
}

async function checkResponses(call: ReturnType<typeof gatewayCalls>, model: string, where: string): Promise<void> {
  const created = json(await call.post('/v1/responses', { model, input: 'Hello', instructions: 'Be brief.', max_output_tokens: 50 }), 200, `${where} responses`) as { id: string };
  assertMatchesSchema('Response', created, `${where} responses`);
  const streamed = await call.post('/v1/responses', { model, input: 'Hello', stream: true });
  assert.equal(streamed.status, 200, streamed.text);
  checkResponseStream(streamed.text, `${where} responses stream`);
  const tools = json(await call.post('/v1/responses', { model, input: 'What is the weather in Oslo?', tools: [responsesTool] }), 200, `${where} responses tool call`);
  assertMatchesSchema('Response', tools, `${where} responses tool call`);
  const toolStream = await call.post('/v1/responses', { model, input: 'What is the weather in Oslo?', tools: [responsesTool], stream: true });
  checkResponseStream(toolStream.text, `${where} responses tool call stream`);
  assertMatchesSchema('Response', json(await call.get(`/v1/responses/${created.id}`), 200, `${where} retrieve`), `${where} retrieve`);
  assertMatchesSchema('ResponseItemList', json(await call.get(`/v1/responses/${created.id}/input_items`), 200, `${where} input items`), `${where} input items`);
}

describe('the gateway\'s own output against the OpenAI OpenAPI spec', () => {
  describe('the built-in mock', () => {
    let redis: Redis;
    let gateway: GatewayProcess;
    let key: string;
    const call = gatewayCalls(() => gateway, () => key);

    before(async () => {
      const fresh = await freshRedis(3);
      redis = fresh.redis;
      key = (await createKey(redis, 'openapi')).key;
      // No vendor configured: the mock serves its own models and stands in for every real one (priced, so a 429 can be had).
      gateway = await startGateway({ env: { REDIS_URL: fresh.url, MOCK_VIDEO_MS: '100' } });
    });
    after(async () => {
      await gateway?.stop();
      redis?.disconnect();
    });

    it('chat completions, plain and streamed, with tool calls', () => checkChat(call, 'mock-chat', 'mock'));

    it('legacy completions, plain and streamed', async () => {
      const plain = json(await call.post('/v1/completions', { model: 'mock-instruct', prompt: 'Say this is a test', max_tokens: 20 }), 200, 'completions');
      assertMatchesSchema('CreateCompletionResponse', plain, 'completions');
      const streamed = await call.post('/v1/completions', { model: 'mock-instruct', prompt: 'Say this is a test', max_tokens: 20, stream: true, stream_options: { include_usage: true } });
      const events = sseEvents(streamed.text);
      assert.ok(events.length > 0);
      // The spec gives legacy completions one schema, CreateCompletionResponse, for the body and each stream chunk,
      // with finish_reason a required string; the API itself sends null in every chunk before the last (WIRE.md), as
      // the gateway does. The one exception this file makes: such a chunk is checked with that null read as unset.
      for (const [i, { data }] of events.entries()) {
        const chunk = data as { choices: Array<{ finish_reason: string | null }> };
        const last = i === events.length - 1 || chunk.choices.some((choice) => choice.finish_reason !== null);
        if (!last) for (const choice of chunk.choices) assert.equal(choice.finish_reason, null, `completions chunk ${i}`);
        const checked = last ? chunk : { ...chunk, choices: chunk.choices.map((choice) => ({ ...choice, finish_reason: 'length' })) };
        assertMatchesSchema('CreateCompletionResponse', checked, `completions chunk ${i}`);
      }
    });

    it('embeddings, as floats and as base64', async () => {
      const floats = json(await call.post('/v1/embeddings', { model: 'mock-embedding', input: ['one', 'two'], encoding_format: 'float' }), 200, 'embeddings float');
      assertMatchesSchema('CreateEmbeddingResponse', floats, 'embeddings float');
      // The spec types `embedding` as a list of floats only; with encoding_format base64 the API sends those floats as a
      // base64 string of little-endian float32s. It is checked decoded, so the rest of the body is held to the schema.
      const encoded = json(await call.post('/v1/embeddings', { model: 'mock-embedding', input: ['one', 'two'], encoding_format: 'base64' }), 200, 'embeddings base64') as { data: Array<{ embedding: unknown }> };
      const decoded = {
        ...encoded,
        data: encoded.data.map((item) => {
          assert.equal(typeof item.embedding, 'string');
          const bytes = Buffer.from(item.embedding as string, 'base64');
          return { ...item, embedding: Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4)) };
        }),
      };
      assertMatchesSchema('CreateEmbeddingResponse', decoded, 'embeddings base64');
    });

    it('model listing and one model', async () => {
      const listed = json(await call.get('/v1/models'), 200, 'models') as { data: Array<{ id: string }> };
      assertMatchesSchema('ListModelsResponse', listed, 'models');
      assertMatchesSchema('Model', json(await call.get(`/v1/models/${listed.data[0]!.id}`), 200, 'model'), 'model');
    });

    it('image generation, as base64 and as a URL', async () => {
      for (const response_format of ['b64_json', 'url']) {
        const answer = json(await call.post('/v1/images/generations', { model: 'mock-image', prompt: 'a lighthouse', size: '256x256', response_format }), 200, `images ${response_format}`);
        assertMatchesSchema('ImagesResponse', answer, `images ${response_format}`);
      }
    });

    it('image edits and audio transcription (multipart)', async () => {
      const edit = new FormData();
      edit.set('model', 'mock-image');
      edit.set('prompt', 'add a hat');
      edit.set('size', '256x256');
      edit.set('image', new Blob([png], { type: 'image/png' }), 'photo.png');
      const edited = await fetch(`${gateway.url}/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: edit });
      assertMatchesSchema('ImagesResponse', json({ status: edited.status, text: await edited.text() }, 200, 'image edit'), 'image edit');
      for (const [format, schema] of [['json', 'CreateTranscriptionResponseJson'], ['verbose_json', 'CreateTranscriptionResponseVerboseJson']] as const) {
        const form = new FormData();
        form.set('model', 'mock-transcribe');
        form.set('response_format', format);
        form.set('file', new Blob([Buffer.from('ID3fake-audio-bytes')], { type: 'audio/mpeg' }), 'clip.mp3');
        const answer = await fetch(`${gateway.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
        assertMatchesSchema(schema, json({ status: answer.status, text: await answer.text() }, 200, `transcription ${format}`), `transcription ${format}`);
      }
    });

    it('the Responses API: create, stream, tools, retrieve, input items, background, delete', async () => {
      await checkResponses(call, 'mock-chat', 'mock');
      const background = json(await call.post('/v1/responses', { model: 'mock-chat', input: 'Hello', background: true }), 200, 'background') as { id: string; status: string };
      assertMatchesSchema('Response', background, 'background (queued)');
      let done: { status: string } = background;
      await waitFor(async () => {
        done = json(await call.get(`/v1/responses/${background.id}`), 200, 'background poll') as { status: string };
        return done.status === 'completed';
      }, 10_000, 'the background response');
      assertMatchesSchema('Response', done, 'background (completed)');
      const replay = await call.get(`/v1/responses/${background.id}?stream=true`);
      checkResponseStream(replay.text, 'background replay');
      const deleted = json(await call.del(`/v1/responses/${background.id}`), 200, 'delete');
      assert.deepEqual(deleted, { id: background.id, object: 'response', deleted: true });
    });

    it('videos: create, retrieve, list, delete', async () => {
      const created = json(await call.post('/v1/videos', { model: 'mock-video', prompt: 'a paper boat', seconds: '4', size: '1280x720' }), 200, 'video') as { id: string };
      assertMatchesSchema('VideoResource', created, 'video (queued)');
      await waitFor(async () => (json(await call.get(`/v1/videos/${created.id}`), 200, 'video poll') as { status: string }).status === 'completed', 10_000, 'the video');
      assertMatchesSchema('VideoResource', json(await call.get(`/v1/videos/${created.id}`), 200, 'video'), 'video (completed)');
      assertMatchesSchema('VideoListResource', json(await call.get('/v1/videos?limit=5'), 200, 'videos'), 'videos');
      assertMatchesSchema('DeletedVideoResource', json(await call.del(`/v1/videos/${created.id}`), 200, 'video delete'), 'video delete');
    });

    it('errors: 400, 401, 404, 429', async () => {
      const bad = await call.post('/v1/chat/completions', { model: 'mock-chat', messages: 'not a list' });
      assertMatchesSchema('ErrorResponse', json(bad, 400, '400'), '400');
      assertMatchesSchema('ErrorResponse', json(await call.get('/v1/models', false), 401, '401'), '401');
      assertMatchesSchema('ErrorResponse', json(await call.post('/v1/chat/completions', { model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }), 404, '404'), '404');
      const poor = await createKey(redis, 'poor');
      await redis.hset(`sy:{acct}:account:acct_${poor.id}`, { id: `acct_${poor.id}`, email: `${poor.id}@example.com`, name: 'poor', role: 'member', created: 1, reserved: 0, balance: 0, unlimited: '0' });
      await redis.hset(`sy:{acct}:key:${poor.id}`, { account: `acct_${poor.id}` });
      const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${poor.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] }),
      });
      const refusedText = await refused.text();
      assert.equal(refused.status, 429, refusedText);
      assertMatchesSchema('ErrorResponse', JSON.parse(refusedText), '429');
    });
  });

  describe('each vendor behind its strict fake', () => {
    const closers: Closer[] = [];
    let redis: Redis;
    let gateway: GatewayProcess;
    let key: string;
    const call = gatewayCalls(() => gateway, () => key);

    before(async () => {
      const fakes = await startVendorFakes();
      closers.push(fakes);
      const fresh = await freshRedis(3);
      redis = fresh.redis;
      key = (await createKey(redis, 'openapi-vendors')).key;
      gateway = await startGateway({ env: { REDIS_URL: fresh.url, ...fakes.env } });
    });
    after(async () => {
      await gateway?.stop();
      await Promise.all(closers.map((c) => c.close()));
      redis?.disconnect();
    });

    for (const [vendor, model] of [
      ['openai', 'gpt-4o-mini'],
      ['anthropic', 'claude-sonnet-4-5'],
      ['google', 'gemini-2.5-flash'],
      ['deepseek', 'deepseek-chat'],
      ['xai', 'grok-4'],
    ] as const) {
      it(`${vendor}: chat completions and the Responses API`, async () => {
        await checkChat(call, model, vendor);
        await checkResponses(call, model, vendor);
      });
    }
  });
});
