import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { request as httpRequest } from 'undici';
import type { CatalogModel } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import { usesLegacyFunctions } from '../../workers/answers/chat-encoder.js';
import type { AnswerEvent, StartEvent } from '../../workers/answers/events.js';
import {
  anthropicAdapter,
  buildAnthropicRequest,
  JSON_OBJECT_INSTRUCTION,
  mapAnthropicStopReason,
} from '../../workers/vendors/anthropic/index.js';
import { adapterMethod } from '../../workers/vendors/registry.js';
import { convertAnthropicUsage } from '../../workers/vendors/anthropic/convert-anthropic-usage.js';
import { Meter, meter } from '../../workers/settlement.js';
import { PriceList } from '../../shared/money/pricing.js';
import { loadCatalog } from '../../shared/catalog.js';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import type { CallContext } from '../../workers/vendors/types.js';
import { encodeAnswer, encodeStream, type EncodedStream } from '../support/answers.js';
import {
  anthropicError,
  FAKE_ANTHROPIC_MESSAGE_ID,
  FAKE_ANTHROPIC_TEXT,
  FAKE_ANTHROPIC_TOOL_USE_ID,
  startFakeAnthropic,
  type FakeAnthropic,
} from '../support/fake-anthropic.js';
import { wireFixture } from '../support/fixtures.js';
import { collect, gatewayError } from '../support/assertions.js';
import { loadConfig } from '../../shared/config.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';

const http = createVendorHttp(loadConfig({}));

const KEY = 'sk-ant-test-channel-key-0123456789';
const UPSTREAM_MODEL = 'claude-sonnet-4-5';
const silentLog = pino({ level: 'silent' });

const MODEL: CatalogModel = {
  id: 'claude-sonnet',
  owned_by: 'anthropic',
  capability: 'chat',
  created: 0,
  context_window: 200000,
  max_output_tokens: 64000,
  input_modalities: ['text', 'image'],
  supports_tools: true,
  routes: [{ vendor: 'anthropic' }],
};

let fake: FakeAnthropic;

function context(overrides: Partial<CallContext> = {}): CallContext {
  return {
    requestId: 'req_test',
    signal: new AbortController().signal,
    channel: { vendor: 'anthropic', baseUrl: fake.url, apiKey: KEY },
    upstreamModel: UPSTREAM_MODEL,
    model: MODEL,
    log: silentLog,
    http,
    ...overrides,
  };
}

const chat = (extra: Record<string, unknown> = {}): ChatCompletionRequest =>
  ({ model: 'claude-sonnet', messages: [{ role: 'user', content: 'Hi' }], ...extra }) as ChatCompletionRequest;
const userText = (text: string) => ({ type: 'text', text });

/** The encoder options the worker uses for this request: the client's model id, and its legacy `functions` use. */
const encoding = (request: ChatCompletionRequest) => ({
  model: request.model,
  legacyFunctions: usesLegacyFunctions(request),
});

/** A plain call: the adapter's answer, and the body the client gets for it. */
async function answer(request: ChatCompletionRequest, ctx: CallContext = context()) {
  const result = await anthropicAdapter.chat!(request, ctx);
  return { answer: result, ...encodeAnswer(result, encoding(request)) };
}

/**
 * A stream as the client gets it (usage chunk included unless told otherwise), with the batches the adapter yielded.
 */
const stream = (
  request: ChatCompletionRequest,
  ctx: CallContext = context(),
  includeUsage = true,
): Promise<EncodedStream> =>
  encodeStream(anthropicAdapter.streamChat!(request, ctx), { ...encoding(request), includeUsage });

async function* replay(batches: AnswerEvent[][]): AsyncGenerator<AnswerEvent[]> {
  yield* batches;
}

/** A stream that must fail: what the client got before the failure, and the failure. */
async function failedStream(request: ChatCompletionRequest): Promise<{ encoded: EncodedStream; error: GatewayError }> {
  const batches: AnswerEvent[][] = [];
  const error = await gatewayError(
    (async () => {
      for await (const batch of anthropicAdapter.streamChat!(request, context())) batches.push(batch);
    })(),
  );
  return { encoded: await encodeStream(replay(batches), encoding(request)), error };
}

/** Sends a chat request and returns the body the fake (strict, so valid) received. */
async function sent(request: ChatCompletionRequest, ctx: CallContext = context()): Promise<unknown> {
  await anthropicAdapter.chat!(request, ctx);
  assert.equal(fake.requests.length, 1);
  return fake.requests[0]!.body;
}

/** The outgoing body for a request that otherwise has only `Hi` from the user. */
const bodyWith = (extra: Record<string, unknown>) => ({
  model: UPSTREAM_MODEL,
  max_tokens: 4096,
  messages: [{ role: 'user', content: [userText('Hi')] }],
  ...extra,
});

async function refused(request: ChatCompletionRequest, param: string): Promise<GatewayError> {
  const error = await gatewayError(anthropicAdapter.chat!(request, context()));
  assert.equal(error.status, 400);
  assert.equal(error.type, 'invalid_request_error');
  assert.equal(error.param, param);
  assert.equal(error.retryable, false);
  assert.equal(fake.requests.length, 0, 'a refused request never reaches the vendor');
  return error;
}

/** Reassembles a stream's chunks the way an OpenAI client does. */
function reassemble({ parsed }: EncodedStream) {
  let text = '';
  let finish: string | null = null;
  const calls: { id?: string; name?: string; arguments: string }[] = [];
  for (const chunk of parsed) {
    const choice = chunk.choices[0];
    if (choice === undefined) continue;
    if (typeof choice.delta.content === 'string') text += choice.delta.content;
    for (const call of (choice.delta.tool_calls ?? []) as {
      index: number;
      id?: string;
      function: { name?: string; arguments?: string };
    }[]) {
      const slot = (calls[call.index] ??= { arguments: '' });
      if (call.id !== undefined) slot.id = call.id;
      if (call.function.name !== undefined) slot.name = call.function.name;
      slot.arguments += call.function.arguments ?? '';
    }
    finish = choice.finish_reason ?? finish;
  }
  return { text, finish, calls };
}

before(async () => {
  fake = await startFakeAnthropic({ apiKey: KEY });
});
after(async () => {
  await http.close();
  await fake.close();
});
beforeEach(() => fake.reset());

