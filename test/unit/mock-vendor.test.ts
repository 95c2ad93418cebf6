import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { GatewayError } from '../../shared/errors.js';
import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../shared/schemas/completions.js';
import { countChatPromptTokens, countTextTokens, encodeText } from '../../shared/tokens.js';
import { loadCatalog } from '../../shared/catalog.js';
import { loadConfig } from '../../shared/config.js';
import type { AnswerEvent, ToolCallEvent, UsageEvent } from '../../workers/answers/events.js';
import type { CallContext, VendorAdapter, VendorHttp } from '../../workers/vendors/types.js';
import type { Answer } from '../../workers/answers/events.js';
import { createVendorHttp } from '../../workers/vendors/vendor-http.js';
import { MOCK_EMBEDDING_DIMENSIONS, mockAdapter } from '../../workers/vendors/mock/index.js';
import { withServiceTier } from '../../workers/answers/chat-encoder.js';
import { encodeAnswer, encodeStream } from '../support/answers.js';

type Json = Record<string, any>;

function makeContext(signal = new AbortController().signal, upstreamModel = 'mock-chat'): CallContext {
  const model = loadCatalog().get('mock-chat')!;
  return {
    requestId: 'r1',
    signal,
    channel: { vendor: 'mock', baseUrl: '', apiKey: '' },
    upstreamModel,
    model,
    log: pino({ level: 'silent' }),
    http,
  };
}

/** The mock implements every capability; this spares a `!` on each call. */
const mock = mockAdapter as Required<VendorAdapter>;

async function collect(stream: AsyncIterable<AnswerEvent[]>): Promise<AnswerEvent[][]> {
  const batches: AnswerEvent[][] = [];
  for await (const batch of stream) batches.push(batch);
  return batches;
}

/** The events alone, as a vendor that does not speak the chat wire form would yield them. */
const withoutWire = (batches: AnswerEvent[][]) =>
  batches.map((batch) => batch.map(({ wire: _wire, ...event }) => event as AnswerEvent));
async function* replay(batches: AnswerEvent[][]): AsyncGenerator<AnswerEvent[]> {
  yield* batches;
}

const chat = (content: string, extra: Partial<ChatCompletionRequest> = {}): ChatCompletionRequest => ({
  model: 'mock-chat',
  messages: [{ role: 'user', content }],
  ...extra,
});

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer' },
        metric: { type: 'boolean' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        tags: { type: 'array', items: { type: 'string' } },
      },
      required: ['city', 'country'],
    },
  },
};
const timeTool = {
  type: 'function' as const,
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } },
};

async function chatBody(request: ChatCompletionRequest): Promise<Json> {
  return encodeAnswer(await mock.chat(request, makeContext())).parsed;
}

interface ChoiceState {
  content: string;
  calls: Map<number, { id?: string; name?: string; arguments: string }>;
  finish?: string;
}

/**
 * Rebuilds each choice's message (or text_completion text) from its chunks, the way a client does; a function_call is
 * call 0.
 */
function reassemble(chunks: Json[]) {
  const choices = new Map<number, ChoiceState>();
  for (const chunk of chunks) {
    for (const choice of chunk.choices) {
      const state: ChoiceState = choices.get(choice.index) ?? { content: '', calls: new Map() };
      choices.set(choice.index, state);
      if (typeof choice.text === 'string') state.content += choice.text;
      if (typeof choice.delta?.content === 'string') state.content += choice.delta.content;
      const legacy = choice.delta?.function_call;
      const fragments = legacy ? [{ index: 0, function: legacy }] : (choice.delta?.tool_calls ?? []);
      for (const fragment of fragments) {
        const call = state.calls.get(fragment.index) ?? { arguments: '' };
        state.calls.set(fragment.index, call);
        if (fragment.id) call.id = fragment.id;
        if (fragment.function?.name) call.name = fragment.function.name;
        call.arguments += fragment.function?.arguments ?? '';
      }
      if (choice.finish_reason) state.finish = choice.finish_reason;
    }
  }
  return choices;
}

let http: VendorHttp;

/** Sets MOCK_STREAM_DELAY_MS as the worker does: through its configuration, for the contexts made from now on. */
function streamDelay(ms: string): void {
  void http?.close();
  http = createVendorHttp(loadConfig({ MOCK_STREAM_DELAY_MS: ms }));
}

