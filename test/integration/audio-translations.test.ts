import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { freshRedis, paidAccountKey, requestRecord, startGateway, type GatewayProcess } from '../support/gateway.js';
import { startFakeOpenAI, type FakeOpenAI } from '../support/fake-openai.js';
import {
  createFakeOpenAIMedia,
  FAKE_TRANSLATION_SRT,
  FAKE_TRANSLATION_TEXT,
  FAKE_TRANSLATION_VTT,
  type FakeFormPart,
  type FakeOpenAIMedia,
} from '../support/fake-openai-media.js';
import { assertMatchesSchema } from '../support/openapi-schemas.js';

/*
 * `POST /v1/audio/translations` (speech in any language, written in English) with the official `openai` SDK: every
 * response format on the mock and on OpenAI's whisper-1 behind a fake that serves the route strictly as the spec
 * writes it (the request's five fields and no other, whisper-1 alone), the bodies against the spec's schemas; the
 * refusals (a model that does not translate, no file, an upload past the audio limit); the bill by the audio's
 * length, the request log's endpoint, and the response cache.
 */

/** OpenAI's whisper-1 price, $0.006 a minute: 100 micros a second. */
const whisperMicrosPerSecond = 100;
const cached = { headers: { 'cache-control': 'max-age=60' } };
/** The SDK types every JSON translation as the plain one; verbose_json's is the verbose one. */
const asVerbose = (translation: unknown) => translation as OpenAI.Audio.TranslationVerbose;