describe('anthropic adapter: outgoing request', () => {
  it('adds Anthropic’s web search tool for web_search_options, with the user’s place', () => {
    const body = buildAnthropicRequest(
      chat({
        web_search_options: {
          search_context_size: 'low',
          user_location: { type: 'approximate', approximate: { city: 'Oslo', country: 'NO' } },
        },
      }),
      context(),
      false,
    );
    assert.deepEqual(body.tools, [
      {
        type: 'web_search_20250305',
        name: 'web_search',
        user_location: { type: 'approximate', city: 'Oslo', country: 'NO' },
      },
    ]);
  });

  it('posts to <base>/v1/messages with x-api-key, anthropic-version and the upstream model', async () => {
    assert.deepEqual(await sent(chat()), bodyWith({}));
    const request = fake.requests[0]!;
    assert.equal(request.path, '/v1/messages');
    assert.equal(request.headers['x-api-key'], KEY);
    assert.equal(request.headers['anthropic-version'], '2023-06-01');
    assert.equal(request.headers['content-type'], 'application/json');
    assert.equal(request.headers.authorization, undefined);
  });

  it("never sends service_tier (Anthropic sells no OpenAI tiers): not the request's, not the job's band", async () => {
    for (const tier of ['flex', 'priority', 'auto', 'scale'] as const) {
      fake.reset();
      assert.deepEqual(
        await sent(
          chat({ service_tier: tier }),
          context({ serviceTier: tier === 'auto' || tier === 'scale' ? 'default' : tier }),
        ),
        bodyWith({}),
        tier,
      );
      fake.reset();
      await collect(anthropicAdapter.streamChat!(chat({ service_tier: tier, stream: true }), context()));
      assert.equal('service_tier' in (fake.requests[0]!.body as object), false, `${tier}, streamed`);
    }
  });

  it('always sends max_tokens: the client value, else the catalog default, else min(4096, max output)', async () => {
    const cases: [Record<string, unknown>, CatalogModel, number][] = [
      [{ max_completion_tokens: 300, max_tokens: 200 }, MODEL, 300],
      [{ max_tokens: 200 }, MODEL, 200],
      [{}, { ...MODEL, default_max_tokens: 8192 }, 8192],
      [{}, { ...MODEL, max_output_tokens: 1024 }, 1024],
      [{}, MODEL, 4096],
    ];
    for (const [extra, model, expected] of cases) {
      fake.reset();
      assert.deepEqual(await sent(chat(extra), context({ model })), bodyWith({ max_tokens: expected }));
    }
  });

  it(
    'lifts system and developer messages from anywhere into `system`: a string for one text, blocks in order ' +
      'otherwise',
    async () => {
      const one = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ];
      assert.deepEqual(await sent(chat({ messages: one })), bodyWith({ system: 'Be brief.' }));

      fake.reset();
      const several = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello.' },
        { role: 'developer', content: [userText('Use metric units.'), userText('Cite sources.')] },
        { role: 'user', content: 'Weather?' },
      ];
      assert.deepEqual(await sent(chat({ messages: several })), {
        ...bodyWith({}),
        system: [userText('Be brief.'), userText('Use metric units.'), userText('Cite sources.')],
        messages: [
          { role: 'user', content: [userText('Hi')] },
          { role: 'assistant', content: [userText('Hello.')] },
          { role: 'user', content: [userText('Weather?')] },
        ],
      });
    },
  );

  it('merges consecutive same-role turns (also across a lifted system message) into one turn', async () => {
    const messages = [
      { role: 'user', content: 'First.' },
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [userText('Second.'), userText('Third.')] },
      { role: 'assistant', content: 'A.' },
      { role: 'assistant', content: [userText('B.')] },
      { role: 'user', content: 'Go on.' },
    ];
    assert.deepEqual(await sent(chat({ messages })), {
      ...bodyWith({ system: 'Be brief.' }),
      messages: [
        { role: 'user', content: [userText('First.'), userText('Second.'), userText('Third.')] },
        { role: 'assistant', content: [userText('A.'), userText('B.')] },
        { role: 'user', content: [userText('Go on.')] },
      ],
    });
  });

  it(
    'maps image parts: data URLs to base64 sources (PDF to a document), http(s) URLs to url sources, dropping ' +
      'detail',
    async () => {
      const content = [
        userText('Compare.'),
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'high' } },
        { type: 'image_url', image_url: { url: 'data:image/jpg;base64,/9j/4AAQ' } },
        { type: 'image_url', image_url: { url: 'https://example.com/cat.webp', detail: 'low' } },
        { type: 'image_url', image_url: { url: 'data:application/pdf;base64,JVBERi0x' } },
      ];
      assert.deepEqual(await sent(chat({ messages: [{ role: 'user', content }] })), {
        ...bodyWith({}),
        messages: [
          {
            role: 'user',
            content: [
              userText('Compare.'),
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
              { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: '/9j/4AAQ' } },
              { type: 'image', source: { type: 'url', url: 'https://example.com/cat.webp' } },
              { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0x' } },
            ],
          },
        ],
      });
    },
  );

  it('refuses images Anthropic cannot take, naming the part', async () => {
    const image = (url: string) =>
      chat({ messages: [{ role: 'user', content: [userText('x'), { type: 'image_url', image_url: { url } }] }] });
    await refused(image('data:image/bmp;base64,Qk0='), 'messages[0].content[1].image_url.url');
    await refused(image('data:image/png,rawbytes'), 'messages[0].content[1].image_url.url');
    await refused(image('ftp://example.com/a.png'), 'messages[0].content[1].image_url.url');
  });

  it('refuses input_audio and file parts with a 400 naming the part', async () => {
    const audio = { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } };
    const file = { type: 'file', file: { file_id: 'file-1' } };
    await refused(chat({ messages: [{ role: 'user', content: [userText('x'), audio] }] }), 'messages[0].content[1]');
    await refused(
      chat({
        messages: [
          { role: 'system', content: 's' },
          { role: 'user', content: [file] },
        ],
      }),
      'messages[1].content[0]',
    );
  });

  it(
    'maps tool calls to tool_use after text, and tool results plus the next user message to one user turn, results ' +
      'first',
    async () => {
      const messages = [
        { role: 'user', content: 'Weather in Oslo and Bergen?' },
        {
          role: 'assistant',
          content: 'Checking.',
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
            { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a', content: '12C' },
        { role: 'tool', tool_call_id: 'call_b', content: [userText('9C'), userText(' rain')] },
        { role: 'user', content: 'Thanks, summarise.' },
      ];
      const result = await answer(chat({ messages }));
      assert.deepEqual(fake.requests[0]!.body, {
        ...bodyWith({}),
        messages: [
          { role: 'user', content: [userText('Weather in Oslo and Bergen?')] },
          {
            role: 'assistant',
            content: [
              userText('Checking.'),
              { type: 'tool_use', id: 'call_a', name: 'get_weather', input: { city: 'Oslo' } },
              { type: 'tool_use', id: 'call_b', name: 'get_weather', input: {} },
            ],
          },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'call_a', content: '12C' },
              { type: 'tool_result', tool_use_id: 'call_b', content: [userText('9C'), userText(' rain')] },
              userText('Thanks, summarise.'),
            ],
          },
        ],
      });
      assert.equal(result.parsed.choices[0].message.content, 'Tool said: 12C; 9C rain');
    },
  );

  it('refuses tool call arguments that are not a JSON object, naming them', async () => {
    const history = (args: string) =>
      chat({
        messages: [
          { role: 'user', content: 'Hi' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }],
          },
          { role: 'tool', tool_call_id: 'c1', content: 'ok' },
        ],
      });
    await refused(history('{"city":'), 'messages[1].tool_calls[0].function.arguments');
    await refused(history('[1,2]'), 'messages[1].tool_calls[0].function.arguments');
  });

  it('maps tool definitions, defaulting the input schema', async () => {
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const tools = [
      { type: 'function', function: { name: 'get_weather', description: 'Weather by city', parameters } },
      { type: 'function', function: { name: 'get_time' } },
    ];
    assert.deepEqual(
      await sent(chat({ tools })),
      bodyWith({
        tools: [
          { name: 'get_weather', description: 'Weather by city', input_schema: parameters },
          { name: 'get_time', input_schema: { type: 'object', properties: {} } },
        ],
      }),
    );
  });

  it('maps tool_choice and parallel_tool_calls:false', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather' } }];
    const mapped = [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }];
    const cases: [Record<string, unknown>, unknown][] = [
      [{ tool_choice: 'auto' }, { type: 'auto' }],
      [{ tool_choice: 'required' }, { type: 'any' }],
      [{ tool_choice: 'none' }, { type: 'none' }],
      [{ tool_choice: { type: 'function', function: { name: 'get_weather' } } }, { type: 'tool', name: 'get_weather' }],
      [{ parallel_tool_calls: false }, { type: 'auto', disable_parallel_tool_use: true }],
      [
        { tool_choice: 'required', parallel_tool_calls: false },
        { type: 'any', disable_parallel_tool_use: true },
      ],
      [{ tool_choice: 'none', parallel_tool_calls: false }, { type: 'none' }],
    ];
    for (const [extra, toolChoice] of cases) {
      fake.reset();
      assert.deepEqual(
        await sent(chat({ tools, ...extra })),
        bodyWith({ tools: mapped, tool_choice: toolChoice }),
        JSON.stringify(extra),
      );
    }
    fake.reset();
    assert.deepEqual(
      await sent(chat({ tool_choice: 'auto', parallel_tool_calls: false })),
      bodyWith({}),
      'no tools: no tool choice',
    );
    fake.reset();
    await refused(chat({ tools: [{ type: 'custom', custom: { name: 'grammar' } }] }), 'tools[0]');
  });

  it('maps legacy functions like tools, one call at a time, and answers in the legacy shape', async () => {
    const functions = [{ name: 'get_weather', parameters: { type: 'object', properties: {} } }];
    const messages = [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: null, function_call: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
      { role: 'function', name: 'get_weather', content: '12C' },
      { role: 'user', content: 'And Bergen?' },
    ];
    const result = await answer(chat({ messages, functions, function_call: { name: 'get_weather' } }));
    assert.deepEqual(fake.requests[0]!.body, {
      ...bodyWith({}),
      messages: [
        { role: 'user', content: [userText('Weather?')] },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'call_function_1', name: 'get_weather', input: { city: 'Oslo' } }],
        },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: 'call_function_1', content: '12C' }, userText('And Bergen?')],
        },
      ],
      tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
    });
    assert.equal(result.parsed.choices[0].message.content, 'Tool said: 12C');

    fake.reset();
    const call = (await answer(chat({ functions }))).parsed.choices[0];
    assert.deepEqual(call.message.function_call, { name: 'get_weather', arguments: '{"city":"Oslo"}' });
    assert.equal(call.message.tool_calls, undefined);
    assert.equal(call.finish_reason, 'function_call');
    assert.deepEqual((fake.requests[0]!.body as { tool_choice: unknown }).tool_choice, {
      type: 'auto',
      disable_parallel_tool_use: true,
    });

    fake.reset();
    const streamed = reassemble(await stream(chat({ functions, stream: true })));
    assert.equal(streamed.finish, 'function_call');
  });

  it('maps stop, top_p and user', async () => {
    assert.deepEqual(
      await sent(chat({ stop: 'END', top_p: 0.9, user: 'user-42' })),
      bodyWith({ stop_sequences: ['END'], top_p: 0.9, metadata: { user_id: 'user-42' } }),
    );
    fake.reset();
    assert.deepEqual(await sent(chat({ stop: ['a', 'b'] })), bodyWith({ stop_sequences: ['a', 'b'] }));
  });

  it('passes temperature within 0–1 and refuses a higher one instead of clamping it', async () => {
    assert.deepEqual(await sent(chat({ temperature: 0.7 })), bodyWith({ temperature: 0.7 }));
    fake.reset();
    assert.deepEqual(await sent(chat({ temperature: 1 })), bodyWith({ temperature: 1 }));
    fake.reset();
    const error = await refused(chat({ temperature: 1.5 }), 'temperature');
    assert.match(error.message, /0 to 1/);
  });

  it('maps response_format: json_schema to output_config.format, json_object to a system instruction', async () => {
    const schema = {
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
      additionalProperties: false,
    };
    const jsonSchema = { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } };
    assert.deepEqual(
      await sent(chat({ response_format: jsonSchema })),
      bodyWith({ output_config: { format: { type: 'json_schema', schema } } }),
    );
    fake.reset();
    assert.deepEqual(
      await sent(chat({ response_format: { type: 'json_object' } })),
      bodyWith({ system: JSON_OBJECT_INSTRUCTION }),
    );
    fake.reset();
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ];
    assert.deepEqual(
      await sent(chat({ messages, response_format: { type: 'json_object' } })),
      bodyWith({ system: [userText('Be brief.'), userText(JSON_OBJECT_INSTRUCTION)] }),
    );
    fake.reset();
    assert.deepEqual(await sent(chat({ response_format: { type: 'text' } })), bodyWith({}));
  });

  it('refuses n > 1 (one answer would silently replace several) and accepts n = 1', async () => {
    await refused(chat({ n: 2 }), 'n');
    assert.deepEqual(await sent(chat({ n: 1 })), bodyWith({}));
  });

  it('drops fields with no counterpart with one warning naming them', async () => {
    const lines: string[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const extra = {
      seed: 7,
      logit_bias: { '50256': -100 },
      presence_penalty: 0.5,
      frequency_penalty: 0.5,
      logprobs: true,
      top_logprobs: 2,
      stream_options: { include_usage: true },
    };
    const messages = [{ role: 'user', content: 'Hi', name: 'alice' }];
    assert.deepEqual(await sent(chat({ ...extra, messages }), context({ log })), bodyWith({}));
    assert.equal(lines.length, 1);
    const entry = JSON.parse(lines[0]!);
    assert.equal(entry.level, 40);
    assert.equal(entry.reqId, 'req_test');
    assert.deepEqual(entry.dropped, [
      'seed',
      'logit_bias',
      'presence_penalty',
      'frequency_penalty',
      'logprobs',
      'top_logprobs',
      'messages[].name',
    ]);

    lines.length = 0;
    fake.reset();
    await sent(chat({ temperature: 0.5, stream_options: null }), context({ log }));
    assert.equal(lines.length, 0, 'nothing dropped, nothing logged');
  });
});

