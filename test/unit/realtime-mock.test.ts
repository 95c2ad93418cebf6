import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openMockRealtime } from '../../workers/vendors/mock/realtime.js';
import type { RealtimeServerEvent, RealtimeVendorSession } from '../../workers/vendors/types.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';
import { serverEventSchemas } from '../support/realtime-client.js';
import { loadCatalog } from '../../shared/catalog.js';
import { createLogger } from '../../shared/logger.js';
import { readRealtimeUsage } from '../../shared/money/realtime.js';

/** The mock's Realtime sessions, driven directly: every event it writes is one of the spec's server events. */

const model = loadCatalog(undefined).get('mock-realtime')!;

function open(streamDelayMs = 0) {
  const events: RealtimeServerEvent[] = [];
  const closes: Array<{ code: number; reason: string }> = [];
  const waiters: Array<{ type: string; resolve: (event: RealtimeServerEvent) => void }> = [];
  const controller = new AbortController();
  const sessionPromise = openMockRealtime(
    {
      sessionId: 'sess_unit',
      channel: { vendor: 'mock', baseUrl: '', apiKey: '' },
      upstreamModel: 'mock-realtime',
      model,
      clientModel: 'my-alias',
      log: createLogger('silent', 'test'),
      http: { mock: { streamDelayMs, videoMs: 0 } } as never,
      signal: controller.signal,
      connectTimeoutMs: 1000,
    },
    {
      event(event) {
        const schema = serverEventSchemas[event.type];
        assert.ok(schema, `the mock wrote an event the test does not know: ${event.type}`);
        assertMatchesSchema(schema, event, `mock ${event.type}`);
        assertMatchesSchema('RealtimeServerEvent', event, `mock ${event.type}`);
        events.push(event);
        for (const waiter of waiters.splice(0)) {
          if (waiter.type === event.type) waiter.resolve(event);
          else waiters.push(waiter);
        }
      },
      closed(end) {
        closes.push(end);
      },
    },
  );
  const next = (type: string) => new Promise<RealtimeServerEvent>((resolve) => waiters.push({ type, resolve }));
  return { sessionPromise, events, closes, next };
}

async function started(streamDelayMs = 0): Promise<ReturnType<typeof open> & { session: RealtimeVendorSession }> {
  const opened = open(streamDelayMs);
  const created = opened.next('session.created');
  const session = await opened.sessionPromise;
  const event = await created;
  assert.equal((event.session as { model: string }).model, 'my-alias');
  return { ...opened, session };
}

