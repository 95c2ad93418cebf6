import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { loadCatalog, type CatalogModel } from '../../shared/catalog.js';
import type { EndpointRequest } from '../../shared/endpoints.js';
import { chatCompletionRequestSchema } from '../../shared/schemas/chat.js';
import { completionRequestSchema } from '../../shared/schemas/completions.js';
import { embeddingRequestSchema } from '../../shared/schemas/embeddings.js';
import { imageEditFieldsSchema, imageGenerationRequestSchema } from '../../shared/schemas/images.js';
import {
  DEFAULT_MAX_AUDIO_SECONDS,
  PriceList,
  microsToUsd,
  reservedPromptTokens,
  tiersBilledFor,
  usdToMicros,
  type Metered,
  type Pricing,
} from '../../shared/money/pricing.js';

const catalog = loadCatalog();
const prices = new PriceList(catalog.all());
const none: Metered = { inputTokens: 0, cachedTokens: 0, outputTokens: 0, images: 0, audioSeconds: 0, videoSeconds: 0 };
const use = (parts: Partial<Metered>): Metered => ({ ...none, ...parts });
const blob = { key: 'k', contentType: 'application/octet-stream', size: 1 };

const dir = mkdtempSync(join(tmpdir(), 'pricing-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const pricingFile = (name: string, content: string) => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};

const chat = (fields: Record<string, unknown>): EndpointRequest => ({
  endpoint: 'chat.completions',
  payload: chatCompletionRequestSchema.parse({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...fields }),
});

describe('catalog prices', () => {
  const has = (value: number | undefined) => typeof value === 'number' && value >= 0;
  const nonEmpty = (table: Record<string, number> | undefined) => table !== undefined && Object.keys(table).length > 0;

  /** Whether a model has the prices its capability is billed by; a new capability fails until it is thought about. */
  const billable = (model: CatalogModel, pricing: Pricing): boolean => {
    switch (model.capability) {
      case 'chat':
      case 'reasoning':
      case 'completion':
        return has(pricing.input_per_1m) && has(pricing.output_per_1m);
      case 'embedding':
        return has(pricing.input_per_1m);
      case 'image':
        return nonEmpty(pricing.per_image);
      case 'video':
        return has(pricing.per_second) || nonEmpty(pricing.per_second_by_size);
      case 'transcription':
        return has(pricing.per_minute) || (has(pricing.input_per_1m) && has(pricing.output_per_1m));
      case 'speech':
        return has(pricing.per_1m_characters) || (has(pricing.input_per_1m) && has(pricing.audio_output_per_1m));
      case 'realtime':
        return (
          has(pricing.input_per_1m) &&
          has(pricing.output_per_1m) &&
          has(pricing.audio_input_per_1m) &&
          has(pricing.audio_output_per_1m)
        );
      case 'moderation':
        return has(pricing.input_per_1m);
      default: {
        const unhandled: never = model.capability;
        throw new Error(`no pricing rule for capability ${String(unhandled)}`);
      }
    }
  };

  it('has a usable price for every model of the built-in catalog', () => {
    const missing = catalog
      .all()
      .filter((model) => !prices.has(model.id) || !billable(model, prices.pricing(model.id)))
      .map((model) => `${model.id} (${model.capability})`);
    assert.deepEqual(missing, [], `models without a price for their capability: ${missing.join(', ')}`);
  });

  it('prices every size an image model accepts, so no charge falls back to a guess', () => {
    for (const model of catalog.all().filter((m) => m.capability === 'image')) {
      const keys = Object.keys(prices.pricing(model.id).per_image ?? {});
      for (const size of model.image_sizes ?? []) {
        if (size === 'auto' && !keys.includes('auto')) continue;
        assert.ok(
          keys.some((key) => key === size || key.startsWith(`${size}/`)),
          `${model.id} has no price for ${size}`,
        );
      }
    }
  });

  it('gives every catalog model an integer worst case and charge', () => {
    for (const model of catalog.all()) {
      const cost = prices.costMicros(
        model.id,
        use({ inputTokens: 1234, outputTokens: 567, images: 1, audioSeconds: 61, videoSeconds: 4 }),
      );
      assert.ok(Number.isSafeInteger(cost) && cost >= 0, `${model.id}: ${cost}`);
    }
  });

  it('never prices cached input above input: a reservation prices the prompt as uncached', () => {
    for (const model of catalog.all()) {
      const { input_per_1m: input, cached_input_per_1m: cached } = prices.pricing(model.id);
      if (cached !== undefined) assert.ok(input !== undefined && cached <= input, model.id);
    }
  });

  it('refuses a model it has no price for', () => {
    assert.throws(() => prices.costMicros('no-such-model', none), /no price for model 'no-such-model'/);
  });
});

describe('costMicros', () => {
  it('is 0 for no usage', () => {
    for (const model of catalog.all()) assert.equal(prices.costMicros(model.id, none), 0, model.id);
  });

  it('prices tokens per 1M, each component rounded up to a whole micro', () => {
    // gpt-4o: $2.50 in, $10 out per 1M.
    assert.equal(prices.costMicros('gpt-4o', use({ inputTokens: 1000, outputTokens: 500 })), 2500 + 5000);
    // gpt-4o-mini: 150,000 micros per 1M in; one token is 0.15 micro, charged 1.
    assert.equal(prices.costMicros('gpt-4o-mini', use({ inputTokens: 1 })), 1);
    // 7 × 0.15 = 1.05 → 2; 3 × 0.6 = 1.8 → 2.
    assert.equal(prices.costMicros('gpt-4o-mini', use({ inputTokens: 7, outputTokens: 3 })), 4);
  });

  it('bills cached tokens (a part of input) at the cached price, else at the input price', () => {
    // gpt-5: 6,000 uncached × 1.25 + 4,000 cached × 0.125 + 2,000 out × 10.
    assert.equal(
      prices.costMicros('gpt-5', use({ inputTokens: 10_000, cachedTokens: 4_000, outputTokens: 2_000 })),
      7_500 + 500 + 20_000,
    );
    // gpt-4o: 400 uncached × 2.5 + 600 cached × 1.25.
    assert.equal(prices.costMicros('gpt-4o', use({ inputTokens: 1000, cachedTokens: 600 })), 1_000 + 750);
    // gpt-4-turbo lists no cached price (its prompts are not cached): every input token at the input price.
    assert.equal(prices.costMicros('gpt-4-turbo', use({ inputTokens: 1000, cachedTokens: 600 })), 10_000);
    // More cached than input is clamped: cached is a subset.
    assert.equal(prices.costMicros('gpt-5', use({ inputTokens: 1000, cachedTokens: 5000 })), 125);
  });

  it('bills cache writes and audio tokens at their own prices', () => {
    // claude-sonnet-4-5: 5,000 × 3 + 2,000 cached × 0.3 + 3,000 written × 3.75 + 100 out × 15.
    const claude = use({ inputTokens: 10_000, cachedTokens: 2_000, cacheWriteTokens: 3_000, outputTokens: 100 });
    assert.equal(prices.costMicros('claude-sonnet-4-5', claude), 15_000 + 600 + 11_250 + 1_500);
    // gpt-4o-audio-preview: 400 text in × 2.5 + 600 audio in × 40 + 300 text out × 10 + 200 audio out × 80.
    const audio = use({ inputTokens: 1000, audioInputTokens: 600, outputTokens: 500, audioOutputTokens: 200 });
    assert.equal(prices.costMicros('gpt-4o-audio-preview', audio), 1_000 + 24_000 + 3_000 + 16_000);
  });

  it('bills every token at the long-context price past the threshold', () => {
    // gemini-2.5-pro: above 200,000 prompt tokens, $2.50 in and $15 out instead of $1.25 and $10.
    assert.equal(
      prices.costMicros('gemini-2.5-pro', use({ inputTokens: 200_000, outputTokens: 1000 })),
      250_000 + 10_000,
    );
    assert.equal(
      prices.costMicros('gemini-2.5-pro', use({ inputTokens: 250_000, outputTokens: 1000 })),
      625_000 + 15_000,
    );
    // grok-4-0709 lists no long-context cached price: the normal one (0.75) stays.
    assert.equal(
      prices.costMicros('grok-4-0709', use({ inputTokens: 200_000, cachedTokens: 100_000 })),
      600_000 + 75_000,
    );
  });

  it('bills transcription per minute, pro-rated per started second', () => {
    // whisper-1: $0.006 a minute = 100 micros a second.
    assert.equal(prices.costMicros('whisper-1', use({ audioSeconds: 61 })), 6_100);
    assert.equal(prices.costMicros('whisper-1', use({ audioSeconds: 0.4 })), 100);
    const odd = new PriceList(catalog.all(), { overrides: { 'whisper-1': { per_minute: 0.007 } } });
    // 7,000 / 60 = 116.67 micros a second → 117.
    assert.equal(odd.costMicros('whisper-1', use({ audioSeconds: 1 })), 117);
    assert.equal(odd.costMicros('whisper-1', use({ audioSeconds: 60 })), 7_000);
  });

  it('bills video per second, by size where the size has its own price', () => {
    assert.equal(prices.costMicros('sora-2-pro', use({ videoSeconds: 8, videoSize: '1792x1024' })), 4_000_000);
    assert.equal(prices.costMicros('sora-2-pro', use({ videoSeconds: 8, videoSize: '720x1280' })), 2_400_000);
    assert.equal(prices.costMicros('sora-2', use({ videoSeconds: 12 })), 1_200_000);
  });

  it('bills images by size/quality, then size, then the cheapest candidate', () => {
    const dalle3 = (parts: Partial<Metered>) => prices.costMicros('dall-e-3', use({ images: 1, ...parts }));
    assert.equal(dalle3({ images: 2, imageSize: '1024x1024', imageQuality: 'hd' }), 160_000);
    assert.equal(dalle3({ imageSize: '1792x1024', imageQuality: 'standard' }), 80_000);
    assert.equal(dalle3({ imageSize: '1792x1024' }), 80_000, 'quality unknown: the cheapest of that size');
    assert.equal(dalle3({ imageSize: '640x480' }), 40_000, 'size unknown: the cheapest entry');
    assert.equal(
      prices.costMicros('dall-e-2', use({ images: 1, imageSize: '512x512', imageQuality: 'standard' })),
      18_000,
    );
    // No size asked: the vendor makes (and charges) its default, 1024x1024, not the cheapest 256x256.
    assert.equal(prices.costMicros('dall-e-2', use({ images: 2 })), 40_000);
    assert.equal(dalle3({}), 40_000, 'dall-e-3 unsized: 1024x1024, standard');
    assert.equal(dalle3({ imageQuality: 'hd' }), 80_000, 'dall-e-3 unsized and hd: 1024x1024/hd');
    assert.equal(
      prices.costMicros('gpt-image-1', use({ images: 1, imageSize: '1536x1024', imageQuality: 'high' })),
      250_000,
    );
    assert.equal(prices.costMicros('gpt-image-1', use({ images: 1, imageSize: 'auto', imageQuality: 'auto' })), 11_000);
  });

  it('sums a million small requests to the exact integer', () => {
    let total = 0;
    for (let i = 0; i < 1_000_000; i++)
      total += prices.costMicros('gpt-4o', use({ inputTokens: 1000, outputTokens: 500 }));
    assert.equal(total, 7_500_000_000);
    assert.equal(microsToUsd(total), 7500);
    // What this avoids: the same sum in float dollars is off.
    let floatUsd = 0;
    for (let i = 0; i < 1_000_000; i++) floatUsd += 0.0075;
    assert.notEqual(floatUsd, 7500);

    // Uneven sizes, checked against an independent BigInt computation of the same rule.
    let sum = 0;
    let expected = 0n;
    const up = (tokens: number, perMillion: bigint) => (BigInt(tokens) * perMillion + 999_999n) / 1_000_000n;
    for (let i = 0; i < 1_000_000; i++) {
      const input = (i * 7_919) % 5_000;
      const cached = Math.min(input, (i * 31) % 1_000);
      const output = (i * 104_729) % 2_000;
      sum += prices.costMicros('gpt-5', use({ inputTokens: input, cachedTokens: cached, outputTokens: output }));
      expected += up(input - cached, 1_250_000n) + up(cached, 125_000n) + up(output, 10_000_000n);
    }
    assert.equal(BigInt(sum), expected);
  });

  it('adds the markup to the total, rounded up once', () => {
    const marked = new PriceList(catalog.all(), { markupPercent: 15 });
    assert.equal(marked.markupPercent, 15);
    assert.equal(marked.costMicros('gpt-4o', use({ inputTokens: 1000, outputTokens: 500 })), 8_625);
    // 4 micros × 1.1 = 4.4 → 5.
    assert.equal(
      new PriceList(catalog.all(), { markupPercent: 10 }).costMicros(
        'gpt-4o-mini',
        use({ inputTokens: 7, outputTokens: 3 }),
      ),
      5,
    );
    assert.equal(marked.costMicros('gpt-4o', none), 0);
    assert.throws(() => new PriceList(catalog.all(), { markupPercent: -1 }), /markup/);
    assert.throws(() => new PriceList(catalog.all(), { markupPercent: 1.5 }), /markup/);
  });

  it('refuses a quantity it cannot count', () => {
    assert.throws(() => prices.costMicros('gpt-4o', use({ inputTokens: Number.NaN })), /inputTokens/);
    assert.throws(() => prices.costMicros('whisper-1', use({ audioSeconds: Infinity })), /audioSeconds/);
    assert.equal(prices.costMicros('gpt-4o', use({ inputTokens: -5, outputTokens: -1 })), 0);
  });

  it('is an integer ≥ 0, monotonic in every quantity (property)', () => {
    const ids = catalog.all().map((m) => m.id);
    const quantity = fc.integer({ min: 0, max: 3_000_000 });
    const metered = fc.record({
      inputTokens: quantity,
      cachedTokens: quantity,
      outputTokens: quantity,
      images: fc.integer({ min: 0, max: 10 }),
      audioSeconds: fc.double({ min: 0, max: 20_000, noNaN: true }),
      videoSeconds: fc.integer({ min: 0, max: 12 }),
      imageSize: fc.option(fc.constantFrom('1024x1024', '1792x1024', 'auto', '640x480'), { nil: undefined }),
      imageQuality: fc.option(fc.constantFrom('standard', 'hd', 'high', 'auto'), { nil: undefined }),
      videoSize: fc.option(fc.constantFrom('720x1280', '1792x1024', '1x1'), { nil: undefined }),
    });
    const grown = fc.constantFrom('inputTokens', 'outputTokens', 'images', 'audioSeconds', 'videoSeconds' as const);
    const lists = [0, 7, 15, 100, 333].map((markupPercent) => new PriceList(catalog.all(), { markupPercent }));
    fc.assert(
      fc.property(
        fc.constantFrom(...ids),
        metered,
        grown,
        fc.integer({ min: 1, max: 500_000 }),
        fc.constantFrom(...lists),
        (id, base, key, more, list) => {
          const before = list.costMicros(id, base);
          const after = list.costMicros(id, { ...base, [key]: base[key] + more });
          assert.ok(Number.isSafeInteger(before) && before >= 0);
          assert.ok(after >= before, `${id}: ${key} +${more}: ${before} → ${after}`);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});

describe('worstCaseMicros', () => {
  it('reserves chat prompt plus the most output of every choice', () => {
    // gpt-4o: 1,000 prompt tokens counted are priced as 1,258 (a quarter more and 8: another tokenizer's count)
    // × 2.5 (+1 micro for the rounding of a cached/uncached split) + 2 × 500 out × 10. The tokens are as counted.
    assert.deepEqual(prices.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, n: 2 }), 1000), {
      micros: 3_146 + 10_000,
      tokens: 2_000,
    });
    // max_completion_tokens wins over max_tokens.
    assert.deepEqual(prices.worstCaseMicros('gpt-4o', chat({ max_tokens: 9, max_completion_tokens: 100 }), 0), {
      micros: 1_000,
      tokens: 100,
    });
    // Nothing asked: the model's max_output_tokens (16,384); more asked is capped at it.
    const full = { micros: 3_146 + 163_840, tokens: 17_384 };
    assert.deepEqual(prices.worstCaseMicros('gpt-4o', chat({}), 1000), full);
    assert.deepEqual(prices.worstCaseMicros('gpt-4o', chat({ max_tokens: 1_000_000 }), 1000), full);
    // Priced as uncached, at long-context prices past the threshold.
    // 250,000 counted: 312,508 priced, × 2.5 (+1).
    assert.equal(
      prices.worstCaseMicros('gemini-2.5-pro', chat({ max_tokens: 1000 }), 250_000).micros,
      781_271 + 15_000,
    );
  });

  it('holds enough for a vendor whose own count of the prompt beats ours', () => {
    // The fake OpenAI counts 12 prompt tokens for "Say hello.", which we count as 10: the hold held 13 micros
    // and the charge was 14. Whatever the model, a vendor counting a quarter more and 8 is still covered.
    for (const model of ['gpt-4o-mini', 'gpt-4o', 'claude-sonnet-4-5', 'gemini-2.5-pro']) {
      for (const counted of [1, 10, 1000, 100_000]) {
        const asked = chat({ max_tokens: 5 });
        const held = prices.worstCaseMicros(model, asked, counted).micros;
        const vendorCount = counted + Math.ceil(counted / 4) + 8;
        const charged = prices.costMicros(model, use({ inputTokens: vendorCount, outputTokens: 5 }));
        assert.ok(charged <= held, `${model}, ${counted} counted: charged ${charged} > held ${held}`);
      }
    }
    assert.equal(reservedPromptTokens(0), 0, 'nothing counted, nothing held');
  });

  it('reserves legacy completions for every prompt of a batch and best_of', () => {
    const request: EndpointRequest = {
      endpoint: 'completions',
      payload: completionRequestSchema.parse({ model: 'm', prompt: ['a', 'b'], n: 1, best_of: 3, max_tokens: 10 }),
    };
    // gpt-3.5-turbo-instruct: 20 counted, 33 priced × 1.5 (+1) + 2 prompts × 3 × 10 out × 2.
    assert.deepEqual(prices.worstCaseMicros('gpt-3.5-turbo-instruct', request, 20), { micros: 51 + 120, tokens: 80 });
  });

  it('reserves embeddings for the prompt', () => {
    const request: EndpointRequest = {
      endpoint: 'embeddings',
      payload: embeddingRequestSchema.parse({ model: 'm', input: 'x' }),
    };
    // 1,000 counted, 1,258 priced × 0.02, and the micro of a split's rounding.
    assert.deepEqual(prices.worstCaseMicros('text-embedding-3-small', request, 1000), { micros: 27, tokens: 1000 });
    assert.deepEqual(prices.worstCaseMicros('text-embedding-3-small', request, 0), { micros: 0, tokens: 0 });
  });

  it("reserves n images at the asked size (else the model's default) and quality, the priciest when unsaid", () => {
    const generate = (fields: Record<string, unknown>): EndpointRequest => ({
      endpoint: 'images.generations',
      payload: imageGenerationRequestSchema.parse({ prompt: 'p', ...fields }),
    });
    assert.deepEqual(prices.worstCaseMicros('dall-e-3', generate({ n: 2, size: '1792x1024', quality: 'hd' }), 10), {
      micros: 240_000,
      tokens: 10,
    });
    // Unsized: the model's default size (what the vendor makes), at its priciest quality.
    assert.equal(prices.worstCaseMicros('dall-e-3', generate({}), 10).micros, 80_000);
    assert.equal(prices.worstCaseMicros('dall-e-2', generate({ n: 2 }), 10).micros, 40_000);
    assert.equal(prices.worstCaseMicros('dall-e-3', generate({ size: '1024x1024' }), 10).micros, 80_000);
    assert.equal(
      prices.worstCaseMicros('gpt-image-1', generate({ size: 'auto', quality: 'auto' }), 10).micros,
      250_000,
    );
    const edit: EndpointRequest = {
      endpoint: 'images.edits',
      payload: {
        ...imageEditFieldsSchema.parse({ prompt: 'p', n: '3', size: '1024x1024', quality: 'low' }),
        images: [blob],
      },
    };
    assert.equal(prices.worstCaseMicros('gpt-image-1', edit, 10).micros, 33_000);
  });

  it('reserves transcription for an hour of audio unless told otherwise', () => {
    const request: EndpointRequest = {
      endpoint: 'audio.transcriptions',
      payload: { file: blob, response_format: 'json' },
    };
    assert.equal(DEFAULT_MAX_AUDIO_SECONDS, 3_600);
    assert.deepEqual(prices.worstCaseMicros('whisper-1', request, 0), { micros: 360_000, tokens: 0 });
    assert.equal(prices.worstCaseMicros('whisper-1', request, 0, 60).micros, 6_000);
  });

  it('reserves video seconds at the size price', () => {
    const video = (seconds: string, size: string): EndpointRequest => ({
      endpoint: 'videos',
      payload: { prompt: 'p', seconds, size },
    });
    assert.equal(prices.worstCaseMicros('sora-2-pro', video('12', '1792x1024'), 0).micros, 6_000_000);
    assert.equal(prices.worstCaseMicros('sora-2', video('4', '720x1280'), 0).micros, 400_000);
    assert.equal(
      prices.worstCaseMicros('sora-2-pro-landscape', video('8', ''), 0).micros,
      2_400_000,
      'no size: the default size',
    );
  });

  it('adds the markup', () => {
    const marked = new PriceList(catalog.all(), { markupPercent: 15 });
    // 13,146 × 1.15 = 15,117.9 → 15,118.
    assert.equal(marked.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, n: 2 }), 1000).micros, 15_118);
  });

  it('covers any chat charge the request can lead to (property)', () => {
    const chatModels = catalog
      .all()
      .filter((m) => m.capability === 'chat' || m.capability === 'reasoning')
      .map((m) => m.id);
    fc.assert(
      fc.property(
        fc.constantFrom(...chatModels),
        fc.integer({ min: 0, max: 400_000 }),
        fc.integer({ min: 1, max: 200_000 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (id, prompt, maxTokens, cachedShare, outShare) => {
          const reserved = prices.worstCaseMicros(id, chat({ max_tokens: maxTokens }), prompt).micros;
          const cap = Math.min(maxTokens, catalog.get(id)!.max_output_tokens);
          const charged = prices.costMicros(
            id,
            use({
              inputTokens: prompt,
              cachedTokens: Math.floor(prompt * cachedShare),
              outputTokens: Math.floor(cap * outShare),
            }),
          );
          assert.ok(charged <= reserved, `${id}: charged ${charged} > reserved ${reserved}`);
        },
      ),
      { numRuns: 1_000 },
    );
  });
});

describe('pricing file', () => {
  const config = (file: string | undefined, markup = 0) => ({ pricingFile: file, pricingMarkupPercent: markup });

  it('uses the catalog prices without one', () => {
    assert.deepEqual(PriceList.load(catalog, config(undefined)).pricing('gpt-4o'), {
      input_per_1m: 2.5,
      output_per_1m: 10,
      cached_input_per_1m: 1.25,
    });
  });

  it('replaces the prices of the models it names, whole', () => {
    const file = pricingFile('ok.json', JSON.stringify({ models: { 'gpt-5': { input_per_1m: 1, output_per_1m: 2 } } }));
    const list = PriceList.load(catalog, config(file, 10));
    assert.deepEqual(list.pricing('gpt-5'), { input_per_1m: 1, output_per_1m: 2 });
    // No cached price any more: cached tokens at the input price. 1,000 + 1,000, plus 10%.
    assert.equal(list.costMicros('gpt-5', use({ inputTokens: 1000, cachedTokens: 500, outputTokens: 500 })), 2_200);
    assert.equal(list.costMicros('gpt-4o', use({ inputTokens: 1000 })), 2_750, 'others keep the catalog price');
  });

  it('refuses a bad file, naming it and the problem', () => {
    const cases: Array<[string, string, RegExp]> = [
      ['negative.json', JSON.stringify({ models: { 'gpt-4o': { input_per_1m: -1 } } }), /input_per_1m/],
      ['typo.json', JSON.stringify({ models: { 'gpt-4o': { input_per_1M: 1 } } }), /input_per_1M/],
      ['unknown.json', JSON.stringify({ models: { 'gpt-9000': { input_per_1m: 1 } } }), /not in the catalog: gpt-9000/],
      ['shape.json', JSON.stringify({ 'gpt-4o': { input_per_1m: 1 } }), /models/],
      ['broken.json', '{"models": {', /JSON/],
    ];
    for (const [name, content, problem] of cases) {
      const file = pricingFile(name, content);
      assert.throws(
        () => PriceList.load(catalog, config(file)),
        (error: Error) => {
          assert.ok(error.message.includes(file), `${name}: ${error.message}`);
          assert.match(error.message, problem);
          return true;
        },
      );
    }
    const absent = join(dir, 'absent.json');
    assert.throws(
      () => PriceList.load(catalog, config(absent)),
      (error: Error) => error.message.includes(absent) && /ENOENT/.test(error.message),
    );
  });
});

describe('usdToMicros and microsToUsd', () => {
  it('round to the nearest micro as the decimal reads', () => {
    assert.equal(usdToMicros(2.5), 2_500_000);
    assert.equal(usdToMicros(0.01875), 18_750);
    assert.equal(usdToMicros(0.0001245), 125, '0.0001245 * 1e6 is 124.49999… in floats');
    assert.equal(usdToMicros(0.0000004), 0);
    assert.equal(usdToMicros(1.25e-7), 0);
    assert.equal(usdToMicros(5e-7), 1);
    assert.equal(usdToMicros(-1.5), -1_500_000);
    assert.equal(usdToMicros(1e9), 1e15);
    assert.throws(() => usdToMicros(Number.NaN), RangeError);
    assert.throws(() => usdToMicros(Infinity), RangeError);
    assert.throws(() => usdToMicros(1e20), RangeError);
  });

  it('agree with each other on every whole number of micros (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -1e15, max: 1e15 }), (micros) => {
        assert.equal(usdToMicros(microsToUsd(micros)), micros);
        assert.equal(String(microsToUsd(micros)), String(Number(`${micros}e-6`)));
      }),
    );
    assert.throws(() => microsToUsd(0.5), RangeError);
  });
});