describe('anthropic adapter: reasoning_effort → extended thinking', () => {
  const thinking = (budget: number) => ({ type: 'enabled', budget_tokens: budget });
  const warnings = () => {
    const lines: string[] = [];
    return { lines, log: pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) }) };
  };

  it('sends the budget of each effort, raising max_tokens by it; none sends no thinking', async () => {
    // The default output is 4096 (MODEL knows a 64000 limit): max_tokens = budget + 4096.
    const cases: [string, Record<string, unknown>][] = [
      ['none', {}],
      ['minimal', { max_tokens: 5120, thinking: thinking(1024) }],
      ['low', { max_tokens: 6144, thinking: thinking(2048) }],
      ['medium', { max_tokens: 8192, thinking: thinking(4096) }],
      ['high', { max_tokens: 20480, thinking: thinking(16384) }],
      ['xhigh', { max_tokens: 36096, thinking: thinking(32000) }],
    ];
    for (const [effort, extra] of cases) {
      fake.reset();
      const { lines, log } = warnings();
      assert.deepEqual(await sent(chat({ reasoning_effort: effort }), context({ log })), bodyWith(extra), effort);
      assert.equal(lines.length, 0, `${effort}: nothing dropped`);
    }
  });

  it(
    'fits thinking inside a client max_tokens (it counts reasoning, and was reserved so); raises only the default, ' +
      'within the catalog limit; gives up below 1024',
    async () => {
      const cases: [Record<string, unknown>, CatalogModel, Record<string, unknown>][] = [
        // The client's max counts the thinking too, as OpenAI's max_completion_tokens counts reasoning.
        [{ reasoning_effort: 'medium', max_completion_tokens: 100 }, MODEL, { max_tokens: 100 }],
        [{ reasoning_effort: 'high', max_tokens: 60000 }, MODEL, { max_tokens: 60000, thinking: thinking(16384) }],
        [{ reasoning_effort: 'medium', max_tokens: 3000 }, MODEL, { max_tokens: 3000, thinking: thinking(2999) }],
        // The gateway's default output gets the budget added.
        [
          { reasoning_effort: 'medium' },
          { ...MODEL, default_max_tokens: 2000 },
          { max_tokens: 6096, thinking: thinking(4096) },
        ],
        // The budget does not fit under the limit: it shrinks to max_tokens - 1.
        [
          { reasoning_effort: 'high' },
          { ...MODEL, max_output_tokens: 8192 },
          { max_tokens: 8192, thinking: thinking(8191) },
        ],
        [
          { reasoning_effort: 'xhigh', max_tokens: 8192 },
          { ...MODEL, max_output_tokens: 8192 },
          { max_tokens: 8192, thinking: thinking(8191) },
        ],
        // Unknown limit: nothing to cap at.
        [
          { reasoning_effort: 'xhigh' },
          { ...MODEL, max_output_tokens: 0 },
          { max_tokens: 36096, thinking: thinking(32000) },
        ],
        // A client max_tokens above the catalog limit is never lowered: refusing it is the vendor's call, as without
        // thinking.
        [{ reasoning_effort: 'low', max_tokens: 70000 }, MODEL, { max_tokens: 70000, thinking: thinking(2048) }],
        // 1024 max tokens leave at most 1023 for thinking: below Anthropic's minimum, so no thinking.
        [{ reasoning_effort: 'minimal' }, { ...MODEL, max_output_tokens: 1024 }, { max_tokens: 1024 }],
        [{ reasoning_effort: 'high', max_tokens: 500 }, { ...MODEL, max_output_tokens: 1000 }, { max_tokens: 500 }],
      ];
      for (const [extra, model, expected] of cases) {
        fake.reset();
        assert.deepEqual(
          await sent(chat(extra), context({ model })),
          bodyWith(expected),
          JSON.stringify([extra, model.max_output_tokens]),
        );
      }
    },
  );

  it('logs an effort it could not fit as dropped, with the reason', async () => {
    const { lines, log } = warnings();
    await sent(chat({ reasoning_effort: 'minimal' }), context({ log, model: { ...MODEL, max_output_tokens: 1024 } }));
    assert.equal(lines.length, 1);
    const entry = JSON.parse(lines[0]!);
    assert.deepEqual(entry.dropped, ['reasoning_effort']);
    assert.match(entry.thinkingSkipped, /minimum thinking budget of 1024/);
  });

  it(
    'drops temperature and top_p when thinking is on (Anthropic accepts only its default sampling then), keeps ' +
      'them otherwise',
    async () => {
      const { lines, log } = warnings();
      const request = chat({ reasoning_effort: 'low', temperature: 0.2, top_p: 0.5, stop: 'END' });
      assert.deepEqual(
        await sent(request, context({ log })),
        bodyWith({ max_tokens: 6144, thinking: thinking(2048), stop_sequences: ['END'] }),
      );
      assert.equal(lines.length, 1);
      assert.deepEqual(JSON.parse(lines[0]!).dropped, ['temperature', 'top_p']);

      fake.reset();
      assert.deepEqual(
        await sent(chat({ reasoning_effort: 'none', temperature: 0.2, top_p: 0.5 })),
        bodyWith({ temperature: 0.2, top_p: 0.5 }),
      );
    },
  );

  it('keeps a forced tool choice and leaves thinking off (Anthropic allows only auto/none with thinking)', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather' } }];
    const mapped = [{ name: 'get_weather', input_schema: { type: 'object', properties: {} } }];
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [{ tool_choice: 'required' }, { tool_choice: { type: 'any' } }],
      [
        { tool_choice: { type: 'function', function: { name: 'get_weather' } } },
        { tool_choice: { type: 'tool', name: 'get_weather' } },
      ],
      [{ tool_choice: 'auto' }, { tool_choice: { type: 'auto' }, max_tokens: 20480, thinking: thinking(16384) }],
      [{ tool_choice: 'none' }, { tool_choice: { type: 'none' }, max_tokens: 20480, thinking: thinking(16384) }],
      [{}, { max_tokens: 20480, thinking: thinking(16384) }],
    ];
    for (const [extra, expected] of cases) {
      fake.reset();
      const { lines, log } = warnings();
      assert.deepEqual(
        await sent(chat({ tools, reasoning_effort: 'high', ...extra }), context({ log })),
        bodyWith({ tools: mapped, ...expected }),
        JSON.stringify(extra),
      );
      assert.deepEqual(
        lines.map((line) => JSON.parse(line).dropped),
        expected.thinking === undefined ? [['reasoning_effort']] : [],
      );
    }
  });

  it(
    'leaves thinking off while answering tool calls (their thinking blocks cannot be replayed) and for a prefilled ' +
      'reply',
    async () => {
      const tools = [{ type: 'function', function: { name: 'get_weather' } }];
      const toolCall = { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{}' } };
      const inLoop = [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [toolCall] },
        { role: 'tool', tool_call_id: 'call_a', content: '12C' },
      ];
      const body = (await sent(chat({ tools, messages: inLoop, reasoning_effort: 'high' }))) as Record<string, unknown>;
      assert.equal(body.thinking, undefined);
      assert.equal(body.max_tokens, 4096);

      // Once the loop is over (a text answer, then a new question), thinking comes back.
      fake.reset();
      const after = [
        ...inLoop,
        { role: 'assistant', content: 'It is 12C.' },
        { role: 'user', content: 'And tomorrow?' },
      ];
      assert.deepEqual(
        ((await sent(chat({ tools, messages: after, reasoning_effort: 'high' }))) as Record<string, unknown>).thinking,
        thinking(16384),
      );

      fake.reset();
      const prefill = [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Well,' },
      ];
      assert.equal(
        ((await sent(chat({ messages: prefill, reasoning_effort: 'high' }))) as Record<string, unknown>).thinking,
        undefined,
      );
    },
  );

  it('sends thinking on stream requests too', async () => {
    await stream(chat({ stream: true, reasoning_effort: 'medium' }));
    assert.deepEqual(fake.requests[0]!.body, bodyWith({ max_tokens: 8192, thinking: thinking(4096), stream: true }));
  });

  it('refuses a reasoning_effort OpenAI does not know, naming it', async () => {
    for (const effort of ['maximum', 'HIGH', 3, true]) {
      const error = await refused(chat({ reasoning_effort: effort }), 'reasoning_effort');
      assert.match(error.message, /none, minimal, low, medium, high, xhigh/);
    }
    assert.deepEqual(await sent(chat({ reasoning_effort: null })), bodyWith({}));
  });

  it(
    'keeps thinking and redacted_thinking blocks out of a plain answer; reasoning tokens stay unset (Anthropic ' +
      'reports none apart)',
    async () => {
      fake.enqueue({
        json: {
          id: 'msg_t',
          type: 'message',
          role: 'assistant',
          model: UPSTREAM_MODEL,
          stop_reason: 'end_turn',
          stop_sequence: null,
          content: [
            {
              type: 'thinking',
              thinking: 'The user greets me. I should greet back.',
              signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
            },
            {
              type: 'redacted_thinking',
              data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj',
            },
            userText('Hello!'),
          ],
          usage: { input_tokens: 10, output_tokens: 95 },
        },
      });
      const result = await answer(chat({ reasoning_effort: 'low' }));
      assert.deepEqual(result.answer.choices, [{ index: 0, text: 'Hello!', toolCalls: [], finishReason: 'stop' }]);
      assert.equal(result.parsed.choices[0].message.content, 'Hello!');
      const usage = {
        prompt_tokens: 10,
        completion_tokens: 95,
        total_tokens: 105,
        prompt_tokens_details: { cached_tokens: 0 },
      };
      assert.deepEqual(result.parsed.usage, usage);
      assert.deepEqual(result.answer.usage, usage);
    },
  );

  it('keeps thinking, signature and redacted blocks out of a stream', async () => {
    fake.enqueue({
      events: [
        { type: 'message_start', message: { id: 'msg_ts', usage: { input_tokens: 10, output_tokens: 1 } } },
        { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'The user greets me.' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: ' Greet back.' } },
        {
          type: 'content_block_delta',
          index: 0,
          delta: { type: 'signature_delta', signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3h' },
        },
        { type: 'content_block_stop', index: 0 },
        {
          type: 'content_block_start',
          index: 1,
          content_block: { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix' },
        },
        { type: 'content_block_stop', index: 1 },
        { type: 'content_block_start', index: 2, content_block: { type: 'text', text: '' } },
        { type: 'content_block_delta', index: 2, delta: { type: 'text_delta', text: 'Hello' } },
        { type: 'content_block_delta', index: 2, delta: { type: 'text_delta', text: '!' } },
        { type: 'content_block_stop', index: 2 },
        {
          type: 'message_delta',
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 95 },
        },
        { type: 'message_stop' },
      ],
    });
    const encoded = await stream(chat({ stream: true, reasoning_effort: 'low' }));
    const events = encoded.batches.flat();
    assert.deepEqual(
      events.filter((event) => event.type === 'text'),
      [
        { type: 'text', choice: 0, text: 'Hello' },
        { type: 'text', choice: 0, text: '!' },
      ],
    );
    assert.deepEqual(reassemble(encoded), { text: 'Hello!', finish: 'stop', calls: [] });
    assert.deepEqual(encoded.usage, {
      prompt_tokens: 10,
      completion_tokens: 95,
      total_tokens: 105,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });
});

