import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { Catalog, CatalogModel } from '../catalog.js';
import type { Config } from '../config.js';
import type { EndpointRequest } from '../endpoints.js';
import { ratioText, servingTier, unitPrices, type ServiceTierPrices } from '../scheduling/service-tier.js';
import { serviceTiers, type ServiceTier } from '../scheduling/vocabulary.js';
import { mostSpeechSeconds, speechCharacters, speechFacts } from '../schemas/speech.js';
import { priceSchema, tokenPriceFields, type Pricing } from './price-schema.js';

export type { Pricing } from './price-schema.js';

/*
 * Exact billing in integer micro-dollars (1 USD = 1,000,000 micros): a sum
 * of many small float costs drifts, a sum of integers does not. Prices become
 * integer micros once, when the list is built; each cost component after that
 * is integer arithmetic rounded UP to a whole micro (a fraction is not given away).
 */

/**
 * The audio a transcription reserves for at admission: the upload's length is
 * unknown until decoded. An hour is about what a 25 MB upload holds at common
 * speech bitrates; the charge after the job is for the real length.
 */
export const DEFAULT_MAX_AUDIO_SECONDS = 3_600;

// The catalog's own entries may carry notes the gateway does not read.
const catalogPriceSchema = priceSchema.loose();
const pricingFileSchema = z.strictObject({ models: z.record(z.string().min(1), priceSchema) });

/** What a finished request used, as the vendor bills it. */
export interface Metered {
  /** Every prompt token, cached ones included. */
  inputTokens: number;
  /** Prompt tokens read from the vendor's cache: part of `inputTokens`. */
  cachedTokens: number;
  outputTokens: number;
  images: number;
  imageSize?: string;
  imageQuality?: string;
  audioSeconds: number;
  videoSeconds: number;
  videoSize?: string;
  /** Prompt tokens written to the cache (Anthropic): part of `inputTokens`, billed at `cache_write_per_1m`. */
  cacheWriteTokens?: number;
  /** Audio prompt tokens: part of `inputTokens`, billed at `audio_input_per_1m`. */
  audioInputTokens?: number;
  /** Audio output tokens: part of `outputTokens`, billed at `audio_output_per_1m`. */
  audioOutputTokens?: number;
  /** Characters of text spoken, billed at `per_1m_characters`. */
  characters?: number;
}

/** Micros per 1M tokens; an absent price already resolved to the one a vendor falls back on. */
interface TokenRates {
  input: number;
  cached: number;
  cacheWrite: number;
  output: number;
  audioInput: number;
  audioOutput: number;
}

/** A model's prices in integer micros, converted once. */
interface Compiled {
  rates: TokenRates;
  longContext: { aboveTokens: number; rates: TokenRates } | undefined;
  perImage: Map<string, number>;
  perSecond: number | undefined;
  perSecondBySize: Map<string, number>;
  perMinute: number | undefined;
  perMillionCharacters: number | undefined;
}

/** A reservation in micros, and the tokens it counts against a tokens-per-minute limit. */
export interface WorstCase {
  micros: number;
  tokens: number;
}

type TokenPrices = { [K in keyof typeof tokenPriceFields]?: number | undefined };
type Choice = 'cheapest' | 'priciest';

const MICROS_PER_USD = 1_000_000;
const TOKENS_PER_PRICE = 1_000_000;

/**
 * USD to integer micros, rounded to the nearest micro (a half away from
 * zero). Rounded on the number's decimal digits, not on `usd * 1e6`: that
 * product is inexact (0.0001245 * 1e6 = 124.49999…), and a price written
 * with a half micro must round the way it reads.
 */
export function usdToMicros(usd: number): number {
  if (!Number.isFinite(usd)) throw new RangeError(`not a finite amount of USD: ${usd}`);
  const match = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(Math.abs(usd)));
  if (!match) throw new RangeError(`cannot read ${usd} as a decimal`);
  const digits = match[1]! + (match[2] ?? '');
  // Where the decimal point falls in `digits` once the amount is in micros.
  const point = match[1]!.length + Number(match[3] ?? 0) + 6;
  const units = point <= 0 ? 0n : BigInt(digits.slice(0, point).padEnd(point, '0'));
  const next = point < 0 ? 0 : Number(digits[point] ?? '0');
  const micros = Number(units + (next >= 5 ? 1n : 0n));
  if (!Number.isSafeInteger(micros)) throw new RangeError(`${usd} USD is too large to count in micros`);
  return usd < 0 && micros !== 0 ? -micros : micros;
}

