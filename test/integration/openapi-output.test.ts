import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { replayStreamKey } from '../../shared/redis-keys.js';
import { anthropicError, startFakeAnthropic, type FakeAnthropic } from '../support/fake-anthropic.js';
import { geminiError, startFakeGemini, type FakeGemini } from '../support/fake-gemini.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import { createFakeOpenAIMedia, type FakeOpenAIMedia } from '../support/fake-openai-media.js';
import { assertMatchesSchema, sseEvents } from '../support/openapi-schemas.js';
import {
  createKey,
  freshRedis,
  paidAccountKey,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';

/*
 * What the gateway writes, byte for byte (read with fetch, not through a
 * client that would forgive a wrong shape), against the OpenAI OpenAPI
 * spec's own schemas: every /v1 JSON body and every stream event, for the
 * mock and for each vendor behind its strict fake, failures included.
 */

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const responsesTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Current weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};
const pngBase64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const png = Buffer.from(pngBase64, 'base64');
/** Long enough that 16 output tokens cut the mock's reply (which quotes it). */
const longPrompt =
  'Tell me a long story about boats and the sea, the wind, the waves, the harbour, the lighthouse keeper and his ' +
  'old dog who liked fish';

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

type Answer = { status: number; text: string };
type Json = Record<string, any>;

function gatewayCalls(gateway: () => GatewayProcess, key: () => string) {
  const auth = () => ({ authorization: `Bearer ${key()}` });
  const headers = () => ({ ...auth(), 'content-type': 'application/json' });
  const answer = async (res: Response): Promise<Answer> => ({ status: res.status, text: await res.text() });
  return {
    post: async (path: string, body: unknown) =>
      answer(
        await fetch(`${gateway().url}${path}`, { method: 'POST', headers: headers(), body: JSON.stringify(body) }),
      ),
    form: async (path: string, body: FormData) =>
      answer(await fetch(`${gateway().url}${path}`, { method: 'POST', headers: auth(), body })),
    get: async (path: string, withKey = true) =>
      answer(await fetch(`${gateway().url}${path}`, { headers: withKey ? headers() : {} })),
    del: async (path: string) =>
      answer(await fetch(`${gateway().url}${path}`, { method: 'DELETE', headers: headers() })),
  };
}
type Calls = ReturnType<typeof gatewayCalls>;

function json(answer: Answer, status: number, where: string): Json {
  assert.equal(answer.status, status, `${where}: ${answer.text.slice(0, 500)}`);
  return JSON.parse(answer.text) as Json;
}

/** A JSON answer with `status`, checked against `schema`; returned for further checks. */
function valid(schema: string, answer: Answer, status: number, where: string): Json {
  const body = json(answer, status, where);
  assertMatchesSchema(schema, body, where);
  return body;
}

/**
 * Every chunk of a chat completions stream. A stream that fails after its
 * 200 ends with an error frame (`data: {"error":…}`, the error body the
 * non-stream answer would have had) instead of `[DONE]`.
 */
function checkChatStream(answer: Answer, where: string, ending: 'done' | 'error' = 'done'): Json[] {
  assert.equal(answer.status, 200, `${where}: ${answer.text.slice(0, 500)}`);
  const chunks = sseEvents(answer.text).map(({ data }) => data as Json);
  assert.ok(chunks.length > 0, `${where}: no chunks`);
  const last = ending === 'error' ? chunks.pop()! : undefined;
  chunks.forEach((chunk, i) => assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, `${where} chunk ${i}`));
  if (last !== undefined) assertMatchesSchema('ErrorResponse', last, `${where}: the error frame`);
  else assert.ok(answer.text.trimEnd().endsWith('data: [DONE]'), `${where}: ends with [DONE]`);
  return chunks;
}

/** Every event of a Responses stream, against its own schema and the union; the events, parsed. */
function checkResponseStream(answer: Answer, where: string): Json[] {
  assert.equal(answer.status, 200, `${where}: ${answer.text.slice(0, 500)}`);
  const events = sseEvents(answer.text);
  assert.ok(events.length > 0, `${where}: no events`);
  for (const [i, { event, data }] of events.entries()) {
    const type = (data as { type: string }).type;
    assert.equal(event, type, `${where} event ${i}: the event: line names its type`);
    const schema = responseEventSchema[type];
    assert.ok(schema, `${where} event ${i}: a type this test knows (${type})`);
    assertMatchesSchema(schema, data, `${where} event ${i} (${type})`);
    assertMatchesSchema('ResponseStreamEvent', data, `${where} event ${i} (${type}) as the union`);
  }
  return events.map(({ data }) => data as Json);
}

/**
 * A legacy completions stream. The spec gives legacy completions one schema,
 * CreateCompletionResponse, for the body and for each stream chunk, with
 * `finish_reason` a required string and `usage` an object; the API itself
 * sends `finish_reason: null` in every chunk before the one that finishes,
 * and `usage: null` in every chunk but the usage one (WIRE.md, 1b), as the
 * gateway does and passes on. The one exception this file makes: in a chunk,
 * and only there, those two nulls are read as unset.
 */
