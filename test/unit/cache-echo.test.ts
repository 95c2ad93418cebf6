import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  cacheEcho,
  echoFor,
  echoTarget,
  hitTier,
  type EchoSource,
  type EchoTarget,
} from '../../api/cache/answer-echo.js';
import type { CacheableAnswer } from '../../shared/cache/index.js';
import { loadConfig } from '../../shared/config.js';
import type { Endpoint, EndpointRequest } from '../../shared/endpoints.js';
import type { ResponseShell } from '../../shared/responses.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { chatForms, storedEvents } from '../../workers/answers/answer-forms.js';
import type { Answer, AnswerEvent } from '../../workers/answers/events.js';
import { AnthropicEventFold, MessagesStreamEncoder } from '../../workers/answers/messages-encoder.js';
import { ResponsesStreamEncoder } from '../../workers/answers/responses-encoder.js';
import { assertMessagesStream, parseMessagesFrames } from '../support/anthropic-stream.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

type Json = Record<string, any>;

const now = 1_800_000_123_456;
const nowS = Math.floor(now / 1000);
/** The request a stored answer now serves: its id as the api makes one. */
const second = `req_${'2'.repeat(32)}`;

/** A target as `echoTarget` makes it, for a request of `endpoint` with `payload`. */
function target(endpoint: Endpoint, payload: unknown, extra: Partial<EchoTarget> = {}): EchoTarget {
  return {
    endpoint,
    payload: payload as EchoTarget['payload'],
    model: undefined,
    requestId: second,
    jobId: second,
    serviceTier: 'default',
    now,
    ...extra,
  };
}

/** SSE frames as the replay writes a stored stream (numbered; Anthropic's named). */
function framesOf(events: CacheableAnswer['events'], data: (d: string, e?: string) => string = (d) => d): string {
  return (events ?? [])
    .map(
      (event, n) =>
        `id: ${n}\n${event.e === undefined ? '' : `event: ${event.e}\n`}data: ${data(event.d, event.e)}\n\n`,
    )
    .join('');
}

const start: AnswerEvent = {
  type: 'start',
  id: 'chatcmpl-first',
  created: 1_700_000_000,
  model: 'gpt-4o-mini-2024-07-18',
  systemFingerprint: 'fp_first',
};
const usage = { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 };
const chatAnswer: Answer = {
  id: 'chatcmpl-first',
  created: 1_700_000_000,
  model: 'gpt-4o-mini-2024-07-18',
  systemFingerprint: 'fp_first',
  choices: [
    {
      index: 0,
      text: 'Hello, "world": {"id":"x"}',
      toolCalls: [{ id: 'call_1', name: 'look', arguments: '{"q":"id"}' }],
      finishReason: 'tool_calls',
    },
  ],
  usage,
};