before(() => {
  streamDelay('0');
});
after(() => http.close());

describe('mock chat, non-stream', () => {
  it('answers deterministically with a full chat.completion', async () => {
    const request = chat('What is the capital of Norway?');
    const first = await chatBody(request);
    const second = await chatBody(request);
    assert.equal(first.choices[0].message.content, 'Mock reply to: "What is the capital of Norway?"');
    assert.deepEqual(first.choices, second.choices);
    assert.match(first.id, /^chatcmpl-/);
    assert.equal(first.object, 'chat.completion');
    assert.equal(first.model, 'mock-chat');
    assert.equal(typeof first.created, 'number');
    assert.ok(Math.abs(first.created - Date.now() / 1000) < 5);
    assert.equal(first.system_fingerprint, 'fp_mock');
    assert.deepEqual(first.choices[0], {
      index: 0,
      message: { role: 'assistant', content: first.choices[0].message.content, refusal: null },
      logprobs: null,
      finish_reason: 'stop',
    });
  });

  it('reports counted usage', async () => {
    const request = chat('Count me');
    const result = await mock.chat(request, makeContext());
    const body = encodeAnswer(result).parsed;
    const promptTokens = countChatPromptTokens(request.messages);
    const completionTokens = countTextTokens(body.choices[0].message.content);
    assert.deepEqual(body.usage, {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
    assert.deepEqual(result.usage, body.usage);
  });

  it('quotes at most 200 characters of the last user text', async () => {
    const long = 'x'.repeat(500);
    const body = await chatBody({
      model: 'mock-chat',
      messages: [
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: [{ type: 'text', text: long }] },
      ],
    });
    assert.equal(body.choices[0].message.content, `Mock reply to: "${'x'.repeat(200)}"`);
  });

  it('truncates to max_tokens / max_completion_tokens with finish_reason "length"', async () => {
    for (const limit of [{ max_tokens: 3 }, { max_completion_tokens: 3 }]) {
      const body = await chatBody(chat('A fairly long question about many things', limit));
      assert.equal(body.choices[0].finish_reason, 'length');
      assert.equal(body.usage.completion_tokens, 3);
      assert.equal(countTextTokens(body.choices[0].message.content), 3);
      assert.ok('Mock reply to: "A fairly long'.startsWith(body.choices[0].message.content));
    }
  });

  it('cuts at the earliest stop sequence with finish_reason "stop"', async () => {
    const body = await chatBody(chat('alpha beta gamma', { stop: ['gamma', 'beta'] }));
    assert.equal(body.choices[0].message.content, 'Mock reply to: "alpha ');
    assert.equal(body.choices[0].finish_reason, 'stop');
    const single = await chatBody(chat('alpha beta', { stop: ':' }));
    assert.equal(single.choices[0].message.content, 'Mock reply to');
  });

  it('returns n choices with indices 0..n-1', async () => {
    const body = await chatBody(chat('twice', { n: 2 }));
    assert.deepEqual(
      body.choices.map((c: Json) => c.index),
      [0, 1],
    );
    assert.equal(body.choices[0].message.content, body.choices[1].message.content);
    assert.equal(body.usage.completion_tokens, 2 * countTextTokens(body.choices[0].message.content));
  });

  it('answers a tool result in text', async () => {
    const body = await chatBody({
      model: 'mock-chat',
      tools: [weatherTool],
      tool_choice: 'required',
      messages: [
        { role: 'user', content: 'call get_weather' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'Sunny and 21 degrees' },
      ],
    });
    assert.equal(body.choices[0].message.content, 'Mock reply using tool result: Sunny and 21 degrees');
    assert.equal(body.choices[0].finish_reason, 'stop');
    assert.equal(body.choices[0].message.tool_calls, undefined);
  });
});

describe('mock chat, tool calls', () => {
  it('calls the tool with arguments built from its schema', async () => {
    const body = await chatBody(chat('Please call the weather tool', { tools: [weatherTool] }));
    const choice = body.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const [call] = choice.message.tool_calls;
    assert.match(call.id, /^call_/);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), {
      city: 'mock',
      days: 1,
      metric: true,
      unit: 'celsius',
      tags: ['mock'],
      country: 'mock',
    });
    const again = await chatBody(chat('Please call the weather tool', { tools: [weatherTool] }));
    assert.deepEqual(again.choices, body.choices);
  });

  it('answers in text when nothing asks for a tool, or tool_choice is "none"', async () => {
    const plain = await chatBody(chat('Hello there', { tools: [weatherTool] }));
    assert.equal(plain.choices[0].finish_reason, 'stop');
    const none = await chatBody(chat('call get_weather', { tools: [weatherTool], tool_choice: 'none' }));
    assert.equal(none.choices[0].finish_reason, 'stop');
  });

  it('calls the tool the user names, or the one tool_choice names', async () => {
    const mentioned = await chatBody(chat('what is get_time in Oslo', { tools: [weatherTool, timeTool] }));
    assert.equal(mentioned.choices[0].message.tool_calls[0].function.name, 'get_time');
    const partOfWord = await chatBody(chat('what is get_timezone in Oslo', { tools: [weatherTool, timeTool] }));
    assert.equal(partOfWord.choices[0].finish_reason, 'stop');
    const forced = await chatBody(
      chat('hi', { tools: [weatherTool, timeTool], tool_choice: { type: 'function', function: { name: 'get_time' } } }),
    );
    assert.equal(forced.choices[0].message.tool_calls.length, 1);
    assert.equal(forced.choices[0].message.tool_calls[0].function.name, 'get_time');
  });

  it('calls the first two tools in parallel when a call is required', async () => {
    const body = await chatBody(chat('hi', { tools: [weatherTool, timeTool], tool_choice: 'required' }));
    const calls = body.choices[0].message.tool_calls as Json[];
    assert.deepEqual(
      calls.map((c) => c.function.name),
      ['get_weather', 'get_time'],
    );
    assert.notEqual(calls[0]!.id, calls[1]!.id);
    const serial = await chatBody(
      chat('hi', { tools: [weatherTool, timeTool], tool_choice: 'required', parallel_tool_calls: false }),
    );
    assert.equal(serial.choices[0].message.tool_calls.length, 1);
  });

  it('uses function_call for legacy functions', async () => {
    const body = await chatBody(
      chat('hi', { functions: [weatherTool.function], function_call: { name: 'get_weather' } }),
    );
    const choice = body.choices[0];
    assert.equal(choice.finish_reason, 'function_call');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.function_call.name, 'get_weather');
    assert.equal(JSON.parse(choice.message.function_call.arguments).city, 'mock');
  });
});