describe('anthropic adapter: billing what Anthropic reports', () => {
  it('bills cache writes at the write price, cache reads at the cached price, and shows both to the client', async () => {
    const usage = convertAnthropicUsage({
      input_tokens: 20,
      cache_creation_input_tokens: 3,
      cache_read_input_tokens: 5,
      output_tokens: 4,
    });
    assert.deepEqual(usage, {
      prompt_tokens: 28,
      completion_tokens: 4,
      total_tokens: 32,
      prompt_tokens_details: { cached_tokens: 5, cache_write_tokens: 3 },
    });
    const produced = new Meter();
    produced.usage = usage;
    const request = {
      endpoint: 'chat.completions',
      payload: chatCompletionRequestSchema.parse({
        model: 'claude-sonnet-4-5',
        messages: [{ role: 'user', content: 'hi' }],
      }),
    } as EndpointRequest;
    const metered = await meter(request, produced);
    assert.deepEqual(
      [metered.inputTokens, metered.cachedTokens, metered.cacheWriteTokens, metered.outputTokens],
      [28, 5, 3, 4],
    );
    // claude-sonnet-4-5 per 1M: $3 in, $0.30 cached, $3.75 written, $15 out; each part rounded up to a micro.
    assert.equal(new PriceList(loadCatalog().all()).costMicros('claude-sonnet-4-5', metered), 60 + 2 + 12 + 60);
    // No cache writes: the field stays out of the client's usage.
    assert.deepEqual(
      convertAnthropicUsage({
        input_tokens: 2,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: 1,
      }).prompt_tokens_details,
      { cached_tokens: 0 },
    );
  });
});