function checkCompletionStream(answer: Answer, where: string): void {
  assert.equal(answer.status, 200, `${where}: ${answer.text.slice(0, 500)}`);
  const chunks = sseEvents(answer.text).map(({ data }) => data as Json);
  assert.ok(chunks.length > 1, `${where}: chunks`);
  assert.ok(answer.text.trimEnd().endsWith('data: [DONE]'), `${where}: ends with [DONE]`);
  let finished = false;
  for (const [i, chunk] of chunks.entries()) {
    const { usage, ...rest } = chunk;
    const choices = (chunk.choices as Json[]).map((choice) => {
      if (choice.finish_reason === null) {
        assert.equal(finished, false, `${where} chunk ${i}: no unfinished choice after the finish`);
        return { ...choice, finish_reason: 'length' };
      }
      finished = true;
      return choice;
    });
    assertMatchesSchema(
      'CreateCompletionResponse',
      { ...rest, ...(usage === null ? {} : { usage }), choices },
      `${where} chunk ${i}`,
    );
  }
  assert.ok(finished, `${where}: a chunk finishes`);
}

const types = (events: Json[]) => events.map((event) => event.type as string);

async function checkChat(call: Calls, model: string, where: string, toolPrompt: string): Promise<void> {
  const plain = valid(
    'CreateChatCompletionResponse',
    await call.post('/v1/chat/completions', {
      model,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello' },
      ],
      max_tokens: 50,
    }),
    200,
    `${where} chat`,
  );
  // A request that names no tier is served, and says it was, as `default`.
  assert.equal(plain.service_tier, 'default', `${where}: the answer names its tier`);
  const chunks = checkChatStream(
    await call.post('/v1/chat/completions', {
      model,
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
      stream_options: { include_usage: true },
    }),
    `${where} chat stream`,
  );
  assert.ok(chunks.at(-1)!.usage && chunks.at(-1)!.choices.length === 0, `${where}: the usage chunk`);
  assert.deepEqual(
    [...new Set(chunks.map((chunk) => chunk.service_tier))],
    ['default'],
    `${where}: every chunk names the tier`,
  );
  const tools = valid(
    'CreateChatCompletionResponse',
    await call.post('/v1/chat/completions', {
      model,
      messages: [{ role: 'user', content: toolPrompt }],
      tools: [weatherTool],
    }),
    200,
    `${where} tool call`,
  );
  assert.equal(
    tools.choices[0].message.tool_calls?.[0]?.function.name,
    'get_weather',
    `${where}: a tool call was made`,
  );
  const toolChunks = checkChatStream(
    await call.post('/v1/chat/completions', {
      model,
      messages: [{ role: 'user', content: toolPrompt }],
      tools: [weatherTool],
      stream: true,
    }),
    `${where} tool call stream`,
  );
  assert.ok(
    toolChunks.some((chunk) => chunk.choices[0]?.delta?.tool_calls),
    `${where}: the stream has tool call fragments`,
  );
}

async function checkResponses(call: Calls, model: string, where: string, toolPrompt: string): Promise<void> {
  const created = valid(
    'Response',
    await call.post('/v1/responses', { model, input: 'Hello', instructions: 'Be brief.', max_output_tokens: 50 }),
    200,
    `${where} responses`,
  );
  assert.equal(created.status, 'completed');
  const streamed = checkResponseStream(
    await call.post('/v1/responses', { model, input: 'Hello', stream: true }),
    `${where} responses stream`,
  );
  assert.equal(streamed.at(-1)!.type, 'response.completed');
  const tools = valid(
    'Response',
    await call.post('/v1/responses', { model, input: toolPrompt, tools: [responsesTool] }),
    200,
    `${where} responses tool call`,
  );
  assert.ok(
    tools.output.some((item: Json) => item.type === 'function_call'),
    `${where}: a function call item`,
  );
  const toolStream = checkResponseStream(
    await call.post('/v1/responses', { model, input: toolPrompt, tools: [responsesTool], stream: true }),
    `${where} responses tool call stream`,
  );
  assert.ok(
    types(toolStream).includes('response.function_call_arguments.done'),
    `${where}: the stream has a function call`,
  );
  valid('Response', await call.get(`/v1/responses/${created.id}`), 200, `${where} retrieve`);
  valid('ResponseItemList', await call.get(`/v1/responses/${created.id}/input_items`), 200, `${where} input items`);
}

