import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { pino } from 'pino';
import { WebSocketServer } from 'ws';
import { loadCatalog } from '../../shared/catalog.js';
import { GatewayError } from '../../shared/errors.js';
import type { RealtimeServerEvent, RealtimeVendorSession, VendorHttp } from '../../workers/vendors/types.js';
import { openGeminiLive, type GeminiLiveOptions } from '../../workers/vendors/gemini/live.js';
import {
  FAKE_LIVE_CHUNKS,
  FAKE_LIVE_PROMPT_TEXT_TOKENS,
  FAKE_LIVE_TEXT,
  FAKE_LIVE_TOKENS_PER_CHUNK,
  GEMINI_LIVE_PATH,
  startFakeGeminiLive,
  type FakeGeminiLive,
} from '../support/fake-gemini-live.js';
import { closeServer, listenOnLoopback } from '../support/fake-server.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/**
 * The Gemini Live adapter against the strict fake Gemini Live: what the worker would see (OpenAI's GA server
 * events, each checked against its schema in OpenAI's spec, ids unique and consistent) and what Gemini received
 * (the setup, 16 kHz audio, the function response under its call's id), for text, audio in both turn modes, a
 * function call round trip, a cancel, settings changed before and after the conversation began, and every way a
 * session fails to open or ends on Gemini's side.
 */

const NATIVE = 'gemini-2.5-flash-native-audio-preview-09-2025';
const HALF_CASCADE = 'gemini-live-2.5-flash-preview';
const log = pino({ level: 'silent' });
const catalog = loadCatalog();

/** The spec's schema for each server event type. */
const schemaByType: Record<string, string> = {
  'session.created': 'RealtimeServerEventSessionCreated',
  'session.updated': 'RealtimeServerEventSessionUpdated',
  error: 'RealtimeServerEventError',
  'conversation.item.added': 'RealtimeServerEventConversationItemAdded',
  'conversation.item.done': 'RealtimeServerEventConversationItemDone',
  'conversation.item.truncated': 'RealtimeServerEventConversationItemTruncated',
  'conversation.item.input_audio_transcription.delta':
    'RealtimeServerEventConversationItemInputAudioTranscriptionDelta',
  'conversation.item.input_audio_transcription.completed':
    'RealtimeServerEventConversationItemInputAudioTranscriptionCompleted',
  'input_audio_buffer.committed': 'RealtimeServerEventInputAudioBufferCommitted',
  'input_audio_buffer.cleared': 'RealtimeServerEventInputAudioBufferCleared',
  'response.created': 'RealtimeServerEventResponseCreated',
  'response.done': 'RealtimeServerEventResponseDone',
  'response.output_item.added': 'RealtimeServerEventResponseOutputItemAdded',
  'response.output_item.done': 'RealtimeServerEventResponseOutputItemDone',
  'response.content_part.added': 'RealtimeServerEventResponseContentPartAdded',
  'response.content_part.done': 'RealtimeServerEventResponseContentPartDone',
  'response.output_audio.delta': 'RealtimeServerEventResponseAudioDelta',
  'response.output_audio.done': 'RealtimeServerEventResponseAudioDone',
  'response.output_audio_transcript.delta': 'RealtimeServerEventResponseAudioTranscriptDelta',
  'response.output_audio_transcript.done': 'RealtimeServerEventResponseAudioTranscriptDone',
  'response.output_text.delta': 'RealtimeServerEventResponseTextDelta',
  'response.output_text.done': 'RealtimeServerEventResponseTextDone',
  'response.function_call_arguments.delta': 'RealtimeServerEventResponseFunctionCallArgumentsDelta',
  'response.function_call_arguments.done': 'RealtimeServerEventResponseFunctionCallArgumentsDone',
};

type Ev = RealtimeServerEvent & Record<string, any>;

/** A session opened through the adapter, recording what it reports. */
class Probe {
  readonly events: Ev[] = [];
  closed: { code: number; reason: string; error?: GatewayError } | undefined;
  session!: RealtimeVendorSession;
  private waiters: Array<() => void> = [];

  readonly sink = {
    event: (event: RealtimeServerEvent) => {
      this.events.push(event as Ev);
      this.wake();
    },
    closed: (end: { code: number; reason: string; error?: GatewayError }) => {
      this.closed = end;
      this.wake();
    },
  };

  private wake() {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  /** Resolves when `test` holds of what came (checked at each event; the test's own deadline bounds it). */
  async until<T>(test: () => T | undefined | false): Promise<T> {
    for (;;) {
      const value = test();
      if (value !== undefined && value !== false) return value;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  next(type: string, after = 0): Promise<Ev> {
    return this.until(() => this.events.slice(after).find((event) => event.type === type));
  }

  count(type: string): number {
    return this.events.filter((event) => event.type === type).length;
  }

  send(event: Record<string, unknown>) {
    this.session.send(event as never);
  }
}

/** Polls what the fake saw until `test` holds (the test's own deadline bounds it). */
async function eventually<T>(test: () => T | undefined | false): Promise<T> {
  for (;;) {
    const value = test();
    if (value !== undefined && value !== false) return value;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function context(
  fake: { url: string; apiKey: string },
  model: string,
  overrides: { connectTimeoutMs?: number; signal?: AbortSignal } = {},
) {
  const entry = catalog.get(model) ?? catalog.get('gemini-2.5-flash')!;
  return {
    sessionId: 'sess_test',
    channel: { vendor: 'google', baseUrl: fake.url, apiKey: fake.apiKey },
    upstreamModel: model,
    model: entry,
    clientModel: model,
    log,
    http: {} as VendorHttp,
    signal: overrides.signal ?? new AbortController().signal,
    connectTimeoutMs: overrides.connectTimeoutMs ?? 5_000,
  };
}

async function open(fake: FakeGeminiLive, model: string, options: GeminiLiveOptions = {}): Promise<Probe> {
  const probe = new Probe();
  probe.session = await openGeminiLive(context(fake, model), probe.sink, options);
  return probe;
}

function checkEvents(events: Ev[]) {
  const ids = new Set<string>();
  for (const [index, event] of events.entries()) {
    const schema = schemaByType[event.type];
    assert.ok(schema, `event ${index} has a type the adapter should not write: ${event.type}`);
    assertMatchesSchema(schema, event, `event ${index} (${event.type})`);
    assert.ok(!ids.has(event.event_id), `event_id ${event.event_id} repeats`);
    ids.add(event.event_id);
  }
}

function tone(samples: number, hz = 440, rate = 24_000): Buffer {
  const pcm = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++) pcm.writeInt16LE(Math.round(9000 * Math.sin((2 * Math.PI * hz * i) / rate)), i * 2);
  return pcm;
}

/** The dominant frequency, from zero crossings. */
function frequencyOf(pcm: Buffer, rate: number): number {
  let crossings = 0;
  let previous = pcm.readInt16LE(0);
  for (let i = 2; i + 1 < pcm.length; i += 2) {
    const value = pcm.readInt16LE(i);
    if ((previous < 0 && value >= 0) || (previous >= 0 && value < 0)) crossings++;
    previous = value;
  }
  return (crossings / 2) * (rate / (pcm.length / 2));
}

describe('Gemini Live adapter (OpenAI GA events ↔ Gemini Live)', () => {
  let fake: FakeGeminiLive;
  before(async () => {
    fake = await startFakeGeminiLive();
  });
  after(async () => {
    await fake.close();
  });

  it(
    'opens with OpenAI defaults, takes the settings of the first session.update on a fresh socket, and answers a ' +
      'text turn',
    async () => {
      const probe = await open(fake, HALF_CASCADE);
      const created = await probe.next('session.created');
      assert.equal(created.session.id, 'sess_test');
      assert.equal(created.session.model, HALF_CASCADE);
      const first = fake.sessions.at(-1)!;
      assert.deepEqual(first.setup, {
        model: `models/${HALF_CASCADE}`,
        generationConfig: { responseModalities: ['AUDIO'] },
        // OpenAI's default server VAD: 300 ms of padding, 500 ms of silence.
        realtimeInputConfig: { automaticActivityDetection: { silenceDurationMs: 500, prefixPaddingMs: 300 } },
        outputAudioTranscription: {},
      });

      probe.send({
        type: 'session.update',
        session: { type: 'realtime', output_modalities: ['text'], instructions: 'Be brief.' },
      });
      const updated = await probe.next('session.updated');
      assert.deepEqual(updated.session.output_modalities, ['text']);
      const second = fake.sessions.at(-1)!;
      assert.notEqual(second, first);
      assert.deepEqual(second.setup, {
        model: `models/${HALF_CASCADE}`,
        generationConfig: { responseModalities: ['TEXT'] },
        systemInstruction: { parts: [{ text: 'Be brief.' }] },
        realtimeInputConfig: { automaticActivityDetection: { silenceDurationMs: 500, prefixPaddingMs: 300 } },
      });
      await eventually(() => first.closed);
      assert.equal(first.closed!.by, 'client');

      probe.send({
        type: 'conversation.item.create',
        event_id: 'client_1',
        item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] },
      });
      probe.send({ type: 'response.create' });
      const done = await probe.next('response.done');
      assert.deepEqual(second.messages, [
        { clientContent: { turns: [{ role: 'user', parts: [{ text: 'Say hello.' }] }], turnComplete: false } },
        { clientContent: { turnComplete: true } },
      ]);
      const deltas = probe.events.filter((e) => e.type === 'response.output_text.delta');
      assert.deepEqual(
        deltas.map((e) => e.delta),
        FAKE_LIVE_CHUNKS,
      );
      assert.equal((await probe.next('response.output_text.done')).text, FAKE_LIVE_TEXT);
      assert.equal(done.response.status, 'completed');
      assert.equal(done.response.output[0].content[0].text, FAKE_LIVE_TEXT);
      const created2 = await probe.next('response.created');
      assert.equal(created2.response.id, done.response.id);
      for (const delta of deltas) assert.equal(delta.response_id, done.response.id);
      assert.deepEqual(done.response.usage, {
        total_tokens: FAKE_LIVE_PROMPT_TEXT_TOKENS + 4 * FAKE_LIVE_TOKENS_PER_CHUNK,
        input_tokens: FAKE_LIVE_PROMPT_TEXT_TOKENS,
        output_tokens: 4 * FAKE_LIVE_TOKENS_PER_CHUNK,
        input_token_details: {
          text_tokens: FAKE_LIVE_PROMPT_TEXT_TOKENS,
          audio_tokens: 0,
          image_tokens: 0,
          cached_tokens: 0,
          cached_tokens_details: { text_tokens: 0, audio_tokens: 0 },
        },
        output_token_details: { text_tokens: 4 * FAKE_LIVE_TOKENS_PER_CHUNK, audio_tokens: 0 },
      });
      checkEvents(probe.events);
      probe.session.close();
      await eventually(() => second.closed);
      assert.equal(second.closed!.by, 'client');
      assert.equal(probe.closed, undefined, 'a close asked by the worker is not reported back');
    },
  );

  it('streams 24 kHz audio to Gemini at 16 kHz in manual turns, and relays its 24 kHz answer with transcripts', async () => {
    const probe = await open(fake, NATIVE);
    probe.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        audio: { input: { turn_detection: null, transcription: { model: 'whisper-1' } }, output: { voice: 'kore' } },
      },
    });
    await probe.next('session.updated');
    const gemini = fake.sessions.at(-1)!;
    assert.deepEqual(gemini.setup, {
      model: `models/${NATIVE}`,
      generationConfig: {
        responseModalities: ['AUDIO'],
        speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: 'Kore' } } },
      },
      realtimeInputConfig: { automaticActivityDetection: { disabled: true } },
      inputAudioTranscription: {},
      outputAudioTranscription: {},
    });

    const sent = tone(24_000); // one second
    for (let offset = 0, size = 1001; offset < sent.length; offset += size) {
      probe.send({ type: 'input_audio_buffer.append', audio: sent.subarray(offset, offset + size).toString('base64') });
    }
    probe.send({ type: 'input_audio_buffer.commit' });
    const committed = await probe.next('input_audio_buffer.committed');
    probe.send({ type: 'response.create' });
    const done = await probe.next('response.done');

    assert.deepEqual(Object.keys(gemini.messages[0]!), ['realtimeInput']);
    assert.deepEqual(gemini.messages[0], { realtimeInput: { activityStart: {} } });
    assert.deepEqual(gemini.messages.at(-1), { realtimeInput: { activityEnd: {} } });
    assert.ok(gemini.audioMimeTypes.every((type) => type === 'audio/pcm;rate=16000'));
    const heard = gemini.audio.length / 2;
    // Two thirds of the samples, plus the filter's tail pushed out at the commit.
    assert.ok(heard >= 16_000 && heard <= 16_040, `Gemini heard ${heard} samples for a second of audio`);
    const pitch = frequencyOf(gemini.audio, 16_000);
    assert.ok(Math.abs(pitch - 440) < 5, `the tone arrived at ${pitch} Hz`);

    const transcript = await probe.next('conversation.item.input_audio_transcription.completed');
    assert.equal(transcript.item_id, committed.item_id);
    assert.match(transcript.transcript, /^heard \d+ ms$/);
    const audio = probe.events.filter((e) => e.type === 'response.output_audio.delta');
    assert.equal(audio.length, 4);
    const spoken = Buffer.concat(audio.map((e) => Buffer.from(e.delta, 'base64')));
    assert.ok(Math.abs(frequencyOf(spoken, 24_000) - 440) < 5, "Gemini's 24 kHz audio is passed as it is");
    const words = probe.events.filter((e) => e.type === 'response.output_audio_transcript.delta').map((e) => e.delta);
    assert.deepEqual(words, FAKE_LIVE_CHUNKS);
    assert.equal(done.response.output[0].content[0].transcript, FAKE_LIVE_TEXT);
    const audioTokens = Math.ceil(32 * (gemini.audio.length / 2 / 16_000));
    assert.equal(done.response.usage.input_token_details.audio_tokens, audioTokens);
    assert.equal(done.response.usage.output_token_details.audio_tokens, 4 * FAKE_LIVE_TOKENS_PER_CHUNK);
    checkEvents(probe.events);
    probe.session.close();
  });

  it("under automatic turn detection, a commit ends the audio stream and Gemini's own answer is the response", async () => {
    const probe = await open(fake, NATIVE);
    const gemini = fake.sessions.at(-1)!;
    probe.send({ type: 'input_audio_buffer.append', audio: tone(4800).toString('base64') });
    probe.send({ type: 'input_audio_buffer.commit' });
    probe.send({ type: 'response.create' });
    const done = await probe.next('response.done');
    assert.equal(done.response.status, 'completed');
    assert.equal(probe.count('response.created'), 1);
    assert.deepEqual(gemini.messages.at(-1), { realtimeInput: { audioStreamEnd: true } });
    assert.ok(!gemini.messages.some((m) => 'clientContent' in m), 'no second turn was asked for');
    checkEvents(probe.events);
    probe.session.close();
  });

  it(
    "turns a toolCall into function-call items with Gemini's id, and the output into a toolResponse that Gemini " +
      'goes on from',
    async () => {
      const probe = await open(fake, HALF_CASCADE);
      const weather = {
        type: 'function',
        name: 'get_weather',
        description: 'The weather in a city.',
        parameters: {
          type: 'object',
          properties: { city: { type: 'string' } },
          required: ['city'],
          additionalProperties: false,
        },
      };
      probe.send({
        type: 'session.update',
        session: { type: 'realtime', output_modalities: ['text'], tools: [weather], tool_choice: 'auto' },
      });
      await probe.next('session.updated');
      const gemini = fake.sessions.at(-1)!;
      assert.deepEqual(gemini.setup!.tools, [
        {
          functionDeclarations: [
            {
              name: 'get_weather',
              description: 'The weather in a city.',
              parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
            },
          ],
        },
      ]);
      probe.send({
        type: 'conversation.item.create',
        item: {
          type: 'message',
          role: 'user',
          content: [{ type: 'input_text', text: 'What is the weather in Paris?' }],
        },
      });
      probe.send({ type: 'response.create' });
      const first = await probe.next('response.done');
      const call = first.response.output[0];
      assert.equal(call.type, 'function_call');
      assert.equal(call.call_id, 'fc-1');
      assert.equal(call.name, 'get_weather');
      assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris' });
      const argsDone = await probe.next('response.function_call_arguments.done');
      assert.equal(argsDone.call_id, 'fc-1');
      assert.equal(argsDone.item_id, call.id);
      assert.equal(
        first.response.usage.output_tokens,
        FAKE_LIVE_TOKENS_PER_CHUNK,
        "the call's turn is billed with the call",
      );

      const mark = probe.events.length;
      probe.send({
        type: 'conversation.item.create',
        item: { type: 'function_call_output', call_id: 'fc-1', output: '{"temperature":21}' },
      });
      probe.send({ type: 'response.create' });
      const second = await probe.next('response.done', mark);
      assert.deepEqual(
        gemini.messages.find((m) => 'toolResponse' in m),
        {
          toolResponse: {
            functionResponses: [{ id: 'fc-1', name: 'get_weather', response: { output: { temperature: 21 } } }],
          },
        },
      );
      assert.equal(
        gemini.messages.filter((m) => 'clientContent' in m && (m.clientContent as any).turnComplete === true).length,
        1,
        'the continuation was not asked for again',
      );
      assert.equal(second.response.output[0].content[0].text, 'Tool said: {"output":{"temperature":21}}');
      assert.equal(probe.events.slice(mark).filter((e) => e.type === 'response.created').length, 1);
      checkEvents(probe.events);

      probe.send({
        type: 'conversation.item.create',
        event_id: 'bad_call',
        item: { type: 'function_call_output', call_id: 'fc-9', output: 'x' },
      });
      const refused = await probe.next('error');
      assert.equal(refused.error.event_id, 'bad_call');
      assert.equal(refused.error.param, 'item.call_id');
      probe.session.close();
    },
  );

  it(
    'cancels best effort: the items end at once, nothing more is relayed, response.done (cancelled) carries the ' +
      "turn's usage",
    async () => {
      const probe = await open(fake, NATIVE);
      const gemini = fake.sessions.at(-1)!;
      probe.send({
        type: 'conversation.item.create',
        item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hold on' }] },
      });
      probe.send({ type: 'response.create' });
      const firstDelta = await probe.next('response.output_audio.delta');
      probe.send({ type: 'response.cancel', response_id: firstDelta.response_id });
      const itemDone = await probe.next('response.output_item.done');
      assert.equal(itemDone.item.status, 'incomplete');
      const mark = probe.events.length;
      // Only now may Gemini's turn go on: what it says is not relayed.
      gemini.release();
      const done = await probe.next('response.done');
      assert.equal(done.response.status, 'cancelled');
      assert.deepEqual(done.response.status_details, { type: 'cancelled', reason: 'client_cancelled' });
      assert.equal(done.response.usage.output_tokens, 4 * FAKE_LIVE_TOKENS_PER_CHUNK);
      assert.deepEqual(
        probe.events.slice(mark).map((e) => e.type),
        ['response.done'],
      );

      probe.send({ type: 'response.cancel', event_id: 'late' });
      assert.equal((await probe.next('error')).error.code, 'response_cancel_not_active');
      checkEvents(probe.events);
      probe.session.close();
    },
  );

  it('refuses what Gemini cannot do with error events, the session going on', async () => {
    const probe = await open(fake, NATIVE);
    probe.send({
      type: 'session.update',
      event_id: 'v',
      session: { type: 'realtime', audio: { output: { voice: 'alloy' } } },
    });
    const voice = await probe.next('error');
    assert.equal(voice.error.param, 'session.audio.output.voice');
    assert.equal(voice.error.event_id, 'v');
    probe.send({
      type: 'session.update',
      session: { type: 'realtime', audio: { input: { format: { type: 'audio/pcmu' } } } },
    });
    await probe.until(() => probe.count('error') === 2);
    probe.send({ type: 'input_audio_buffer.commit' });
    await probe.until(() => probe.count('error') === 3);
    assert.equal(probe.events.at(-1)!.error.code, 'input_audio_buffer_commit_empty');
    probe.send({ type: 'conversation.item.delete', item_id: 'x' });
    probe.send({ type: 'no.such.event' });
    await probe.until(() => probe.count('error') === 5);
    assert.equal(probe.events.at(-1)!.error.code, 'invalid_value');
    // Text output on a native-audio model: Gemini refuses the new setup; the session keeps the one it had.
    const before = fake.sessions.at(-1)!;
    probe.send({
      type: 'session.update',
      event_id: 'text_please',
      session: { type: 'realtime', output_modalities: ['text'] },
    });
    await probe.until(() => probe.count('error') === 6);
    assert.equal(probe.events.at(-1)!.error.event_id, 'text_please');
    assert.match(probe.events.at(-1)!.error.message, /Text output is not supported/);
    assert.equal(fake.sessions.at(-1)!.closed?.code, 1007);
    assert.equal(before.closed, undefined);

    // Once the conversation began, a change of settings would need a new setup: refused.
    probe.send({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
    });
    probe.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Now be terse.' } });
    await probe.until(() => probe.count('error') === 7);
    assert.equal(probe.events.at(-1)!.error.code, 'session_update_too_late');
    // An update that changes nothing Gemini holds is answered.
    probe.send({ type: 'session.update', session: { type: 'realtime', tool_choice: 'auto' } });
    await probe.next('session.updated');
    probe.send({ type: 'input_audio_buffer.clear' });
    await probe.next('input_audio_buffer.cleared');
    assert.equal(before.closed, undefined, 'nothing refused here ended the session');
    await eventually(() => before.messages.length === 1);
    assert.deepEqual(Object.keys(before.messages[0]!), ['clientContent'], 'only the user text reached Gemini');
    checkEvents(probe.events);
    probe.session.close();
  });

  it(
    'maps refusals at opening: a bad key, an unknown model, nobody listening, no setupComplete in time, an aborted ' +
      'open',
    async () => {
      const refusal = async (ctx: ReturnType<typeof context>) => {
        const error = await openGeminiLive(ctx, new Probe().sink).then(
          () => undefined,
          (caught: unknown) => caught,
        );
        assert.ok(error instanceof GatewayError, `expected a GatewayError, got ${String(error)}`);
        return error;
      };
      const badKey = await refusal(context({ url: fake.url, apiKey: 'wrong' }, NATIVE));
      assert.equal(badKey.status, 502);
      assert.equal(badKey.code, 'vendor_auth_failed');
      assert.ok(!badKey.message.includes('wrong'));
      const unknown = await refusal(context(fake, 'gemini-0-nope'));
      assert.equal(unknown.status, 404);

      const silent = createServer();
      const wss = new WebSocketServer({ server: silent, path: GEMINI_LIVE_PATH });
      wss.on('connection', () => {});
      const port = await listenOnLoopback(silent);
      const late = await refusal(
        context({ url: `http://127.0.0.1:${port}`, apiKey: 'k' }, NATIVE, { connectTimeoutMs: 200 }),
      );
      assert.equal(late.status, 504);
      for (const client of wss.clients) client.terminate();
      wss.close();
      await closeServer(silent);
      const gone = await refusal(context({ url: `http://127.0.0.1:${port}`, apiKey: 'k' }, NATIVE));
      assert.equal(gone.code, 'vendor_unreachable');

      const aborted = new AbortController();
      aborted.abort(new GatewayError(499, 'client left'));
      assert.equal((await refusal(context(fake, NATIVE, { signal: aborted.signal }))).status, 499);
    },
  );

  it('reports Gemini ending a session: a quota as a retryable 429, goAway then a close as 503, a bad frame', async () => {
    const quota = await open(fake, NATIVE);
    fake.sessions.at(-1)!.close(1011, 'RESOURCE_EXHAUSTED: You exceeded your current quota.');
    const ended = await quota.until(() => quota.closed);
    assert.equal(ended.code, 1011);
    assert.equal(ended.error?.status, 429);
    assert.equal(ended.error?.retryable, true);

    const leaving = await open(fake, NATIVE);
    const session = fake.sessions.at(-1)!;
    session.goAway('1s');
    session.close(1001, 'going away');
    const left = await leaving.until(() => leaving.closed);
    assert.equal(left.error?.code, 'vendor_going_away');
    assert.equal(left.error?.status, 503);

    const garbled = await open(fake, NATIVE);
    fake.sessions.at(-1)!.send('not an object');
    const bad = await garbled.until(() => garbled.closed);
    assert.equal(bad.error?.code, 'vendor_bad_response');
    await eventually(() => fake.sessions.at(-1)!.closed);
    await eventually(() => fake.openSessions() === 0);
  });

  it('ends a session whose Gemini stops answering pings, and closes its socket', async () => {
    const mute = await startFakeGeminiLive({ answerPings: false });
    try {
      const probe = await open(mute, NATIVE, { pingIntervalMs: 50 });
      const ended = await probe.until(() => probe.closed);
      assert.equal(ended.code, 1011);
      assert.deepEqual([ended.error?.status, ended.error?.code], [502, 'vendor_timeout']);
      await eventually(() => mute.sessions.at(-1)!.closed);
    } finally {
      await mute.close();
    }
  });
});
