import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import type { CatalogModel } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import { countTextTokens } from '../../shared/tokens.js';
import {
  buildGeminiRequest,
  convertJsonSchema,
  createToolCallId,
  encodeFloat32Base64,
  geminiAdapter,
  mapGeminiError,
  readThoughtSignature,
  SKIP_THOUGHT_SIGNATURE,
} from '../../workers/vendors/gemini/index.js';
import { mapGeminiFinishReason } from '../../workers/vendors/gemini/map-gemini-finish-reason.js';
import type { CallContext } from '../../workers/vendors/types.js';
import type { AnswerEvent } from '../../workers/answers/events.js';
import { encodeAnswer, encodeStream } from '../support/answers.js';
import {
  FAKE_GEMINI_PIECES,
  FAKE_GEMINI_TEXT,
  fakeEmbedding,
  geminiError,
  startFakeGemini,
  type FakeGemini,
} from '../support/fake-gemini.js';
import { wireFixture } from '../support/fixtures.js';
import { gatewayError } from '../support/assertions.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

type Json = Record<string, any>;
const KEY = 'AIzaSyTestKey0123456789abcdefghijklmno';
const MODEL: CatalogModel = {
  id: 'gemini-2.5-flash',
  owned_by: 'google',
  capability: 'chat',
  created: 0,
  context_window: 1_048_576,
  max_output_tokens: 65_536,
  input_modalities: ['text', 'image', 'audio'],
  supports_tools: true,
  routes: [{ vendor: 'google' }],
};
const WEATHER = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};

let fake: FakeGemini;
let logs: Json[] = [];

function context(options: { signal?: AbortSignal; upstreamModel?: string; apiKey?: string } = {}): CallContext {
  return {
    requestId: 'req_gemini',
    signal: options.signal ?? new AbortController().signal,
    channel: { vendor: 'google', baseUrl: fake.url, apiKey: options.apiKey ?? KEY },
    upstreamModel: options.upstreamModel ?? 'gemini-2.5-flash',
    model: MODEL,
    log: pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line)) }),
    http,
  };
}

const chat = (extra: Json = {}): ChatCompletionRequest =>
  ({ model: MODEL.id, messages: [{ role: 'user', content: 'Hi' }], ...extra }) as ChatCompletionRequest;
const sent = (index = 0) => fake.requests[index]!.body as Json;
const textOf = (parsed: Json[]) => parsed.map((chunk) => chunk.choices[0]?.delta?.content ?? '').join('');

/** The adapter's plain answer and the body a chat client gets for it. */
async function answer(request: ChatCompletionRequest, ctx: CallContext) {
  const result = await geminiAdapter.chat!(request, ctx);
  return { result, body: encodeAnswer(result).parsed };
}
const bodyOf = async (request: ChatCompletionRequest, ctx: CallContext) => (await answer(request, ctx)).body;
const stream = (request: ChatCompletionRequest, ctx: CallContext) => geminiAdapter.streamChat!(request, ctx);
const embed = (request: EmbeddingRequest, ctx: CallContext) => geminiAdapter.embed!(request, ctx);

/** Passes a stream through while keeping its batches, so what came before a failure can still be encoded. */
async function* recording(batches: AsyncIterable<AnswerEvent[]>, seen: AnswerEvent[][]): AsyncGenerator<AnswerEvent[]> {
  for await (const batch of batches) {
    seen.push(batch);
    yield batch;
  }
}
async function* replay(batches: AnswerEvent[][]): AsyncGenerator<AnswerEvent[]> {
  yield* batches;
}

before(async () => {
  fake = await startFakeGemini({ apiKey: KEY });
});
after(async () => {
  await http.close();
  await fake.close();
});
beforeEach(() => {
  fake.reset();
  logs = [];
});