describe('anthropic adapter: answers', () => {
  it('maps a text message to a chat.completion with OpenAI usage (cache reads and writes included and detailed)', async () => {
    const before = Math.floor(Date.now() / 1000);
    const result = await answer(chat());
    const body = result.parsed;
    assert.ok(body.created >= before && body.created <= Math.floor(Date.now() / 1000) + 1);
    const usage = {
      prompt_tokens: 28,
      completion_tokens: 4,
      total_tokens: 32,
      prompt_tokens_details: { cached_tokens: 5, cache_write_tokens: 3 },
    };
    assert.deepEqual(body, {
      id: `chatcmpl-${FAKE_ANTHROPIC_MESSAGE_ID}`,
      object: 'chat.completion',
      created: body.created,
      model: 'claude-sonnet',
      service_tier: 'default',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: FAKE_ANTHROPIC_TEXT, refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage,
    });
    assert.deepEqual(result.answer.usage, usage);
    assert.equal(result.answer.model, undefined, 'the client sees the model id it asked for');
  });

  it('maps tool_use blocks to tool_calls with null content', async () => {
    const result = await answer(chat({ tools: [{ type: 'function', function: { name: 'get_weather' } }] }));
    const choice = result.parsed.choices[0];
    assert.deepEqual(choice.message, {
      role: 'assistant',
      content: null,
      refusal: null,
      tool_calls: [
        {
          id: FAKE_ANTHROPIC_TOOL_USE_ID,
          type: 'function',
          function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
        },
      ],
    });
    assert.equal(choice.finish_reason, 'tool_calls');
  });

  it('concatenates text blocks and ignores thinking blocks', async () => {
    fake.enqueue({
      json: {
        id: 'msg_2',
        type: 'message',
        role: 'assistant',
        model: UPSTREAM_MODEL,
        stop_reason: 'max_tokens',
        stop_sequence: null,
        content: [{ type: 'thinking', thinking: 'hmm', signature: 's' }, userText('Part one, '), userText('part two.')],
        usage: { input_tokens: 5, output_tokens: 7 },
      },
    });
    const body = (await answer(chat())).parsed;
    assert.equal(body.choices[0].message.content, 'Part one, part two.');
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.deepEqual(body.usage, {
      prompt_tokens: 5,
      completion_tokens: 7,
      total_tokens: 12,
      prompt_tokens_details: { cached_tokens: 0 },
    });
  });

  it('maps every stop reason', () => {
    const table: [unknown, string][] = [
      ['end_turn', 'stop'],
      ['stop_sequence', 'stop'],
      ['pause_turn', 'stop'],
      ['max_tokens', 'length'],
      ['model_context_window_exceeded', 'length'],
      ['tool_use', 'tool_calls'],
      ['refusal', 'content_filter'],
      [null, 'stop'],
    ];
    for (const [reason, expected] of table) assert.equal(mapAnthropicStopReason(reason), expected, String(reason));
  });

  it('streams the default text answer as OpenAI chunks with one id, created and model, then a usage-only chunk', async () => {
    const encoded = await stream(chat({ stream: true }));
    assert.equal((fake.requests[0]!.body as { stream: boolean }).stream, true);
    const chunks = encoded.parsed;
    const { id, created } = chunks[0]!;
    assert.equal(id, `chatcmpl-${FAKE_ANTHROPIC_MESSAGE_ID}`);
    for (const chunk of chunks) {
      assert.equal(chunk.id, id);
      assert.equal(chunk.created, created);
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.model, 'claude-sonnet');
    }
    const choice = (delta: unknown, finish: string | null = null) => [
      { index: 0, delta, logprobs: null, finish_reason: finish },
    ];
    assert.deepEqual(
      chunks.map((chunk) => chunk.choices),
      [
        choice({ role: 'assistant', content: '' }),
        ...['Hello', ' from', ' fake', ' upstream'].map((content) => choice({ content })),
        choice({}, 'stop'),
        [],
      ],
    );
    const usage = {
      prompt_tokens: 28,
      completion_tokens: 4,
      total_tokens: 32,
      prompt_tokens_details: { cached_tokens: 5, cache_write_tokens: 3 },
    };
    assert.deepEqual(chunks.at(-1)!.usage, usage);
    assert.deepEqual(encoded.usage, usage);
    const events = encoded.batches.flat();
    assert.deepEqual(events.at(-1), { type: 'usage', usage });
    assert.ok(events.slice(0, -1).every((event) => event.type !== 'usage'));
    assert.ok(chunks.slice(0, -1).every((chunk) => chunk.usage === undefined));

    // A client that did not ask for usage gets the same chunks without the usage-only one; billing still reads it.
    fake.reset();
    const quiet = await stream(chat({ stream: true }), context(), false);
    assert.deepEqual(
      quiet.parsed.map((chunk) => chunk.choices),
      chunks.slice(0, -1).map((chunk) => chunk.choices),
    );
    assert.ok(quiet.parsed.every((chunk) => chunk.usage === undefined));
    assert.deepEqual(quiet.usage, usage);
  });

  it('streams a default tool call with OpenAI tool-call fragments', async () => {
    const encoded = await stream(
      chat({ stream: true, tools: [{ type: 'function', function: { name: 'get_weather' } }] }),
    );
    const result = reassemble(encoded);
    assert.deepEqual(result.calls, [
      { id: FAKE_ANTHROPIC_TOOL_USE_ID, name: 'get_weather', arguments: '{"city": "Oslo"}' },
    ]);
    assert.equal(result.finish, 'tool_calls');
    assert.deepEqual(encoded.parsed[1]!.choices[0].delta, {
      tool_calls: [
        {
          index: 0,
          id: FAKE_ANTHROPIC_TOOL_USE_ID,
          type: 'function',
          function: { name: 'get_weather', arguments: '' },
        },
      ],
    });
  });

  it('replays the recorded text-then-tool-use stream (tool index counts tool blocks; no-args call gets "{}")', async () => {
    fake.enqueue({ chunksFile: wireFixture('anthropic-stream-text-then-tool-use.chunks.jsonl'), chunkSize: 7 });
    const encoded = await stream(chat({ stream: true }));
    const result = reassemble(encoded);
    assert.equal(result.text, "I'll update the issue list for you.");
    assert.deepEqual(result.calls, [
      { id: 'toolu_01QE1WLsSVp5hy5Q3GmGTmjP', name: 'updateIssueList', arguments: '{}' },
    ]);
    assert.equal(result.finish, 'tool_calls');
    assert.equal(encoded.parsed[0]!.id, 'chatcmpl-msg_01GE2RKp1VYsPzdFs3sS9z5S');
    const usage = {
      prompt_tokens: 565,
      completion_tokens: 48,
      total_tokens: 613,
      prompt_tokens_details: { cached_tokens: 0 },
    };
    assert.deepEqual(encoded.usage, usage);
    assert.deepEqual(encoded.parsed.at(-1)!.usage, usage);
    assert.equal(encoded.batches.flat().filter((event) => event.type === 'usage').length, 1);
    assert.equal(encoded.parsed.filter((chunk) => chunk.usage !== undefined).length, 1);
    // Reads of 7 bytes mostly complete no SSE event: those yield nothing, never an empty array.
    assert.ok(encoded.batches.every((batch) => batch.length > 0));
  });

  it('replays the recorded input_json_delta stream', async () => {
    const file = wireFixture('anthropic-stream-tool-use-input-json-delta.chunks.jsonl');
    fake.enqueue({ chunksFile: file, chunkDelayMs: 2 });
    const encoded = await stream(chat({ stream: true }));
    const result = reassemble(encoded);
    const expectedArguments = readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as { delta?: { partial_json?: string } })
      .map((event) => event.delta?.partial_json ?? '')
      .join('');
    assert.deepEqual(result.calls, [
      { id: 'toolu_01KFbKqPYSuAKujiL6mTfzYA', name: 'json', arguments: expectedArguments },
    ]);
    assert.deepEqual(JSON.parse(result.calls[0]!.arguments), {
      elements: [{ location: 'San Francisco', temperature: 58, condition: 'sunny' }],
    });
    assert.equal(result.text, '');
    assert.equal(result.finish, 'tool_calls');
    const usage = {
      prompt_tokens: 849,
      completion_tokens: 47,
      total_tokens: 896,
      prompt_tokens_details: { cached_tokens: 0 },
    };
    assert.deepEqual(encoded.usage, usage);
    assert.deepEqual(encoded.parsed.at(-1)!.usage, usage);
  });
});

