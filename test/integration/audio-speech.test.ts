import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI from 'openai';
import { readBill } from '../../shared/money/billing.js';
import {
  freshRedis,
  paidAccountKey,
  requestRecord,
  startGateway,
  waitFor,
  type GatewayProcess,
} from '../support/gateway.js';
import { startFakeOpenAISpeech, type FakeOpenAISpeech } from '../support/fake-openai-speech.js';
import { startFakeGeminiSpeech, type FakeGeminiSpeech } from '../support/fake-gemini-speech.js';
import { assertMatchesSchema, sseEvents } from '../support/openapi-schemas.js';
import { decodeMp3, durationOf, pitchOf, readPcm, readWav, rmsOf } from '../support/speech-audio.js';

/*
 * `POST /v1/audio/speech` with the official `openai` SDK (`client.audio.speech.create`), through the audio queue:
 * the mock's offline speech in every format it claims, decoded by real decoders; OpenAI's tts-1 and gpt-4o-mini-tts
 * behind a strict fake that sends its audio in pieces (the first chunk reaches the client while the fake still holds
 * the rest), every format relayed byte for byte; `stream_format: "sse"` events against the spec's schemas; Gemini's
 * speech models through a strict fake of `streamGenerateContent`, their 24 kHz PCM written as wav, mp3 and pcm; the
 * refusals; a vendor cut mid-stream; the bill to the micro (balance delta = price); the response cache; async jobs.
 */

const sampleRate = 24_000;
/** The mock's prices: $0.50 per 1M text tokens, $10 per 1M audio tokens. */
const mockMicros = (usage: { input_tokens: number; output_tokens: number }) =>
  Math.ceil(usage.input_tokens * 0.5) + usage.output_tokens * 10;
const cached = { headers: { 'cache-control': 'max-age=60' } };