describe('gemini adapter: outgoing requests', () => {
  it('asks for grounding with Google Search for web_search_options: beside functions on Gemini 3, alone on Gemini 2', () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    assert.deepEqual(buildGeminiRequest(chat({ web_search_options: {} }), context()).tools, [{ googleSearch: {} }]);
    const three = buildGeminiRequest(
      chat({ web_search_options: {}, tools }),
      context({ upstreamModel: 'gemini-3-pro-preview' }),
    ).tools!;
    assert.deepEqual(
      three.map((tool) => Object.keys(tool)[0]),
      ['functionDeclarations', 'googleSearch'],
    );
    const two = buildGeminiRequest(chat({ web_search_options: {}, tools }), context()).tools!;
    assert.deepEqual(
      two.map((tool) => Object.keys(tool)[0]),
      ['functionDeclarations'],
    );
  });

  it('maps messages, parts and sampling fields to the exact Gemini request', async () => {
    const request = chat({
      messages: [
        { role: 'system', content: 'Be terse.' },
        { role: 'user', content: 'Hi' },
        { role: 'developer', content: [{ type: 'text', text: 'Use metric.' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0K' } },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.webp?size=2' } },
            { type: 'image_url', image_url: { url: 'https://example.com/photo' } },
            { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
            { type: 'input_audio', input_audio: { data: 'SUQz', format: 'mp3' } },
          ],
        },
        { role: 'assistant', content: 'Checking.' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
            { id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a', content: '{"tempC":4}' },
        { role: 'tool', tool_call_id: 'call_b', content: [{ type: 'text', text: '12:00' }] },
        { role: 'user', content: 'Thanks' },
      ],
      temperature: 0.3,
      top_p: 0.9,
      max_tokens: 100,
      max_completion_tokens: 50,
      stop: 'END',
      n: 2,
      seed: 7,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      response_format: { type: 'json_object' },
    });
    const body = await bodyOf(request, context());
    assert.equal(fake.requests[0]!.path, '/v1beta/models/gemini-2.5-flash:generateContent');
    assert.equal(fake.requests[0]!.headers['x-goog-api-key'], KEY);
    assert.deepEqual(sent(), {
      contents: [
        {
          role: 'user',
          parts: [
            { text: 'Hi' },
            { text: 'Look' },
            { inlineData: { mimeType: 'image/png', data: 'iVBORw0K' } },
            { fileData: { mimeType: 'image/webp', fileUri: 'https://example.com/cat.webp?size=2' } },
            { fileData: { mimeType: 'image/jpeg', fileUri: 'https://example.com/photo' } },
            { inlineData: { mimeType: 'audio/wav', data: 'UklGRg==' } },
            { inlineData: { mimeType: 'audio/mp3', data: 'SUQz' } },
          ],
        },
        {
          role: 'model',
          parts: [
            { text: 'Checking.' },
            // Ids minted elsewhere carry no signature: Google's bypass value goes on the step's first call.
            { functionCall: { name: 'get_weather', args: { city: 'Oslo' } }, thoughtSignature: SKIP_THOUGHT_SIGNATURE },
            { functionCall: { name: 'get_time', args: {} } },
          ],
        },
        {
          role: 'user',
          parts: [
            { functionResponse: { name: 'get_weather', response: { tempC: 4 } } },
            { functionResponse: { name: 'get_time', response: { content: '12:00' } } },
            { text: 'Thanks' },
          ],
        },
      ],
      systemInstruction: { parts: [{ text: 'Be terse.' }, { text: 'Use metric.' }] },
      generationConfig: {
        temperature: 0.3,
        topP: 0.9,
        candidateCount: 2,
        seed: 7,
        presencePenalty: 0.5,
        frequencyPenalty: -0.5,
        maxOutputTokens: 50,
        stopSequences: ['END'],
        responseMimeType: 'application/json',
      },
    });
    assert.deepEqual(
      body.choices.map((choice: Json) => choice.index),
      [0, 1],
      'n → candidateCount → one choice per candidate',
    );
    assert.equal(logs.filter((entry) => entry.level === 40).length, 0, 'nothing dropped, nothing to warn about');
  });

  it('declares tools with converted schemas and maps every tool_choice', async () => {
    const tools = [
      WEATHER,
      {
        type: 'function',
        function: {
          name: 'get_time',
          description: 'Now',
          strict: true,
          parameters: { type: 'object', properties: {} },
        },
      },
    ];
    const declarations = [
      {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
      { name: 'get_time', description: 'Now' },
    ];
    const expectations: Array<[unknown, unknown]> = [
      ['auto', { mode: 'AUTO' }],
      ['required', { mode: 'ANY' }],
      ['none', { mode: 'NONE' }],
      [
        { type: 'function', function: { name: 'get_time' } },
        { mode: 'ANY', allowedFunctionNames: ['get_time'] },
      ],
    ];
    for (const [toolChoice, config] of expectations) {
      const body = buildGeminiRequest(chat({ tools, tool_choice: toolChoice }), context());
      assert.deepEqual(body.tools, [{ functionDeclarations: declarations }]);
      assert.deepEqual(body.toolConfig, { functionCallingConfig: config });
    }
    const schema = {
      type: 'object',
      properties: { answer: { type: 'string' } },
      required: ['answer'],
      additionalProperties: false,
      $schema: 'https://json-schema.org/draft/2020-12/schema',
    };
    const structured = buildGeminiRequest(
      chat({ response_format: { type: 'json_schema', json_schema: { name: 'a', strict: true, schema } } }),
      context(),
    );
    assert.deepEqual(structured.generationConfig, {
      responseMimeType: 'application/json',
      responseSchema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
    });
    // The strict fake refuses `additionalProperties` in a declaration: the converted request passes.
    const body = await bodyOf(chat({ tools, tool_choice: 'required' }), context());
    assert.equal(body.choices[0].message.tool_calls[0].function.name, 'get_weather');
  });

  it('drops parameters with no Gemini counterpart and names them in one warning', async () => {
    await geminiAdapter.chat!(
      chat({
        logit_bias: { '50256': -100 },
        logprobs: true,
        top_logprobs: 2,
        parallel_tool_calls: false,
        user: 'u1',
        metadata: null,
      }),
      context(),
    );
    assert.equal(sent().logit_bias, undefined);
    const warnings = logs.filter((entry) => entry.level === 40);
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0]!.reqId, 'req_gemini');
    assert.deepEqual(warnings[0]!.dropped, ['logit_bias', 'logprobs', 'top_logprobs', 'parallel_tool_calls', 'user']);
  });

  it('refuses what Gemini cannot take with a 400, before any request', async () => {
    const refused: Array<[Json, string]> = [
      [{ tools: [{ type: 'custom', custom: { name: 'grammar' } }] }, 'tools[0]'],
      [{ functions: [{ name: 'f' }] }, 'functions'],
      [{ messages: [{ role: 'tool', tool_call_id: 'call_unknown', content: 'x' }] }, 'messages[0].tool_call_id'],
      [
        {
          messages: [
            {
              role: 'assistant',
              tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{oops' } }],
            },
          ],
        },
        'messages[0].tool_calls[0].function.arguments',
      ],
      [
        { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png,raw' } }] }] },
        'messages[0].content[0].image_url.url',
      ],
      [{ messages: [{ role: 'system', content: 'only a system prompt' }] }, 'messages'],
    ];
    for (const [extra, param] of refused) {
      const error = await gatewayError(encodeStream(stream(chat(extra), context())));
      assert.equal(error.status, 400);
      assert.equal(error.param, param);
    }
    assert.equal(fake.requests.length, 0);
  });
});

describe('gemini adapter: reasoning_effort → thinkingConfig', () => {
  const efforts = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
  const hi = { contents: [{ role: 'user', parts: [{ text: 'Hi' }] }] };

  /** The exact body the fake got for each effort on one upstream model. */
  async function sentPerEffort(upstreamModel: string): Promise<Json[]> {
    const bodies: Json[] = [];
    for (const effort of efforts) {
      fake.reset();
      await geminiAdapter.chat!(chat({ reasoning_effort: effort }), context({ upstreamModel }));
      assert.equal(fake.requests.length, 1);
      bodies.push(sent());
    }
    return bodies;
  }
  const withThinking = (thinkingConfig: Json) => ({ ...hi, generationConfig: { thinkingConfig } });

  it('sends a thinkingBudget per effort to Gemini 2.5 Flash: 0 turns thinking off, 24576 is its ceiling', async () => {
    assert.deepEqual(
      await sentPerEffort('gemini-2.5-flash'),
      [0, 512, 1024, 8192, 24576, 24576].map((thinkingBudget) => withThinking({ thinkingBudget })),
    );
    assert.equal(logs.filter((entry) => entry.level === 40).length, 0, 'reasoning_effort is mapped, not dropped');
  });

  it('keeps Gemini 2.5 Pro within 128–32768: it cannot turn thinking off', async () => {
    assert.deepEqual(
      await sentPerEffort('gemini-2.5-pro'),
      [128, 512, 1024, 8192, 24576, 32768].map((thinkingBudget) => withThinking({ thinkingBudget })),
    );
  });

  it('sends thinkingLevel (never a budget) to Gemini 3: all four levels on Flash, low/high on Pro', async () => {
    assert.deepEqual(
      await sentPerEffort('gemini-3-flash-preview'),
      ['minimal', 'minimal', 'low', 'medium', 'high', 'high'].map((thinkingLevel) => withThinking({ thinkingLevel })),
    );
    assert.deepEqual(
      await sentPerEffort('gemini-3-pro-preview'),
      ['low', 'low', 'low', 'high', 'high', 'high'].map((thinkingLevel) => withThinking({ thinkingLevel })),
    );
    assert.deepEqual(
      await sentPerEffort('gemini-3.1-pro-preview'),
      ['low', 'low', 'low', 'high', 'high', 'high'].map((thinkingLevel) => withThinking({ thinkingLevel })),
    );
  });

  it(
    'leaves the rest of generationConfig as it was, maxOutputTokens included, and sends no thinkingConfig without ' +
      'an effort',
    async () => {
      await geminiAdapter.chat!(
        chat({ reasoning_effort: 'low', max_completion_tokens: 300, temperature: 0.4 }),
        context(),
      );
      assert.deepEqual(sent(), {
        ...hi,
        generationConfig: { temperature: 0.4, maxOutputTokens: 300, thinkingConfig: { thinkingBudget: 1024 } },
      });

      fake.reset();
      await geminiAdapter.chat!(chat({ reasoning_effort: null }), context());
      assert.deepEqual(sent(), hi);

      fake.reset();
      await encodeStream(
        stream(chat({ stream: true, reasoning_effort: 'high' }), context({ upstreamModel: 'gemini-3-pro-preview' })),
      );
      assert.equal(fake.requests[0]!.path, '/v1beta/models/gemini-3-pro-preview:streamGenerateContent?alt=sse');
      assert.deepEqual(sent(), withThinking({ thinkingLevel: 'high' }));
    },
  );

  it('refuses a reasoning_effort OpenAI does not know, before any request', async () => {
    for (const effort of ['maximum', 'High', 2]) {
      const error = await gatewayError(geminiAdapter.chat!(chat({ reasoning_effort: effort }), context()));
      assert.deepEqual([error.status, error.param], [400, 'reasoning_effort']);
      assert.match(error.message, /none, minimal, low, medium, high, xhigh/);
    }
    assert.equal(fake.requests.length, 0);
  });

  const thoughtUsage = { promptTokenCount: 7, candidatesTokenCount: 2, thoughtsTokenCount: 40, totalTokenCount: 49 };
  const expectedUsage = {
    prompt_tokens: 7,
    completion_tokens: 42,
    total_tokens: 49,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 40 },
  };

  it('keeps thought parts out of a plain answer and reports thoughtsTokenCount as reasoning tokens', async () => {
    fake.enqueue({
      json: {
        candidates: [
          {
            content: {
              role: 'model',
              parts: [
                { text: '**Planning** the greeting.', thought: true },
                { text: 'Hel', thoughtSignature: 'c2ln' },
                { text: 'lo' },
              ],
            },
            finishReason: 'STOP',
            index: 0,
          },
        ],
        usageMetadata: thoughtUsage,
      },
    });
    const { result, body } = await answer(chat({ reasoning_effort: 'medium' }), context());
    assert.deepEqual(result.choices, [{ index: 0, text: 'Hello', toolCalls: [], finishReason: 'stop' }]);
    assert.equal(body.choices[0].message.content, 'Hello');
    assert.deepEqual(body.usage, expectedUsage);
  });

  it('keeps thought parts out of a stream, alone or mixed with text, and reports reasoning tokens', async () => {
    const chunk = (parts: Json[], extra: Json = {}) => ({
      candidates: [{ content: { role: 'model', parts }, index: 0, ...extra }],
      usageMetadata: thoughtUsage,
    });
    fake.enqueue({
      chunks: [
        chunk([{ text: '**Planning**', thought: true }]),
        chunk([{ text: ' the greeting.', thought: true }, { text: 'Hel' }]),
        chunk([{ text: 'lo' }, { text: 'one more thought', thought: true }]),
        chunk([{ text: '', thoughtSignature: 'c2ln' }], { finishReason: 'STOP' }),
      ],
    });
    const { parsed, batches, usage } = await encodeStream(
      stream(chat({ stream: true, reasoning_effort: 'medium' }), context()),
    );
    assert.deepEqual(
      batches.flat().filter((event) => event.type === 'text'),
      [
        { type: 'text', choice: 0, text: 'Hel' },
        { type: 'text', choice: 0, text: 'lo' },
      ],
    );
    assert.equal(textOf(parsed), 'Hello');
    assert.equal(parsed.at(-2)!.choices[0].finish_reason, 'stop');
    assert.deepEqual(usage, expectedUsage);
    assert.deepEqual(parsed.at(-1)!.usage, expectedUsage);
  });
});

describe('convertJsonSchema', () => {
  it('inlines refs, folds null unions into nullable and reports lossy drops', () => {
    const { schema, dropped } = convertJsonSchema(
      {
        $schema: 'x',
        type: 'object',
        $defs: {
          Tag: { type: 'string', enum: ['a', 'b'] },
          Node: { type: 'object', properties: { child: { $ref: '#/$defs/Node' } } },
        },
        properties: {
          tag: { $ref: '#/$defs/Tag', description: 'A tag' },
          note: { type: ['string', 'null'], format: 'email' },
          maybe: { anyOf: [{ type: 'integer' }, { type: 'null' }] },
          either: { oneOf: [{ type: 'string' }, { type: 'number', exclusiveMinimum: 0 }] },
          both: {
            allOf: [
              { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] },
              { properties: { b: { type: 'boolean' } } },
            ],
          },
          level: { type: 'integer', enum: [1, 2] },
          kind: { const: 'fixed' },
          extra: { type: 'object', properties: { x: { type: 'string' } }, additionalProperties: { type: 'string' } },
          tree: { $ref: '#/$defs/Node' },
        },
        required: ['tag', 'ghost'],
        additionalProperties: false,
      },
      'tools[0].function.parameters',
    );
    assert.deepEqual(schema, {
      type: 'object',
      properties: {
        tag: { description: 'A tag', type: 'string', enum: ['a', 'b'] },
        note: { nullable: true, type: 'string' },
        maybe: { nullable: true, type: 'integer' },
        either: { anyOf: [{ type: 'string' }, { type: 'number' }] },
        both: { type: 'object', properties: { a: { type: 'string' }, b: { type: 'boolean' } }, required: ['a'] },
        level: { type: 'integer', description: 'Allowed values: 1, 2.' },
        kind: { enum: ['fixed'], type: 'string' },
        extra: { type: 'object', properties: { x: { type: 'string' } } },
        tree: { type: 'object', properties: { child: { type: 'object' } } },
      },
      required: ['tag'],
    });
    assert.deepEqual(dropped, ['$ref', 'additionalProperties', 'enum', 'exclusiveMinimum', 'format']);
    assert.deepEqual(convertJsonSchema({ type: 'object', properties: {} }, 'p'), { schema: undefined, dropped: [] });
  });
});