describe('chat completions', () => {
  const entry = chatForms(chatAnswer, {
    form: 'chat.completion',
    model: 'gpt-4o-mini',
    legacyFunctions: false,
    serviceTier: 'priority',
  });
  const echo = () =>
    cacheEcho(target('chat.completions', { model: 'gpt-4o-mini', messages: [] }, { serviceTier: 'flex' }));

  it('the body: a fresh id of the request, its time and tier; the vendor’s model, the content and usage as stored', () => {
    const stored = JSON.parse(entry.body) as Json;
    const body = JSON.parse(echo().body(entry.body)) as Json;
    assert.equal(body.id, `chatcmpl-${'2'.repeat(32)}`, 'the request id’s digits');
    assert.notEqual(body.id, stored.id);
    assert.equal(body.created, nowS);
    assert.equal(body.service_tier, 'flex');
    assert.equal(body.model, 'gpt-4o-mini-2024-07-18');
    assert.deepEqual(body.choices, stored.choices);
    assert.deepEqual(body.usage, stored.usage);
    assert.equal(body.system_fingerprint, 'fp_first');
    assertMatchesSchema('CreateChatCompletionResponse', body, 'an echoed chat body');
    // Made of the request id: the same for the same request, another for another.
    assert.equal(JSON.parse(echo().body(entry.body)).id, body.id);
    assert.notEqual(
      JSON.parse(cacheEcho(target('chat.completions', {}, { requestId: `req_${'3'.repeat(32)}` })).body(entry.body)).id,
      body.id,
    );
  });

  it('every chunk and the usage chunk say the same id, time and tier; their choices unchanged', () => {
    const e = echo();
    const body = JSON.parse(e.body(entry.body)) as Json;
    const chunks = entry.events!.map((event) => JSON.parse(e.event(event.d)) as Json);
    const storedChunks = entry.events!.map((event) => JSON.parse(event.d) as Json);
    const usageChunk = JSON.parse(e.usage(entry.usage!)) as Json;
    for (const [n, chunk] of [...chunks, usageChunk].entries()) {
      assertMatchesSchema('CreateChatCompletionStreamResponse', chunk, `echoed chunk ${n}`);
      assert.equal(chunk.id, body.id);
      assert.equal(chunk.created, nowS);
      assert.equal(chunk.service_tier, 'flex');
      assert.equal(chunk.model, 'gpt-4o-mini-2024-07-18');
    }
    chunks.forEach((chunk, n) => assert.deepEqual(chunk.choices, storedChunks[n]!.choices));
    assert.deepEqual(usageChunk.usage, JSON.parse(entry.usage!).usage);
    // The chunks after the first are rewritten by their envelope's text: byte for byte what a parse would write.
    for (const event of entry.events!) {
      const parsed = JSON.parse(event.d) as Json;
      Object.assign(parsed, { id: body.id, created: nowS, service_tier: 'flex' });
      assert.equal(e.event(event.d), JSON.stringify(parsed));
    }
  });

  it('a vendor’s own body (its tier after its choices, or none) gets the tier where it says one', () => {
    const wire = JSON.stringify({
      id: 'chatcmpl-v',
      object: 'chat.completion',
      created: 1,
      model: 'gpt-4o-mini-2024-07-18',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'x', refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage,
      service_tier: 'priority',
      system_fingerprint: null,
    });
    const body = JSON.parse(echo().body(wire)) as Json;
    assert.equal(body.service_tier, 'flex');
    assert.equal(body.created, nowS);
    assert.deepEqual(Object.keys(body), Object.keys(JSON.parse(wire)), 'the fields in their order');
    const chunk =
      '{"id":"chatcmpl-v","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],"service_tier":"priority"}';
    const e = echo();
    for (let n = 0; n < 3; n++) {
      const out = JSON.parse(e.event(chunk)) as Json;
      assert.equal(out.service_tier, 'flex', `chunk ${n}`);
      assert.equal(out.created, nowS);
    }
  });

  it('legacy completions: a fresh `cmpl-` id and the time, no tier', () => {
    const forms = chatForms(
      { ...chatAnswer, choices: [{ index: 0, text: 'Once upon', toolCalls: [], finishReason: 'length' }] },
      { form: 'text_completion', model: 'gpt-3.5-turbo-instruct', legacyFunctions: false, serviceTier: 'default' },
    );
    const e = cacheEcho(target('completions', {}, { serviceTier: 'priority' }));
    const body = JSON.parse(e.body(forms.body)) as Json;
    assert.equal(body.id, `cmpl-${'2'.repeat(32)}`);
    assert.equal(body.created, nowS);
    assert.equal('service_tier' in body, false);
    assertMatchesSchema('CreateCompletionResponse', body, 'an echoed completion');
    for (const event of [...forms.events!, { d: forms.usage! }]) {
      const chunk = JSON.parse(e.event(event.d)) as Json;
      assert.equal(chunk.id, body.id);
      assert.equal(chunk.created, nowS);
      assert.equal('service_tier' in chunk, false);
    }
  });
});

