import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import {
  FAKE_REALTIME_KEY,
  startFakeOpenAIRealtime,
  type FakeOpenAIRealtime,
} from '../support/fake-openai-realtime.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { EventInbox, serverEventSchemas } from '../support/realtime-client.js';

/*
 * The strict fake of OpenAI's Realtime API, checked on its own: refusals at the upgrade as HTTP statuses, the GA
 * session's answers to each client event, its refusals of events the spec does not allow (as `error` events), and
 * every event it sends against the spec's schema.
 */

type Event = Record<string, any>;

interface TestClient {
  socket: WebSocket;
  events: Event[];
  /** The next event of `type` not yet taken (waiting for it, up to 10 s). */
  next(type: string): Promise<Event>;
  send(event: Event | string): void;
  close(): Promise<void>;
}

function connect(
  fake: FakeOpenAIRealtime,
  options: { model?: string; key?: string; protocols?: string[] } = {},
): Promise<TestClient> {
  const url = `ws://127.0.0.1:${fake.port}/v1/realtime?model=${options.model ?? 'gpt-realtime'}`;
  const headers: Record<string, string> = options.protocols
    ? {}
    : { authorization: `Bearer ${options.key ?? fake.key}` };
  const socket = new WebSocket(url, options.protocols ?? [], { headers });
  const inbox = new EventInbox<Event & { type: string }>();
  socket.on('message', (data) => inbox.push(JSON.parse(data.toString()) as Event & { type: string }));
  const client: TestClient = {
    socket,
    events: inbox.events,
    next: (type) => inbox.next(type, 10_000),
    send(event) {
      socket.send(typeof event === 'string' ? event : JSON.stringify(event));
    },
    close() {
      return new Promise((resolve) => {
        if (socket.readyState === WebSocket.CLOSED) return resolve();
        socket.once('close', () => resolve());
        socket.close();
      });
    },
  };
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve(client));
    socket.once('unexpected-response', (_request, response) =>
      reject(Object.assign(new Error(`HTTP ${response.statusCode}`), { status: response.statusCode })),
    );
    socket.once('error', reject);
  });
}

/** The status and JSON body of a refused upgrade, with its headers. */
function refusal(
  fake: FakeOpenAIRealtime,
  options: { model?: string; key?: string | null; path?: string } = {},
): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  const path = options.path ?? `/v1/realtime?model=${options.model ?? 'gpt-realtime'}`;
  const headers: Record<string, string> =
    options.key === null ? {} : { authorization: `Bearer ${options.key ?? fake.key}` };
  const socket = new WebSocket(`ws://127.0.0.1:${fake.port}${path}`, { headers });
  return new Promise((resolve, reject) => {
    socket.once('open', () => reject(new Error('the upgrade was accepted')));
    socket.once('error', () => {});
    socket.once('unexpected-response', (_request, response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body: JSON.parse(text) }),
      );
    });
  });
}

/** Every event the fake sent so far validates against the spec's schema for its type. */
function assertAllSentMatch(fake: FakeOpenAIRealtime): void {
  assert.deepEqual(fake.problems, []);
  for (const session of fake.sessions) {
    for (const event of session.sent)
      assertMatchesSchema(serverEventSchemas[event.type as string]!, event, `sent ${String(event.type)}`);
  }
}

