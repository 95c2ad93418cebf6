import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { loadCatalog } from '../../shared/catalog.js';
import { readBill } from '../../shared/money/billing.js';
import { PriceList } from '../../shared/money/pricing.js';
import { readRealtimeUsage, realtimeResponseCostMicros } from '../../shared/money/realtime.js';
import { freshRedis, paidAccountKey, startGateway, waitFor, type GatewayProcess } from '../support/gateway.js';
import { openRealtime, userText, type RealtimeTestClient, type ServerEvent } from '../support/realtime-client.js';
import {
  FAKE_LIVE_PROMPT_TEXT_TOKENS,
  FAKE_LIVE_TEXT,
  FAKE_LIVE_TOKENS_PER_CHUNK,
  startFakeGeminiLive,
  type FakeGeminiLive,
} from '../support/fake-gemini-live.js';

/**
 * Gemini Live behind OpenAI's Realtime API, end to end: the official SDK's `OpenAIRealtimeWS` talks to the gateway,
 * whose worker holds a Gemini Live session with the strict fake (the gateway's Gemini channel points at it). Text,
 * audio both ways (Gemini hears 16 kHz, the client gets 24 kHz), a function call round trip under Gemini's call id,
 * a cancel, and each response billed at the catalog's prices for the model, from the usage Gemini reported; a key
 * Gemini refuses is the client's HTTP answer at the upgrade.
 */

const NATIVE = 'gemini-2.5-flash-native-audio-preview-09-2025';
const HALF_CASCADE = 'gemini-live-2.5-flash-preview';
const catalog = loadCatalog(undefined);
const prices = new PriceList(catalog.all());
const costOf = (model: string, done: ServerEvent) =>
  realtimeResponseCostMicros(prices, model, readRealtimeUsage((done.response as { usage: unknown }).usage));

/** A tone of pcm16 at 24 kHz. */
function tone(samples: number, hz = 440): Buffer {
  const pcm = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++)
    pcm.writeInt16LE(Math.round(9000 * Math.sin((2 * Math.PI * hz * i) / 24_000)), i * 2);
  return pcm;
}

function frequencyOf(pcm: Buffer, rate: number): number {
  let crossings = 0;
  for (let i = 2; i + 1 < pcm.length; i += 2) if (pcm.readInt16LE(i - 2) < 0 !== pcm.readInt16LE(i) < 0) crossings++;
  return (crossings / 2) * (rate / (pcm.length / 2));
}