describe('gemini adapter: non-stream answers', () => {
  it('answers text as a chat.completion with the catalog model id and converted usage', async () => {
    const before = Math.floor(Date.now() / 1000);
    const { result, body } = await answer(chat(), context());
    assert.match(body.id, /^chatcmpl-/);
    assert.equal(body.object, 'chat.completion');
    assert.ok(body.created >= before && body.created <= before + 2);
    assert.equal(body.model, MODEL.id);
    assert.deepEqual(body.choices, [
      {
        index: 0,
        message: { role: 'assistant', content: FAKE_GEMINI_TEXT, refusal: null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ]);
    const usage = {
      prompt_tokens: 12,
      completion_tokens: 4,
      total_tokens: 16,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    };
    assert.deepEqual(body.usage, usage);
    assert.deepEqual(result.usage, usage);
  });

  it('skips thoughts, counts reasoning as completion and maps finish reasons', async () => {
    fake.enqueue({
      json: {
        candidates: [
          {
            content: { role: 'model', parts: [{ text: 'plan…', thought: true }, { text: 'Hel' }, { text: 'lo' }] },
            finishReason: 'MAX_TOKENS',
            index: 0,
          },
        ],
        usageMetadata: {
          promptTokenCount: 10,
          cachedContentTokenCount: 6,
          candidatesTokenCount: 3,
          thoughtsTokenCount: 20,
          totalTokenCount: 33,
        },
      },
    });
    const body = await bodyOf(chat(), context());
    assert.equal(body.choices[0].message.content, 'Hello');
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.deepEqual(body.usage, {
      prompt_tokens: 10,
      completion_tokens: 23,
      total_tokens: 33,
      prompt_tokens_details: { cached_tokens: 6 },
      completion_tokens_details: { reasoning_tokens: 20 },
    });

    const table: Array<[string | null, boolean, string]> = [
      ['STOP', false, 'stop'],
      ['STOP', true, 'tool_calls'],
      [null, true, 'tool_calls'],
      ['MAX_TOKENS', true, 'length'],
      ['SAFETY', false, 'content_filter'],
      ['RECITATION', false, 'content_filter'],
      ['BLOCKLIST', false, 'content_filter'],
      ['PROHIBITED_CONTENT', false, 'content_filter'],
      ['SPII', false, 'content_filter'],
      ['IMAGE_SAFETY', false, 'content_filter'],
      ['LANGUAGE', false, 'stop'],
      ['OTHER', false, 'stop'],
      ['MALFORMED_FUNCTION_CALL', false, 'stop'],
    ];
    for (const [reason, calls, expected] of table)
      assert.equal(mapGeminiFinishReason(reason, calls), expected, `${reason}/${calls}`);
  });

  it('answers a blocked prompt with content_filter and null content; no candidates otherwise is a 502', async () => {
    fake.enqueue({
      json: {
        promptFeedback: { blockReason: 'PROHIBITED_CONTENT' },
        usageMetadata: { promptTokenCount: 9, totalTokenCount: 9 },
      },
    });
    const { result, body } = await answer(chat(), context());
    assert.deepEqual(body.choices, [
      {
        index: 0,
        message: { role: 'assistant', content: null, refusal: null },
        logprobs: null,
        finish_reason: 'content_filter',
      },
    ]);
    assert.equal(result.usage?.prompt_tokens, 9);

    fake.enqueue({ json: { usageMetadata: { promptTokenCount: 9 } } });
    const error = await gatewayError(geminiAdapter.chat!(chat(), context()));
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
  });
});

describe('gemini adapter: streams', () => {
  const fixtureLines = (name: string) =>
    readFileSync(wireFixture(name), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Json);
  const usageChunks = (parsed: Json[]) => parsed.filter((chunk) => chunk.choices.length === 0);

  it('replays the recorded text stream (CRLF framing, cut every 7 bytes)', async () => {
    fake.enqueue({ chunksFile: wireFixture('gemini-stream-text.chunks.jsonl'), chunkSize: 7 });
    const { parsed, batches, usage } = await encodeStream(stream(chat({ stream: true }), context()));
    assert.equal(fake.requests[0]!.path, '/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse');
    assert.deepEqual(parsed[0]!.choices[0].delta, { role: 'assistant', content: '' });
    assert.equal(textOf(parsed), 'There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y');
    assert.equal(parsed.at(-2)!.choices[0].finish_reason, 'stop');
    assert.deepEqual(parsed.at(-1)!.choices, []);
    const expected = {
      prompt_tokens: 9,
      completion_tokens: 208,
      total_tokens: 217,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 185 },
    };
    assert.deepEqual(parsed.at(-1)!.usage, expected);
    assert.deepEqual(usage, expected);
    assert.equal(usageChunks(parsed).length, 1);
    // The usage comes alone, last, once: the client gets it only if it asked (include_usage).
    assert.deepEqual(batches.at(-1), [{ type: 'usage', usage: expected }]);
    assert.equal(batches.flat().filter((event) => event.type === 'usage').length, 1);
    assert.equal(batches.flat().filter((event) => event.type === 'start').length, 1);
    assert.equal(batches[0]![0]!.type, 'start');
    assert.ok(
      batches.every((batch) => batch.length > 0),
      'no empty batch, even for reads that cut an event',
    );
    const [first] = parsed;
    // The encoder's client model id is 'test-model': the catalog id in the chunks comes from the adapter, as before.
    assert.ok(
      parsed.every(
        (chunk) =>
          chunk.id === first!.id &&
          chunk.created === first!.created &&
          chunk.model === MODEL.id &&
          chunk.object === 'chat.completion.chunk',
      ),
    );
  });

  it('replays the recorded function call: tool_calls although Gemini said STOP, signature in the id', async () => {
    const recorded = fixtureLines('gemini-stream-function-call.chunks.jsonl');
    fake.enqueue({ chunksFile: wireFixture('gemini-stream-function-call.chunks.jsonl') });
    const { parsed, usage } = await encodeStream(stream(chat({ stream: true }), context()));
    assert.equal(parsed.length, 4);
    const call = parsed[1]!.choices[0].delta.tool_calls[0];
    assert.deepEqual(
      { ...call, id: undefined },
      {
        index: 0,
        id: undefined,
        type: 'function',
        function: { name: 'weather', arguments: '{"location":"San Francisco"}' },
      },
    );
    assert.match(call.id, /^call_[0-9a-f]{24}__ts_[A-Za-z0-9_-]+$/);
    assert.equal(readThoughtSignature(call.id), recorded[0]!.candidates[0].content.parts[0].thoughtSignature);
    assert.equal(parsed[2]!.choices[0].finish_reason, 'tool_calls');
    const expected = {
      prompt_tokens: 29,
      completion_tokens: 60,
      total_tokens: 89,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 45 },
    };
    assert.deepEqual(parsed[3]!.usage, expected);
    assert.deepEqual(usage, expected);
  });

  it('streams the default answer piece by piece', async () => {
    const { parsed, usage } = await encodeStream(stream(chat({ stream: true }), context()));
    assert.equal(parsed.length, 1 + FAKE_GEMINI_PIECES.length + 2, 'role, pieces, finish, usage');
    assert.deepEqual(
      parsed.slice(1, -2).map((chunk) => chunk.choices[0].delta),
      FAKE_GEMINI_PIECES.map((piece) => ({ content: piece })),
    );
    assert.equal(textOf(parsed), FAKE_GEMINI_TEXT);
    assert.equal(parsed.at(-2)!.choices[0].finish_reason, 'stop');
    assert.equal(usage?.total_tokens, 16);
    assert.equal(parsed.at(-1)!.usage.total_tokens, 16);

    // Without include_usage the usage chunk stays with the gateway (billing), as before.
    const quiet = await encodeStream(stream(chat({ stream: true }), context()), { includeUsage: false });
    assert.equal(quiet.parsed.length, 1 + FAKE_GEMINI_PIECES.length + 1);
    assert.equal(usageChunks(quiet.parsed).length, 0);
    assert.equal(quiet.usage?.total_tokens, 16);
  });

  it('yields the events of one upstream read as one array', async () => {
    // The fake writes the whole default body at once: one read, then the close.
    const whole = await encodeStream(stream(chat({ stream: true }), context()));
    assert.deepEqual(
      whole.batches.map((batch) => batch.map((event) => event.type)),
      [['start', 'role', ...FAKE_GEMINI_PIECES.map(() => 'text'), 'finish'], ['usage']],
    );

    // Paced writes: one read per payload, so one array per payload.
    const payloads = [
      { candidates: [{ content: { role: 'model', parts: [{ text: 'a' }, { text: 'b' }] }, index: 0 }] },
      {
        candidates: [
          { content: { role: 'model', parts: [{ functionCall: { name: 'f', args: {} } }, { text: 'c' }] }, index: 0 },
        ],
      },
      {
        candidates: [{ content: { role: 'model', parts: [] }, finishReason: 'STOP', index: 0 }],
        usageMetadata: { promptTokenCount: 1, candidatesTokenCount: 2 },
      },
    ];
    fake.enqueue({ chunks: payloads, chunkDelayMs: 30 });
    const paced = await encodeStream(stream(chat({ stream: true }), context()));
    assert.deepEqual(
      paced.batches.map((batch) => batch.map((event) => event.type)),
      [['start', 'role', 'text'], ['tool-call', 'text'], ['finish'], ['usage']],
    );
    assert.deepEqual(
      paced.batches[0]![2],
      { type: 'text', choice: 0, text: 'ab' },
      'a run of text parts is one text event',
    );
    assert.equal(paced.parsed[3]!.choices[0].finish_reason, null);
    assert.equal(paced.parsed.at(-2)!.choices[0].finish_reason, 'tool_calls');
  });

  it('ends a blocked prompt with content_filter', async () => {
    fake.enqueue({
      chunks: [
        { promptFeedback: { blockReason: 'SAFETY' }, usageMetadata: { promptTokenCount: 5, totalTokenCount: 5 } },
      ],
    });
    const { parsed } = await encodeStream(stream(chat({ stream: true }), context()));
    assert.deepEqual(
      parsed.map((chunk) => (chunk.choices.length === 0 ? 'usage' : chunk.choices[0].finish_reason)),
      [null, 'content_filter', 'usage'],
    );
  });

  it('throws a mapped, scrubbed error for an error payload mid-stream, after the chunks it delivered', async () => {
    const text = { candidates: [{ content: { role: 'model', parts: [{ text: 'Hel' }] }, index: 0 }] };
    fake.enqueue({ chunks: [text, geminiError(503, 'UNAVAILABLE', `overloaded (https://x/y?key=${KEY})`)] });
    const seen: AnswerEvent[][] = [];
    const error = await gatewayError(encodeStream(recording(stream(chat({ stream: true }), context()), seen)));
    assert.equal(textOf((await encodeStream(replay(seen))).parsed), 'Hel');
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.doesNotMatch(error.message, /AIza/);
  });

  it('fails a stream that closes without a finish reason as retryable "ended early"', async () => {
    fake.enqueue({ chunks: [{ candidates: [{ content: { role: 'model', parts: [{ text: 'Hel' }] }, index: 0 }] }] });
    const seen: AnswerEvent[][] = [];
    const error = await gatewayError(encodeStream(recording(stream(chat({ stream: true }), context()), seen)));
    const delivered = await encodeStream(replay(seen));
    assert.equal(delivered.parsed.length, 2);
    assert.equal(textOf(delivered.parsed), 'Hel');
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.match(error.message, /ended early/);
  });

  it('throws the mapped HTTP error from the first next(), before any chunk', async () => {
    fake.enqueue({
      status: 429,
      json: geminiError(429, 'RESOURCE_EXHAUSTED', 'Quota exceeded.', [
        { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '12s' },
      ]),
    });
    const iterator = stream(chat({ stream: true }), context())[Symbol.asyncIterator]();
    const error = await gatewayError(iterator.next());
    assert.equal(error.status, 429);
    assert.equal(error.retryAfterMs, 12_000);
  });

  it('aborts the upstream request when the caller aborts mid-stream', async () => {
    fake.enqueue({
      chunks: [{ candidates: [{ content: { role: 'model', parts: [{ text: 'Hel' }] }, index: 0 }] }],
      hang: true,
    });
    const controller = new AbortController();
    const iterator = stream(chat({ stream: true }), context({ signal: controller.signal }))[Symbol.asyncIterator]();
    const first = await iterator.next();
    assert.equal(first.done, false);
    // The first read holds the role and the text: one batch, so the next read is the one left hanging.
    assert.equal(textOf((await encodeStream(replay([first.value as AnswerEvent[]]))).parsed), 'Hel');
    const pending = iterator.next();
    controller.abort();
    await assert.rejects(
      pending,
      (error: unknown) => !(error instanceof GatewayError) && (error as Error).name === 'AbortError',
    );
    for (let attempt = 0; attempt < 50 && fake.abortedRequests === 0; attempt += 1) await sleep(10);
    assert.equal(fake.abortedRequests, 1);
    assert.equal(fake.requests[0]!.aborted, true);
  });
});