const userText = (text: string, id?: string) => ({
  type: 'conversation.item.create',
  item: { ...(id ? { id } : {}), type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
});

describe('fake OpenAI realtime server', () => {
  let fake: FakeOpenAIRealtime;
  const clients: TestClient[] = [];
  const open = async (options?: Parameters<typeof connect>[1]) => {
    const client = await connect(fake, options);
    clients.push(client);
    return client;
  };

  before(async () => {
    fake = await startFakeOpenAIRealtime({ maxSessions: 3 });
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
    fake.refuseUpgrades(undefined);
    assertAllSentMatch(fake);
  });
  after(() => fake.close());

  it('refuses at the upgrade with HTTP statuses and OpenAI error bodies', async () => {
    const noKey = await refusal(fake, { key: null });
    assert.equal(noKey.status, 401);
    assert.match(noKey.body.error.message, /didn't provide an API key/);
    const wrongKey = await refusal(fake, { key: 'sk-wrong-key-1234' });
    assert.deepEqual([wrongKey.status, wrongKey.body.error.code], [401, 'invalid_api_key']);
    assert.doesNotMatch(wrongKey.body.error.message, /sk-wrong-key-1234/, 'the key is not echoed whole');
    const unknownModel = await refusal(fake, { model: 'gpt-4o' });
    assert.deepEqual([unknownModel.status, unknownModel.body.error.code], [404, 'model_not_found']);
    const wrongPath = await refusal(fake, { path: '/v1/realtime/other?model=gpt-realtime' });
    assert.equal(wrongPath.status, 404);

    fake.refuseUpgrades({ status: 429, retryAfterSeconds: 7 });
    const limited = await refusal(fake);
    assert.deepEqual(
      [limited.status, limited.headers['retry-after'], limited.body.error.code],
      [429, '7', 'rate_limit_exceeded'],
    );
    fake.refuseUpgrades({ status: 503, message: 'overloaded' });
    assert.equal((await refusal(fake)).status, 503);
    fake.refuseUpgrades(undefined);

    // The cap of 3 open sessions.
    await Promise.all([open(), open(), open()]);
    assert.equal(fake.openSessions, 3);
    const capped = await refusal(fake);
    assert.deepEqual([capped.status, capped.body.error.code], [429, 'session_limit_reached']);
    assert.deepEqual(
      fake.upgrades.slice(-4).map((upgrade) => upgrade.status),
      [101, 101, 101, 429],
    );
  });

  it('accepts the browser subprotocols, answering `realtime`', async () => {
    const client = await open({ protocols: ['realtime', `openai-insecure-api-key.${FAKE_REALTIME_KEY}`] });
    assert.equal(client.socket.protocol, 'realtime');
    const created = await client.next('session.created');
    assert.equal(created.session.model, 'gpt-realtime');
  });

  it('opens with session.created and counts and closes sessions', async () => {
    const before = fake.opened;
    const client = await open({ model: 'gpt-realtime-mini' });
    const created = await client.next('session.created');
    assert.equal(client.events[0]!.type, 'session.created', 'the first event');
    assert.deepEqual(
      [created.session.type, created.session.object, created.session.model],
      ['realtime', 'realtime.session', 'gpt-realtime-mini'],
    );
    assert.deepEqual(created.session.audio.output.format, { type: 'audio/pcm', rate: 24_000 });
    assert.equal(fake.opened, before + 1);
    const session = fake.sessions.at(-1)!;
    assert.equal(session.headers.authorization, `Bearer ${fake.key}`);
    await client.close();
    assert.deepEqual(await session.closed, { code: 1005, reason: '', by: 'client' });
    assert.equal(session.open, false);

    const killed = await open();
    const closed = new Promise<number>((resolve) => killed.socket.once('close', (code) => resolve(code)));
    fake.sessions.at(-1)!.kill(1011, 'boom');
    assert.equal(await closed, 1011);
    assert.equal((await fake.sessions.at(-1)!.closed).by, 'fake');
  });

  it('answers events the spec does not allow with error events naming the problem', async () => {
    const client = await open();
    await client.next('session.created');
    const cases: Array<[Event | string, string, string | null]> = [
      [{ type: 'session.frobnicate', event_id: 'c1' }, 'invalid_value', 'type'],
      ['{not json', 'invalid_json', null],
      [{ type: 'conversation.item.create', event_id: 'c2' }, 'missing_required_parameter', 'item'],
      [
        { type: 'session.update', event_id: 'c3', session: { type: 'realtime', temperature: 0.5 } },
        'unknown_parameter',
        'session.temperature',
      ],
      [{ type: 'response.create', event_id: 'c4', extra: true }, 'unknown_parameter', 'extra'],
      [
        { type: 'conversation.item.truncate', event_id: 'c5', item_id: 'x', content_index: 'zero', audio_end_ms: 10 },
        'invalid_type',
        'content_index',
      ],
      [
        { type: 'session.update', event_id: 'c6', session: { type: 'realtime', output_modalities: ['video'] } },
        'invalid_value',
        'session.output_modalities.0',
      ],
      [{ type: 'input_audio_buffer.append', event_id: 'c7', audio: '***' }, 'invalid_value', 'audio'],
      [{ type: 'input_audio_buffer.commit', event_id: 'c8' }, 'input_audio_buffer_commit_empty', null],
      [{ type: 'response.cancel', event_id: 'c9' }, 'response_cancel_not_active', null],
      [{ type: 'conversation.item.delete', event_id: 'c10', item_id: 'item_none' }, 'item_not_found', 'item_id'],
      [{ type: 'output_audio_buffer.clear', event_id: 'c11' }, 'invalid_value', 'type'],
      [
        { type: 'session.update', event_id: 'c12', session: { type: 'realtime', model: 'gpt-realtime-mini' } },
        'invalid_value',
        'session.model',
      ],
      [
        {
          type: 'session.update',
          event_id: 'c13',
          session: { type: 'realtime', audio: { output: { voice: 'nobody' } } },
        },
        'invalid_value',
        'session.audio.output.voice',
      ],
    ];
    for (const [event, code, param] of cases) {
      client.send(event);
      const error = await client.next('error');
      assertMatchesSchema('RealtimeServerEventError', error, `error for ${JSON.stringify(event)}`);
      assert.equal(error.error.type, 'invalid_request_error');
      assert.equal(error.error.code, code, `${JSON.stringify(event)}: ${error.error.message}`);
      assert.equal(error.error.param, param, JSON.stringify(event));
      assert.equal(error.error.event_id, typeof event === 'string' ? null : event.event_id);
    }
    client.socket.send(Buffer.from([1, 2, 3]), { binary: true });
    assert.equal((await client.next('error')).error.code, 'invalid_json');
    assert.ok(client.socket.readyState === WebSocket.OPEN, 'errors do not end the session');
    assert.equal(
      client.events.filter((event) => event.type !== 'session.created' && event.type !== 'error').length,
      0,
      'nothing but errors',
    );
  });

  it('updates the session and answers with the whole effective session', async () => {
    const client = await open();
    await client.next('session.created');
    client.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        instructions: 'Be brief.',
        output_modalities: ['text'],
        audio: {
          input: { turn_detection: null, transcription: { model: 'gpt-4o-mini-transcribe' } },
          output: { voice: 'marin' },
        },
        tools: [
          {
            type: 'function',
            name: 'get_weather',
            description: 'Weather',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
          },
        ],
      },
    });
    const updated = await client.next('session.updated');
    assert.equal(updated.session.instructions, 'Be brief.');
    assert.deepEqual(updated.session.output_modalities, ['text']);
    assert.equal(updated.session.audio.input.turn_detection, null);
    assert.deepEqual(updated.session.audio.input.format, { type: 'audio/pcm', rate: 24_000 }, 'untouched fields kept');
    assert.equal(updated.session.audio.output.voice, 'marin');
    assert.equal(updated.session.tools[0].name, 'get_weather');
  });

  it('answers a text conversation with the GA event sequence and usage', async () => {
    const client = await open();
    await client.next('session.created');
    client.send({
      type: 'session.update',
      session: { type: 'realtime', instructions: 'Be brief.', output_modalities: ['text'] },
    });
    await client.next('session.updated');
    client.send(userText('Hello there', 'item_mine'));
    const added = await client.next('conversation.item.added');
    assert.equal(added.item.id, 'item_mine');
    await client.next('conversation.item.done');
    client.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const types = client.events.map((event) => event.type);
    const from = types.indexOf('response.created');
    assert.deepEqual(
      [...new Set(types.slice(from))],
      [
        'response.created',
        'rate_limits.updated',
        'response.output_item.added',
        'conversation.item.added',
        'response.content_part.added',
        'response.output_text.delta',
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'conversation.item.done',
        'response.done',
      ],
    );
    const deltas = client.events
      .filter((event) => event.type === 'response.output_text.delta')
      .map((event) => event.delta)
      .join('');
    assert.equal(deltas, 'You said: Hello there');
    assert.equal(done.response.status, 'completed');
    assert.equal(done.response.output[0].content[0].text, 'You said: Hello there');
    // Instructions (9 characters: 3 tokens) and the user's content as sent; the answer's 21 characters: 6 tokens.
    const contentTokens = Math.ceil(JSON.stringify([{ type: 'input_text', text: 'Hello there' }]).length / 4);
    assert.deepEqual(done.response.usage, {
      total_tokens: 3 + contentTokens + 6,
      input_tokens: 3 + contentTokens,
      output_tokens: 6,
      input_token_details: {
        text_tokens: 3 + contentTokens,
        audio_tokens: 0,
        image_tokens: 0,
        cached_tokens: 0,
        cached_tokens_details: { text_tokens: 0, audio_tokens: 0, image_tokens: 0 },
      },
      output_token_details: { text_tokens: 6, audio_tokens: 0 },
    });
  });

  it('takes audio in and answers audio out with a transcript, billed as audio tokens', async () => {
    const client = await open();
    await client.next('session.created');
    client.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        instructions: '',
        audio: { input: { turn_detection: null, transcription: { model: 'whisper-1' } } },
      },
    });
    await client.next('session.updated');
    // 500 ms of pcm16 at 24 kHz in 20 ms frames.
    for (let i = 0; i < 25; i++)
      client.send({ type: 'input_audio_buffer.append', audio: Buffer.alloc(960, i).toString('base64') });
    client.send({ type: 'input_audio_buffer.commit' });
    const committed = await client.next('input_audio_buffer.committed');
    const transcription = await client.next('conversation.item.input_audio_transcription.completed');
    assert.equal(transcription.item_id, committed.item_id);
    assert.equal(transcription.transcript, '(500 ms of speech)');
    assert.equal(fake.sessions.at(-1)!.appendedBytes, 25 * 960);

    client.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const audio = Buffer.concat(
      client.events
        .filter((event) => event.type === 'response.output_audio.delta')
        .map((event) => Buffer.from(event.delta, 'base64')),
    );
    const transcript = (await client.next('response.output_audio_transcript.done')).transcript;
    assert.equal(transcript, 'I heard you speak.');
    assert.equal(audio.length, transcript.length * 60 * 48, '60 ms of pcm16 a character');
    const samples = Array.from({ length: audio.length / 2 }, (_, i) => audio.readInt16LE(i * 2));
    assert.ok(Math.max(...samples) > 5_000 && Math.min(...samples) < -5_000, 'a tone, not silence');
    assert.equal(done.response.output[0].content[0].type, 'output_audio');
    assert.equal(done.response.output[0].content[0].transcript, transcript);
    const usage = done.response.usage;
    assert.equal(usage.input_token_details.audio_tokens, 5, '500 ms of user audio: 5 tokens');
    assert.equal(
      usage.output_token_details.audio_tokens,
      Math.ceil((transcript.length * 60) / 50),
      'a token each 50 ms',
    );
    assert.equal(usage.output_token_details.text_tokens, Math.ceil(transcript.length / 4), 'the transcript as text');
  });

  it('calls a function the user text names, then answers with its output', async () => {
    const client = await open();
    await client.next('session.created');
    const tool = {
      type: 'function',
      name: 'get_weather',
      description: 'Weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    };
    client.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], tools: [tool] } });
    await client.next('session.updated');
    client.send(userText('What is get_weather({"city": "Paris"}) today?'));
    client.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const call = await client.next('response.function_call_arguments.done');
    assert.deepEqual([call.name, call.arguments], ['get_weather', '{"city":"Paris"}']);
    const deltas = client.events
      .filter((event) => event.type === 'response.function_call_arguments.delta')
      .map((event) => event.delta)
      .join('');
    assert.equal(deltas, '{"city":"Paris"}');
    assert.deepEqual(
      {
        type: done.response.output[0].type,
        name: done.response.output[0].name,
        call_id: done.response.output[0].call_id,
      },
      { type: 'function_call', name: 'get_weather', call_id: call.call_id },
    );

    client.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: 'call_unknown', output: '{}' },
    });
    assert.equal((await client.next('error')).error.param, 'item.call_id', 'an output for no call is refused');
    client.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' },
    });
    await client.next('conversation.item.done');
    client.send({ type: 'response.create' });
    const answer = await client.next('response.output_text.done');
    assert.equal(answer.text, 'The tool answered {"sky":"clear"}.');
  });

  it('cancels a held response with response.done cancelled, and refuses a second response meanwhile', async () => {
    const client = await open();
    await client.next('session.created');
    client.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['audio'] } });
    await client.next('session.updated');
    client.send(userText('Tell me a long story [hold]'));
    client.send({ type: 'response.create' });
    const created = await client.next('response.created');
    await client.next('response.output_audio.delta');
    client.send({ type: 'response.create', event_id: 'second' });
    const busy = await client.next('error');
    assert.deepEqual([busy.error.code, busy.error.event_id], ['conversation_already_has_active_response', 'second']);
    client.send({ type: 'response.cancel', response_id: 'resp_other' });
    assert.equal(
      (await client.next('error')).error.code,
      'response_cancel_not_active',
      'another id is not the active one',
    );
    client.send({ type: 'response.cancel', response_id: created.response.id });
    const done = await client.next('response.done');
    assert.equal(done.response.status, 'cancelled');
    assert.deepEqual(done.response.status_details, { type: 'cancelled', reason: 'client_cancelled' });
    assert.equal(done.response.output[0].status, 'incomplete');
    assert.equal(
      client.events.filter((event) => event.type === 'response.output_audio.delta').length,
      1,
      'nothing after the cancel',
    );
    assert.equal(done.response.usage.output_token_details.audio_tokens, 2, 'the one 100 ms delta sent: 2 tokens');
    // The voice cannot change once assistant audio exists.
    client.send({ type: 'session.update', session: { type: 'realtime', audio: { output: { voice: 'ash' } } } });
    assert.equal((await client.next('error')).error.code, 'cannot_update_voice');
  });

  it('reads the previous response input back as cached tokens, in steps of 64', async () => {
    const client = await open();
    await client.next('session.created');
    client.send({
      type: 'session.update',
      session: { type: 'realtime', output_modalities: ['text'], instructions: 'x'.repeat(1000) },
    });
    await client.next('session.updated');
    client.send(userText('one'));
    client.send({ type: 'response.create' });
    const first = await client.next('response.done');
    assert.equal(first.response.usage.input_token_details.cached_tokens, 0);
    client.send(userText('two'));
    client.send({ type: 'response.create' });
    const second = await client.next('response.done');
    const cached = Math.floor(first.response.usage.input_tokens / 64) * 64;
    assert.ok(cached >= 256);
    assert.equal(second.response.usage.input_token_details.cached_tokens, cached);
    assert.deepEqual(second.response.usage.input_token_details.cached_tokens_details, {
      text_tokens: cached,
      audio_tokens: 0,
      image_tokens: 0,
    });
  });

  it('flags an event of its own that the spec does not allow (its check can fail)', async () => {
    const client = await open();
    await client.next('session.created');
    fake.sessions.at(-1)!.push({ type: 'response.output_text.delta', response_id: 'resp_1' });
    await client.next('response.output_text.delta');
    assert.equal(fake.problems.length, 1);
    assert.match(fake.problems[0]!, /RealtimeServerEventResponseTextDelta/);
    fake.problems.splice(0);
    fake.sessions.at(-1)!.sent.pop();
  });

  it('manages items: retrieve, delete, insert after a given item', async () => {
    const client = await open();
    await client.next('session.created');
    client.send(userText('first', 'item_a'));
    client.send(userText('second', 'item_b'));
    client.send({ ...userText('between', 'item_c'), previous_item_id: 'item_a' });
    await client.next('conversation.item.done');
    await client.next('conversation.item.done');
    const between = await client.next('conversation.item.added');
    assert.ok(between);
    const third = client.events.filter((event) => event.type === 'conversation.item.added').at(-1)!;
    assert.equal(third.previous_item_id, 'item_a');
    client.send(userText('again', 'item_a'));
    assert.match((await client.next('error')).error.message, /already exists/);
    client.send({ type: 'conversation.item.retrieve', item_id: 'item_c' });
    assert.equal((await client.next('conversation.item.retrieved')).item.content[0].text, 'between');
    client.send({ type: 'conversation.item.delete', item_id: 'item_c' });
    assert.equal((await client.next('conversation.item.deleted')).item_id, 'item_c');
    client.send({ type: 'input_audio_buffer.clear' });
    await client.next('input_audio_buffer.cleared');
  });
});

describe('fake OpenAI realtime server, echo mode', () => {
  it('answers each appended frame at once with an output audio delta of the same bytes', async () => {
    const fake = await startFakeOpenAIRealtime({ echo: true, record: false });
    try {
      const client = await connect(fake);
      await client.next('session.created');
      const frame = Buffer.alloc(960, 7).toString('base64');
      client.send({ type: 'input_audio_buffer.append', audio: frame });
      const echo = await client.next('response.output_audio.delta');
      assert.equal(echo.delta, frame);
      assertMatchesSchema('RealtimeServerEventResponseAudioDelta', echo, 'echo');
      assert.equal(fake.sessions[0]!.received.length, 0, 'nothing recorded');
      await client.close();
      await fake.waitForOpenSessions(0);
      assert.equal(fake.sessions.length, 0, 'a closed session is forgotten when not recording');
      assert.deepEqual(fake.problems, []);
    } finally {
      await fake.close();
    }
  });
});