describe('anthropic adapter: answer events', () => {
  const textEvents = [
    { type: 'message_start', message: { id: 'msg_b', usage: { input_tokens: 3, output_tokens: 1 } } },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'ping' },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'One' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' read' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 2 } },
    { type: 'message_stop' },
  ];
  const textUsage = {
    prompt_tokens: 3,
    completion_tokens: 2,
    total_tokens: 5,
    prompt_tokens_details: { cached_tokens: 0 },
  };
  const textAnswer = (created: number): AnswerEvent[] => [
    { type: 'start', id: 'chatcmpl-msg_b', created },
    { type: 'role', choice: 0 },
    { type: 'text', choice: 0, text: 'One' },
    { type: 'text', choice: 0, text: ' read' },
    { type: 'finish', choice: 0, reason: 'stop' },
    { type: 'usage', usage: textUsage },
  ];
  const createdOf = (encoded: EncodedStream) => (encoded.batches[0]![0] as StartEvent).created;

  it('yields the events of one upstream read as one array', async () => {
    fake.enqueue({ events: textEvents }); // one write: one read
    const encoded = await stream(chat({ stream: true }));
    assert.deepEqual(encoded.batches, [textAnswer(createdOf(encoded))]);
    assert.equal(encoded.chunks.length, 5, 'role, two texts, finish, usage');
  });

  it('yields one array per upstream read, none for reads whose events say nothing', async () => {
    fake.enqueue({ events: textEvents, chunkDelayMs: 20 }); // one write, so one read, per event
    const encoded = await stream(chat({ stream: true }));
    const [start, role, one, read, finish, usage] = textAnswer(createdOf(encoded));
    // Block start, ping and block stop produce no events: they yield nothing, not an empty array.
    assert.deepEqual(encoded.batches, [[start, role], [one], [read], [finish], [usage]]);
  });

  const twoCalls = [
    { type: 'message_start', message: { id: 'msg_l', usage: { input_tokens: 3, output_tokens: 1 } } },
    {
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: {} },
    },
    { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"city":"Oslo"}' } },
    { type: 'content_block_stop', index: 0 },
    {
      type: 'content_block_start',
      index: 1,
      content_block: { type: 'tool_use', id: 'toolu_b', name: 'get_time', input: {} },
    },
    { type: 'content_block_stop', index: 1 },
    { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 9 } },
    { type: 'message_stop' },
  ];
  const twoCallsMessage = {
    id: 'msg_l',
    type: 'message',
    role: 'assistant',
    model: UPSTREAM_MODEL,
    stop_reason: 'tool_use',
    stop_sequence: null,
    content: [
      { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: { city: 'Oslo' } },
      { type: 'tool_use', id: 'toolu_b', name: 'get_time', input: {} },
    ],
    usage: { input_tokens: 3, output_tokens: 9 },
  };
  const functions = [{ name: 'get_weather' }, { name: 'get_time' }];
  const tools = functions.map((definition) => ({ type: 'function', function: definition }));
  const delta = (value: unknown, finish: string | null = null) => [
    { index: 0, delta: value, logprobs: null, finish_reason: finish },
  ];

  it('streams every tool call as an event; the encoder gives a legacy functions client one function_call', async () => {
    fake.enqueue({ events: twoCalls });
    const legacy = await stream(chat({ stream: true, functions }));
    assert.deepEqual(
      legacy.parsed.map((chunk) => chunk.choices),
      [
        delta({ role: 'assistant', content: '' }),
        delta({ function_call: { name: 'get_weather', arguments: '' } }),
        delta({ function_call: { arguments: '{"city":"Oslo"}' } }),
        delta({}, 'function_call'),
        [],
      ],
    );

    fake.reset();
    fake.enqueue({ events: twoCalls });
    const current = await stream(chat({ stream: true, tools }));
    assert.deepEqual(reassemble(current).calls, [
      { id: 'toolu_a', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      { id: 'toolu_b', name: 'get_time', arguments: '{}' },
    ]);
    assert.equal(reassemble(current).finish, 'tool_calls');
    // The adapter does not know the client's form: both got the same events.
    const created = createdOf(legacy);
    const events = (encoded: EncodedStream) =>
      encoded.batches.flat().map((event) => (event.type === 'start' ? { ...event, created } : event));
    assert.deepEqual(events(current), events(legacy));
  });

  it(
    'answers every tool call in a plain answer; the encoder gives a legacy functions client the first as ' +
      'function_call',
    async () => {
      fake.enqueue({ json: twoCallsMessage });
      const legacy = await answer(chat({ functions }));
      assert.deepEqual(legacy.answer.choices, [
        {
          index: 0,
          text: null,
          toolCalls: [
            { id: 'toolu_a', name: 'get_weather', arguments: '{"city":"Oslo"}' },
            { id: 'toolu_b', name: 'get_time', arguments: '{}' },
          ],
          finishReason: 'tool_calls',
        },
      ]);
      assert.deepEqual(legacy.parsed.choices, [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: null,
            refusal: null,
            function_call: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
          },
          logprobs: null,
          finish_reason: 'function_call',
        },
      ]);
      assert.deepEqual((fake.requests[0]!.body as { tool_choice: unknown }).tool_choice, {
        type: 'auto',
        disable_parallel_tool_use: true,
      });
    },
  );
});