describe('gemini adapter: thoughtSignature round trip (gemini-3 against the strict fake)', () => {
  const gemini3 = () => context({ upstreamModel: 'gemini-3-pro-preview' });
  const conversation = (call: Json): ChatCompletionRequest =>
    chat({
      tools: [WEATHER],
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: null, tool_calls: [call] },
        { role: 'tool', tool_call_id: call.id, content: 'sunny' },
      ],
    });

  it('carries the signature from a streamed call to the replayed request, which the fake accepts', async () => {
    const { parsed } = await encodeStream(stream(chat({ stream: true, tools: [WEATHER] }), gemini3()));
    const call = parsed.find((chunk) => chunk.choices[0]?.delta?.tool_calls)!.choices[0].delta.tool_calls[0];
    const signature = readThoughtSignature(call.id);
    assert.ok(signature !== undefined && fake.issuedSignatures.has(signature));

    const { index: _index, ...toolCall } = call;
    const { body } = await answer(conversation(toolCall), gemini3());
    assert.deepEqual(sent(1).contents[1], {
      role: 'model',
      parts: [{ functionCall: { name: 'get_weather', args: { city: 'Oslo' } }, thoughtSignature: signature }],
    });
    assert.equal(body.choices[0].message.content, 'Tool said: {"content":"sunny"}');

    // The same replay without the signature is refused, as the real API refuses it.
    const stripped = structuredClone(sent(1));
    delete stripped.contents[1].parts[0].thoughtSignature;
    const refused = await fetch(`${fake.url}/v1beta/models/gemini-3-pro-preview:generateContent`, {
      method: 'POST',
      headers: { 'x-goog-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify(stripped),
    });
    assert.equal(refused.status, 400);
    assert.match(((await refused.json()) as Json).error.message, /missing a thought_signature/);
  });

  it('round-trips a non-stream call; a corrupted signature is the client 400; a foreign id gets the bypass value', async () => {
    const first = await bodyOf(chat({ tools: [WEATHER] }), gemini3());
    assert.equal(first.choices[0].finish_reason, 'tool_calls');
    assert.equal(first.choices[0].message.content, null);
    const call = first.choices[0].message.tool_calls[0];
    await geminiAdapter.chat!(conversation(call), gemini3());
    assert.equal(sent(1).contents[1].parts[0].thoughtSignature, readThoughtSignature(call.id));

    const forged = await gatewayError(
      geminiAdapter.chat!(conversation({ ...call, id: createToolCallId('Zm9yZ2Vk') }), gemini3()),
    );
    assert.equal(forged.status, 400);
    assert.equal(forged.message, 'Corrupted thought signature.');

    await geminiAdapter.chat!(conversation({ ...call, id: 'call_from_another_model' }), gemini3());
    assert.equal(sent(3).contents[1].parts[0].thoughtSignature, SKIP_THOUGHT_SIGNATURE);
  });

  it('encodes any signature reversibly and leaves oversized ones out of the id', () => {
    for (const signature of ['EqUCCqICAb4+9vsh/8Pd5taZ=', 'not base64: ü/+', 'YQ'])
      assert.equal(readThoughtSignature(createToolCallId(signature)), signature);
    assert.match(createToolCallId('a'.repeat(20_000)), /^call_[0-9a-f]{24}$/);
    assert.equal(readThoughtSignature('call_abc'), undefined);
  });
});