/** Micros to USD: exact for any amount under a billion dollars (15 significant digits). */
export function microsToUsd(micros: number): number {
  if (!Number.isSafeInteger(micros)) throw new RangeError(`micros must be a safe integer, got ${micros}`);
  return micros / MICROS_PER_USD;
}

/** ceil(a * b / d) for non-negative integers, exact even past 2^53 in the product. */
function mulCeilDiv(a: number, b: number, d: number): number {
  const product = a * b;
  if (Number.isSafeInteger(product)) {
    const rest = product % d;
    return (product - rest) / d + (rest > 0 ? 1 : 0);
  }
  const big = BigInt(a) * BigInt(b);
  const result = Number((big + BigInt(d) - 1n) / BigInt(d));
  if (!Number.isSafeInteger(result)) throw new RangeError(`a cost of ${result} micros is beyond exact integers`);
  return result;
}

/** Tokens at micros per 1M, rounded up. (Not a closure in `costMicros`: that would be made on every charge.) */
function tokens(count: number, perMillion: number): number {
  return mulCeilDiv(count, perMillion, TOKENS_PER_PRICE);
}

/** A metered quantity as a whole count: fractions round up (a started second is billed), below zero is nothing. */
/**
 * The prompt tokens a reservation prices for a prompt we count as `counted`.
 * Our count follows OpenAI's tokenizer and message framing; other vendors'
 * tokenizers and framings count the same text differently (Anthropic's and
 * Gemini's often 10–20 % more, a few tokens more per request for the framing),
 * and a worst case that a vendor's own count beats is not a worst case. So a
 * quarter more, and 8 tokens for the framing. Only the reservation grows: the charge
 * is for the vendor's count, and the rest of the reservation goes back at settlement.
 */
export function reservedPromptTokens(counted: number): number {
  return counted > 0 ? counted + Math.ceil(counted / 4) + 8 : 0;
}

function whole(name: string, value: number | undefined): number {
  if (value === undefined) return 0;
  if (!Number.isFinite(value)) throw new RangeError(`${name} must be a finite number, got ${value}`);
  return value <= 0 ? 0 : Math.ceil(value);
}

/**
 * Token rates with the fallbacks vendors bill by: cached/cache-write/audio input at the input price, audio output at
 * the output price.
 */
function compileRates(prices: TokenPrices, parent?: TokenPrices): TokenRates {
  const of = (key: keyof TokenPrices) => {
    const value = prices[key] ?? parent?.[key];
    return value === undefined ? undefined : usdToMicros(value);
  };
  const input = of('input_per_1m') ?? 0;
  const output = of('output_per_1m') ?? 0;
  return {
    input,
    cached: of('cached_input_per_1m') ?? input,
    cacheWrite: of('cache_write_per_1m') ?? input,
    output,
    audioInput: of('audio_input_per_1m') ?? input,
    audioOutput: of('audio_output_per_1m') ?? output,
  };
}

function compile(pricing: Pricing): Compiled {
  const table = (record: Record<string, number> | undefined) =>
    new Map(Object.entries(record ?? {}).map(([key, value]) => [key, usdToMicros(value)] as const));
  const single = (value: number | undefined) => (value === undefined ? undefined : usdToMicros(value));
  const long = pricing.long_context;
  return {
    rates: compileRates(pricing),
    // A long-context price the table leaves out is the normal one (xAI lists no long cached price).
    longContext: long && { aboveTokens: long.above_tokens, rates: compileRates(long, pricing) },
    perImage: table(pricing.per_image),
    perSecond: single(pricing.per_second),
    perSecondBySize: table(pricing.per_second_by_size),
    perMinute: single(pricing.per_minute),
    perMillionCharacters: single(pricing.per_1m_characters),
  };
}

function pick(values: Iterable<number>, which: Choice): number | undefined {
  let chosen: number | undefined;
  for (const value of values)
    if (chosen === undefined || (which === 'cheapest' ? value < chosen : value > chosen)) chosen = value;
  return chosen;
}

/**
 * The price of one image: `<size>/<quality>`, else `<size>`, else (quality
 * unknown, e.g. `auto`) one of that size's qualities, else (size unknown)
 * one of all entries. A charge takes the cheapest candidate (a doubt is
 * never billed to the client), a reservation the priciest (it must cover).
 */