describe('mock chat, stream', () => {
  async function streamChunks(request: ChatCompletionRequest) {
    const encoded = await encodeStream(mock.streamChat(request, makeContext()));
    return { ...encoded, chunks: encoded.parsed };
  }

  it('streams in OpenAI order: role, content pieces, finish, usage', async () => {
    const request = chat('Tell me something nice about the sea');
    const { batches, chunks, usage } = await streamChunks(request);
    const usageChunk = chunks.at(-1)!;
    const finishChunk = chunks.at(-2)!;
    const ids = new Set(chunks.map((c) => c.id));
    const created = new Set(chunks.map((c) => c.created));
    assert.equal(ids.size, 1);
    assert.equal(created.size, 1);
    assert.match([...ids][0], /^chatcmpl-/);
    for (const chunk of chunks) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      assert.equal(chunk.model, 'mock-chat');
    }
    assert.deepEqual(chunks[0]!.choices, [
      { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
    ]);
    const middle = chunks.slice(1, -2);
    assert.ok(middle.length > 2, 'content should arrive in several pieces');
    for (const chunk of middle) {
      assert.deepEqual(Object.keys(chunk.choices[0].delta), ['content']);
      assert.equal(chunk.choices[0].finish_reason, null);
      assert.equal('usage' in chunk, false);
    }
    assert.deepEqual(finishChunk.choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]);
    assert.deepEqual(usageChunk.choices, []);
    // The usage chunk is its own batch, a lone usage event; no earlier batch reports usage.
    assert.deepEqual(
      batches.at(-1)!.map((event) => event.type),
      ['usage'],
    );
    assert.deepEqual((batches.at(-1)![0] as UsageEvent).usage, usageChunk.usage);
    assert.deepEqual(usage, usageChunk.usage);
    assert.ok(batches.slice(0, -1).every((batch) => batch.every((event) => event.type !== 'usage')));

    const text = middle.map((c) => c.choices[0].delta.content).join('');
    const plain = await chatBody(request);
    assert.equal(text, plain.choices[0].message.content);
    assert.deepEqual(usageChunk.usage, plain.usage);
  });

  it('interleaves n=2 choices, each complete and in order', async () => {
    const { chunks } = await streamChunks(chat('two of them', { n: 2 }));
    const choiceChunks = chunks.slice(0, -1);
    assert.deepEqual(
      choiceChunks.slice(0, 2).map((c) => c.choices[0].index),
      [0, 1],
    );
    assert.ok(choiceChunks.every((c) => c.choices.length === 1));
    const states = reassemble(choiceChunks);
    assert.equal(states.size, 2);
    assert.equal(states.get(0)!.content, 'Mock reply to: "two of them"');
    assert.equal(states.get(1)!.content, states.get(0)!.content);
    assert.equal(states.get(0)!.finish, 'stop');
    for (const index of [0, 1]) {
      const own = choiceChunks.filter((c) => c.choices[0].index === index);
      assert.equal(own[0]!.choices[0].delta.role, 'assistant');
      assert.equal(own.at(-1)!.choices[0].finish_reason, 'stop');
    }
  });

  it('streams a length-limited reply', async () => {
    const { chunks } = await streamChunks(chat('A fairly long question about many things', { max_tokens: 4 }));
    const state = reassemble(chunks).get(0)!;
    assert.equal(state.finish, 'length');
    assert.equal(countTextTokens(state.content), 4);
    assert.equal(chunks.at(-1)!.usage.completion_tokens, 4);
  });

  it('streams tool calls as fragments that reassemble to valid JSON', async () => {
    const { chunks } = await streamChunks(chat('hi', { tools: [weatherTool, timeTool], tool_choice: 'required' }));
    const first = chunks[0]!.choices[0].delta;
    assert.equal(first.role, 'assistant');
    assert.equal(first.content, null);
    assert.deepEqual(first.tool_calls[0].function, { name: 'get_weather', arguments: '' });
    assert.equal(first.tool_calls[0].type, 'function');
    assert.match(first.tool_calls[0].id, /^call_/);
    const fragments = chunks.slice(1, -2).map((c) => c.choices[0].delta.tool_calls[0]);
    for (const fragment of fragments) {
      if (fragment.id === undefined) assert.deepEqual(Object.keys(fragment).sort(), ['function', 'index']);
    }
    // All of call 0 arrives before call 1 starts.
    const order = fragments.map((f: Json) => f.index);
    assert.deepEqual(order, [...order].sort());
    assert.equal(chunks.at(-2)!.choices[0].finish_reason, 'tool_calls');

    const calls = reassemble(chunks).get(0)!.calls;
    assert.equal(calls.size, 2);
    const plain = await chatBody(chat('hi', { tools: [weatherTool, timeTool], tool_choice: 'required' }));
    plain.choices[0].message.tool_calls.forEach((expected: Json, index: number) => {
      const call = calls.get(index)!;
      assert.equal(call.id, expected.id);
      assert.equal(call.name, expected.function.name);
      assert.deepEqual(JSON.parse(call.arguments), JSON.parse(expected.function.arguments));
    });
  });

  it('streams legacy function_call deltas', async () => {
    const { chunks } = await streamChunks(chat('call it', { functions: [weatherTool.function] }));
    assert.deepEqual(chunks[0]!.choices[0].delta, {
      role: 'assistant',
      content: null,
      function_call: { name: 'get_weather', arguments: '' },
    });
    const args = chunks
      .slice(1, -2)
      .map((c) => c.choices[0].delta.function_call.arguments)
      .join('');
    assert.equal(JSON.parse(args).city, 'mock');
    assert.equal(chunks.at(-2)!.choices[0].finish_reason, 'function_call');
  });

  it('rejects promptly with the abort reason when cancelled mid-stream', async () => {
    streamDelay('5000');
    try {
      const controller = new AbortController();
      const iterator = mock.streamChat(chat('slow one'), makeContext(controller.signal))[Symbol.asyncIterator]();
      const first = await iterator.next();
      assert.equal(first.done, false);
      const reason = new Error('client went away');
      const started = Date.now();
      setTimeout(() => controller.abort(reason), 20);
      await assert.rejects(iterator.next(), (error) => error === reason);
      assert.ok(Date.now() - started < 1000, 'abort should not wait for the chunk delay');
    } finally {
      streamDelay('0');
    }
  });

  it('paces chunks by MOCK_STREAM_DELAY_MS and by the [mock:slow] marker', async () => {
    streamDelay('15');
    try {
      const started = Date.now();
      const batches = await collect(mock.streamChat(chat('hi'), makeContext()));
      // Every chunk after the first waits, except the usage chunk that rides with the finish chunk.
      assert.ok(Date.now() - started >= (batches.length - 2) * 15 - 5);
    } finally {
      streamDelay('0');
    }
    const started = Date.now();
    const batches = await collect(mock.streamChat(chat('hi [mock:slow:30]'), makeContext()));
    assert.ok(Date.now() - started >= (batches.length - 2) * 30 - 5);
  });
});