describe('the mock vendor speaks OpenAI GA Realtime events', () => {
  it('answers text with deltas and a response.done whose usage counts the tokens', async () => {
    const { session, next, events } = await started();
    const updated = next('session.updated');
    session.send({
      type: 'session.update',
      session: { type: 'realtime', output_modalities: ['text'], instructions: 'Be brief.' },
    });
    assert.deepEqual((await updated).session && (await updated).session!['output_modalities' as never], ['text']);
    const added = next('conversation.item.done');
    session.send({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say something nice' }] },
    });
    await added;
    const done = next('response.done');
    session.send({ type: 'response.create' });
    const response = (await done).response as {
      status: string;
      usage: unknown;
      output: Array<{ content: Array<{ text: string }> }>;
    };
    assert.equal(response.status, 'completed');
    assert.equal(response.output[0]!.content[0]!.text, 'Mock reply: Say something nice');
    const deltas = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    assert.equal(deltas, 'Mock reply: Say something nice');
    const tokens = readRealtimeUsage(response.usage);
    assert.ok(tokens.textInput > 0 && tokens.textOutput > 0, JSON.stringify(tokens));
    assert.equal(tokens.audioOutput, 0);
    assert.ok(events.some((e) => e.type === 'rate_limits.updated'));
    session.close();
  });

  it('takes audio in (commit → committed and an item) and speaks pcm16 at 24 kHz with its transcript', async () => {
    const { session, next, events } = await started();
    const pcm = Buffer.alloc(24_000 * 2 * 0.5); // half a second
    session.send({ type: 'input_audio_buffer.append', audio: pcm.toString('base64') });
    const committed = next('input_audio_buffer.committed');
    session.send({ type: 'input_audio_buffer.commit' });
    await committed;
    const done = next('response.done');
    session.send({ type: 'response.create' });
    const response = (await done).response as { usage: unknown };
    const audio = Buffer.concat(
      events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(String(e.delta), 'base64')),
    );
    assert.ok(audio.length > 0 && audio.length % 2 === 0);
    // A real tone: samples vary, and none is silent throughout.
    const samples = new Set<number>();
    for (let i = 0; i < Math.min(audio.length, 2000); i += 2) samples.add(audio.readInt16LE(i));
    assert.ok(samples.size > 10);
    const transcript = events.find((e) => e.type === 'response.output_audio_transcript.done')!.transcript;
    assert.equal(transcript, 'I heard 500 ms of audio.');
    const tokens = readRealtimeUsage(response.usage);
    assert.equal(tokens.audioInput, 5);
    assert.ok(tokens.audioOutput > 0);
    session.close();
  });

  it('clears the buffer, refuses an empty commit with an error event', async () => {
    const { session, next } = await started();
    const cleared = next('input_audio_buffer.cleared');
    session.send({ type: 'input_audio_buffer.append', audio: Buffer.alloc(480).toString('base64') });
    session.send({ type: 'input_audio_buffer.clear' });
    await cleared;
    const error = next('error');
    session.send({ type: 'input_audio_buffer.commit' });
    assert.equal(((await error).error as { code: string }).code, 'input_audio_buffer_commit_empty');
    session.close();
  });

  it('calls a function the user asks for, then answers from its output', async () => {
    const { session, next } = await started();
    session.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        tools: [
          {
            type: 'function',
            name: 'get_weather',
            description: 'weather',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
          },
        ],
      },
    });
    session.send({
      type: 'conversation.item.create',
      item: {
        type: 'message',
        role: 'user',
        content: [{ type: 'input_text', text: 'Please call get_weather for Paris' }],
      },
    });
    const args = next('response.function_call_arguments.done');
    const done = next('response.done');
    session.send({ type: 'response.create' });
    const call = await args;
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(String(call.arguments)), { city: 'mock' });
    await done;
    session.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' },
    });
    const text = next('response.output_text.done');
    session.send({ type: 'response.create' });
    assert.equal((await text).text, 'The function said: {"sky":"clear"}');
    session.close();
  });

  it('cancels a response: response.done with status cancelled', async () => {
    const { session, next } = await started(50);
    session.send({
      type: 'conversation.item.create',
      item: {
        type: 'message',
        role: 'user',
        content: [{ type: 'input_text', text: 'one two three four five six seven eight nine ten eleven twelve' }],
      },
    });
    const first = next('response.output_audio.delta');
    const done = next('response.done');
    session.send({ type: 'response.create' });
    await first;
    session.send({ type: 'response.cancel' });
    const response = (await done).response as { status: string };
    assert.equal(response.status, 'cancelled');
    const error = next('error');
    session.send({ type: 'response.cancel' });
    assert.equal(((await error).error as { code: string }).code, 'response_cancel_not_active');
    session.close();
  });

  it('answers an unknown event type with an error event and goes on', async () => {
    const { session, next } = await started();
    const error = next('error');
    session.send({ type: 'response.frobnicate', event_id: 'evt_1' });
    const body = (await error).error as { type: string; event_id: string };
    assert.equal(body.type, 'invalid_request_error');
    assert.equal(body.event_id, 'evt_1');
    session.close();
  });

  it('closes from its side on the marker, after an error event', async () => {
    const { session, next, closes } = await started();
    session.send({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: '[mock:vendor-close]' }] },
    });
    const error = next('error');
    session.send({ type: 'response.create' });
    await error;
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(closes.length, 1);
    assert.equal(closes[0]!.code, 1011);
  });
});
