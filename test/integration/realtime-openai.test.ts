import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { startFakeOpenAIRealtime, type FakeOpenAIRealtime } from '../support/fake-openai-realtime.js';
import { openRealtime, userText, type RealtimeRefusal } from '../support/realtime-client.js';
import { readBill } from '../../shared/money/billing.js';

/*
 * OpenAI's realtime models through the gateway: the official SDK's `OpenAIRealtimeWS` against the gateway, the
 * gateway's OpenAI channel pointed at the strict fake of OpenAI's Realtime API (test/support/fake-openai-realtime.ts).
 * Text, audio both ways, a function call round trip, a cancel; every event the client gets checked against the
 * spec's schema for its type; `session.model` as asked; the client's events reaching OpenAI as sent; each response
 * billed at the model's prices from the usage OpenAI reported (the balance moves by exactly their sum, computed here
 * from the catalog's prices); the vendor's refusals answered at the upgrade; the vendor ending a session, and the
 * client ending one (the worker closes OpenAI's socket).
 */

/** USD per 1M tokens, as OpenAI prices them (and the catalog says). */
const PRICES = {
  'gpt-realtime': { text: 4, cachedText: 0.4, textOut: 16, audio: 32, cachedAudio: 0.4, audioOut: 64 },
  'gpt-realtime-mini': { text: 0.6, cachedText: 0.06, textOut: 2.4, audio: 10, cachedAudio: 0.3, audioOut: 20 },
};

type ServerEvent = Record<string, any> & { type: string };

/**
 * What a response costs in micro-dollars: each kind of token at its price, each rounded up (a part-micro is a micro).
 */
function expectedMicros(model: keyof typeof PRICES, usage: any): number {
  const price = PRICES[model];
  const input = usage.input_token_details;
  const cached = input.cached_tokens_details;
  // USD per 1M tokens is micro-dollars per token; prices are kept in millionths of a micro to stay in integers.
  const part = (tokens: number, usd: number) => Math.ceil((tokens * Math.round(usd * 1_000_000)) / 1_000_000);
  return (
    part(input.text_tokens - cached.text_tokens, price.text) +
    part(cached.text_tokens, price.cachedText) +
    part(input.audio_tokens - cached.audio_tokens, price.audio) +
    part(cached.audio_tokens, price.cachedAudio) +
    part(usage.output_token_details.text_tokens, price.textOut) +
    part(usage.output_token_details.audio_tokens, price.audioOut)
  );
}