describe('audio speech', () => {
  let openai: FakeOpenAISpeech;
  let gemini: FakeGeminiSpeech;
  let redis: Redis;
  let gateway: GatewayProcess;
  let key: string;
  let client: OpenAI;

  before(async () => {
    [openai, gemini] = await Promise.all([
      startFakeOpenAISpeech({ pieces: 4, pauseMs: 5 }),
      startFakeGeminiSpeech({ pieces: 3 }),
    ]);
    const fresh = await freshRedis(8);
    redis = fresh.redis;
    ({ key } = await paidAccountKey(redis, 50_000_000));
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        GEMINI_API_KEY: 'gemini-test-key',
        GEMINI_BASE_URL: gemini.url,
        MOCK_VENDOR: 'on',
        STREAM_RESUME_GRACE_MS: '0',
      },
    });
    client = gateway.client(key, { timeout: 30_000 });
  });
  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), gemini?.close()]);
    redis?.disconnect();
  });

  /** The speech as the SDK hands it over: the response, and every byte of its body. */
  const speak = async (params: OpenAI.Audio.SpeechCreateParams, options?: OpenAI.RequestOptions, as = client) => {
    const { data, response } = await as.audio.speech.create(params, options).withResponse();
    return { response, bytes: Buffer.from(await data.arrayBuffer()) };
  };
  /** The error a request is answered with. */
  const refused = async (params: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const res = await fetch(`${gateway.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(params),
    });
    const body = (await res.json()) as {
      error: { message: string; type: string; param: string | null; code: string | null };
    };
    return { status: res.status, error: body.error };
  };
  const text = 'Switchyard speaks: every voice menu and every read-aloud page.';

  it('speaks on the mock, offline, in mp3, wav and pcm, each decoded by a real decoder and as long as its text', async () => {
    const seconds = text.length * 0.06;
    const mp3 = await speak({ model: 'mock-speech', input: text, voice: 'alloy' });
    assert.equal(mp3.response.headers.get('content-type'), 'audio/mpeg');
    assert.equal(mp3.response.headers.get('transfer-encoding'), 'chunked');
    const decoded = await decodeMp3(mp3.bytes);
    assert.equal(decoded.sampleRate, sampleRate);
    assert.ok(Math.abs(durationOf(decoded) - seconds) < 0.15, `mp3 plays ${durationOf(decoded)} s`);
    assert.ok(rmsOf(decoded.samples) > 0.05, 'audible');

    const wav = await speak({ model: 'mock-speech', input: text, voice: 'alloy', response_format: 'wav' });
    assert.equal(wav.response.headers.get('content-type'), 'audio/wav');
    const read = readWav(wav.bytes);
    assert.deepEqual([read.sampleRate, read.channels, read.streamed], [sampleRate, 1, false]);
    assert.equal(read.samples.length, Math.round(seconds * sampleRate));

    const pcm = await speak({ model: 'mock-speech', input: text, voice: 'alloy', response_format: 'pcm' });
    assert.equal(pcm.response.headers.get('content-type'), 'audio/pcm');
    assert.deepEqual(readPcm(pcm.bytes).samples, read.samples, "pcm is the wav's samples");

    // Twice as fast is half as long; another voice is another sound.
    const fast = readWav(
      (await speak({ model: 'mock-speech', input: text, voice: 'alloy', response_format: 'wav', speed: 2 })).bytes,
    );
    assert.equal(fast.samples.length, Math.round((seconds / 2) * sampleRate));
    const other = await speak({ model: 'mock-speech', input: text, voice: 'nova', response_format: 'wav' });
    assert.notDeepEqual(other.bytes, wav.bytes);
  });

  it(
    "relays OpenAI's audio as it arrives: the first chunk reaches the client while the vendor still holds the rest",
    { timeout: 30_000 },
    async () => {
      openai.reset();
      const held = openai.hold();
      const response = await client.audio.speech.create({
        model: 'tts-1',
        input: text,
        voice: 'alloy',
        response_format: 'wav',
      });
      assert.equal(response.headers.get('content-type'), 'audio/wav');
      const reader = response.body!.getReader();
      const first = await reader.read();
      // Only the release lets the fake send more: a gateway that waited for the vendor's end would never get here.
      await held.reached;
      assert.ok(!first.done && first.value.length > 0, 'a first chunk');
      const pieces = [Buffer.from(first.value)];
      held.release();
      for (let read = await reader.read(); !read.done; read = await reader.read()) pieces.push(Buffer.from(read.value));
      const bytes = Buffer.concat(pieces);
      assert.ok(pieces[0]!.length < bytes.length, 'the first chunk is only part of the audio');
      assert.deepEqual(bytes, openai.audios[0], "the vendor's bytes, unchanged");
      const wav = readWav(bytes);
      assert.ok(wav.streamed, "OpenAI's streamed wav header is passed on");
      assert.ok(Math.abs(pitchOf(wav.samples, sampleRate) - 440) < 5);
    },
  );

  it(
    "speaks on OpenAI's tts-1 in every format, the vendor's bytes and content type passed on, only the spec's " +
      'fields sent',
    async () => {
      openai.reset();
      const types = {
        mp3: 'audio/mpeg',
        opus: 'audio/opus',
        aac: 'audio/aac',
        flac: 'audio/flac',
        wav: 'audio/wav',
        pcm: 'audio/pcm',
      } as const;
      for (const [format, type] of Object.entries(types) as Array<[keyof typeof types, string]>) {
        const { response, bytes } = await speak({
          model: 'tts-1',
          input: text,
          voice: 'coral',
          response_format: format,
          speed: 1.25,
        });
        assert.equal(response.headers.get('content-type'), type, format);
        assert.deepEqual(bytes, openai.audios.at(-1), `${format}: the vendor's bytes`);
      }
      assert.deepEqual(openai.requests[0]!.body, {
        model: 'tts-1',
        input: text,
        voice: 'coral',
        response_format: 'mp3',
        speed: 1.25,
      });
      assert.equal(openai.requests[0]!.headers.authorization, 'Bearer sk-openai-test');
      const mp3 = await decodeMp3(openai.audios[0]!);
      assert.ok(Math.abs(pitchOf(mp3.samples.subarray(2400, 12_000), sampleRate) - 440) < 10);
      assert.equal(readPcm(openai.audios[5]!).samples.length, Math.round((text.length * 0.05 * sampleRate) / 1.25));
      // A custom voice by its id, and a field the spec does not name left here (the strict fake refuses unknown ones).
      const custom = await fetch(`${gateway.url}/v1/audio/speech`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'tts-1-hd',
          input: 'Hi.',
          voice: { id: 'voice_1234' },
          response_format: 'pcm',
          language: 'en',
        }),
      });
      assert.equal(custom.status, 200);
      assert.deepEqual(Buffer.from(await custom.arrayBuffer()), openai.audios.at(-1));
      assert.deepEqual(openai.requests.at(-1)!.body, {
        model: 'tts-1-hd',
        input: 'Hi.',
        voice: { id: 'voice_1234' },
        response_format: 'pcm',
      });
    },
  );

  it(
    "streams gpt-4o-mini-tts as the spec's speech.audio events, and bills its audio form by the usage OpenAI's " +
      'events report',
    async () => {
      openai.reset();
      const res = await fetch(`${gateway.url}/v1/audio/speech`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'gpt-4o-mini-tts',
          input: text,
          voice: 'ash',
          instructions: 'Calm and slow.',
          response_format: 'pcm',
          stream_format: 'sse',
        }),
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
      const events = sseEvents(await res.text());
      const deltas = events.slice(0, -1);
      assert.ok(deltas.length >= 2, `${deltas.length} deltas`);
      for (const event of deltas) assertMatchesSchema('SpeechAudioDeltaEvent', event.data, 'delta');
      assertMatchesSchema('SpeechAudioDoneEvent', events.at(-1)!.data, 'done');
      const audio = Buffer.concat(
        deltas.map((event) => Buffer.from((event.data as { audio: string }).audio, 'base64')),
      );
      assert.deepEqual(audio, openai.audios[0]);
      assert.deepEqual((events.at(-1)!.data as { usage: unknown }).usage, openai.usages[0]);
      assert.deepEqual(openai.requests[0]!.body, {
        model: 'gpt-4o-mini-tts',
        input: text,
        voice: 'ash',
        instructions: 'Calm and slow.',
        response_format: 'pcm',
        stream_format: 'sse',
      });

      // The audio form: OpenAI is asked for its events all the same (they carry the usage), the client gets the bytes.
      const billed = await paidAccountKey(redis, 1_000_000);
      const own = gateway.client(billed.key, { timeout: 30_000 });
      const { response, bytes } = await speak(
        { model: 'gpt-4o-mini-tts', input: text, voice: 'ash', response_format: 'mp3' },
        undefined,
        own,
      );
      assert.equal(response.headers.get('content-type'), 'audio/mpeg');
      assert.equal(openai.requests[1]!.body.stream_format, 'sse');
      assert.deepEqual(bytes, openai.audios[1]);
      const usage = openai.usages[1]!;
      // $0.60 per 1M text tokens, $12 per 1M audio tokens.
      const price = Math.ceil(usage.input_tokens * 0.6) + usage.output_tokens * 12;
      const record = await requestRecord(gateway.url, billed.key, response.headers.get('x-request-id')!);
      assert.deepEqual(
        [record.endpoint, record.model, record.vendor, record.status],
        ['audio.speech', 'gpt-4o-mini-tts', 'openai', 'completed'],
      );
      assert.deepEqual(
        [record.input_tokens, record.output_tokens, record.cost_micros],
        [usage.input_tokens, usage.output_tokens, price],
      );
      const bill = await readBill(redis, billed.account);
      assert.deepEqual([bill?.balanceMicros, bill?.reservedMicros], [1_000_000 - price, 0]);
    },
  );

  it("streams the mock's speech as events, the done event's usage what is billed", async () => {
    const billed = await paidAccountKey(redis, 1_000_000);
    const res = await fetch(`${gateway.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${billed.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-speech',
        input: text,
        voice: 'sage',
        response_format: 'wav',
        stream_format: 'sse',
      }),
    });
    const events = sseEvents(await res.text());
    for (const event of events.slice(0, -1)) assertMatchesSchema('SpeechAudioDeltaEvent', event.data, 'delta');
    const done = events.at(-1)!.data as {
      type: string;
      usage: { input_tokens: number; output_tokens: number; total_tokens: number };
    };
    assertMatchesSchema('SpeechAudioDoneEvent', done, 'done');
    const wav = readWav(
      Buffer.concat(events.slice(0, -1).map((event) => Buffer.from((event.data as { audio: string }).audio, 'base64'))),
    );
    assert.equal(done.usage.output_tokens, Math.ceil((wav.samples.length / sampleRate) * 20));
    assert.equal(done.usage.total_tokens, done.usage.input_tokens + done.usage.output_tokens);
    const record = await requestRecord(gateway.url, billed.key, res.headers.get('x-request-id')!);
    assert.equal(record.cost_micros, mockMicros(done.usage));
    assert.equal(record.audio_seconds, Math.ceil(wav.samples.length / sampleRate));
    assert.equal((await readBill(redis, billed.account))?.balanceMicros, 1_000_000 - mockMicros(done.usage));
  });

  it("bills tts-1 by its input's characters, exactly: $15 per million", async () => {
    const billed = await paidAccountKey(redis, 1_000_000);
    const own = gateway.client(billed.key, { timeout: 30_000 });
    const input = 'Ünïcode counts as characters: 🎙️ once each.';
    const { response } = await speak({ model: 'tts-1', input, voice: 'echo' }, undefined, own);
    const characters = Array.from(input).length;
    const record = await requestRecord(gateway.url, billed.key, response.headers.get('x-request-id')!);
    assert.equal(record.cost_micros, characters * 15);
    assert.equal((await readBill(redis, billed.account))?.balanceMicros, 1_000_000 - characters * 15);
    const hd = await speak({ model: 'tts-1-hd', input, voice: 'echo' }, undefined, own);
    assert.equal(
      (await requestRecord(gateway.url, billed.key, hd.response.headers.get('x-request-id')!)).cost_micros,
      characters * 30,
    );
  });

  it("speaks on Gemini's speech models through generateContent's stream, their PCM written as wav, mp3 and pcm", async () => {
    gemini.reset();
    const billed = await paidAccountKey(redis, 1_000_000);
    const own = gateway.client(billed.key, { timeout: 30_000 });
    const wav = await speak(
      {
        model: 'gemini-2.5-flash-preview-tts',
        input: text,
        voice: 'alloy',
        instructions: 'Say cheerfully',
        response_format: 'wav',
      },
      undefined,
      own,
    );
    assert.equal(wav.response.headers.get('content-type'), 'audio/wav');
    const request = gemini.requests[0]!;
    assert.equal(request.path, '/v1beta/models/gemini-2.5-flash-preview-tts:streamGenerateContent?alt=sse');
    assert.equal(request.headers['x-goog-api-key'], 'gemini-test-key');
    assert.deepEqual(request.body, {
      contents: [{ role: 'user', parts: [{ text: `Say cheerfully: ${text}` }] }],
      generationConfig: {
        responseModalities: ['AUDIO'],
        speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: 'Kore' } } },
      },
    });
    const read = readWav(wav.bytes);
    assert.ok(read.streamed, 'the length was not known when the header went out');
    assert.deepEqual(read.samples, readPcm(gemini.pcms[0]!).samples, "Gemini's samples, unchanged");
    const usage = gemini.usages[0]!;
    // $0.50 per 1M text tokens, $10 per 1M audio tokens.
    const price = Math.ceil(usage.promptTokenCount * 0.5) + usage.candidatesTokenCount * 10;
    const record = await requestRecord(gateway.url, billed.key, wav.response.headers.get('x-request-id')!);
    assert.deepEqual(
      [record.vendor, record.input_tokens, record.output_tokens, record.cost_micros],
      ['google', usage.promptTokenCount, usage.candidatesTokenCount, price],
    );
    assert.equal((await readBill(redis, billed.account))?.balanceMicros, 1_000_000 - price);

    const mp3 = await decodeMp3(
      (await speak({ model: 'gemini-2.5-pro-preview-tts', input: text, voice: 'Puck' })).bytes,
    );
    assert.ok(Math.abs(durationOf(mp3) - gemini.pcms[1]!.length / 2 / sampleRate) < 0.15);
    assert.ok(Math.abs(pitchOf(mp3.samples.subarray(2400, 24_000), sampleRate) - 330) < 10);
    assert.equal(
      (
        gemini.requests[1]!.body.generationConfig as {
          speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: string } } };
        }
      ).speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName,
      'Puck',
    );
    const pcm = await speak({
      model: 'gemini-2.5-flash-preview-tts',
      input: text,
      voice: 'kore',
      response_format: 'pcm',
    });
    assert.deepEqual(pcm.bytes, gemini.pcms[2]);
  });

  it("refuses what a model cannot be given with a 400 in OpenAI's shape naming the field, before any vendor call", async () => {
    openai.reset();
    gemini.reset();
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ model: 'tts-1', input: 'x'.repeat(4097), voice: 'alloy' }, 'input', /4096/],
      [{ model: 'tts-1', input: '', voice: 'alloy' }, 'input', /./],
      [{ model: 'tts-1', input: 'Hi.', voice: 'alloy', stream_format: 'sse' }, 'stream_format', /sse/],
      [{ model: 'tts-1-hd', input: 'Hi.', voice: 'alloy', instructions: 'Whisper.' }, 'instructions', /instructions/],
      [{ model: 'tts-1', input: 'Hi.', voice: 'alloy', speed: 4.5 }, 'speed', /./],
      [{ model: 'tts-1', input: 'Hi.', voice: 'alloy', response_format: 'ogg' }, 'response_format', /./],
      [
        { model: 'mock-speech', input: 'Hi.', voice: 'alloy', response_format: 'opus' },
        'response_format',
        /Supported formats: mp3, wav, pcm\./,
      ],
      [
        { model: 'gemini-2.5-flash-preview-tts', input: 'Hi.', voice: 'alloy', response_format: 'flac' },
        'response_format',
        /Supported formats: mp3, wav, pcm\./,
      ],
      [
        { model: 'gemini-2.5-flash-preview-tts', input: 'Hi.', voice: 'Nobody' },
        'voice',
        /Unknown voice 'Nobody'.*Kore/,
      ],
      [{ model: 'gemini-2.5-flash-preview-tts', input: 'Hi.', voice: { id: 'voice_1234' } }, 'voice', /custom voices/],
      [{ model: 'gemini-2.5-flash-preview-tts', input: 'Hi.', voice: 'Kore', speed: 1.5 }, 'speed', /one speed/],
      [{ model: 'mock-speech', input: 'Hi.', voice: 'robot' }, 'voice', /Unknown voice/],
      // Within 4,096 characters, past gpt-4o-mini-tts's 2,000 tokens (a rare character is a token or more).
      [{ model: 'gpt-4o-mini-tts', input: '龘'.repeat(3000), voice: 'alloy' }, 'input', /at most 2000 tokens/],
      [{ model: 'gpt-4o-mini', input: 'Hi.', voice: 'alloy' }, 'model', /chat model/],
    ];
    for (const [params, param, message] of cases) {
      const { status, error } = await refused(params);
      assert.equal(status, 400, `${JSON.stringify(params).slice(0, 80)}: ${error.message}`);
      assert.equal(error.type, 'invalid_request_error');
      assert.equal(error.param, param, error.message);
      assert.match(error.message, message);
    }
    const async = await refused(
      { model: 'mock-speech', input: 'Hi.', voice: 'alloy', stream_format: 'sse' },
      { prefer: 'respond-async' },
    );
    assert.deepEqual([async.status, async.error.param], [400, 'stream_format']);
    // The SDK sees the same 400.
    const sdk = await client.audio.speech
      .create({ model: 'tts-1', input: 'Hi.', voice: 'alloy', stream_format: 'sse' })
      .catch((error: unknown) => error);
    assert.ok(sdk instanceof OpenAI.BadRequestError && sdk.param === 'stream_format', String(sdk));
    assert.equal(openai.requests.length, 0, 'OpenAI was never called');
    assert.equal(gemini.requests.length, 0, 'Gemini was never called');
  });

  it(
    'cuts the response short when the vendor fails mid-stream, records the failure, and bills the characters begun',
    { timeout: 30_000 },
    async () => {
      const billed = await paidAccountKey(redis, 1_000_000);
      openai.failNext();
      const res = await fetch(`${gateway.url}/v1/audio/speech`, {
        method: 'POST',
        headers: { authorization: `Bearer ${billed.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tts-1', input: text, voice: 'alloy', response_format: 'pcm' }),
      });
      assert.equal(res.status, 200);
      await assert.rejects(res.arrayBuffer(), 'the body ends in an error, never as whole audio');
      const record = await requestRecord(gateway.url, billed.key, res.headers.get('x-request-id')!);
      assert.equal(record.status, 'failed');
      assert.equal(record.cost_micros, text.length * 15);
      assert.equal((await readBill(redis, billed.account))?.balanceMicros, 1_000_000 - text.length * 15);
      // Nothing sent before the failure would be a plain error; and the gateway goes on serving.
      const after = await speak({ model: 'tts-1', input: 'Still here.', voice: 'alloy', response_format: 'pcm' });
      assert.deepEqual(after.bytes, openai.audios.at(-1));
    },
  );

  it(
    'answers an identical request from the cache under Cache-Control: the same bytes, the same headers, no vendor ' +
      'call',
    async () => {
      openai.reset();
      const first = await speak(
        { model: 'tts-1', input: 'Press one for sales.', voice: 'nova', response_format: 'mp3' },
        cached,
      );
      assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      const again = await speak(
        { model: 'tts-1', input: 'Press one for sales.', voice: 'nova', response_format: 'mp3' },
        cached,
      );
      assert.match(again.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      assert.equal(again.response.headers.get('content-type'), 'audio/mpeg');
      assert.deepEqual(again.bytes, first.bytes);
      assert.equal(openai.requests.length, 1, 'one vendor call');
      const hit = await requestRecord(gateway.url, key, again.response.headers.get('x-request-id')!);
      assert.deepEqual([hit.endpoint, hit.cache], ['audio.speech', 'hit']);
      // Another voice, format or speed is another request.
      const other = await speak(
        { model: 'tts-1', input: 'Press one for sales.', voice: 'nova', response_format: 'wav' },
        cached,
      );
      assert.equal(other.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
      // The events form is kept as its events, replayed to the next such request.
      const sse = (params: Record<string, unknown>) =>
        fetch(`${gateway.url}/v1/audio/speech`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${key}`,
            'content-type': 'application/json',
            'cache-control': 'max-age=60',
          },
          body: JSON.stringify(params),
        });
      const params = {
        model: 'mock-speech',
        input: 'Press two.',
        voice: 'alloy',
        response_format: 'pcm',
        stream_format: 'sse',
      };
      const missed = await sse(params);
      const missedEvents = sseEvents(await missed.text());
      const replayed = await sse(params);
      assert.match(replayed.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
      assert.deepEqual(
        sseEvents(await replayed.text()).map((event) => event.data),
        missedEvents.map((event) => event.data),
      );
    },
  );

  it("keeps an async job's audio in the blob store, fetched by the signed link its result names", async () => {
    const res = await fetch(`${gateway.url}/v1/audio/speech`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', prefer: 'respond-async' },
      body: JSON.stringify({ model: 'mock-speech', input: text, voice: 'alloy', response_format: 'wav' }),
    });
    assert.equal(res.status, 202);
    const { id } = (await res.json()) as { id: string };
    let job:
      | {
          status: string;
          endpoint: string;
          result: { url: string; content_type: string; bytes: number; seconds: number } | null;
        }
      | undefined;
    await waitFor(
      async () => {
        job = (await (
          await fetch(`${gateway.url}/v1/jobs/${id}`, { headers: { authorization: `Bearer ${key}` } })
        ).json()) as typeof job;
        return job!.status === 'completed' || job!.status === 'failed';
      },
      15_000,
      'the speech job',
    );
    assert.equal(job!.status, 'completed', JSON.stringify(job));
    assert.equal(job!.endpoint, 'audio.speech');
    const result = job!.result!;
    assert.equal(result.content_type, 'audio/wav');
    const file = await fetch(result.url);
    assert.equal(file.status, 200);
    assert.equal(file.headers.get('content-type'), 'audio/wav');
    const bytes = Buffer.from(await file.arrayBuffer());
    assert.equal(bytes.length, result.bytes);
    const wav = readWav(bytes);
    assert.equal(wav.samples.length, Math.round(text.length * 0.06 * sampleRate));
    assert.equal(result.seconds, wav.samples.length / sampleRate);
    // Without its signature the link is refused.
    assert.equal((await fetch(result.url.replace(/signature=[^&]+/, 'signature=forged'))).status, 403);
  });
});