describe('messages', () => {
  const encoder = new MessagesStreamEncoder({ model: 'claude-sonnet-4-6', inputTokens: 12 });
  let frames = encoder.encode([
    start,
    { type: 'role', choice: 0 },
    { type: 'text', choice: 0, text: 'Hi "message_start" there' },
    { type: 'finish', choice: 0, reason: 'stop' },
    { type: 'usage', usage },
  ]).frames;
  frames += encoder.end().frames;
  const entry: CacheableAnswer = { body: JSON.stringify(encoder.message()), events: storedEvents(frames) };
  const payload = { model: 'claude-alias', anthropic: { model: 'claude-alias' }, chat: {}, inputTokens: 12 };
  const echo = () => cacheEcho(target('messages', payload, { model: 'claude-alias' }));

  it(
    'the body and message_start name the model as this request did, with a fresh msg_ id; the other events pass ' +
      'unread',
    () => {
      const e = echo();
      const body = JSON.parse(e.body(entry.body)) as Json;
      const stored = JSON.parse(entry.body) as Json;
      assert.equal(body.model, 'claude-alias');
      assert.equal(body.id, `msg_${'2'.repeat(32)}`);
      assert.notEqual(body.id, stored.id);
      assert.deepEqual(body.content, stored.content);
      assert.deepEqual(body.usage, stored.usage);
      const replay = framesOf(entry.events, (d, name) => e.event(d, name));
      const events = assertMessagesStream(parseMessagesFrames(replay));
      assert.equal(events[0]!.data.message.model, 'claude-alias');
      assert.equal(events[0]!.data.message.id, body.id);
      entry.events!.forEach((event) => {
        if (event.e !== 'message_start') assert.equal(e.event(event.d, event.e), event.d, `${event.e} untouched`);
      });
      // The stream folds to the body.
      const fold = new AnthropicEventFold();
      for (const frame of parseMessagesFrames(replay)) fold.add(frame.event!, frame.data);
      assert.deepEqual(fold.message(), body);
    },
  );

  it('Anthropic’s own events: message_start named by its data when it has no event name', () => {
    const native =
      '{"type":"message_start","message":{"id":"msg_01Abc","type":"message","role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}';
    const out = JSON.parse(echo().event(native)) as Json;
    assert.equal(out.message.model, 'claude-alias');
    assert.match(out.message.id, /^msg_/);
    assert.notEqual(out.message.id, 'msg_01Abc');
  });
});

function shellOf(overrides: Partial<ResponseShell> = {}): ResponseShell {
  return {
    id: 'resp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
    created_at: 1_700_000_000,
    model: 'gpt-4o-mini',
    instructions: null,
    previous_response_id: null,
    tools: [{ type: 'function', name: 'look', parameters: { type: 'object', properties: {} }, strict: false }],
    tool_choice: 'auto',
    parallel_tool_calls: true,
    temperature: null,
    top_p: null,
    max_output_tokens: null,
    text: { format: { type: 'text' } },
    reasoning: { effort: null, summary: null },
    metadata: {},
    store: false,
    background: false,
    user: 'alice',
    service_tier: 'default',
    ...overrides,
  };
}