describe('Gemini Live through the gateway with the official OpenAI Realtime SDK', () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let fake: FakeGeminiLive;

  before(async () => {
    // The model takes its time to answer a function's response, as Gemini's does: the client's response.create, sent
    // right behind the output, reaches the translation before the answer begins (the round trip below).
    fake = await startFakeGeminiLive({ toolAnswerDelayMs: 300 });
    const fresh = await freshRedis(3);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        GEMINI_API_KEY: fake.apiKey,
        GEMINI_BASE_URL: fake.url,
        REALTIME_START_WAIT_MS: '20000',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
    await fake?.close();
  });

  async function started(key: string, model: string): Promise<RealtimeTestClient & { sessionId: string }> {
    const client = openRealtime(gateway.url, key, model);
    await client.opened;
    const created = await client.next('session.created');
    const session = created.session as { id: string; model: string };
    assert.equal(session.model, model);
    return { ...client, sessionId: session.id };
  }

  it("answers text at the catalog's prices: the balance moves by exactly what Gemini reported", async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = await started(key, HALF_CASCADE);
    client.rt.send({
      type: 'session.update',
      session: { type: 'realtime', output_modalities: ['text'], instructions: 'Answer briefly.' },
    });
    await client.next('session.updated');
    const gemini = fake.sessions.at(-1)!;
    assert.deepEqual(gemini.setup!.systemInstruction, { parts: [{ text: 'Answer briefly.' }] });
    client.rt.send(userText('Say hello.'));
    client.rt.send({ type: 'response.create' });
    const done = await client.next('response.done');
    assert.equal((await client.next('response.output_text.done')).text, FAKE_LIVE_TEXT);
    assert.equal((done.response as { status: string }).status, 'completed');
    // 120 text tokens in at $0.50/1M and 40 out at $2/1M: 60 + 80 micro-dollars.
    assert.equal(costOf(HALF_CASCADE, done), FAKE_LIVE_PROMPT_TEXT_TOKENS * 0.5 + 4 * FAKE_LIVE_TOKENS_PER_CHUNK * 2);
    client.rt.close();
    await client.closed;
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - costOf(HALF_CASCADE, done),
      10_000,
      'the response settled',
    );
    await waitFor(async () => gemini.closed !== undefined, 10_000, "the Gemini session closed with the client's");
  });

  it(
    'carries audio both ways: Gemini hears 16 kHz, the client gets 24 kHz and the transcript, audio billed at ' +
      'audio prices',
    async () => {
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      const client = await started(key, NATIVE);
      client.rt.send({
        type: 'session.update',
        session: { type: 'realtime', audio: { input: { turn_detection: null }, output: { voice: 'Aoede' } } },
      });
      await client.next('session.updated');
      const gemini = fake.sessions.at(-1)!;
      const second = tone(24_000);
      for (let at = 0; at < second.length; at += 4800)
        client.rt.send({ type: 'input_audio_buffer.append', audio: second.subarray(at, at + 4800).toString('base64') });
      client.rt.send({ type: 'input_audio_buffer.commit' });
      await client.next('input_audio_buffer.committed');
      client.rt.send({ type: 'response.create' });
      const done = await client.next('response.done');

      assert.ok(
        gemini.audioMimeTypes.length > 0 && gemini.audioMimeTypes.every((type) => type === 'audio/pcm;rate=16000'),
      );
      const heard = gemini.audio.length / 2;
      assert.ok(heard >= 16_000 && heard <= 16_040, `Gemini heard ${heard} samples of a second`);
      assert.ok(Math.abs(frequencyOf(gemini.audio, 16_000) - 440) < 5);
      const spoken = Buffer.concat(
        client.events
          .filter((e) => e.type === 'response.output_audio.delta')
          .map((e) => Buffer.from(String(e.delta), 'base64')),
      );
      assert.ok(spoken.length > 0);
      assert.ok(Math.abs(frequencyOf(spoken, 24_000) - 440) < 5, 'the 24 kHz tone arrives as it was spoken');
      assert.equal((await client.next('response.output_audio_transcript.done')).transcript, FAKE_LIVE_TEXT);
      const tokens = readRealtimeUsage((done.response as { usage: unknown }).usage);
      assert.equal(tokens.audioInput, Math.ceil((32 * heard) / 16_000));
      assert.equal(tokens.audioOutput, 4 * FAKE_LIVE_TOKENS_PER_CHUNK);
      // Audio at $3/1M in and $12/1M out, text at $0.50/1M: rounded up to whole micros once.
      assert.equal(
        costOf(NATIVE, done),
        Math.ceil(tokens.audioInput * 3 + FAKE_LIVE_PROMPT_TEXT_TOKENS * 0.5 + tokens.audioOutput * 12),
      );
      client.rt.close();
      await client.closed;
      await waitFor(
        async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - costOf(NATIVE, done),
        10_000,
        'the response settled',
      );
    },
  );

  it("runs a function call round trip under Gemini's call id", async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = await started(key, HALF_CASCADE);
    client.rt.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        tools: [
          {
            type: 'function',
            name: 'get_weather',
            description: 'The weather in a city.',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
          },
        ],
      },
    });
    await client.next('session.updated');
    const gemini = fake.sessions.at(-1)!;
    client.rt.send(userText('What is the weather in Paris?'));
    client.rt.send({ type: 'response.create' });
    const call = await client.next('response.function_call_arguments.done');
    assert.equal(call.call_id, 'fc-1');
    assert.deepEqual(JSON.parse(String(call.arguments)), { city: 'Paris' });
    const first = await client.next('response.done');
    client.rt.send({
      type: 'conversation.item.create',
      item: { type: 'function_call_output', call_id: 'fc-1', output: '{"temperature":21}' },
    });
    client.rt.send({ type: 'response.create' });
    assert.equal((await client.next('response.output_text.done')).text, 'Tool said: {"output":{"temperature":21}}');
    const second = await client.next('response.done');
    assert.deepEqual(
      gemini.messages.find((m) => 'toolResponse' in m),
      {
        toolResponse: {
          functionResponses: [{ id: 'fc-1', name: 'get_weather', response: { output: { temperature: 21 } } }],
        },
      },
    );
    client.rt.close();
    await client.closed;
    const sum = costOf(HALF_CASCADE, first) + costOf(HALF_CASCADE, second);
    assert.ok(costOf(HALF_CASCADE, first) > 0 && costOf(HALF_CASCADE, second) > 0);
    await waitFor(
      async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - sum,
      10_000,
      'both responses settled',
    );
  });

  it(
    "cancels a response: nothing more of it is relayed, response.done says cancelled, and Gemini's usage for it is " +
      'billed',
    async () => {
      const { key, account } = await paidAccountKey(redis, 10_000_000);
      const client = await started(key, NATIVE);
      const gemini = fake.sessions.at(-1)!;
      client.rt.send(userText('hold that thought'));
      client.rt.send({ type: 'response.create' });
      await client.next('response.output_audio.delta');
      client.rt.send({ type: 'response.cancel' });
      const itemDone = await client.next('response.output_item.done');
      assert.equal((itemDone.item as { status: string }).status, 'incomplete');
      gemini.release();
      const done = await client.next('response.done');
      assert.equal((done.response as { status: string }).status, 'cancelled');
      const afterCancel = client.events.slice(client.events.indexOf(itemDone) + 1).map((e) => e.type);
      assert.deepEqual(
        afterCancel,
        ['conversation.item.done', 'response.done'],
        'nothing of the turn after the cancel',
      );
      assert.equal(
        readRealtimeUsage((done.response as { usage: unknown }).usage).audioOutput,
        4 * FAKE_LIVE_TOKENS_PER_CHUNK,
      );
      client.rt.close();
      await client.closed;
      await waitFor(
        async () => (await readBill(redis, account))?.balanceMicros === 10_000_000 - costOf(NATIVE, done),
        10_000,
        'the cancelled response settled',
      );
    },
  );
});

describe("Gemini Live refusing the gateway's key", () => {
  let gateway: GatewayProcess;
  let redis: Redis;
  let fake: FakeGeminiLive;

  before(async () => {
    fake = await startFakeGeminiLive({ apiKey: 'the-real-key' });
    const fresh = await freshRedis(4);
    redis = fresh.redis;
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        GEMINI_API_KEY: 'a-revoked-key',
        GEMINI_BASE_URL: fake.url,
        REALTIME_START_WAIT_MS: '20000',
      },
    });
  });

  after(async () => {
    await gateway?.stop();
    redis?.disconnect();
    await fake?.close();
  });

  it("answers the upgrade with an HTTP error, never opening the client's socket, and bills nothing", async () => {
    const { key, account } = await paidAccountKey(redis, 10_000_000);
    const client = openRealtime(gateway.url, key, NATIVE);
    await assert.rejects(client.opened, /refused with 502/);
    await waitFor(
      async () => fake.sessions.length > 0 && fake.sessions.every((s) => s.closed?.code === 1007),
      10_000,
      'Gemini refused the key',
    );
    const bill = await readBill(redis, account);
    assert.equal(bill!.balanceMicros, 10_000_000);
  });
});
