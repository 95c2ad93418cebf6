import { z } from 'zod';

/**
 * A model's prices as the catalog and a pricing file write them, in USD: the schema the price list reads them with,
 * and their type, which the console's bundle takes too (this file imports only zod).
 */

const usd = z.number().finite().min(0);
export const tokenPriceFields = {
  /** USD per 1M tokens. */
  input_per_1m: usd.optional(),
  cached_input_per_1m: usd.optional(),
  cache_write_per_1m: usd.optional(),
  output_per_1m: usd.optional(),
  audio_input_per_1m: usd.optional(),
  audio_output_per_1m: usd.optional(),
};

/**
 * One model's prices. Strict, so that a mistyped key in a pricing file
 * (`input_per_1M`) is refused instead of silently leaving a price out.
 */
export const priceSchema = z.strictObject({
  ...tokenPriceFields,
  /** Token prices for a request whose prompt is longer than `above_tokens` (every token of it). */
  long_context: z.strictObject({ above_tokens: z.number().int().min(0), ...tokenPriceFields }).optional(),
  /** Discounted hours (DeepSeek): not applied, see `costMicros`. */
  off_peak: z.strictObject(tokenPriceFields).optional(),
  /** USD per image, keyed `<size>` or `<size>/<quality>`. */
  per_image: z.record(z.string().min(1), usd).optional(),
  /** USD per second of video, and by size where a size costs more. */
  per_second: usd.optional(),
  per_second_by_size: z.record(z.string().min(1), usd).optional(),
  /** USD per minute of transcribed audio. */
  per_minute: usd.optional(),
  /** USD per 1M characters of text spoken (OpenAI's tts-1 and tts-1-hd). */
  per_1m_characters: usd.optional(),
  /** USD per 1M cached audio input tokens (Realtime models: shared/money/realtime.ts prices them). */
  cached_audio_input_per_1m: usd.optional(),
});
export type Pricing = z.infer<typeof priceSchema>;