describe("the gateway's own output against the OpenAI OpenAPI spec", () => {
  describe('the built-in mock', () => {
    let redis: Redis;
    let gateway: GatewayProcess;
    let key: string;
    const call = gatewayCalls(
      () => gateway,
      () => key,
    );
    // The mock calls a tool when the user names it.
    const toolPrompt = 'Call get_weather for Oslo';

    before(async () => {
      const fresh = await freshRedis(3);
      redis = fresh.redis;
      key = (await createKey(redis, 'openapi')).key;
      // No vendor configured: the mock serves its own models and stands in for every real one (priced, so a 429 can be
      // had).
      gateway = await startGateway({ env: { REDIS_URL: fresh.url, MOCK_VIDEO_MS: '100' } });
    });
    after(async () => {
      await gateway?.stop();
      redis?.disconnect();
    });

    it('chat completions: plain, streamed, tool calls, legacy functions, two choices cut short, a resumed stream', async () => {
      await checkChat(call, 'mock-chat', 'mock', toolPrompt);
      const functions = [{ name: 'get_weather', parameters: weatherTool.function.parameters }];
      const legacy = valid(
        'CreateChatCompletionResponse',
        await call.post('/v1/chat/completions', {
          model: 'mock-chat',
          messages: [{ role: 'user', content: 'Oslo?' }],
          functions,
          function_call: { name: 'get_weather' },
        }),
        200,
        'function_call',
      );
      assert.equal(legacy.choices[0].message.function_call.name, 'get_weather');
      checkChatStream(
        await call.post('/v1/chat/completions', {
          model: 'mock-chat',
          messages: [{ role: 'user', content: 'Oslo?' }],
          functions,
          function_call: { name: 'get_weather' },
          stream: true,
        }),
        'function_call stream',
      );
      const cut = valid(
        'CreateChatCompletionResponse',
        await call.post('/v1/chat/completions', {
          model: 'mock-chat',
          messages: [{ role: 'user', content: longPrompt }],
          max_tokens: 5,
          n: 2,
        }),
        200,
        'two choices',
      );
      assert.deepEqual(
        cut.choices.map((choice: Json) => choice.finish_reason),
        ['length', 'length'],
      );
      const stream = checkChatStream(
        await call.post('/v1/chat/completions', {
          model: 'mock-chat',
          messages: [{ role: 'user', content: longPrompt }],
          max_tokens: 5,
          n: 2,
          stream: true,
          stream_options: { include_usage: true },
        }),
        'two choices stream',
      );
      // A stream read again from its log (GET /v1/chat/completions/{id}/stream) is the same chunks.
      assert.deepEqual(
        checkChatStream(await call.get(`/v1/chat/completions/${stream[0]!.id}/stream`), 'resumed stream'),
        stream,
      );
    });

    it('legacy completions, plain and streamed', async () => {
      valid(
        'CreateCompletionResponse',
        await call.post('/v1/completions', {
          model: 'mock-instruct',
          prompt: ['Say this is a test', 'and this'],
          max_tokens: 20,
          n: 2,
          echo: true,
        }),
        200,
        'completions',
      );
      checkCompletionStream(
        await call.post('/v1/completions', {
          model: 'mock-instruct',
          prompt: 'Say this is a test',
          max_tokens: 20,
          stream: true,
          stream_options: { include_usage: true },
        }),
        'mock completions stream',
      );
    });

    it('embeddings, as floats and as base64', async () => {
      await checkEmbeddings(call, 'mock-embedding', 'mock');
    });

    it('model listing and one model', async () => {
      const listed = valid('ListModelsResponse', await call.get('/v1/models'), 200, 'models');
      valid('Model', await call.get(`/v1/models/${listed.data[0].id}`), 200, 'model');
    });

    it('image generation, as base64 and as a URL, and an image edit', async () => {
      for (const response_format of ['b64_json', 'url']) {
        valid(
          'ImagesResponse',
          await call.post('/v1/images/generations', {
            model: 'mock-image',
            prompt: 'a lighthouse',
            size: '256x256',
            response_format,
          }),
          200,
          `images ${response_format}`,
        );
      }
      const edit = new FormData();
      edit.set('model', 'mock-image');
      edit.set('prompt', 'add a hat');
      edit.set('size', '256x256');
      edit.set('image', new Blob([png], { type: 'image/png' }), 'photo.png');
      valid('ImagesResponse', await call.form('/v1/images/edits', edit), 200, 'image edit');
    });

    it('audio transcription and translation, json and verbose_json', async () => {
      await checkTranscriptions(call, 'mock-transcribe', 'mock');
      await checkTranslations(call, 'mock-transcribe', 'mock');
    });

    it('the Responses API: create, stream, tools, retrieve, input items', () =>
      checkResponses(call, 'mock-chat', 'mock', toolPrompt));

    it(
      'service_tier: the tier that served each answer, on a chat completion, every chunk, and the Response object ' +
        'and its events',
      async () => {
        // The mock sells no tiers and nothing waits here: priority (not granted) and flex (not deferred) are served as
        // default.
        const served = {
          priority: 'default',
          fast: 'default',
          default: 'default',
          auto: 'default',
          scale: 'default',
          flex: 'default',
        } as const;
        for (const [asked, tier] of Object.entries(served)) {
          const messages = [{ role: 'user', content: 'Hello' }];
          const plain = valid(
            'CreateChatCompletionResponse',
            await call.post('/v1/chat/completions', { model: 'mock-chat', messages, service_tier: asked }),
            200,
            `chat, ${asked}`,
          );
          assert.equal(plain.service_tier, tier, `chat asking ${asked}`);
          const chunks = checkChatStream(
            await call.post('/v1/chat/completions', {
              model: 'mock-chat',
              messages,
              service_tier: asked,
              stream: true,
              stream_options: { include_usage: true },
            }),
            `chat stream, ${asked}`,
          );
          assert.deepEqual(
            [...new Set(chunks.map((chunk) => chunk.service_tier))],
            [tier],
            `every chunk of a stream asking ${asked}`,
          );
          const response = valid(
            'Response',
            await call.post('/v1/responses', { model: 'mock-chat', input: 'Hello', service_tier: asked }),
            200,
            `responses, ${asked}`,
          );
          assert.equal(response.service_tier, tier, `response asking ${asked}`);
          assert.equal(
            json(await call.get(`/v1/responses/${response.id}`), 200, 'retrieve').service_tier,
            tier,
            `stored response asking ${asked}`,
          );
          const events = checkResponseStream(
            await call.post('/v1/responses', { model: 'mock-chat', input: 'Hello', service_tier: asked, stream: true }),
            `responses stream, ${asked}`,
          );
          const carrying = events.filter((event) => event.response !== undefined);
          assert.deepEqual(types(carrying), ['response.created', 'response.in_progress', 'response.completed']);
          for (const event of carrying)
            assert.equal(event.response.service_tier, tier, `${event.type} asking ${asked}`);
        }
        // A background response says its tier from the start (queued), and a name the API does not know is refused.
        const queued = valid(
          'Response',
          await call.post('/v1/responses', {
            model: 'mock-chat',
            input: 'Hello',
            background: true,
            service_tier: 'flex',
          }),
          200,
          'background flex',
        );
        assert.equal(queued.service_tier, 'flex');
        const refused = valid(
          'ErrorResponse',
          await call.post('/v1/chat/completions', {
            model: 'mock-chat',
            messages: [{ role: 'user', content: 'Hi' }],
            service_tier: 'turbo',
          }),
          400,
          'an unknown tier',
        );
        assert.equal(refused.error.param, 'service_tier');
      },
    );

    it('the Responses API: every echoed request field, a conversation of every item type, a chained response', async () => {
      const echoed = valid(
        'Response',
        await call.post('/v1/responses', {
          model: 'mock-chat',
          input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }],
          tools: [{ ...responsesTool, strict: true }],
          tool_choice: { type: 'function', name: 'get_weather' },
          parallel_tool_calls: false,
          temperature: 0.3,
          top_p: 0.9,
          metadata: { team: 'docs' },
          user: 'user-1',
          reasoning: { effort: 'low' },
          text: {
            format: {
              type: 'json_schema',
              name: 'weather',
              schema: { type: 'object', properties: { city: { type: 'string' } } },
              strict: false,
            },
          },
        }),
        200,
        'echoed fields',
      );
      assert.equal(echoed.user, 'user-1', 'a named user is echoed as the string it is');
      valid(
        'Response',
        await call.post('/v1/responses', {
          model: 'mock-chat',
          input: 'Hi',
          tools: [responsesTool],
          tool_choice: 'required',
          text: { format: { type: 'json_object' } },
        }),
        200,
        'json_object',
      );

      const conversation = valid(
        'Response',
        await call.post('/v1/responses', {
          model: 'mock-chat',
          tools: [responsesTool],
          input: [
            { role: 'developer', content: 'Be brief.' },
            {
              role: 'user',
              content: [
                { type: 'input_text', text: 'What is this?' },
                { type: 'input_image', image_url: `data:image/png;base64,${pngBase64}`, detail: 'auto' },
              ],
            },
            {
              role: 'user',
              content: [{ type: 'input_file', filename: 'note.txt', file_data: 'data:text/plain;base64,aGVsbG8=' }],
            },
            { role: 'assistant', content: 'A pixel.' },
            {
              type: 'message',
              role: 'assistant',
              content: [{ type: 'output_text', text: 'Checking the weather.', annotations: [] }],
            },
            { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
            { type: 'function_call_output', call_id: 'call_1', output: '{"temperature":21}' },
            { type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Bergen"}' },
            {
              type: 'function_call_output',
              call_id: 'call_2',
              output: [{ type: 'input_text', text: '{"temperature":12}' }],
            },
            { role: 'user', content: 'Thanks' },
          ],
        }),
        200,
        'conversation',
      );
      const items = valid(
        'ResponseItemList',
        await call.get(`/v1/responses/${conversation.id}/input_items?order=asc`),
        200,
        'conversation input items',
      );
      assert.equal(items.data.length, 10);
      valid(
        'ResponseItemList',
        await call.get(`/v1/responses/${conversation.id}/input_items?limit=3&after=${items.data[2].id}`),
        200,
        'a page of input items',
      );
      const chained = valid(
        'Response',
        await call.post('/v1/responses', {
          model: 'mock-chat',
          previous_response_id: conversation.id,
          input: 'And tomorrow?',
        }),
        200,
        'chained',
      );
      valid('ResponseItemList', await call.get(`/v1/responses/${chained.id}/input_items`), 200, 'chained input items');
    });

    it('the Responses API: cut short by max_output_tokens, plain and streamed', async () => {
      const cut = valid(
        'Response',
        await call.post('/v1/responses', { model: 'mock-chat', input: longPrompt, max_output_tokens: 16 }),
        200,
        'incomplete',
      );
      assert.deepEqual([cut.status, cut.incomplete_details], ['incomplete', { reason: 'max_output_tokens' }]);
      const events = checkResponseStream(
        await call.post('/v1/responses', {
          model: 'mock-chat',
          input: longPrompt,
          max_output_tokens: 16,
          stream: true,
        }),
        'incomplete stream',
      );
      assert.equal(events.at(-1)!.type, 'response.incomplete');
    });

    it('the Responses API: background, followed, replayed from its log and from the stored object, deleted', async () => {
      const background = valid(
        'Response',
        await call.post('/v1/responses', { model: 'mock-chat', input: 'Hello', background: true }),
        200,
        'background (queued)',
      );
      let done: Json = background;
      await waitFor(
        async () => {
          done = json(await call.get(`/v1/responses/${background.id}`), 200, 'background poll');
          return done.status === 'completed';
        },
        10_000,
        'the background response',
      );
      assertMatchesSchema('Response', done, 'background (completed)');
      checkResponseStream(await call.get(`/v1/responses/${background.id}?stream=true`), 'background replay');
      // Once the event log is gone (it expires) the events are rebuilt from the stored object.
      await redis.del(replayStreamKey(background.id));
      const rebuilt = checkResponseStream(
        await call.get(`/v1/responses/${background.id}?stream=true`),
        'background replay from the stored object',
      );
      assert.equal(rebuilt.at(-1)!.type, 'response.completed');
      const streamed = checkResponseStream(
        await call.post('/v1/responses', { model: 'mock-chat', input: 'Hello', background: true, stream: true }),
        'background, streamed',
      );
      assert.deepEqual(types(streamed).slice(0, 3), ['response.created', 'response.queued', 'response.in_progress']);
      const deleted = json(await call.del(`/v1/responses/${background.id}`), 200, 'delete');
      // The spec names no schema for this answer; its documented example is this object.
      assert.deepEqual(deleted, { id: background.id, object: 'response', deleted: true });
    });

    it('the Responses API: a failed response, its events, and a cancelled one', async () => {
      const failing = valid(
        'Response',
        await call.post('/v1/responses', { model: 'mock-chat', input: '[mock:error:400] Hello', background: true }),
        200,
        'failing (queued)',
      );
      let failed: Json = failing;
      await waitFor(
        async () => {
          failed = json(await call.get(`/v1/responses/${failing.id}`), 200, 'failing poll');
          return failed.status === 'failed';
        },
        10_000,
        'the failed response',
      );
      assertMatchesSchema('Response', failed, 'failed');
      // The mock's own code is not one of the spec's: the object says server_error, the stream's error event the code
      // itself.
      assert.equal(failed.error.code, 'server_error');
      const events = checkResponseStream(await call.get(`/v1/responses/${failing.id}?stream=true`), 'failed, followed');
      assert.deepEqual(types(events).slice(-2), ['error', 'response.failed']);
      assert.equal(events.at(-2)!.code, 'mock_error');
      await redis.del(replayStreamKey(failing.id));
      const rebuilt = checkResponseStream(
        await call.get(`/v1/responses/${failing.id}?stream=true`),
        'failed, rebuilt from the stored object',
      );
      assert.deepEqual(types(rebuilt).slice(-2), ['error', 'response.failed']);

      const slow = valid(
        'Response',
        await call.post('/v1/responses', {
          model: 'mock-chat',
          input: `[mock:slow:300] ${longPrompt}`,
          background: true,
        }),
        200,
        'slow (queued)',
      );
      await waitFor(
        async () => json(await call.get(`/v1/responses/${slow.id}`), 200, 'slow poll').status === 'in_progress',
        5000,
        'the slow response to start',
      );
      const cancelled = valid('Response', await call.post(`/v1/responses/${slow.id}/cancel`, {}), 200, 'cancel');
      assert.equal(cancelled.status, 'cancelled');
      checkResponseStream(await call.get(`/v1/responses/${slow.id}?stream=true`), 'cancelled, followed');
      valid(
        'ErrorResponse',
        await call.post(`/v1/responses/${failing.id}x/cancel`, {}),
        404,
        'cancel of an unknown response',
      );
    });

    it('videos: create, retrieve, list, delete, and one that fails', async () => {
      const created = valid(
        'VideoResource',
        await call.post('/v1/videos', { model: 'mock-video', prompt: 'a paper boat', seconds: '4', size: '1280x720' }),
        200,
        'video (queued)',
      );
      await waitFor(
        async () => json(await call.get(`/v1/videos/${created.id}`), 200, 'video poll').status === 'completed',
        10_000,
        'the video',
      );
      valid('VideoResource', await call.get(`/v1/videos/${created.id}`), 200, 'video (completed)');
      const failing = valid(
        'VideoResource',
        await call.post('/v1/videos', { model: 'mock-video', prompt: '[mock:error:400] a paper boat' }),
        200,
        'failing video (queued)',
      );
      await waitFor(
        async () => json(await call.get(`/v1/videos/${failing.id}`), 200, 'failing video poll').status === 'failed',
        10_000,
        'the failed video',
      );
      valid('VideoResource', await call.get(`/v1/videos/${failing.id}`), 200, 'video (failed)');
      const listed = valid('VideoListResource', await call.get('/v1/videos?limit=5'), 200, 'videos');
      assert.equal(listed.data.length, 2);
      valid('DeletedVideoResource', await call.del(`/v1/videos/${created.id}`), 200, 'video delete');
    });

    it('errors: 400, 401, 404, 429', async () => {
      valid(
        'ErrorResponse',
        await call.post('/v1/chat/completions', { model: 'mock-chat', messages: 'not a list' }),
        400,
        '400',
      );
      valid('ErrorResponse', await call.post('/v1/responses', { model: 'mock-chat' }), 400, '400 (responses)');
      valid(
        'ErrorResponse',
        await call.post('/v1/chat/completions', {
          model: 'mock-chat',
          messages: [{ role: 'user', content: '[mock:error:400] Hello' }],
          stream: true,
        }),
        400,
        '400 from the vendor, before a stream began',
      );
      valid('ErrorResponse', await call.get('/v1/models', false), 401, '401');
      valid(
        'ErrorResponse',
        await call.post('/v1/chat/completions', { model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
        404,
        '404',
      );
      for (const path of [
        '/v1/models/no-such-model',
        '/v1/responses/resp_none',
        '/v1/responses/resp_none/input_items',
        '/v1/videos/video_none',
      ]) {
        valid('ErrorResponse', await call.get(path), 404, `404 ${path}`);
      }
      const poor = await paidAccountKey(redis, 0);
      const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${poor.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] }),
      });
      valid('ErrorResponse', { status: refused.status, text: await refused.text() }, 429, '429');
    });
  });

  describe('each vendor behind its strict fake', () => {
    let openai: FakeOpenAI;
    let deepseek: FakeOpenAI;
    let xai: FakeOpenAI;
    let anthropic: FakeAnthropic;
    let gemini: FakeGemini;
    let media: FakeOpenAIMedia;
    let redis: Redis;
    let gateway: GatewayProcess;
    let key: string;
    const call = gatewayCalls(
      () => gateway,
      () => key,
    );
    const toolPrompt = 'What is the weather in Oslo?';

    before(async () => {
      [openai, deepseek, xai, anthropic, gemini] = await Promise.all([
        startFakeOpenAI(),
        startFakeOpenAI(),
        startFakeOpenAI(),
        startFakeAnthropic(),
        startFakeGemini(),
      ]);
      // The fake OpenAI also serves transcriptions and videos.
      media = createFakeOpenAIMedia({ pollsToComplete: 2 });
      openai.setDefault(media.handler);
      const fresh = await freshRedis(3);
      redis = fresh.redis;
      key = (await createKey(redis, 'openapi-vendors')).key;
      gateway = await startGateway({
        env: {
          REDIS_URL: fresh.url,
          OPENAI_API_KEY: 'sk-openai-test',
          OPENAI_BASE_URL: openai.url,
          // Every tier granted, so OpenAI is sent priority as asked.
          SERVICE_TIERS_GRANTED: 'priority,default,flex',
          DEEPSEEK_API_KEY: 'sk-deepseek-test',
          DEEPSEEK_BASE_URL: deepseek.url,
          XAI_API_KEY: 'xai-test',
          XAI_BASE_URL: xai.url,
          ANTHROPIC_API_KEY: 'sk-ant-test',
          ANTHROPIC_BASE_URL: anthropic.url,
          GEMINI_API_KEY: 'gemini-test-key',
          GEMINI_BASE_URL: gemini.url,
          VIDEO_POLL_INTERVAL_MS: '50',
        },
      });
    });
    after(async () => {
      await gateway?.stop();
      await Promise.all([openai, deepseek, xai, anthropic, gemini, media].map((fake) => fake?.close()));
      redis?.disconnect();
    });

    const vendors = [
      ['openai', 'gpt-4o-mini'],
      ['anthropic', 'claude-sonnet-4-5'],
      ['google', 'gemini-2.5-flash'],
      ['deepseek', 'deepseek-chat'],
      ['xai', 'grok-4'],
    ] as const;

    it('model listing and one model of each vendor', async () => {
      const listed = valid('ListModelsResponse', await call.get('/v1/models'), 200, 'models');
      const owners = new Set(listed.data.map((model: Json) => model.owned_by));
      for (const [vendor, model] of vendors) {
        assert.ok(owners.has(vendor), vendor);
        valid('Model', await call.get(`/v1/models/${model}`), 200, `model ${model}`);
      }
    });

    for (const [vendor, model] of vendors) {
      it(`${vendor}: chat completions and the Responses API`, async () => {
        await checkChat(call, model, vendor, toolPrompt);
        await checkResponses(call, model, vendor, toolPrompt);
      });
    }

    it(
      'service_tier: OpenAI receives the tier it is queued in, and the answer says the tier that served it; the ' +
        'other vendors never receive it',
      async () => {
        const messages = [{ role: 'user', content: 'Hello' }];
        const band = { flex: 'flex', priority: 'priority', default: 'default', auto: 'default' } as const;
        for (const asked of ['flex', 'priority', 'default', 'auto'] as const) {
          openai.requests.length = 0;
          valid(
            'CreateChatCompletionResponse',
            await call.post('/v1/chat/completions', { model: 'gpt-4o-mini', messages, service_tier: asked }),
            200,
            `openai chat, ${asked}`,
          );
          checkChatStream(
            await call.post('/v1/chat/completions', {
              model: 'gpt-4o-mini',
              messages,
              service_tier: asked,
              stream: true,
            }),
            `openai chat stream, ${asked}`,
          );
          valid(
            'Response',
            await call.post('/v1/responses', { model: 'gpt-4o-mini', input: 'Hello', service_tier: asked }),
            200,
            `openai responses, ${asked}`,
          );
          const sent = openai.requests
            .filter((request) => request.path.startsWith('/v1/chat/completions'))
            .map((request) => (request.body as Json).service_tier);
          assert.deepEqual(sent, [band[asked], band[asked], band[asked]], `what OpenAI received for ${asked}`);
        }
        // OpenAI's own echo (here: it served a priority request as default) is the tier echoed and billed.
        openai.requests.length = 0;
        openai.enqueue({
          json: {
            id: 'chatcmpl-tier',
            object: 'chat.completion',
            created: 1,
            model: 'gpt-4o-mini',
            service_tier: 'default',
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: 'Hi', refusal: null },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
          },
        });
        const downgraded = valid(
          'CreateChatCompletionResponse',
          await call.post('/v1/chat/completions', { model: 'gpt-4o-mini', messages, service_tier: 'priority' }),
          200,
          'openai downgraded',
        );
        assert.equal(downgraded.service_tier, 'default');
        const chunk = (fields: Json) =>
          `data: ${JSON.stringify({ id: 'chatcmpl-tier', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', service_tier: null, ...fields })}\n\n`;
        openai.enqueue({
          sse:
            chunk({
              choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, logprobs: null, finish_reason: null }],
            }) +
            chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }] }) +
            chunk({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } }) +
            'data: [DONE]\n\n',
        });
        // A stream whose chunks say no tier was served in the tier it was sent.
        const flexChunks = checkChatStream(
          await call.post('/v1/chat/completions', {
            model: 'gpt-4o-mini',
            messages,
            service_tier: 'flex',
            stream: true,
            stream_options: { include_usage: true },
          }),
          'openai stream without a tier',
        );
        assert.deepEqual(
          flexChunks.map((c) => c.service_tier),
          ['flex', 'flex', 'flex'],
        );

        for (const [vendor, model] of vendors.filter(([name]) => name !== 'openai')) {
          const fake = { anthropic, google: gemini, deepseek, xai }[
            vendor as 'anthropic' | 'google' | 'deepseek' | 'xai'
          ];
          fake.requests.length = 0;
          const plain = valid(
            'CreateChatCompletionResponse',
            await call.post('/v1/chat/completions', { model, messages, service_tier: 'flex' }),
            200,
            `${vendor} chat, flex`,
          );
          // Served at once, where nothing waited: neither deferred (flex) nor ahead of anything (priority).
          assert.equal(plain.service_tier, 'default', `${vendor}: the answer says default`);
          const stream = checkChatStream(
            await call.post('/v1/chat/completions', { model, messages, service_tier: 'priority', stream: true }),
            `${vendor} chat stream, priority`,
          );
          assert.deepEqual(
            [...new Set(stream.map((c) => c.service_tier))],
            ['default'],
            `${vendor}: every chunk says default`,
          );
          assert.equal(
            valid(
              'Response',
              await call.post('/v1/responses', { model, input: 'Hello', service_tier: 'flex' }),
              200,
              `${vendor} responses, flex`,
            ).service_tier,
            'default',
          );
          assert.equal(fake.requests.length, 3, `${vendor}: three calls`);
          for (const request of fake.requests)
            assert.equal((request.body as Json).service_tier, undefined, `${vendor} received no service_tier`);
        }
      },
    );

    it('openai: legacy completions, plain and streamed with usage', async () => {
      valid(
        'CreateCompletionResponse',
        await call.post('/v1/completions', {
          model: 'gpt-3.5-turbo-instruct',
          prompt: 'Say this is a test',
          max_tokens: 10,
        }),
        200,
        'completions',
      );
      checkCompletionStream(
        await call.post('/v1/completions', {
          model: 'gpt-3.5-turbo-instruct',
          prompt: 'Say this is a test',
          max_tokens: 10,
          stream: true,
          stream_options: { include_usage: true },
        }),
        'openai completions stream',
      );
    });

    it('openai and google: embeddings, as floats and as base64', async () => {
      await checkEmbeddings(call, 'text-embedding-3-small', 'openai');
      await checkEmbeddings(call, 'gemini-embedding-001', 'google');
    });

    it('openai: audio transcription and translation, and videos, one of them failing', async () => {
      await checkTranscriptions(call, 'whisper-1', 'openai');
      await checkTranslations(call, 'whisper-1', 'openai');
      const created = valid(
        'VideoResource',
        await call.post('/v1/videos', { model: 'sora-2', prompt: 'a paper boat', seconds: '4', size: '720x1280' }),
        200,
        'sora (queued)',
      );
      await waitFor(
        async () => json(await call.get(`/v1/videos/${created.id}`), 200, 'sora poll').status === 'completed',
        10_000,
        'the video',
      );
      valid('VideoResource', await call.get(`/v1/videos/${created.id}`), 200, 'sora (completed)');
      media.failNextVideo({
        code: 'moderation_blocked',
        message: 'Your request was blocked by our moderation system.',
      });
      const failing = valid(
        'VideoResource',
        await call.post('/v1/videos', { model: 'sora-2', prompt: 'a blocked boat', seconds: '4', size: '720x1280' }),
        200,
        'failing sora (queued)',
      );
      await waitFor(
        async () => json(await call.get(`/v1/videos/${failing.id}`), 200, 'failing sora poll').status === 'failed',
        10_000,
        'the failed video',
      );
      valid('VideoResource', await call.get(`/v1/videos/${failing.id}`), 200, 'sora (failed)');
      valid('VideoListResource', await call.get('/v1/videos'), 200, 'videos');
      valid('DeletedVideoResource', await call.del(`/v1/videos/${created.id}`), 200, 'sora delete');
    });

    it("each vendor's refusals, as error bodies", async () => {
      openai.enqueue({
        status: 400,
        json: {
          error: {
            message: "Unsupported value: 'temperature'.",
            type: 'invalid_request_error',
            param: 'temperature',
            code: 'unsupported_value',
          },
        },
      });
      valid(
        'ErrorResponse',
        await call.post('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] }),
        400,
        'openai 400',
      );
      anthropic.enqueue({
        status: 400,
        json: anthropicError('invalid_request_error', 'prompt is too long: 250000 tokens > 200000 maximum'),
      });
      valid(
        'ErrorResponse',
        await call.post('/v1/responses', { model: 'claude-sonnet-4-5', input: 'x' }),
        400,
        'anthropic 400',
      );
      gemini.enqueue({
        status: 400,
        json: geminiError(400, 'INVALID_ARGUMENT', 'Request contains an invalid argument.'),
      });
      valid(
        'ErrorResponse',
        await call.post('/v1/chat/completions', {
          model: 'gemini-2.5-flash',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
        }),
        400,
        'gemini 400',
      );
    });

    it('streams that fail after their 200, and a background response a vendor refuses', async () => {
      openai.enqueue({
        sse:
          'data: ' +
          '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"logprobs":null,"finish_reason":null}]}\n\n',
        destroyAtEnd: true,
      });
      checkChatStream(
        await call.post('/v1/chat/completions', {
          model: 'gpt-4o-mini',
          messages: [{ role: 'user', content: 'x' }],
          stream: true,
        }),
        'openai chat stream cut',
        'error',
      );

      anthropic.enqueue({
        events: [
          {
            type: 'message_start',
            message: {
              id: 'msg_1',
              type: 'message',
              role: 'assistant',
              model: 'claude-sonnet-4-5',
              content: [],
              stop_reason: null,
              stop_sequence: null,
              usage: { input_tokens: 5, output_tokens: 1 },
            },
          },
          { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
          { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi' } },
          { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
        ],
      });
      const events = checkResponseStream(
        await call.post('/v1/responses', { model: 'claude-sonnet-4-5', input: 'x', stream: true }),
        'anthropic responses stream failed',
      );
      assert.deepEqual(types(events).slice(-2), ['error', 'response.failed']);
      assert.equal(events.at(-1)!.response.error.code, 'server_error');

      gemini.enqueue({
        status: 400,
        json: geminiError(400, 'INVALID_ARGUMENT', 'Request contains an invalid argument.'),
      });
      const refused = valid(
        'Response',
        await call.post('/v1/responses', { model: 'gemini-2.5-flash', input: 'x', background: true }),
        200,
        'gemini background (queued)',
      );
      let failed: Json = refused;
      await waitFor(
        async () => {
          failed = json(await call.get(`/v1/responses/${refused.id}`), 200, 'gemini background poll');
          return failed.status === 'failed';
        },
        10_000,
        'the refused response',
      );
      assertMatchesSchema('Response', failed, 'gemini background (failed)');
      // A vendor's 400: the request's own fault, which the spec's codes call invalid_prompt.
      assert.equal(failed.error.code, 'invalid_prompt');
      checkResponseStream(await call.get(`/v1/responses/${refused.id}?stream=true`), 'gemini background, followed');
    });
  });
});