describe('gemini adapter: embeddings', () => {
  const embeddingContext = () => ({
    ...context({ upstreamModel: 'gemini-embedding-001' }),
    model: { ...MODEL, id: 'gemini-embedding-001', capability: 'embedding' as const },
  });

  it('sends batchEmbedContents and answers float arrays with estimated usage', async () => {
    const result = await embed(
      { model: 'gemini-embedding-001', input: ['hello world', 'bye'] } as EmbeddingRequest,
      embeddingContext(),
    );
    assert.equal(fake.requests[0]!.path, '/v1beta/models/gemini-embedding-001:batchEmbedContents');
    assert.deepEqual(sent(), {
      requests: [
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'hello world' }] } },
        { model: 'models/gemini-embedding-001', content: { parts: [{ text: 'bye' }] } },
      ],
    });
    const tokens = countTextTokens('hello world') + countTextTokens('bye');
    assert.deepEqual(JSON.parse(result.body), {
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: fakeEmbedding('hello world') },
        { object: 'embedding', index: 1, embedding: fakeEmbedding('bye') },
      ],
      model: 'gemini-embedding-001',
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
    assert.deepEqual(result.usage, { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens });
  });

  it('encodes base64 as little-endian float32 and passes dimensions', async () => {
    const request = { model: 'e', input: 'hello', encoding_format: 'base64', dimensions: 4 } as EmbeddingRequest;
    const body = JSON.parse((await embed(request, embeddingContext())).body) as Json;
    assert.equal(sent().requests[0].outputDimensionality, 4);
    const bytes = Buffer.from(body.data[0].embedding, 'base64');
    const decoded = Array.from({ length: bytes.length / 4 }, (_, index) => bytes.readFloatLE(index * 4));
    assert.deepEqual(decoded, fakeEmbedding('hello', 4).map(Math.fround));
    assert.equal(encodeFloat32Base64([1, -2]), Buffer.from([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]).toString('base64'));
  });

  it('splits inputs into batches of 100 and refuses token arrays', async () => {
    const input = Array.from({ length: 150 }, (_, index) => `text ${index}`);
    const body = JSON.parse((await embed({ model: 'e', input } as EmbeddingRequest, embeddingContext())).body) as Json;
    assert.deepEqual(
      fake.requests.map((request) => (request.body as Json).requests.length),
      [100, 50],
    );
    assert.deepEqual(body.data[149].embedding, fakeEmbedding('text 149'));

    const error = await gatewayError(embed({ model: 'e', input: [1, 2, 3] } as EmbeddingRequest, embeddingContext()));
    assert.equal(error.status, 400);
    assert.equal(error.param, 'input');
    assert.equal(fake.requests.length, 2);
  });
});