describe("OpenAI's realtime models through the gateway", () => {
  let fake: FakeOpenAIRealtime;
  let redis: Redis;
  let gateway: GatewayProcess;

  before(async () => {
    fake = await startFakeOpenAIRealtime();
    const fresh = await freshRedis(5);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: fake.key,
        OPENAI_BASE_URL: fake.url,
        REALTIME_START_WAIT_MS: '20000',
      },
    });
  });
  afterEach(() => {
    assert.deepEqual(fake.problems, []);
  });
  after(async () => {
    await gateway?.stop();
    await fake?.close();
    redis?.disconnect();
  });

  /** A started session on `model`: open, session.created seen, the vendor's session found. */
  async function start(key: string, model = 'gpt-realtime') {
    const before = fake.opened;
    const client = openRealtime<ServerEvent>(gateway.url, key, model);
    await client.opened;
    const created = await client.next('session.created');
    assert.equal(created.session.model, model, 'session.model is the model as the client named it');
    assert.equal(fake.opened, before + 1);
    const vendor = fake.sessions.at(-1)!;
    assert.equal(vendor.model, model);
    assert.equal(vendor.headers.authorization, `Bearer ${fake.key}`, "the channel's key, never the client's");
    return { client, vendor, sessionId: await client.requestId };
  }

  it('answers text, the client events reaching OpenAI as sent, billed at gpt-realtime prices', async () => {
    const { key, account } = await paidAccountKey(redis, 50_000_000);
    const { client, vendor, sessionId } = await start(key);
    const sent = [
      {
        type: 'session.update',
        session: {
          type: 'realtime',
          output_modalities: ['text'],
          instructions: `Answer kindly. ${'Be precise. '.repeat(80)}`,
          audio: { input: { turn_detection: null } },
        },
      },
      userText('What is a switchyard?'),
      { type: 'response.create', event_id: 'evt_client_1' },
    ];
    for (const event of sent) client.send(event);
    const updated = await client.next('session.updated');
    assert.equal(updated.session.model, 'gpt-realtime');
    const first = await client.next('response.done');
    const text = client.events
      .filter((event) => event.type === 'response.output_text.delta')
      .map((event) => event.delta)
      .join('');
    assert.equal(text, 'You said: What is a switchyard?');
    assert.equal(first.response.status, 'completed');

    client.send(userText('And a marshalling yard?'));
    client.send({ type: 'response.create' });
    const second = await client.next('response.done');
    assert.ok(second.response.usage.input_token_details.cached_tokens > 0, 'the second response reads cached tokens');
    assert.deepEqual(vendor.received.slice(0, 3), sent, 'the events as the client wrote them');

    const cost =
      expectedMicros('gpt-realtime', first.response.usage) + expectedMicros('gpt-realtime', second.response.usage);
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 50_000_000 - cost,
      10_000,
      'both responses settled',
    );
    client.rt.close();
    await client.closed;
    const row = await requestRecord(gateway.url, key, sessionId, 'session');
    assert.deepEqual([row.endpoint, row.model, row.cost_micros], ['realtime', 'gpt-realtime', cost]);
    const bill = await readBill(redis, account);
    assert.deepEqual([bill!.balanceMicros, bill!.reservedMicros], [50_000_000 - cost, 0]);
    const end = await vendor.closed;
    assert.equal(end.by, 'client', "the worker closed OpenAI's socket when the client left");
  });

  it('carries audio both ways: the frames reach OpenAI byte for byte, its pcm16 comes back with a transcript', async () => {
    const { key, account } = await paidAccountKey(redis, 50_000_000);
    const { client, vendor } = await start(key, 'gpt-realtime-mini');
    client.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: null } } } });
    await client.next('session.updated');
    // One second of a 300 Hz tone, in 20 ms frames of 960 bytes, as a microphone sends them.
    const second = Buffer.alloc(48_000);
    for (let i = 0; i < 24_000; i++)
      second.writeInt16LE(Math.round(4000 * Math.sin((2 * Math.PI * 300 * i) / 24_000)), i * 2);
    const frames: string[] = [];
    for (let at = 0; at < second.length; at += 960) frames.push(second.subarray(at, at + 960).toString('base64'));
    for (const audio of frames) client.send({ type: 'input_audio_buffer.append', audio });
    client.send({ type: 'input_audio_buffer.commit' });
    await client.next('input_audio_buffer.committed');
    client.send({ type: 'response.create' });
    const done = await client.next('response.done');
    const appended = vendor.received
      .filter((event: any) => event.type === 'input_audio_buffer.append')
      .map((event: any) => event.audio);
    assert.deepEqual(appended, frames, 'every frame, in order, unchanged');
    assert.equal(vendor.appendedBytes, 48_000);

    const audio = Buffer.concat(
      client.events
        .filter((event) => event.type === 'response.output_audio.delta')
        .map((event) => Buffer.from(event.delta, 'base64')),
    );
    const transcript = (await client.next('response.output_audio_transcript.done')).transcript;
    assert.equal(transcript, 'I heard you speak.');
    assert.equal(audio.length, transcript.length * 60 * 48, 'pcm16 at 24 kHz, as much as OpenAI sent');
    let peak = 0;
    for (let i = 0; i < audio.length; i += 2) peak = Math.max(peak, Math.abs(audio.readInt16LE(i)));
    assert.ok(peak > 5000, 'real samples');
    assert.equal(done.response.usage.input_token_details.audio_tokens, 10, 'a second of audio in');
    assert.ok(done.response.usage.output_token_details.audio_tokens > 0);

    const cost = expectedMicros('gpt-realtime-mini', done.response.usage);
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 50_000_000 - cost,
      10_000,
      'the response settled at gpt-realtime-mini prices',
    );
    client.rt.close();
    await client.closed;
  });

  it('runs a function call round trip', async () => {
    const { key } = await paidAccountKey(redis, 50_000_000);
    const { client, vendor } = await start(key);
    const tool = {
      type: 'function',
      name: 'lookup_train',
      description: 'Finds a train',
      parameters: { type: 'object', properties: { number: { type: 'string' } }, required: ['number'] },
    };
    client.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], tools: [tool] } });
    await client.next('session.updated');
    client.send(userText('When does lookup_train({"number": "IC 815"}) leave?'));
    client.send({ type: 'response.create' });
    const call = await client.next('response.function_call_arguments.done');
    assert.deepEqual([call.name, JSON.parse(call.arguments)], ['lookup_train', { number: 'IC 815' }]);
    const done = await client.next('response.done');
    assert.equal(done.response.output[0].type, 'function_call');
    client.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: call.call_id, output: '{"platform":4}' },
    });
    client.send({ type: 'response.create' });
    assert.equal((await client.next('response.output_text.done')).text, 'The tool answered {"platform":4}.');
    await client.next('response.done');
    const output = vendor.received.find(
      (event: any) => event.type === 'conversation.item.create' && event.item.type === 'function_call_output',
    ) as any;
    assert.equal(output.item.call_id, call.call_id, "OpenAI got the call's id back");
    client.rt.close();
    await client.closed;
  });

  it('cancels a response under way: response.done cancelled, what ran billed', async () => {
    const { key, account } = await paidAccountKey(redis, 50_000_000);
    const { client } = await start(key);
    client.send(userText('Tell me everything [hold]'));
    client.send({ type: 'response.create' });
    const created = await client.next('response.created');
    await client.next('response.output_audio.delta');
    client.send({ type: 'response.cancel', response_id: created.response.id });
    const done = await client.next('response.done');
    assert.deepEqual([done.response.status, done.response.status_details.reason], ['cancelled', 'client_cancelled']);
    assert.ok(done.response.usage.output_token_details.audio_tokens > 0);
    const cost = expectedMicros('gpt-realtime', done.response.usage);
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 50_000_000 - cost,
      10_000,
      'the cancelled response settled',
    );
    client.rt.close();
    await client.closed;
  });

  it(
    'runs one response at a time: an out-of-band response.create OpenAI would run beside one under way is refused, ' +
      'never run unreserved',
    async () => {
      const { key, account } = await paidAccountKey(redis, 50_000_000);
      const { client, vendor } = await start(key);
      client.send(userText('Keep talking [hold]'));
      client.send({ type: 'response.create' });
      const created = await client.next('response.created');
      // OpenAI runs an out-of-band response beside the conversation's; the session's reservation covers one response.
      client.send({
        type: 'response.create',
        event_id: 'evt_second',
        response: { conversation: 'none', output_modalities: ['text'] },
      });
      const refused = await client.next('error');
      assert.deepEqual(
        [refused.error.code, refused.error.event_id],
        ['conversation_already_has_active_response', 'evt_second'],
      );
      client.send({ type: 'response.cancel', response_id: created.response.id });
      const done = await client.next('response.done');
      await waitFor(
        async () =>
          (await readBill(redis, account))?.balanceMicros ===
          50_000_000 - expectedMicros('gpt-realtime', done.response.usage),
        10_000,
        'the one response settled',
      );
      assert.equal(
        vendor.received.filter((event: any) => event.type === 'response.create').length,
        1,
        'the second never reached OpenAI',
      );
      // The next response, once the first is done, runs.
      client.send({ type: 'response.create', response: { output_modalities: ['text'] } });
      assert.equal((await client.next('response.done')).response.status, 'completed');
      client.rt.close();
      await client.closed;
    },
  );

  it("relays OpenAI's error events and refusals of bad events without ending the session", async () => {
    const { key } = await paidAccountKey(redis, 50_000_000);
    const { client } = await start(key);
    client.send({ type: 'response.cancel', event_id: 'evt_nothing' });
    const error = await client.next('error');
    assert.deepEqual([error.error.code, error.error.event_id], ['response_cancel_not_active', 'evt_nothing']);
    client.send({ type: 'session.update', session: { type: 'realtime', temperature: 2 } });
    assert.equal((await client.next('error')).error.code, 'unknown_parameter');
    client.send(userText('still here?'));
    client.send({ type: 'response.create', response: { output_modalities: ['text'] } });
    await client.next('response.done');
    client.rt.close();
    await client.closed;
  });

  it("answers OpenAI's refusals at the upgrade as HTTP statuses", async () => {
    const { key } = await paidAccountKey(redis, 50_000_000);
    fake.refuseUpgrades({ status: 429, retryAfterSeconds: 9 });
    try {
      const refused = await openRealtime(gateway.url, key, 'gpt-realtime').opened.then(
        () => assert.fail('the upgrade was accepted'),
        (error: RealtimeRefusal) => error,
      );
      assert.equal(refused.status, 429);
      assert.ok(Number(refused.headers['retry-after']) >= 1, 'Retry-After');
      assert.match(refused.body, /"error"/);
      fake.refuseUpgrades({ status: 401 });
      const misconfigured = await openRealtime(gateway.url, key, 'gpt-realtime').opened.then(
        () => assert.fail('the upgrade was accepted'),
        (error: RealtimeRefusal) => error,
      );
      assert.equal(misconfigured.status, 502, "a key OpenAI refuses is the gateway's fault, not the client's");
      assert.match(misconfigured.body, /vendor_auth_failed/);
    } finally {
      fake.refuseUpgrades(undefined);
    }
  });

  it('ends the session when OpenAI drops it: an error event, then close 1011', async () => {
    const { key } = await paidAccountKey(redis, 50_000_000);
    const { client, vendor, sessionId } = await start(key);
    vendor.kill();
    const error = await client.next('error');
    assert.equal(error.error.type, 'server_error');
    assert.equal((await client.closed).code, 1011);
    const row = await requestRecord(gateway.url, key, sessionId, 'session');
    assert.equal(row.status, 'failed');
  });
});