describe('responses', () => {
  const first = shellOf();
  const encoder = new ResponsesStreamEncoder(first, { serviceTier: 'priority' });
  let frames = encoder.encode([
    start,
    { type: 'role', choice: 0 },
    { type: 'text', choice: 0, text: 'Let me "item_id":"msg_x" look.' },
    { type: 'tool-call', choice: 0, index: 0, id: 'call_abc', name: 'look', arguments: '{"q":' },
    { type: 'tool-call', choice: 0, index: 0, arguments: '"x"}' },
    { type: 'finish', choice: 0, reason: 'tool_calls' },
    { type: 'usage', usage },
  ]).frames;
  frames += encoder.end().frames;
  const entry: CacheableAnswer = { body: JSON.stringify(encoder.current()), events: storedEvents(frames), trailer: '' };
  const bob = shellOf({
    id: 'resp_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
    created_at: 1_800_000_000,
    user: 'bob',
    metadata: { team: 'b' },
  });
  const echo = (shell = bob, tier: ServiceTier = 'default') =>
    cacheEcho(target('responses', { chat: {}, shell }, { jobId: shell.id, model: shell.model, serviceTier: tier }));

  it(
    'the body is this request’s response: its id, time, user, metadata and tier, fresh item ids; the output as ' +
      'stored',
    () => {
      const stored = JSON.parse(entry.body) as Json;
      const body = JSON.parse(echo().body(entry.body)) as Json;
      assertMatchesSchema('Response', body, 'an echoed response');
      assert.equal(stored.user, 'alice');
      assert.equal(body.id, bob.id);
      assert.equal(body.user, 'bob');
      assert.deepEqual(body.metadata, { team: 'b' });
      assert.equal(body.created_at, bob.created_at);
      assert.equal(body.completed_at, nowS);
      assert.equal(body.service_tier, 'default');
      assert.equal(body.store, false);
      assert.deepEqual(body.usage, stored.usage);
      assert.equal(body.output_text, stored.output_text);
      assert.equal(body.output.length, 2);
      body.output.forEach((item: Json, n: number) => {
        assert.notEqual(item.id, stored.output[n].id, 'a fresh item id');
        assert.equal(
          item.id.slice(0, item.id.indexOf('_') + 1),
          stored.output[n].id.slice(0, stored.output[n].id.indexOf('_') + 1),
          'of the same kind',
        );
        assert.deepEqual({ ...item, id: '' }, { ...stored.output[n], id: '' });
      });
      assert.deepEqual(Object.keys(body), Object.keys(stored), 'the fields in their order');
    },
  );

  it('every event is this request’s, its items’ ids the body’s', () => {
    const e = echo();
    const body = JSON.parse(e.body(entry.body)) as Json;
    const ids = new Set(body.output.map((item: Json) => item.id));
    const storedIds = new Set((JSON.parse(entry.body) as Json).output.map((item: Json) => item.id));
    for (const event of entry.events!) {
      const data = JSON.parse(e.event(event.d, event.e)) as Json;
      assertMatchesSchema('ResponseStreamEvent', data, `echoed ${data.type}`);
      assert.equal(data.type, event.e);
      if (data.response) {
        assert.equal(data.response.id, bob.id);
        assert.equal(data.response.user, 'bob');
        assert.equal(data.response.created_at, bob.created_at);
        assert.equal(data.response.service_tier, 'default');
        for (const item of data.response.output) assert.ok(ids.has(item.id), `${data.type} output item ${item.id}`);
      }
      if (data.item) assert.ok(ids.has(data.item.id), `${data.type} item ${data.item.id}`);
      if (data.item_id) assert.ok(ids.has(data.item_id), `${data.type} item_id ${data.item_id}`);
      assert.equal(storedIds.has(data.item_id) || storedIds.has(data.item?.id), false);
    }
    const completed = JSON.parse(e.event(entry.events!.at(-1)!.d)) as Json;
    assert.deepEqual(completed.response, body);
  });

  it('a request naming no user gets none, and the tier it is served in', () => {
    const body = JSON.parse(echo(shellOf({ id: bob.id, user: null }), 'flex').body(entry.body)) as Json;
    assert.equal('user' in body, false);
    assert.equal(body.service_tier, 'flex');
    assertMatchesSchema('Response', body, 'an echoed response without user');
    // And the reverse: a user added where the stored one had none, before metadata as a miss writes it.
    const none = echo(shellOf({ user: null })).body(entry.body);
    const added = JSON.parse(echo().body(none)) as Json;
    assert.equal(added.user, 'bob');
    assert.deepEqual(Object.keys(added).slice(-2), ['user', 'metadata']);
  });

  it('the same request twice: the same answer (nothing random)', () => {
    assert.equal(echo().body(entry.body), echo().body(entry.body));
  });
});

describe('images, embeddings and transcriptions', () => {
  it('an image answer gets the time it is answered; its pictures stay', () => {
    const stored = JSON.stringify({
      created: 1_700_000_000,
      data: [{ b64_json: 'AAAA' }],
      usage: {
        total_tokens: 1,
        input_tokens: 1,
        output_tokens: 0,
        input_tokens_details: { text_tokens: 1, image_tokens: 0 },
      },
    });
    for (const endpoint of ['images.generations', 'images.edits', 'images.variations'] as const) {
      const body = JSON.parse(cacheEcho(target(endpoint, {})).body(stored)) as Json;
      assert.equal(body.created, nowS, endpoint);
      assert.deepEqual(body.data, [{ b64_json: 'AAAA' }]);
    }
    assertMatchesSchema(
      'ImagesResponse',
      JSON.parse(cacheEcho(target('images.generations', {})).body(stored)),
      'an echoed image answer',
    );
  });

  it('embeddings and transcriptions echo nothing of the request: their bytes pass as stored', () => {
    const embedding =
      '{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":1,"total_tokens":1}}';
    assert.equal(cacheEcho(target('embeddings', {})).body(embedding), embedding);
    for (const text of [
      '{"text":"hello","usage":{"type":"duration","seconds":2}}',
      'hello',
      '1\n00:00:00,000 --> 00:00:01,000\nhello\n',
    ]) {
      const echo = cacheEcho(target('audio.transcriptions', {}));
      assert.equal(echo.body(text), text);
      assert.equal(echo.sse(`data: ${text}\n\n`), `data: ${text}\n\n`);
    }
  });
});

