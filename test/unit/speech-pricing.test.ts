import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import {
  mostSpeechSeconds,
  speechCharacters,
  speechRequestSchema,
  type SpeechJob,
} from '../../shared/schemas/speech.js';
import { countTextTokens } from '../../shared/tokens.js';
import {
  MOCK_AUDIO_TOKENS_PER_SECOND,
  MOCK_SPEECH_SAMPLE_RATE,
  planMockSpeech,
} from '../../workers/vendors/mock/speech.js';

/*
 * Speech's money: tts-1 and tts-1-hd by the character (the reservation is the charge), token-billed models by text
 * tokens in and audio tokens out, reserved for the longest the text can be spoken (`mostSpeechSeconds`): never less
 * than what the mock, which keeps within that bound, is then billed. And the request's limits as the spec counts them.
 */

const catalog = loadCatalog();
const prices = new PriceList(catalog.all());
const job = (input: string, fields: Partial<SpeechJob> = {}): SpeechJob => ({
  input,
  voice: 'alloy',
  response_format: 'mp3',
  stream_format: 'audio',
  ...fields,
});
const worst = (model: string, speech: SpeechJob, promptTokens = countTextTokens(speech.input)) =>
  prices.worstCaseMicros(model, { endpoint: 'audio.speech', payload: speech }, promptTokens);

describe('speech prices', () => {
  it('bills tts-1 and tts-1-hd by characters (code points) at $15 and $30 per million, and reserves exactly that', () => {
    const input = 'Grüße, 世界! 🎙️';
    const characters = speechCharacters(input);
    assert.equal(characters, 13, 'the microphone and its variation selector are two');
    assert.equal(
      prices.costMicros('tts-1', {
        inputTokens: 0,
        cachedTokens: 0,
        outputTokens: 0,
        images: 0,
        audioSeconds: 3,
        videoSeconds: 0,
        characters,
      }),
      characters * 15,
    );
    assert.equal(
      prices.costMicros('tts-1-hd', {
        inputTokens: 0,
        cachedTokens: 0,
        outputTokens: 0,
        images: 0,
        audioSeconds: 3,
        videoSeconds: 0,
        characters,
      }),
      characters * 30,
    );
    assert.deepEqual(worst('tts-1', job(input)), { micros: characters * 15, tokens: countTextTokens(input) });
    // A million characters cost the listed price.
    assert.equal(
      prices.costMicros('tts-1', {
        inputTokens: 0,
        cachedTokens: 0,
        outputTokens: 0,
        images: 0,
        audioSeconds: 0,
        videoSeconds: 0,
        characters: 1_000_000,
      }),
      15_000_000,
    );
  });

  it('bills token models by text in and audio out at their own prices', () => {
    const metered = {
      inputTokens: 1_000_000,
      cachedTokens: 0,
      outputTokens: 1_000_000,
      audioOutputTokens: 1_000_000,
      images: 0,
      audioSeconds: 0,
      videoSeconds: 0,
    };
    assert.equal(prices.costMicros('gpt-4o-mini-tts', metered), 600_000 + 12_000_000);
    assert.equal(prices.costMicros('gemini-2.5-flash-preview-tts', metered), 500_000 + 10_000_000);
    assert.equal(prices.costMicros('gemini-2.5-pro-preview-tts', metered), 1_000_000 + 20_000_000);
    assert.ok(prices.costMicros('mock-speech', metered) > 0, 'the mock is priced, so its billing is tested');
  });

  it("reserves at least what the mock's speech then costs, at every speed and length", () => {
    const texts = [
      'Hi.',
      'Press one for sales, two for support.',
      'A longer text that a reader would take a while to speak aloud. '.repeat(40),
    ];
    for (const text of texts) {
      for (const speed of [0.25, 0.5, 1, 2, 4]) {
        const speech = job(text, speed === 1 ? {} : { speed });
        const seconds = planMockSpeech(speech).samples / MOCK_SPEECH_SAMPLE_RATE;
        assert.ok(seconds <= mostSpeechSeconds(speechCharacters(text), speed));
        const inputTokens = countTextTokens(text);
        const outputTokens = Math.ceil(seconds * MOCK_AUDIO_TOKENS_PER_SECOND);
        const cost = prices.costMicros('mock-speech', {
          inputTokens,
          cachedTokens: 0,
          outputTokens,
          audioOutputTokens: outputTokens,
          images: 0,
          audioSeconds: 0,
          videoSeconds: 0,
        });
        const reserved = worst('mock-speech', speech, inputTokens);
        assert.ok(
          reserved.micros >= cost,
          `${text.length} chars at ${speed}x: reserved ${reserved.micros} < cost ${cost}`,
        );
        assert.equal(
          reserved.tokens,
          inputTokens + Math.ceil(mostSpeechSeconds(speechCharacters(text), speed) * MOCK_AUDIO_TOKENS_PER_SECOND),
        );
      }
    }
  });

  it('takes a request as the spec writes it: 4,096 characters, speeds 0.25 to 4, the six formats, a voice or {id}', () => {
    const ok = (body: Record<string, unknown>) =>
      speechRequestSchema.safeParse({ model: 'tts-1', voice: 'alloy', input: 'x', ...body }).success;
    assert.ok(ok({ input: '🎙️'.repeat(2048) }), '4,096 code points');
    assert.ok(!ok({ input: 'x'.repeat(4097) }));
    assert.ok(!ok({ input: '' }));
    assert.ok(ok({ speed: 0.25 }) && ok({ speed: 4 }) && !ok({ speed: 0.2 }) && !ok({ speed: 4.01 }));
    for (const format of ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm']) assert.ok(ok({ response_format: format }));
    assert.ok(!ok({ response_format: 'ogg' }));
    assert.ok(
      ok({ voice: { id: 'voice_1234' } }) && !ok({ voice: { id: 'voice_1234', name: 'x' } }) && !ok({ voice: 7 }),
    );
    assert.ok(ok({ stream_format: 'sse' }) && !ok({ stream_format: 'chunks' }));
    const parsed = speechRequestSchema.parse({ model: 'tts-1', voice: 'alloy', input: 'x' });
    assert.deepEqual([parsed.response_format, parsed.stream_format], ['mp3', 'audio']);
  });
});