describe('service tiers', () => {
  const tiered = new PriceList(catalog.all(), {
    tierPrices: {
      priority: { numerator: 2, denominator: 1 },
      default: { numerator: 1, denominator: 1 },
      flex: { numerator: 1, denominator: 2 },
    },
  });
  const responses = (serviceTier: 'priority' | 'default' | 'flex' | undefined, maxOutput: number): EndpointRequest =>
    ({
      endpoint: 'responses',
      payload: {
        chat: { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_completion_tokens: maxOutput },
        shell: { id: 'resp_1', ...(serviceTier ? { service_tier: serviceTier } : {}) },
      },
    }) as unknown as EndpointRequest;

  it('charges the token part at the tier prices: flex half, priority double, default and no tier the listed price', () => {
    const used = use({ inputTokens: 1000, outputTokens: 500 });
    assert.equal(tiered.costMicros('gpt-4o', used), 7_500);
    assert.equal(tiered.costMicros('gpt-4o', used, 'default'), 7_500);
    assert.equal(tiered.costMicros('gpt-4o', used, 'flex'), 3_750);
    assert.equal(tiered.costMicros('gpt-4o', used, 'priority'), 15_000);
    // Without tier prices every tier is at the listed price.
    assert.equal(prices.costMicros('gpt-4o', used, 'priority'), 7_500);
  });

  it('rounds the tier price once, up, in integer micros, and applies the markup after it', () => {
    // One input token of gpt-4o is 2.5 micros, billed 3; at flex, half of that rounds up to 2.
    assert.equal(tiered.costMicros('gpt-4o', use({ inputTokens: 1 }), 'flex'), 2);
    const third = new PriceList(catalog.all(), {
      tierPrices: {
        priority: { numerator: 1, denominator: 1 },
        default: { numerator: 1, denominator: 1 },
        flex: { numerator: 333_333, denominator: 1_000_000 },
      },
    });
    // 7,500 × 0.333333 = 2,499.9975 → 2,500.
    assert.equal(third.costMicros('gpt-4o', use({ inputTokens: 1000, outputTokens: 500 }), 'flex'), 2_500);
    const marked = new PriceList(catalog.all(), { markupPercent: 10, tierPrices: tiered.tierPrices });
    // 3,750 at flex, then 10 % on the total: 4,125.
    assert.equal(marked.costMicros('gpt-4o', use({ inputTokens: 1000, outputTokens: 500 }), 'flex'), 4_125);
    // Large amounts stay exact past 2^53 in the product.
    const huge = new PriceList(catalog.all(), {
      tierPrices: {
        priority: { numerator: 999_999_999, denominator: 1_000_000 },
        default: { numerator: 1, denominator: 1 },
        flex: { numerator: 1, denominator: 2 },
      },
    });
    const big = tiered.costMicros('gpt-4o', use({ outputTokens: 1_000_000_000 }));
    assert.equal(
      huge.costMicros('gpt-4o', use({ outputTokens: 1_000_000_000 }), 'priority'),
      Number((BigInt(big) * 999_999_999n + 999_999n) / 1_000_000n),
    );
  });

  it(
    'reserves at the dearest tier a chat or Responses request may be billed at: flex at the default price, ' +
      'priority at the priority price, rounding up',
    () => {
      const listed = tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500 }), 1000);
      assert.deepEqual(listed, { micros: 3_146 + 5_000, tokens: 1_500 });
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'auto' }), 1000), listed);
      // A flex request is billed default when it is not served as flex: it is reserved at the default price.
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'flex' }), 1000), listed);
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'priority' }), 1000), {
        micros: 16_292,
        tokens: 1_500,
      });
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'fast' }), 1000), {
        micros: 16_292,
        tokens: 1_500,
      });
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', responses('flex', 500), 1000), listed);
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', responses('priority', 500), 1000), {
        micros: 16_292,
        tokens: 1_500,
      });
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', responses(undefined, 500), 1000), listed);
      // A legacy completion has no tier: listed price, whatever its body says.
      const completion = {
        endpoint: 'completions',
        payload: { model: 'gpt-4o', prompt: 'hi', max_tokens: 500, service_tier: 'priority' },
      } as unknown as EndpointRequest;
      assert.deepEqual(tiered.worstCaseMicros('gpt-4o', completion, 1000), listed);
      // The reservation covers the charge of the most the request may use, at every tier it may be billed at.
      for (const band of ['priority', 'default', 'flex'] as const) {
        assert.ok(tiersBilledFor(band).includes('default'), `${band} may be billed default`);
        for (const tier of tiersBilledFor(band)) {
          const charge = tiered.costMicros(
            'gpt-4o',
            use({ inputTokens: reservedPromptTokens(1000), outputTokens: 500 }),
            tier,
          );
          assert.ok(
            tiered.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: band }), 1000).micros >= charge,
            `${band} billed ${tier}`,
          );
        }
      }
      // Whatever the tier prices: a flex price above the default one (an operator's odd choice) is reserved too.
      const odd = new PriceList(catalog.all(), {
        tierPrices: {
          priority: { numerator: 1, denominator: 2 },
          default: { numerator: 1, denominator: 1 },
          flex: { numerator: 3, denominator: 2 },
        },
      });
      const oddFlex = odd.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'flex' }), 1000).micros;
      assert.equal(
        odd.worstCaseMicros('gpt-4o', chat({ max_tokens: 500, service_tier: 'priority' }), 1000).micros,
        oddFlex,
        'priority may be billed flex',
      );
      assert.ok(oddFlex > listed.micros);
    },
  );

  it('lists each tier multiple as an exact decimal, from the configuration', () => {
    assert.deepEqual(tiered.tierMultiples(), { priority: '2', default: '1', flex: '0.5' });
    assert.deepEqual(
      PriceList.load(catalog, {
        pricingFile: undefined,
        pricingMarkupPercent: 0,
        serviceTierPrices: {
          priority: { numerator: 3, denominator: 2 },
          default: { numerator: 1, denominator: 1 },
          flex: { numerator: 1, denominator: 4 },
        },
      }).tierMultiples(),
      {
        priority: '1.5',
        default: '1',
        flex: '0.25',
      },
    );
    assert.throws(
      () =>
        new PriceList(catalog.all(), { tierPrices: { ...tiered.tierPrices, flex: { numerator: 1, denominator: 0 } } }),
      /flex tier/,
    );
  });
});