describe('gemini adapter: vendor errors', () => {
  it('makes 429 RESOURCE_EXHAUSTED retryable, waiting as long as RetryInfo says', async () => {
    const details = [
      { '@type': 'type.googleapis.com/google.rpc.QuotaFailure', violations: [] },
      { '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '34.4s' },
    ];
    fake.enqueue({
      status: 429,
      json: geminiError(429, 'RESOURCE_EXHAUSTED', 'You exceeded your current quota.', details),
    });
    const error = await gatewayError(geminiAdapter.chat!(chat(), context()));
    assert.deepEqual(
      [error.status, error.code, error.retryable, error.retryAfterMs, error.headers['retry-after']],
      [429, 'rate_limit_exceeded', true, 34_400, '35'],
    );
    assert.equal(error.message, 'You exceeded your current quota.');
  });

  it('keeps 400 INVALID_ARGUMENT and FAILED_PRECONDITION as the client 400 with the message', async () => {
    for (const status of ['INVALID_ARGUMENT', 'FAILED_PRECONDITION']) {
      fake.enqueue({ status: 400, json: geminiError(400, status, `Bad: ${status}`) });
      const error = await gatewayError(geminiAdapter.chat!(chat(), context()));
      assert.deepEqual(
        [error.status, error.type, error.retryable, error.message],
        [400, 'invalid_request_error', false, `Bad: ${status}`],
      );
    }
    // The strict fake itself refuses OpenAI field names, in Google's words.
    const raw = await fetch(`${fake.url}/v1beta/models/gemini-2.5-flash:generateContent`, {
      method: 'POST',
      headers: { 'x-goog-api-key': KEY },
      body: JSON.stringify({ messages: [] }),
    });
    assert.equal(
      ((await raw.json()) as Json).error.message,
      'Invalid JSON payload received. Unknown name "messages": Cannot find field.',
    );
  });

  it("has a strict fake that refuses, in Google's envelope, what Gemini refuses", async () => {
    const user = { role: 'user', parts: [{ text: 'Hi' }] };
    const declaration = {
      name: 'f',
      parameters: { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false },
    };
    const refused: Array<[Json, RegExp]> = [
      [{ contents: [{ role: 'system', parts: [{ text: 'x' }] }, user] }, /valid role: user, model/],
      [{ contents: [{ role: 'user', parts: [] }] }, /contents.parts must not be empty/],
      [
        { contents: [user, { role: 'user', parts: [{ functionResponse: { name: 'f', response: {} } }] }] },
        /immediately after a function call turn/,
      ],
      [{ contents: [user], max_tokens: 5 }, /Unknown name "max_tokens": Cannot find field/],
      [
        { contents: [user], generationConfig: { max_output_tokens: 5 } },
        /Unknown name "max_output_tokens" at 'generation_config'/,
      ],
      [
        { contents: [user], tools: [{ functionDeclarations: [declaration] }] },
        /Unknown name "additionalProperties" at 'tools\[0\].function_declarations\[0\].parameters'/,
      ],
    ];
    for (const [body, message] of refused) {
      const response = await fetch(`${fake.url}/v1beta/models/gemini-2.5-flash:generateContent`, {
        method: 'POST',
        headers: { 'x-goog-api-key': KEY },
        body: JSON.stringify(body),
      });
      const error = ((await response.json()) as Json).error;
      assert.deepEqual([response.status, error.code, error.status], [400, 400, 'INVALID_ARGUMENT']);
      assert.match(error.message, message);
    }
    const anonymous = await fetch(`${fake.url}/v1beta/models/gemini-2.5-flash:generateContent`, {
      method: 'POST',
      body: JSON.stringify({ contents: [user] }),
    });
    assert.equal(anonymous.status, 403);
  });

  it('treats a JSON error answered with 200 on the stream route as that error', async () => {
    fake.enqueue({ json: [geminiError(400, 'INVALID_ARGUMENT', 'Bad stream request.')] });
    const error = await gatewayError(encodeStream(stream(chat({ stream: true }), context())));
    assert.deepEqual([error.status, error.message], [400, 'Bad stream request.']);
  });

  it('turns a missing, refused or wrong key into a generic 502 vendor_auth_failed', async () => {
    fake.enqueue({ status: 403, json: geminiError(403, 'PERMISSION_DENIED', 'Permission denied.') });
    for (const ctx of [
      context(),
      context({ apiKey: '' }),
      context({ apiKey: 'AIzaWrongKey0123456789abcdefghijklmnopq' }),
    ]) {
      const error = await gatewayError(geminiAdapter.chat!(chat(), ctx));
      assert.deepEqual([error.status, error.code, error.retryable], [502, 'vendor_auth_failed', false]);
      assert.doesNotMatch(error.message, /AIza|API key/);
    }
  });

  it('keeps 404 as model_not_found and makes 500/503 retryable', async () => {
    const missing = await gatewayError(geminiAdapter.chat!(chat(), context({ upstreamModel: 'nonexistent-model' })));
    assert.deepEqual([missing.status, missing.code], [404, 'model_not_found']);
    assert.match(missing.message, /models\/nonexistent-model is not found/);
    for (const [code, status] of [
      [500, 'INTERNAL'],
      [503, 'UNAVAILABLE'],
    ] as const) {
      fake.enqueue({ status: code, json: geminiError(code, status, 'The model is overloaded.') });
      const error = await gatewayError(geminiAdapter.chat!(chat(), context()));
      assert.deepEqual(
        [error.status, error.retryable, error.message],
        [502, true, 'Upstream vendor error: The model is overloaded.'],
      );
    }
  });

  it('scrubs keys from messages, in URLs too', () => {
    const bodyText = JSON.stringify(
      geminiError(400, 'INVALID_ARGUMENT', `Bad ${KEY} at https://g/v1beta/x?alt=sse&key=secretvalue1`),
    );
    const error = mapGeminiError({ status: 400, headers: {}, bodyText }, [KEY]);
    assert.equal(error.message, 'Bad [redacted] at https://g/v1beta/x?alt=sse&key=[redacted]');
  });

  it('offers no legacy completions, so the registry refuses them before any request', () => {
    assert.equal(geminiAdapter.complete, undefined);
    assert.equal(geminiAdapter.streamCompletion, undefined);
    assert.deepEqual(Object.keys(geminiAdapter).sort(), [
      'chat',
      'countGeminiTokens',
      'embed',
      'embedGemini',
      'generateImages',
      'nativeGemini',
      'openRealtime',
      'speak',
      'streamChat',
    ]);
  });
});