describe('anthropic adapter: vendor errors', () => {
  const cases: {
    name: string;
    status: number;
    body: unknown;
    headers?: Record<string, string>;
    expect: Partial<GatewayError>;
  }[] = [
    {
      name: '400 keeps its status and the scrubbed vendor message',
      status: 400,
      body: anthropicError('invalid_request_error', `messages.0: bad input for key ${KEY}`),
      expect: {
        status: 400,
        type: 'invalid_request_error',
        message: 'messages.0: bad input for key [redacted]',
        retryable: false,
      },
    },
    {
      name: '404 is model_not_found',
      status: 404,
      body: anthropicError('not_found_error', 'model: claude-9'),
      expect: { status: 404, code: 'model_not_found', message: 'model: claude-9', retryable: false },
    },
    {
      name: '403 is our credentials problem',
      status: 403,
      body: anthropicError('permission_error', 'Your API key does not have permission'),
      expect: { status: 502, code: 'vendor_auth_failed', retryable: false },
    },
    {
      name: '429 is retryable after retry-after',
      status: 429,
      headers: { 'retry-after': '3' },
      body: anthropicError('rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit'),
      expect: {
        status: 429,
        type: 'rate_limit_exceeded',
        code: 'rate_limit_exceeded',
        retryable: true,
        retryAfterMs: 3000,
      },
    },
    {
      name: '429 spend limit is quota, not retried',
      status: 429,
      body: anthropicError('rate_limit_error', 'You have reached your specified workspace API usage limits.', {
        details: { error_code: 'enforced_spend_limit_reached' },
      }),
      expect: { status: 503, code: 'vendor_quota_exhausted', retryable: false },
    },
    {
      name: '400 low credit balance is quota',
      status: 400,
      body: anthropicError('invalid_request_error', 'Your credit balance is too low to access the Anthropic API.'),
      expect: { status: 503, code: 'vendor_quota_exhausted', retryable: false },
    },
    {
      name: '529 overloaded is a retryable 502',
      status: 529,
      body: anthropicError('overloaded_error', 'Overloaded'),
      expect: { status: 502, code: 'vendor_error', message: 'Upstream vendor error: Overloaded', retryable: true },
    },
    {
      name: '500 api_error is a retryable 502',
      status: 500,
      body: anthropicError('api_error', 'Internal server error'),
      expect: { status: 502, retryable: true },
    },
  ];
  for (const { name, status, body, headers, expect } of cases) {
    it(name, async () => {
      fake.enqueue({ status, json: body, ...(headers ? { headers } : {}) });
      const error = await gatewayError(anthropicAdapter.chat!(chat(), context()));
      for (const [field, value] of Object.entries(expect))
        assert.deepEqual(error[field as keyof GatewayError], value, field);
      assert.doesNotMatch(JSON.stringify(error.toBody()), /sk-ant/);
    });
  }

  it('maps the fake refusing a wrong key (401) to vendor_auth_failed without vendor text', async () => {
    const ctx = context({ channel: { vendor: 'anthropic', baseUrl: fake.url, apiKey: 'sk-ant-wrong-key-abcdefghij' } });
    const error = await gatewayError(anthropicAdapter.chat!(chat(), ctx));
    assert.equal(error.status, 502);
    assert.equal(error.code, 'vendor_auth_failed');
    assert.doesNotMatch(error.message, /x-api-key|sk-ant/);
  });

  it('throws a refused stream request from the first next(), before any chunk', async () => {
    fake.enqueue({ status: 529, json: anthropicError('overloaded_error', 'Overloaded') });
    const iterator = anthropicAdapter.streamChat!(chat({ stream: true }), context())[Symbol.asyncIterator]();
    const error = await gatewayError(iterator.next());
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
  });

  it('throws an error event mid-stream as the mapped error, after the chunks before it', async () => {
    fake.enqueue({
      events: [
        { type: 'message_start', message: { id: 'msg_e', usage: { input_tokens: 3, output_tokens: 1 } } },
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Partial' } },
        { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
      ],
    });
    const { encoded, error } = await failedStream(chat({ stream: true }));
    assert.equal(reassemble(encoded).text, 'Partial');
    assert.equal(encoded.chunks.length, 2);
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.equal(error.message, 'Upstream vendor error: Overloaded');
  });

  it('fails a stream that ends without message_stop', async () => {
    fake.enqueue({
      events: [
        { type: 'message_start', message: { id: 'msg_x', usage: { input_tokens: 3, output_tokens: 1 } } },
        { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
        { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Cut' } },
      ],
    });
    const { encoded, error } = await failedStream(chat({ stream: true }));
    assert.equal(reassemble(encoded).text, 'Cut');
    assert.equal(encoded.chunks.length, 2);
    assert.equal(error.status, 502);
    assert.equal(error.retryable, true);
    assert.match(error.message, /ended early/);
  });

  it('aborts the vendor request when the caller aborts mid-stream', async () => {
    fake.enqueue({
      events: [
        { type: 'message_start', message: { id: 'msg_h', usage: { input_tokens: 3, output_tokens: 1 } } },
        { type: 'ping' },
      ],
      hang: true,
    });
    const controller = new AbortController();
    const iterator = anthropicAdapter.streamChat!(chat({ stream: true }), context({ signal: controller.signal }))[
      Symbol.asyncIterator
    ]();
    assert.equal((await iterator.next()).done, false);
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

  it('has chat and the Messages API only: the registry refuses the endpoints Anthropic does not have', () => {
    assert.deepEqual(Object.keys(anthropicAdapter).sort(), [
      'chat',
      'countMessageTokens',
      'nativeMessages',
      'streamChat',
    ]);
    for (const method of ['complete', 'streamCompletion', 'embed'] as const) {
      assert.throws(
        () => adapterMethod('anthropic', method),
        (error: unknown) =>
          error instanceof GatewayError &&
          error.status === 400 &&
          error.code === 'unsupported_endpoint' &&
          /anthropic/.test(error.message),
        method,
      );
    }
    assert.equal(fake.requests.length, 0);
  });
});

describe('fake anthropic: refuses what the real API refuses', () => {
  const valid = { model: UPSTREAM_MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'Hi' }] };
  const headers = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' };
  const toolTurns = [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f', input: {} }] },
  ];
  const cases: [string, Record<string, unknown>, Record<string, string>, number][] = [
    ['no x-api-key', valid, { 'x-api-key': '' }, 401],
    ['no anthropic-version', valid, { 'anthropic-version': '' }, 400],
    ['no max_tokens', { ...valid, max_tokens: undefined }, {}, 400],
    ['a system role', { ...valid, messages: [{ role: 'system', content: 'x' }, ...valid.messages] }, {}, 400],
    ['an assistant first', { ...valid, messages: [{ role: 'assistant', content: 'x' }, ...valid.messages] }, {}, 400],
    ['two user turns in a row', { ...valid, messages: [...valid.messages, ...valid.messages] }, {}, 400],
    [
      'a tool_result for an unknown tool_use',
      {
        ...valid,
        messages: [
          ...toolTurns,
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_2', content: 'x' }] },
        ],
      },
      {},
      400,
    ],
    ['a tool_use left unanswered', { ...valid, messages: [...toolTurns, { role: 'user', content: 'next' }] }, {}, 400],
    ['temperature above 1', { ...valid, temperature: 1.2 }, {}, 400],
    [
      'a bmp image',
      {
        ...valid,
        messages: [
          {
            role: 'user',
            content: [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'Qk0=' } }],
          },
        ],
      },
      {},
      400,
    ],
    [
      'a file image source',
      { ...valid, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f' } }] }] },
      {},
      400,
    ],
    ['n', { ...valid, n: 1 }, {}, 400],
    ['stream_options', { ...valid, stream_options: { include_usage: true } }, {}, 400],
    ['response_format', { ...valid, response_format: { type: 'json_object' } }, {}, 400],
    ['an OpenAI tool_choice', { ...valid, tool_choice: 'auto' }, {}, 400],
  ];
  for (const [name, body, headerOverrides, status] of cases) {
    it(`refuses ${name} with ${status}`, async () => {
      const response = await httpRequest(`${fake.url}/v1/messages`, {
        method: 'POST',
        headers: { ...headers, ...headerOverrides },
        body: JSON.stringify(body),
      });
      const answer = (await response.body.json()) as { type: string; error: { type: string; message: string } };
      assert.equal(response.statusCode, status);
      assert.equal(answer.type, 'error');
      assert.equal(typeof answer.error.message, 'string');
    });
  }
});