describe('what does not read as expected passes unchanged', () => {
  const all: Endpoint[] = [
    'chat.completions',
    'completions',
    'messages',
    'responses',
    'images.generations',
    'embeddings',
    'audio.transcriptions',
  ];
  const odd = [
    '',
    'not json',
    '{"id":',
    '[1,2]',
    'null',
    '42',
    '"text"',
    '{"object":"list"}',
    '{"type":"message_start","message":null}',
    '{"type":"response.created","response":[1]}',
    '{"object":"response","output":"x"}',
    '{"type":"response.output_item.added","item":{"id":7}}',
    '{"type":"message_start"}',
    '{"type":"message_start"',
    '{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","delta":"x"',
  ];
  for (const endpoint of all) {
    it(endpoint, () => {
      const shell = shellOf();
      const echo = cacheEcho(target(endpoint, { shell, model: 'm' }, { model: 'm' }));
      for (const text of odd) {
        assert.doesNotThrow(() => echo.body(text));
        if (!text.startsWith('{"type":"response.output_text.delta"')) {
          assert.equal(echo.body(text), text, `${endpoint} body ${JSON.stringify(text)}`);
          assert.equal(echo.event(text), text, `${endpoint} event ${JSON.stringify(text)}`);
          assert.equal(echo.event(text, 'message_start'), text, `${endpoint} named event ${JSON.stringify(text)}`);
        }
        assert.equal(
          echo.usage(text.startsWith('{"type":"response') ? '' : text),
          text.startsWith('{"type":"response') ? '' : text,
        );
      }
    });
  }

  it('a delta cut short still has its item renamed only where its head reads whole', () => {
    const echo = cacheEcho(target('responses', { shell: shellOf() }, { jobId: 'resp_x' }));
    const cut = '{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","delta":"x"';
    const out = echo.event(cut);
    assert.equal(out.replace(/"item_id":"msg_[0-9a-f]{24}"/, '"item_id":"msg_1"'), cut, 'only the item id differs');
  });
});

describe('SSE text as a followed log writes it', () => {
  it('rewrites each frame’s data, keeps its id and event lines, comments, [DONE], an error and a partial tail', () => {
    const entry = chatForms(chatAnswer, {
      form: 'chat.completion',
      model: 'gpt-4o-mini',
      legacyFunctions: false,
      serviceTier: 'priority',
    });
    const make = () => cacheEcho(target('chat.completions', {}, { serviceTier: 'default' }));
    const frames = framesOf(entry.events);
    const expected = framesOf(entry.events, make().event);
    const echo = make();
    // Several frames at once, then one at a time, as the log's entries come.
    const half = frames.indexOf('\n\nid: 2\n') + 2;
    assert.equal(echo.sse(frames.slice(0, half)) + echo.sse(frames.slice(half)), expected);
    assert.equal(echo.sse('data: [DONE]\n\n'), 'data: [DONE]\n\n');
    const error = 'data: {"error":{"message":"nope","type":"api_error","param":null,"code":null}}\n\n';
    assert.equal(echo.sse(error), error);
    assert.equal(echo.sse(': keep-alive\n\n'), ': keep-alive\n\n');
    assert.equal(echo.sse(''), '');
    const tail = 'id: 9\ndata: {"id":"chatcmpl-first"';
    assert.equal(echo.sse(tail), tail);
    const multi = 'data: {"id":"a",\ndata: "object":"chat.completion.chunk"}\n\n';
    assert.equal(echo.sse(multi), multi, 'a frame of several data lines passes');
    for (const chunk of expected.split('\n\n').filter((frame) => frame !== ''))
      assertMatchesSchema(
        'CreateChatCompletionStreamResponse',
        JSON.parse(chunk.split('\ndata: ')[1]!),
        'a followed chunk',
      );
  });

  it('Anthropic and Responses frames, by their event lines', () => {
    const encoder = new MessagesStreamEncoder({ model: 'claude-sonnet-4-6', inputTokens: 1 });
    const frames =
      encoder.encode([
        start,
        { type: 'text', choice: 0, text: 'x' },
        { type: 'finish', choice: 0, reason: 'stop' },
        { type: 'usage', usage },
      ]).frames + encoder.end().frames;
    const out = cacheEcho(target('messages', {}, { model: 'alias' })).sse(frames);
    const events = assertMessagesStream(parseMessagesFrames(out));
    assert.equal(events[0]!.data.message.model, 'alias');
    assert.equal(
      out.split('\n\n').slice(1).join('\n\n'),
      frames.split('\n\n').slice(1).join('\n\n'),
      'only message_start changed',
    );

    const responses = new ResponsesStreamEncoder(shellOf(), { serviceTier: 'priority' });
    const logged =
      responses.encode([start, { type: 'text', choice: 0, text: 'y' }, { type: 'finish', choice: 0, reason: 'stop' }])
        .frames + responses.end().frames;
    const bob = shellOf({ id: 'resp_bob', user: 'bob' });
    const followed = cacheEcho(target('responses', { shell: bob }, { jobId: bob.id, model: bob.model })).sse(logged);
    const items = new Set<string>();
    for (const block of followed.split('\n\n').filter((frame) => frame !== '')) {
      const data = JSON.parse(block.slice(block.indexOf('data: ') + 6)) as Json;
      assertMatchesSchema('ResponseStreamEvent', data, `followed ${data.type}`);
      if (data.response) assert.equal(data.response.user, 'bob');
      if (data.item_id) items.add(data.item_id);
      if (data.item) items.add(data.item.id);
    }
    assert.equal(items.size, 1, 'one message item, one id everywhere');
    assert.equal(logged.includes([...items][0]!), false, 'a fresh one');
  });
});

