import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadCatalog } from '../../shared/catalog.js';
import { PriceList } from '../../shared/money/pricing.js';
import {
  readRealtimeUsage,
  realtimePromptCacheSavedMicros,
  realtimeReservationMicros,
  realtimeResponseCostMicros,
  realtimeResponseWorstCaseMicros,
} from '../../shared/money/realtime.js';
import { loadConfig } from '../../shared/config.js';

/**
 * A Realtime response's price: each kind of token at its own price, exactly, and the worst case one response may cost.
 */

const catalog = loadCatalog(undefined);
const pricing = {
  input_per_1m: 4,
  cached_input_per_1m: 0.4,
  output_per_1m: 16,
  audio_input_per_1m: 32,
  audio_output_per_1m: 64,
  cached_audio_input_per_1m: 0.4,
};

/** OpenAI's GA `response.usage`, as its docs show it. */
const usage = {
  total_tokens: 1000,
  input_tokens: 700,
  output_tokens: 300,
  input_token_details: {
    text_tokens: 300,
    audio_tokens: 400,
    image_tokens: 0,
    cached_tokens: 250,
    cached_tokens_details: { text_tokens: 100, audio_tokens: 150, image_tokens: 0 },
  },
  output_token_details: { text_tokens: 50, audio_tokens: 250 },
};

describe('Realtime money', () => {
  it('splits a response.usage into what is priced apart', () => {
    assert.deepEqual(readRealtimeUsage(usage), {
      textInput: 200,
      cachedTextInput: 100,
      audioInput: 250,
      cachedAudioInput: 150,
      textOutput: 50,
      audioOutput: 250,
    });
  });

  it('reads a usage without details as text, and hostile numbers as nothing', () => {
    assert.deepEqual(readRealtimeUsage({ input_tokens: 10, output_tokens: 5 }), {
      textInput: 10,
      cachedTextInput: 0,
      audioInput: 0,
      cachedAudioInput: 0,
      textOutput: 5,
      audioOutput: 0,
    });
    assert.deepEqual(readRealtimeUsage({ input_tokens: -3, output_tokens: 'many', input_token_details: null }), {
      textInput: 0,
      cachedTextInput: 0,
      audioInput: 0,
      cachedAudioInput: 0,
      textOutput: 0,
      audioOutput: 0,
    });
    assert.deepEqual(readRealtimeUsage(undefined), {
      textInput: 0,
      cachedTextInput: 0,
      audioInput: 0,
      cachedAudioInput: 0,
      textOutput: 0,
      audioOutput: 0,
    });
    // Cached counts past their whole are clamped to it.
    const clamped = readRealtimeUsage({
      input_token_details: {
        text_tokens: 5,
        audio_tokens: 0,
        cached_tokens_details: { text_tokens: 50, audio_tokens: 9 },
      },
    });
    assert.deepEqual(
      [clamped.textInput, clamped.cachedTextInput, clamped.audioInput, clamped.cachedAudioInput],
      [0, 5, 0, 0],
    );
  });

  it('prices each kind at its own rate, rounding each up to a whole micro', () => {
    const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
    // 200×4 + 100×0.4 + 250×32 + 150×0.4 + 50×16 + 250×64 per 1M = 800 + 40 + 8000 + 60 + 800 + 16000 micros.
    assert.equal(realtimeResponseCostMicros(prices, 'mock-realtime', readRealtimeUsage(usage)), 25_700);
    // One token of each: ceil of each part (4, 0.4→1, 32, 0.4→1, 16, 64).
    assert.equal(
      realtimeResponseCostMicros(prices, 'mock-realtime', {
        textInput: 1,
        cachedTextInput: 1,
        audioInput: 1,
        cachedAudioInput: 1,
        textOutput: 1,
        audioOutput: 1,
      }),
      4 + 1 + 32 + 1 + 16 + 64,
    );
  });

  it(
    "says what the vendor's prompt cache saved a response: its cached text and audio at their plain prices, less " +
      'what it was billed',
    () => {
      const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
      const tokens = readRealtimeUsage(usage);
      const billed = realtimeResponseCostMicros(prices, 'mock-realtime', tokens);
      // Uncached: 300×4 + 400×32 + 50×16 + 250×64 per 1M = 1,200 + 12,800 + 800 + 16,000 micros, less the 25,700 billed.
      assert.equal(realtimePromptCacheSavedMicros(prices, 'mock-realtime', tokens, billed), 30_800 - 25_700);
      // Nothing read from the cache: nothing saved (and no second pricing).
      assert.equal(
        realtimePromptCacheSavedMicros(
          prices,
          'mock-realtime',
          readRealtimeUsage({ input_tokens: 10, output_tokens: 5 }),
          56,
        ),
        0,
      );
    },
  );

  it('adds the markup once, on the total', () => {
    const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing }, markupPercent: 10 });
    assert.equal(realtimeResponseCostMicros(prices, 'mock-realtime', readRealtimeUsage(usage)), 28_270);
  });

  it(
    'bounds one response by its context window at the dearest input price and its most output at the dearest ' +
      'output price',
    () => {
      const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
      const model = catalog.get('mock-realtime')!;
      // 16,000 tokens × $32/1M + 4,096 × $64/1M, in micros.
      assert.equal(realtimeResponseWorstCaseMicros(prices, model), 16_000 * 32 + 4096 * 64);
      // No response the model can write costs more than the bound.
      const most = {
        textInput: 0,
        cachedTextInput: 0,
        audioInput: model.context_window,
        cachedAudioInput: 0,
        textOutput: 0,
        audioOutput: model.max_output_tokens,
      };
      assert.ok(
        realtimeResponseCostMicros(prices, 'mock-realtime', most) <= realtimeResponseWorstCaseMicros(prices, model),
      );
    },
  );

  it('reserves nothing for a session the mock answers unbilled', () => {
    const prices = new PriceList(catalog.all(), { overrides: { 'mock-realtime': pricing } });
    const model = catalog.get('mock-realtime')!;
    assert.equal(realtimeReservationMicros(loadConfig({ MOCK_VENDOR: 'on' }), prices, model), 0);
    assert.ok(realtimeReservationMicros(loadConfig({ MOCK_VENDOR: 'on', MOCK_BILLING: 'on' }), prices, model) > 0);
  });
});