describe('mock answer events', () => {
  const toolsRequest = chat('hi', { tools: [weatherTool, timeTool], tool_choice: 'required' });
  const functionRequest = chat('call it', { functions: [weatherTool.function] });
  const completion: CompletionRequest = {
    model: 'mock-instruct',
    prompt: ['Once upon a time', 'Far away'],
    n: 2,
    echo: true,
    max_tokens: 50,
  };

  it('implements every capability in one adapter', () => {
    const methods = [
      'chat',
      'streamChat',
      'complete',
      'streamCompletion',
      'embed',
      'generateImages',
      'editImages',
      'transcribe',
      'translate',
      'generateVideo',
    ];
    for (const method of methods) assert.equal(typeof mockAdapter[method as keyof VendorAdapter], 'function', method);
  });

  it('gives plain answers whose fields encode to the body it sends as wire', async () => {
    const cases: Array<[ChatCompletionRequest, boolean]> = [
      [chat('twice', { n: 2 }), false],
      [chat('A fairly long question about many things', { max_tokens: 3 }), false],
      [toolsRequest, false],
      [functionRequest, true],
    ];
    for (const [request, legacyFunctions] of cases) {
      const answer = await mock.chat(request, makeContext());
      assert.equal(typeof answer.wire, 'string');
      const { wire: _wire, ...fields } = answer;
      // The encoder adds the tier that served it; the mock's own body names none.
      assert.deepEqual(encodeAnswer(fields, { legacyFunctions }).parsed, {
        ...JSON.parse(answer.wire!),
        service_tier: 'default',
      });
    }
    const functionAnswer = await mock.chat(functionRequest, makeContext());
    assert.deepEqual(
      functionAnswer.choices[0]!.toolCalls.map((call) => [call.id, call.name]),
      [['', 'get_weather']],
    );

    const text = await mock.complete(completion, makeContext());
    const { wire: _wire, ...fields } = text;
    assert.deepEqual(encodeAnswer(fields, { form: 'text_completion' }).parsed, JSON.parse(text.wire!));
  });

  it('yields one batch per chunk: the chunk on the first event, "" on the rest, start first and once', async () => {
    for (const request of [chat('two of them', { n: 2 }), toolsRequest, functionRequest]) {
      const { batches, chunks } = await encodeStream(mock.streamChat(request, makeContext()));
      assert.equal(batches.length, chunks.length);
      batches.forEach((batch, position) => {
        assert.ok(batch.length > 0);
        assert.equal(withServiceTier(batch[0]!.wire!, 'default'), chunks[position]);
        assert.ok(batch.slice(1).every((event) => event.wire === ''));
      });
      const events = batches.flat();
      assert.equal(events[0]!.type, 'start');
      assert.equal(events.filter((event) => event.type === 'start').length, 1);
      const first = JSON.parse(chunks[0]!) as Json;
      const { wire: _wire, ...start } = events[0]!;
      assert.deepEqual(start, {
        type: 'start',
        id: first.id,
        created: first.created,
        model: 'mock-chat',
        systemFingerprint: 'fp_mock',
      });
      const roles = events
        .filter((event) => event.type === 'role')
        .map((event) => (event as { choice: number }).choice);
      assert.deepEqual(roles, [...new Set(roles)].sort(), 'one role event per choice');
      assert.equal(roles.length, request.n ?? 1);
    }
    const plain = withoutWire(await collect(mock.streamChat(chat('hi'), makeContext())))[0]!;
    assert.deepEqual(plain.slice(1), [{ type: 'role', choice: 0 }]);
    const opened = withoutWire(await collect(mock.streamChat(toolsRequest, makeContext())))[0]!;
    assert.deepEqual(
      opened.map((event) => event.type),
      ['start', 'role', 'tool-call'],
    );
    const { id, ...call } = opened[2] as ToolCallEvent;
    assert.match(id!, /^call_/);
    assert.deepEqual(call, { type: 'tool-call', choice: 0, index: 0, name: 'get_weather', arguments: '' });
    const legacy = withoutWire(await collect(mock.streamChat(functionRequest, makeContext())))[0]!;
    assert.deepEqual(legacy.slice(1), [
      { type: 'role', choice: 0 },
      { type: 'tool-call', choice: 0, index: 0, name: 'get_weather', arguments: '' },
    ]);

    const text = await collect(mock.streamCompletion(completion, makeContext()));
    assert.equal(text[0]![0]!.type, 'start');
    assert.ok(text.flat().every((event) => ['start', 'text', 'finish', 'usage'].includes(event.type)));
  });

  it('sends the usage chunk only when the client asked for it, yet always reports usage', async () => {
    const withUsage = await encodeStream(mock.streamChat(chat('hi'), makeContext()));
    const without = await encodeStream(mock.streamChat(chat('hi'), makeContext()), { includeUsage: false });
    assert.deepEqual(without.chunks, withUsage.chunks.slice(0, -1));
    assert.ok(without.parsed.every((chunk) => !('usage' in chunk)));
    assert.deepEqual(without.usage, withUsage.parsed.at(-1)!.usage);

    // No prompts, no text chunks: start still comes first, and the lone usage chunk stays optional.
    const empty = (includeUsage: boolean) =>
      encodeStream(mock.streamCompletion({ model: 'mock-instruct', prompt: [] }, makeContext()), {
        form: 'text_completion',
        includeUsage,
      });
    const bare = await empty(false);
    assert.deepEqual(
      bare.batches.flat().map((event) => event.type),
      ['start', 'usage'],
    );
    assert.deepEqual(bare.chunks, []);
    assert.deepEqual(bare.usage, { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
    assert.deepEqual(
      (await empty(true)).parsed.map((chunk) => chunk.choices),
      [[]],
    );
  });

  it('says in events, encoded without wire, the same text and tool calls as its wire chunks', async () => {
    const cases: Array<[AsyncIterable<AnswerEvent[]>, Parameters<typeof encodeStream>[1]]> = [
      [mock.streamChat(chat('two of them', { n: 2 }), makeContext()), {}],
      [mock.streamChat(chat('A fairly long question about many things', { max_tokens: 4 }), makeContext()), {}],
      [mock.streamChat(toolsRequest, makeContext()), {}],
      [mock.streamChat(functionRequest, makeContext()), { legacyFunctions: true }],
      [mock.streamCompletion(completion, makeContext()), { form: 'text_completion' }],
    ];
    for (const [stream, options] of cases) {
      const wire = await encodeStream(stream, options);
      const semantic = await encodeStream(replay(withoutWire(wire.batches)), options);
      assert.ok(semantic.batches.flat().every((event) => event.wire === undefined));
      const expected = reassemble(wire.parsed);
      const actual = reassemble(semantic.parsed);
      assert.ok(expected.size > 0);
      assert.deepEqual(actual, expected);
      assert.deepEqual(semantic.usage, wire.usage);
      assert.deepEqual(semantic.parsed.at(-1)!.usage, wire.parsed.at(-1)!.usage);
      for (const chunk of semantic.parsed) assert.equal(chunk.id, wire.parsed[0]!.id);
    }
  });
});

describe('mock error markers', () => {
  it('throws a retryable GatewayError for [mock:error:503]', async () => {
    await assert.rejects(mock.chat(chat('boom [mock:error:503]'), makeContext()), (error) => {
      assert.ok(error instanceof GatewayError);
      assert.equal(error.status, 503);
      assert.equal(error.retryable, true);
      return true;
    });
  });

  it('throws from the first next() of a stream, before any chunk', async () => {
    const iterator = mock.streamChat(chat('[mock:error:429]'), makeContext())[Symbol.asyncIterator]();
    await assert.rejects(
      iterator.next(),
      (error) => error instanceof GatewayError && error.status === 429 && error.retryable,
    );
    const completions = mock
      .streamCompletion({ model: 'mock-instruct', prompt: '[mock:error:502]' }, makeContext())
      [Symbol.asyncIterator]();
    await assert.rejects(
      completions.next(),
      (error) => error instanceof GatewayError && error.status === 502 && error.retryable,
    );
  });

  it('makes 4xx errors non-retryable, and works for completions and embeddings', async () => {
    await assert.rejects(
      mock.complete({ model: 'mock-instruct', prompt: 'x [mock:error:400]' }, makeContext()),
      (error) => error instanceof GatewayError && error.status === 400 && !error.retryable,
    );
    await assert.rejects(
      mock.embed({ model: 'mock-embedding', input: ['ok', 'bad [mock:error:500]'] }, makeContext()),
      (error) => error instanceof GatewayError && error.status === 500 && error.retryable,
    );
  });
});

describe('mock request checks', () => {
  it('rejects with the abort reason when cancelled before it starts', async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    controller.abort(reason);
    await assert.rejects(mock.chat(chat('hi'), makeContext(controller.signal)), (error) => error === reason);
    const iterator = mock.streamChat(chat('hi'), makeContext(controller.signal))[Symbol.asyncIterator]();
    await assert.rejects(iterator.next(), (error) => error === reason);
  });

  it('rejects token ids outside the vocabulary with a 400', async () => {
    await assert.rejects(
      mock.complete({ model: 'mock-instruct', prompt: [1, 99_999_999] }, makeContext()),
      (error) => error instanceof GatewayError && error.status === 400 && error.param === 'prompt',
    );
    await assert.rejects(
      mock.embed({ model: 'mock-embedding', input: [[1], [99_999_999]] }, makeContext()),
      (error) => error instanceof GatewayError && error.status === 400 && error.param === 'input',
    );
  });
});

describe('mock legacy completions', () => {
  const completion = (extra: Partial<CompletionRequest> = {}): CompletionRequest => ({
    model: 'mock-instruct',
    prompt: 'Once upon a time',
    ...extra,
  });
  const completionBody = (answer: Answer) => encodeAnswer(answer, { form: 'text_completion' }).parsed;

  it('returns a text_completion with the default 16-token limit', async () => {
    const result = await mock.complete(
      completion({ prompt: 'A rather long prompt that will make the reply exceed sixteen tokens for sure' }),
      makeContext(),
    );
    const body = completionBody(result);
    assert.match(body.id, /^cmpl-/);
    assert.equal(body.object, 'text_completion');
    assert.equal(body.choices[0].finish_reason, 'length');
    assert.equal(body.choices[0].logprobs, null);
    assert.equal(body.usage.completion_tokens, 16);
    assert.equal(
      body.usage.prompt_tokens,
      countTextTokens('A rather long prompt that will make the reply exceed sixteen tokens for sure'),
    );
    assert.deepEqual(result.usage, body.usage);
  });

  it('echoes the prompt, counts token-array prompts, and numbers choices per prompt', async () => {
    const echoed = completionBody(await mock.complete(completion({ echo: true, max_tokens: 50 }), makeContext()));
    assert.ok(echoed.choices[0].text.startsWith('Once upon a time Mock completion of'));

    const tokens = encodeText('Hello, world');
    const fromTokens = completionBody(
      await mock.complete(completion({ prompt: tokens, max_tokens: 50 }), makeContext()),
    );
    assert.equal(fromTokens.usage.prompt_tokens, tokens.length);
    assert.ok(fromTokens.choices[0].text.includes('"Hello, world"'));

    const many = completionBody(await mock.complete(completion({ prompt: ['a', 'b'], n: 2 }), makeContext()));
    assert.deepEqual(
      many.choices.map((c: Json) => c.index),
      [0, 1, 2, 3],
    );
    assert.ok(many.choices[2].text.includes('"b"'));
  });

  it('streams text_completion chunks, finish on the last, then a usage chunk', async () => {
    const {
      batches,
      parsed: chunks,
      usage,
    } = await encodeStream(mock.streamCompletion(completion({ max_tokens: 50, stop: '"' }), makeContext()), {
      form: 'text_completion',
    });
    const usageChunk = chunks.at(-1)!;
    const textChunks = chunks.slice(0, -1);
    assert.ok(
      textChunks.every((c) => c.object === 'text_completion' && c.id === chunks[0]!.id && c.choices.length === 1),
    );
    assert.ok(textChunks.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
    assert.equal(textChunks.at(-1)!.choices[0].finish_reason, 'stop');
    assert.equal(textChunks.map((c) => c.choices[0].text).join(''), ' Mock completion of: ');
    assert.deepEqual(usageChunk.choices, []);
    assert.deepEqual(
      batches.at(-1)!.map((event) => event.type),
      ['usage'],
    );
    assert.ok(batches.slice(0, -1).every((batch) => batch.every((event) => event.type !== 'usage')));
    const plain = completionBody(await mock.complete(completion({ max_tokens: 50, stop: '"' }), makeContext()));
    assert.deepEqual(usageChunk.usage, plain.usage);
    assert.deepEqual(usage, plain.usage);
  });
});

describe('mock embeddings', () => {
  const embed = async (input: string | string[] | number[], extra: Json = {}) => {
    const result = await mock.embed(
      { model: 'mock-embedding', input, ...extra },
      makeContext(undefined, 'mock-embedding'),
    );
    return { body: JSON.parse(result.body) as Json, usage: result.usage };
  };
  const norm = (vector: number[]) => Math.sqrt(vector.reduce((sum, v) => sum + v * v, 0));

  it('returns unit-length vectors of the default size with real token counts', async () => {
    const { body, usage } = await embed(['hello world', 'something else']);
    assert.equal(body.object, 'list');
    assert.equal(body.model, 'mock-embedding');
    assert.equal(body.data.length, 2);
    body.data.forEach((item: Json, index: number) => {
      assert.equal(item.object, 'embedding');
      assert.equal(item.index, index);
      assert.equal(item.embedding.length, MOCK_EMBEDDING_DIMENSIONS);
      assert.ok(Math.abs(norm(item.embedding) - 1) < 1e-5);
    });
    const tokens = countTextTokens('hello world') + countTextTokens('something else');
    assert.deepEqual(body.usage, { prompt_tokens: tokens, total_tokens: tokens });
    assert.equal(usage?.prompt_tokens, tokens);
    assert.equal(MOCK_EMBEDDING_DIMENSIONS, 256);
  });

  it('is deterministic, differs between inputs, and honours dimensions', async () => {
    const a1 = (await embed('alpha')).body.data[0].embedding;
    const a2 = (await embed('alpha')).body.data[0].embedding;
    const b = (await embed('beta')).body.data[0].embedding;
    assert.deepEqual(a1, a2);
    assert.notDeepEqual(a1, b);
    const small = (await embed('alpha', { dimensions: 8 })).body.data[0].embedding;
    assert.equal(small.length, 8);
    assert.ok(Math.abs(norm(small) - 1) < 1e-5);
  });

  it('gives a string and its token array the same vector', async () => {
    const text = (await embed('Hello, world')).body.data[0].embedding;
    const tokens = (await embed(encodeText('Hello, world'))).body.data[0].embedding;
    assert.deepEqual(tokens, text);
  });

  it('encodes base64 as little-endian float32 equal to the float form', async () => {
    const floats = (await embed('alpha')).body.data[0].embedding as number[];
    const encoded = (await embed('alpha', { encoding_format: 'base64' })).body.data[0].embedding as string;
    assert.equal(typeof encoded, 'string');
    const bytes = Buffer.from(encoded, 'base64');
    assert.equal(bytes.length, floats.length * 4);
    const decoded = Array.from({ length: floats.length }, (_, i) => bytes.readFloatLE(i * 4));
    assert.deepEqual(decoded, Array.from(Float32Array.from(floats)));
  });
});