describe('the tier a request served a stored answer says', () => {
  it(
    'uncontended at the band it was granted: a vendor’s own tiers as asked, the gateway’s only flex with no wait ' +
      'required',
    () => {
      const at = (
        band: ServiceTier | undefined,
        native: boolean,
        flexMinWaitMs = 1000,
        endpoint: Endpoint = 'chat.completions',
      ) => hitTier(endpoint, band, { native, flexMinWaitMs });
      assert.equal(at('priority', true), 'priority');
      assert.equal(at('flex', true), 'flex');
      assert.equal(at(undefined, true), 'default');
      assert.equal(at('priority', false), 'default', 'uncontended: its place in the queue was worth nothing');
      assert.equal(at('flex', false), 'default', 'served at once');
      assert.equal(at('flex', false, 0), 'flex');
      assert.equal(at('priority', true, 1000, 'completions'), 'default', 'legacy completions has no tier');
      assert.equal(at('priority', true, 1000, 'responses'), 'priority');
    },
  );

  it('echoTarget reads the model’s first vendor and the settings, and the model a miss names', () => {
    const config = loadConfig({
      OPENAI_API_KEY: 'sk-x',
      ANTHROPIC_API_KEY: 'sk-y',
      SERVICE_TIER_NATIVE_VENDORS: 'openai',
    });
    const source = (vendor: string, serviceTier?: ServiceTier): EchoSource => ({
      job: { id: 'resp_job', data: serviceTier ? { serviceTier } : {} },
      model: { routes: [{ vendor }] },
      config,
    });
    const chat = {
      endpoint: 'chat.completions',
      payload: { model: 'gpt-4o-mini', messages: [] },
    } as unknown as EndpointRequest;
    assert.equal(echoTarget(chat, 'r', source('openai', 'priority'), now).serviceTier, 'priority');
    assert.equal(echoTarget(chat, 'r', source('anthropic', 'priority'), now).serviceTier, 'default');
    assert.equal(
      echoTarget(chat, 'r', source('openai', 'priority'), now).model,
      undefined,
      'chat: the vendor’s word stands',
    );
    const messages = {
      endpoint: 'messages',
      payload: { model: 'claude-alias', anthropic: {}, chat: {}, inputTokens: 1 },
    } as unknown as EndpointRequest;
    assert.equal(echoTarget(messages, 'r', source('anthropic'), now).model, 'claude-alias');
    const responses = {
      endpoint: 'responses',
      payload: { chat: {}, shell: shellOf({ model: 'gpt-4o-mini' }) },
    } as unknown as EndpointRequest;
    const t = echoTarget(responses, 'req-1', source('openai'), now);
    assert.deepEqual([t.model, t.jobId, t.requestId, t.now], ['gpt-4o-mini', 'resp_job', 'req-1', now]);
    // Without a source, the stored answer as it is.
    const entry = chatForms(chatAnswer, {
      form: 'chat.completion',
      model: 'gpt-4o-mini',
      legacyFunctions: false,
      serviceTier: 'priority',
    });
    assert.equal(echoFor(chat, 'r', undefined).body(entry.body), entry.body);
  });
});