async function checkEmbeddings(call: Calls, model: string, where: string): Promise<void> {
  valid(
    'CreateEmbeddingResponse',
    await call.post('/v1/embeddings', { model, input: ['one', 'two'], encoding_format: 'float' }),
    200,
    `${where} embeddings float`,
  );
  // The spec types `embedding` as a list of floats only; with encoding_format base64 the API sends those floats as a
  // base64 string of little-endian float32s. It is checked decoded, so the rest of the body is held to the schema.
  const encoded = json(
    await call.post('/v1/embeddings', { model, input: ['one', 'two'], encoding_format: 'base64' }),
    200,
    `${where} embeddings base64`,
  );
  const decoded = {
    ...encoded,
    data: encoded.data.map((item: Json) => {
      assert.equal(typeof item.embedding, 'string');
      const bytes = Buffer.from(item.embedding as string, 'base64');
      return { ...item, embedding: Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4)) };
    }),
  };
  assertMatchesSchema('CreateEmbeddingResponse', decoded, `${where} embeddings base64`);
}

async function checkTranscriptions(call: Calls, model: string, where: string): Promise<void> {
  for (const [format, schema] of [
    ['json', 'CreateTranscriptionResponseJson'],
    ['verbose_json', 'CreateTranscriptionResponseVerboseJson'],
  ] as const) {
    const form = new FormData();
    form.set('model', model);
    form.set('response_format', format);
    form.set('file', new Blob([Buffer.from('ID3fake-audio-bytes')], { type: 'audio/mpeg' }), 'clip.mp3');
    valid(schema, await call.form('/v1/audio/transcriptions', form), 200, `${where} transcription ${format}`);
  }
}

async function checkTranslations(call: Calls, model: string, where: string): Promise<void> {
  for (const [format, schema] of [
    ['json', 'CreateTranslationResponseJson'],
    ['verbose_json', 'CreateTranslationResponseVerboseJson'],
  ] as const) {
    const form = new FormData();
    form.set('model', model);
    form.set('response_format', format);
    form.set('file', new Blob([Buffer.from('ID3fake-audio-bytes')], { type: 'audio/mpeg' }), 'clip.mp3');
    const body = valid(schema, await call.form('/v1/audio/translations', form), 200, `${where} translation ${format}`);
    if (format === 'verbose_json') assert.equal(body.language, 'english', `${where}: a translation is in English`);
  }
}