function imageMicros(table: Map<string, number>, which: Choice, size?: string | null, quality?: string | null): number {
  if (size) {
    const exact = (quality ? table.get(`${size}/${quality}`) : undefined) ?? table.get(size);
    if (exact !== undefined) return exact;
    const chosen = pick(
      [...table].filter(([key]) => key.startsWith(`${size}/`)).map(([, value]) => value),
      which,
    );
    if (chosen !== undefined) return chosen;
  }
  return pick(table.values(), which) ?? 0;
}

/**
 * The per-second video price for a size: its own price, else the model's, else (charge) the cheapest / (reservation)
 * the priciest sized one.
 */
function videoMicros(price: Compiled, which: Choice, size?: string): number {
  return (
    (size ? price.perSecondBySize.get(size) : undefined) ??
    price.perSecond ??
    pick(price.perSecondBySize.values(), which) ??
    0
  );
}

/** How many completions a legacy completions request asks for: `n` (or `best_of`, all billed) per prompt of a batch. */
function completionChoices(payload: Extract<EndpointRequest, { endpoint: 'completions' }>['payload']): number {
  const prompt = payload.prompt;
  const prompts = Array.isArray(prompt) && prompt.length > 0 && typeof prompt[0] !== 'number' ? prompt.length : 1;
  return prompts * Math.max(payload.n ?? 1, payload.best_of ?? 1);
}

/**
 * The band a request asks to be served in, from what it names (chat: `service_tier`; Responses: its shell's);
 * every other endpoint (legacy completions included, whose API has no `service_tier`) is `default`.
 */
function requestTier(request: EndpointRequest): ServiceTier {
  if (request.endpoint === 'chat.completions') return servingTier(request.payload.service_tier);
  if (request.endpoint === 'responses') return request.payload.shell.service_tier ?? 'default';
  return 'default';
}

/**
 * The tiers a request queued in `band` may be billed at (`shared/scheduling/served-tier.ts`): a flex or default one at
 * flex or default (flex only when it was served so; where a vendor is not paid for flex, only when it waited),
 * a priority one at any tier (priority only when it was served so). Never a tier above its band, or `default`.
 */
export function tiersBilledFor(band: ServiceTier): readonly ServiceTier[] {
  return band === 'priority' ? serviceTiers : (['flex', 'default'] as const);
}

/**
 * The prices in effect: the catalog's, each model's replaced whole by a
 * pricing file's entry, and a markup on every total.
 */
export class PriceList {
  readonly markupPercent: number;
  /** Each tier's token prices as a multiple of the listed ones (SERVICE_TIER_PRICE_*), exact ratios. */
  readonly tierPrices: ServiceTierPrices;
  private readonly models = new Map<string, CatalogModel>();
  private readonly prices = new Map<string, { pricing: Pricing; compiled: Compiled }>();

  /** `overrides` replace a model's whole pricing (a field left out is no price), as `PRICING_FILE` does. */
  constructor(
    models: Iterable<CatalogModel>,
    options: {
      overrides?: Readonly<Record<string, Pricing>>;
      markupPercent?: number;
      tierPrices?: ServiceTierPrices;
    } = {},
  ) {
    const markup = options.markupPercent ?? 0;
    if (!Number.isSafeInteger(markup) || markup < 0)
      throw new RangeError(`markup percent must be an integer ≥ 0, got ${markup}`);
    this.markupPercent = markup;
    const tierPrices = options.tierPrices ?? unitPrices;
    for (const tier of serviceTiers) {
      const { numerator, denominator } = tierPrices[tier];
      if (!Number.isSafeInteger(numerator) || numerator < 0 || !Number.isSafeInteger(denominator) || denominator < 1) {
        throw new RangeError(
          `the ${tier} tier's price multiple must be a ratio of integers ≥ 0, got ${numerator}/${denominator}`,
        );
      }
    }
    this.tierPrices = tierPrices;
    const add = (id: string, raw: unknown, schema: z.ZodType<Pricing>) => {
      const parsed = schema.safeParse(raw);
      if (!parsed.success) throw new Error(`bad pricing for '${id}': ${z.prettifyError(parsed.error)}`);
      this.prices.set(id, { pricing: parsed.data, compiled: compile(parsed.data) });
    };
    for (const model of models) {
      this.models.set(model.id, model);
      if (model.pricing !== undefined) add(model.id, model.pricing, catalogPriceSchema);
    }
    for (const [id, pricing] of Object.entries(options.overrides ?? {})) {
      // A price for a model the catalog lacks is a typo: nothing would ever be billed by it.
      if (!this.models.has(id)) throw new Error(`pricing given for '${id}', which is not in the catalog`);
      add(id, pricing, priceSchema);
    }
  }