describe('audio translations, to English', () => {
  let openai: FakeOpenAI;
  let media: FakeOpenAIMedia;
  let redis: Redis;
  let gateway: GatewayProcess;
  let key: string;
  let client: OpenAI;

  before(async () => {
    openai = await startFakeOpenAI();
    media = createFakeOpenAIMedia();
    openai.setDefault(media.handler);
    const fresh = await freshRedis(7);
    redis = fresh.redis;
    ({ key } = await paidAccountKey(redis, 50_000_000));
    gateway = await startGateway({
      env: {
        REDIS_URL: fresh.url,
        OPENAI_API_KEY: 'sk-openai-test',
        OPENAI_BASE_URL: openai.url,
        // The mock serves its own models beside OpenAI's.
        MOCK_VENDOR: 'on',
        // Small, so the refusal of a larger upload costs little to send.
        MAX_AUDIO_BYTES: String(1024 * 1024),
      },
    });
    client = gateway.client(key, { timeout: 30_000 });
  });
  after(async () => {
    await gateway?.stop();
    await Promise.all([openai?.close(), media?.close()]);
    redis?.disconnect();
  });

  const speech = (bytes = 48_000, name = 'rede.wav', fill = 1) =>
    toFile(Buffer.alloc(bytes, fill), name, { type: 'audio/wav' });
  const post = (form: FormData) =>
    fetch(`${gateway.url}/v1/audio/translations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
    });
  const fieldsOf = (parts: FakeFormPart[]) =>
    parts.map((part) =>
      'value' in part
        ? [part.name, part.value]
        : [part.name, `${part.filename} (${part.type}, ${part.bytes.length} bytes)`],
    );

  it('translates on the mock in every response format, offline', async () => {
    const file = await speech();
    const { data: json, response } = await client.audio.translations
      .create({ model: 'mock-transcribe', file, response_format: 'json' })
      .withResponse();
    assertMatchesSchema('CreateTranslationResponseJson', json, 'mock json');
    assert.equal(json.text, 'Mock translation into English of rede.wav (48000 bytes).');
    assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
    // OpenAI's translation is its text alone: no usage.
    assert.deepEqual(Object.keys(json), ['text']);

    const verbose = asVerbose(
      await client.audio.translations.create({
        model: 'mock-transcribe',
        file,
        response_format: 'verbose_json',
        prompt: 'A talk.',
        temperature: 0.2,
      }),
    );
    assertMatchesSchema('CreateTranslationResponseVerboseJson', verbose, 'mock verbose_json');
    assert.equal(verbose.language, 'english');
    assert.equal(verbose.duration, 3);
    assert.equal(verbose.text, json.text);
    assert.ok(verbose.segments && verbose.segments.length > 0, 'segments');
    assert.equal(verbose.segments.at(-1)!.end, 3, 'the segments span the audio');
    assert.equal(verbose.segments[0]!.temperature, 0.2);
    assert.equal((verbose as unknown as { task: string }).task, 'translate');
    assert.equal((verbose as unknown as { words?: unknown }).words, undefined, 'no word timings in a translation');

    const text = await client.audio.translations
      .create({ model: 'mock-transcribe', file, response_format: 'text' })
      .withResponse();
    assert.equal(text.data, `${json.text}\n`);
    assert.match(text.response.headers.get('content-type') ?? '', /^text\/plain/);
    const srt = await client.audio.translations.create({ model: 'mock-transcribe', file, response_format: 'srt' });
    assert.match(String(srt), /^1\n00:00:00,000 --> 00:00:\d\d,\d{3}\nMock translation into English\n\n2\n/);
    const vtt = await client.audio.translations.create({ model: 'mock-transcribe', file, response_format: 'vtt' });
    assert.match(String(vtt), /^WEBVTT\n\n00:00:00\.000 --> 00:00:\d\d\.\d{3}\nMock translation into English\n\n/);
  });

  it(
    "translates on OpenAI's whisper-1 in every response format, the vendor's bytes passed on, only the spec's " +
      'fields sent',
    async () => {
      media.reset();
      const file = await speech(48_000, 'rede.wav');
      const json = await client.audio.translations.create({
        model: 'whisper-1',
        file,
        response_format: 'json',
        prompt: 'A talk.',
        temperature: 0.3,
      });
      assertMatchesSchema('CreateTranslationResponseJson', json, 'openai json');
      assert.deepEqual(json, { text: FAKE_TRANSLATION_TEXT });
      assert.deepEqual(fieldsOf(media.translations[0]!), [
        ['file', 'rede.wav (audio/wav, 48000 bytes)'],
        ['model', 'whisper-1'],
        ['prompt', 'A talk.'],
        ['response_format', 'json'],
        ['temperature', '0.3'],
      ]);

      const verbose = asVerbose(
        await client.audio.translations.create({ model: 'whisper-1', file, response_format: 'verbose_json' }),
      );
      assertMatchesSchema('CreateTranslationResponseVerboseJson', verbose, 'openai verbose_json');
      assert.deepEqual(
        [verbose.language, verbose.duration, verbose.text, verbose.segments?.length],
        ['english', 4, FAKE_TRANSLATION_TEXT, 1],
      );
      assert.equal(
        await client.audio.translations.create({ model: 'whisper-1', file, response_format: 'text' }),
        `${FAKE_TRANSLATION_TEXT}\n`,
      );
      assert.equal(
        await client.audio.translations.create({ model: 'whisper-1', file, response_format: 'srt' }),
        FAKE_TRANSLATION_SRT,
      );
      assert.equal(
        await client.audio.translations.create({ model: 'whisper-1', file, response_format: 'vtt' }),
        FAKE_TRANSLATION_VTT,
      );

      // A raw client's transcription-only fields are not the translation's: they stay here (the strict fake refuses
      // them).
      const form = new FormData();
      form.set('model', 'whisper-1');
      form.set('language', 'de');
      form.set('timestamp_granularities[]', 'word');
      form.set('file', new Blob([Buffer.alloc(16_000, 3)], { type: 'audio/wav' }), 'rede.wav');
      const raw = await post(form);
      assert.equal(raw.status, 200, await raw.clone().text());
      assert.deepEqual(await raw.json(), { text: FAKE_TRANSLATION_TEXT });
      assert.deepEqual(
        fieldsOf(media.translations.at(-1)!).map(([name]) => name),
        ['file', 'model', 'response_format'],
      );
    },
  );

  it('refuses a model that does not translate, naming those that do, before any vendor call', async () => {
    media.reset();
    for (const model of ['gpt-4o-transcribe', 'gpt-4o-mini-transcribe']) {
      const refused = await client.audio.translations.create({ model, file: await speech() }).then(
        () => assert.fail(`${model} translated`),
        (error: unknown) => error,
      );
      assert.ok(refused instanceof OpenAI.BadRequestError, String(refused));
      assert.equal(refused.status, 400);
      assert.equal(refused.param, 'model');
      assert.equal(refused.code, 'model_not_supported');
      assert.match(
        refused.message,
        new RegExp(
          `\`${model}\` does not translate audio; use (whisper-1 or mock-transcribe|mock-transcribe or whisper-1)\\.`,
        ),
      );
    }
    // A model of another capability is the model resolver's refusal, as on every endpoint.
    const chat = await client.audio.translations
      .create({ model: 'gpt-4o-mini', file: await speech() })
      .catch((error: unknown) => error);
    assert.ok(chat instanceof OpenAI.BadRequestError && chat.param === 'model', String(chat));
    assert.equal(media.translations.length, 0, 'OpenAI was never called');
  });

  it('refuses a request without its file, and an upload past the audio limit with 413, and keeps serving', async () => {
    const form = new FormData();
    form.set('model', 'whisper-1');
    form.set('response_format', 'json');
    const missing = await post(form);
    assert.equal(missing.status, 400);
    const error = ((await missing.json()) as { error: { param: string; type: string; message: string } }).error;
    assert.deepEqual([error.type, error.param], ['invalid_request_error', 'file']);
    assert.match(error.message, /'file'/);

    const big = new FormData();
    big.set('model', 'whisper-1');
    big.set('file', new Blob([Buffer.alloc(1024 * 1024 + 1, 2)], { type: 'audio/wav' }), 'big.wav');
    const tooLarge = await post(big);
    assert.equal(tooLarge.status, 413);
    assert.equal(((await tooLarge.json()) as { error: { code: string } }).error.code, 'file_too_large');

    const after = await client.audio.translations.create({
      model: 'mock-transcribe',
      file: await speech(100, 'a.wav'),
    });
    assert.ok(after.text);
  });

  it("is billed by the audio's length as a transcription is, and logged as audio.translations", async () => {
    const billed = await paidAccountKey(redis, 5_000_000);
    const own = gateway.client(billed.key, { timeout: 30_000 });
    // verbose_json says how long the audio was: 4 seconds at whisper-1's price.
    const verbose = await own.audio.translations
      .create({ model: 'whisper-1', file: await speech(), response_format: 'verbose_json' })
      .withResponse();
    const timed = await requestRecord(gateway.url, billed.key, verbose.response.headers.get('x-request-id')!);
    assert.deepEqual(
      [timed.endpoint, timed.model, timed.vendor, timed.status],
      ['audio.translations', 'whisper-1', 'openai', 'completed'],
    );
    assert.equal(timed.audio_seconds, 4);
    assert.equal(timed.cost_micros, 4 * whisperMicrosPerSecond);
    // Plain text says nothing of it: the length is judged from the upload's size (48,000 bytes at 128 kbit/s, 3 s).
    const text = await own.audio.translations
      .create({ model: 'whisper-1', file: await speech(), response_format: 'text' })
      .withResponse();
    const judged = await requestRecord(gateway.url, billed.key, text.response.headers.get('x-request-id')!);
    assert.equal(judged.endpoint, 'audio.translations');
    assert.equal(judged.audio_seconds, 3);
    assert.equal(judged.cost_micros, 3 * whisperMicrosPerSecond);
  });

  it("is cached under Cache-Control as a transcription is: by the file's bytes, in the form asked", async () => {
    media.reset();
    const first = await client.audio.translations
      .create({ model: 'whisper-1', file: await speech(32_000, 'one.wav', 5), response_format: 'srt' }, cached)
      .withResponse();
    assert.equal(first.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    // The same bytes under another name: the same request, answered from the cache.
    const again = await client.audio.translations
      .create({ model: 'whisper-1', file: await speech(32_000, 'two.wav', 5), response_format: 'srt' }, cached)
      .withResponse();
    assert.match(again.response.headers.get('cache-status') ?? '', /^Switchyard; hit; /);
    assert.match(again.response.headers.get('content-type') ?? '', /^text\/plain/);
    assert.equal(again.data, first.data);
    assert.equal(media.translations.length, 1, 'one vendor call');
    const hit = await requestRecord(gateway.url, key, again.response.headers.get('x-request-id')!);
    assert.deepEqual([hit.endpoint, hit.cache], ['audio.translations', 'hit']);
    // Another form of the answer, or the same bytes transcribed: other requests.
    const json = await client.audio.translations
      .create({ model: 'whisper-1', file: await speech(32_000, 'one.wav', 5), response_format: 'json' }, cached)
      .withResponse();
    assert.equal(json.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    const transcribed = await client.audio.transcriptions
      .create({ model: 'whisper-1', file: await speech(32_000, 'one.wav', 5), response_format: 'json' }, cached)
      .withResponse();
    assert.equal(transcribed.response.headers.get('cache-status'), 'Switchyard; fwd=miss; stored');
    assert.equal(media.translations.length, 2);
  });
});