  /**
   * The catalog's prices, `pricingFile`'s over them, `pricingMarkupPercent` and the tiers' `serviceTierPrices`. A bad
   * file throws, naming it and the problem.
   */
  static load(
    catalog: Catalog,
    config: Pick<Config, 'pricingFile' | 'pricingMarkupPercent'> & Partial<Pick<Config, 'serviceTierPrices'>>,
  ): PriceList {
    const markupPercent = config.pricingMarkupPercent;
    const tierPrices = config.serviceTierPrices ?? unitPrices;
    if (!config.pricingFile) return new PriceList(catalog.all(), { markupPercent, tierPrices });
    const file = config.pricingFile;
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new Error(`pricing file ${file}: ${error instanceof Error ? error.message : String(error)}`, {
        cause: error,
      });
    }
    const parsed = pricingFileSchema.safeParse(raw);
    if (!parsed.success) throw new Error(`pricing file ${file}: ${z.prettifyError(parsed.error)}`);
    const unknown = Object.keys(parsed.data.models).filter((id) => catalog.get(id) === undefined);
    if (unknown.length > 0) throw new Error(`pricing file ${file}: not in the catalog: ${unknown.join(', ')}`);
    return new PriceList(catalog.all(), { overrides: parsed.data.models, markupPercent, tierPrices });
  }

  has(modelId: string): boolean {
    return this.prices.has(modelId);
  }

  /** The vendor prices in effect for a model (the pricing file's if it names it), before the markup. */
  pricing(modelId: string): Pricing {
    return this.entry(modelId).pricing;
  }

  /**
   * The prices a client is charged, markup included, in USD as a price list shows them
   * (the charge itself is computed in micros: `costMicros`). Thresholds are not prices and stay as they are.
   */
  listedPricing(modelId: string): Pricing {
    const factor = (100 + this.markupPercent) / 100;
    // Rounded to a billionth of a dollar: enough for any per-token price, and free of float noise
    // (0.30000000000000004).
    const marked = (usd: number) => Math.round(usd * factor * 1e9) / 1e9;
    const scale = (value: unknown, key: string): unknown => {
      if (typeof value === 'number') return key === 'above_tokens' ? value : marked(value);
      if (value && typeof value === 'object')
        return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scale(v, k)]));
      return value;
    };
    return scale(this.pricing(modelId), '') as Pricing;
  }

  /**
   * Each tier's token prices as a multiple of the listed ones, as exact decimals (`{priority: '2', default: '1', flex:
   * '0.5'}`).
   */
  tierMultiples(): Record<ServiceTier, string> {
    return {
      priority: ratioText(this.tierPrices.priority),
      default: ratioText(this.tierPrices.default),
      flex: ratioText(this.tierPrices.flex),
    };
  }

  /**
   * The exact charge for what a request used, in integer micros, markup
   * included. The token part is at the prices of the tier that served it
   * (`tier`: the listed ones times its multiple, rounded up once, before the markup). Each component is ceil(quantity ×
   * price) in micros: tokens at micros per 1M, audio at micros per minute pro-rated per whole second,
   * video per whole second, images per image (an image without a size is
   * the model's `default_size`, the size the vendor then makes; without one
   * either, the cheapest). Subsets (cached, cache-write
   * and audio tokens) are clamped to what contains them. Above a model's
   * `long_context` threshold (counted on `inputTokens`) every token is at
   * the long-context prices. `off_peak` is not applied: a charge does not
   * know the hour, and the standard price is the higher one. A quantity
   * with no price (tokens of an image-only model) costs nothing.
   */
  costMicros(modelId: string, metered: Metered, tier: ServiceTier = 'default'): number {
    const price = this.entry(modelId).compiled;
    const input = whole('inputTokens', metered.inputTokens);
    const cached = Math.min(whole('cachedTokens', metered.cachedTokens), input);
    const cacheWrite = Math.min(whole('cacheWriteTokens', metered.cacheWriteTokens), input - cached);
    const audioIn = Math.min(whole('audioInputTokens', metered.audioInputTokens), input - cached - cacheWrite);
    const output = whole('outputTokens', metered.outputTokens);
    const audioOut = Math.min(whole('audioOutputTokens', metered.audioOutputTokens), output);
    const rates = this.ratesFor(price, input);
    const images = whole('images', metered.images);
    const audioSeconds = whole('audioSeconds', metered.audioSeconds);
    const videoSeconds = whole('videoSeconds', metered.videoSeconds);
    const characters = whole('characters', metered.characters);
    const tokenCost =
      tokens(input - cached - cacheWrite - audioIn, rates.input) +
      tokens(cached, rates.cached) +
      tokens(cacheWrite, rates.cacheWrite) +
      tokens(audioIn, rates.audioInput) +
      tokens(output - audioOut, rates.output) +
      tokens(audioOut, rates.audioOutput);
    const cost =
      this.tiered(tokenCost, tier) +
      (images === 0
        ? 0
        : images *
          imageMicros(
            price.perImage,
            'cheapest',
            metered.imageSize ?? this.models.get(modelId)?.default_size,
            metered.imageQuality,
          )) +
      (audioSeconds === 0 ? 0 : mulCeilDiv(audioSeconds, price.perMinute ?? 0, 60)) +
      (videoSeconds === 0 ? 0 : videoSeconds * videoMicros(price, 'cheapest', metered.videoSize)) +
      (characters === 0 ? 0 : mulCeilDiv(characters, price.perMillionCharacters ?? 0, 1_000_000));
    return this.marked(cost);
  }

  /**
   * The most a request can cost, reserved at admission, and the tokens it
   * counts against a tokens-per-minute limit (the prompt and the most output
   * it may produce; the prompt alone for other endpoints).
   * - chat/completions: the prompt plus the most output (`max_completion_tokens`
   *   ?? `max_tokens` ?? the model's `max_output_tokens`, capped at the latter:
   *   a vendor writes no more) for each choice (`n`; completions: `best_of` if
   *   larger, times the prompts of a batch), all priced as uncached (cache
   *   writes and audio tokens, dearer, are not foreseen).
   * - embeddings and moderations: the prompt (moderation models are priced at 0: OpenAI charges nothing).
   * - images: `n` images at the asked size/quality (size default: the model's
   *   `default_size`); an unknown or `auto` size or quality takes the priciest
   *   candidate. A prompt is added at the input price when the model has one.
   * - transcription and translation: `maxAudioSeconds` at `per_minute` (the length is unknown
   *   until decoded); a model without `per_minute` reserves its token prices
   *   (prompt plus `max_output_tokens`), which cannot include audio tokens.
   * - videos: `seconds` at the per-second price of the size.
   * - speech: the input's characters at `per_1m_characters` (exact: what is billed), plus, for a model billed by
   *   the token, the prompt (input and instructions, counted) and the most audio tokens the text can yield: its
   *   longest speaking (`mostSpeechSeconds`, at the speed asked) times the model's audio tokens a second.
   * Chat and Responses requests are priced at the dearest tier they may be
   * billed at (`tiersBilledFor` the band they name, read as `servingTier`
   * reads it for the job): a flex request at the default price (it is billed
   * default when it is not served as flex), a priority one at the priority
   * price, so no tier the worker bills (`shared/scheduling/served-tier.ts`) passes the
   * reservation.
   */
  worstCaseMicros(
    modelId: string,
    request: EndpointRequest,
    promptTokens: number,
    maxAudioSeconds = DEFAULT_MAX_AUDIO_SECONDS,
  ): WorstCase {
    const price = this.entry(modelId).compiled;
    const model = this.models.get(modelId);
    const modelMax = model?.max_output_tokens ?? 0;
    const prompt = whole('promptTokens', promptTokens);
    // The prompt is priced as the most a vendor may count for it, which is more than our count (see
    // reservedPromptTokens).
    const billable = reservedPromptTokens(prompt);
    const rates = this.ratesFor(price, billable);
    // Plus a micro: a charge rounds cached and uncached input apart, which can cost one more than rounding them
    // together.
    const promptCost = mulCeilDiv(billable, rates.input, TOKENS_PER_PRICE) + (billable > 0 && rates.input > 0 ? 1 : 0);
    const upTo = (asked: number | null | undefined) => {
      const most = whole('max output tokens', asked ?? modelMax);
      return modelMax > 0 ? Math.min(most, modelMax) : most;
    };
    const generating = (maxOutput: number) => ({
      micros: this.marked(
        this.worstTiered(promptCost + mulCeilDiv(maxOutput, rates.output, TOKENS_PER_PRICE), requestTier(request)),
      ),
      tokens: prompt + maxOutput,
    });
    const only = (cost: number) => ({ micros: this.marked(cost), tokens: prompt });
    switch (request.endpoint) {
      case 'chat.completions': {
        const { payload } = request;
        return generating(upTo(payload.max_completion_tokens ?? payload.max_tokens) * whole('n', payload.n ?? 1));
      }
      case 'completions':
        return generating(upTo(request.payload.max_tokens) * completionChoices(request.payload));
      case 'responses':
      case 'messages':
        return generating(upTo(request.payload.chat.max_completion_tokens));
      case 'gemini.generate':
        // `candidateCount` is chat's `n`: each candidate may write up to the limit.
        return generating(
          upTo(request.payload.chat.max_completion_tokens) * whole('candidateCount', request.payload.chat.n ?? 1),
        );
      case 'messages.count_tokens':
      case 'gemini.count_tokens':
        // Counting is free at Anthropic and Gemini and local elsewhere: nothing is reserved, only the fair share's
        // tokens.
        return only(0);
      case 'embeddings':
      case 'gemini.embed':
      case 'gemini.batch_embed':
      case 'moderations':
        return only(promptCost);
      case 'images.generations':
      case 'images.edits':
      case 'images.variations': {
        const { payload } = request;
        const quality = request.endpoint === 'images.variations' ? undefined : request.payload.quality;
        const each = imageMicros(price.perImage, 'priciest', payload.size ?? model?.default_size, quality);
        return only(promptCost + whole('n', payload.n ?? 1) * each);
      }
      case 'audio.transcriptions':
      case 'audio.translations': {
        if (price.perMinute === undefined) return { ...generating(upTo(undefined)), tokens: prompt };
        return only(mulCeilDiv(whole('maxAudioSeconds', maxAudioSeconds), price.perMinute, 60));
      }
      case 'audio.speech': {
        const { payload } = request;
        const characters = speechCharacters(payload.input);
        const perSecond = model ? speechFacts(model).audioTokensPerSecond : 0;
        const audioTokens = Math.ceil(mostSpeechSeconds(characters, payload.speed) * perSecond);
        const characterCost = mulCeilDiv(characters, price.perMillionCharacters ?? 0, 1_000_000);
        const tokenCost =
          audioTokens === 0 && rates.input === 0
            ? 0
            : promptCost + mulCeilDiv(audioTokens, rates.audioOutput, TOKENS_PER_PRICE);
        return { micros: this.marked(characterCost + tokenCost), tokens: prompt + audioTokens };
      }
      case 'videos': {
        const { payload } = request;
        const seconds = whole('seconds', Number(payload.seconds));
        return only(seconds * videoMicros(price, 'priciest', payload.size || model?.default_size));
      }
    }
  }

  private entry(modelId: string): { pricing: Pricing; compiled: Compiled } {
    const found = this.prices.get(modelId);
    // No price is a catalog mistake, not a free model: refusing beats serving unbilled.
    if (!found) throw new Error(`no price for model '${modelId}'`);
    return found;
  }

  private ratesFor(price: Compiled, promptTokens: number): TokenRates {
    const long = price.longContext;
    return long && promptTokens > long.aboveTokens ? long.rates : price.rates;
  }

  /** A token cost at the dearest of the tiers a request of `band` may be billed at: its reservation. */
  private worstTiered(cost: number, band: ServiceTier): number {
    let worst = 0;
    for (const tier of tiersBilledFor(band)) worst = Math.max(worst, this.tiered(cost, tier));
    return worst;
  }

  /** A token cost at a tier's prices: times its multiple, one rounding, up. */
  private tiered(cost: number, tier: ServiceTier): number {
    const { numerator, denominator } = this.tierPrices[tier];
    return numerator === denominator ? cost : mulCeilDiv(cost, numerator, denominator);
  }

  /** The markup on a total (not on each price): one rounding, up. */
  private marked(cost: number): number {
    if (!Number.isSafeInteger(cost)) throw new RangeError(`a cost of ${cost} micros is beyond exact integers`);
    return this.markupPercent === 0 ? cost : mulCeilDiv(cost, 100 + this.markupPercent, 100);
  }
}
