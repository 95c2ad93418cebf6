import { z } from 'zod';
import type { ServiceTier } from './vocabulary.js';

/**
 * OpenAI's `service_tier` (Chat Completions and Responses) and the tier that
 * serves a request. A request names one of the API's values; the gateway
 * serves it in one of three strict bands: `priority` waits only behind other
 * priority work, `default` behind priority, `flex` takes only capacity nothing
 * else wants. `auto`, `scale` and an absent field are served as `default`;
 * `fast` is OpenAI's other name for `priority`.
 */

export const requestedServiceTierSchema = z.enum(['auto', 'default', 'flex', 'scale', 'priority', 'fast']).nullish();
export type RequestedServiceTier = z.infer<typeof requestedServiceTierSchema>;

/** The band a request is served in. */
export function servingTier(requested: RequestedServiceTier | string | null | undefined): ServiceTier {
  if (requested === 'priority' || requested === 'fast') return 'priority';
  if (requested === 'flex') return 'flex';
  return 'default';
}

/** An exact non-negative ratio of safe integers. */
export interface Ratio {
  numerator: number;
  denominator: number;
}

/** The token price of each tier as a multiple of the listed price (SERVICE_TIER_PRICE_*; `default` is 1). */
export type ServiceTierPrices = Record<ServiceTier, Ratio>;

export const unitPrices: ServiceTierPrices = {
  priority: { numerator: 1, denominator: 1 },
  default: { numerator: 1, denominator: 1 },
  flex: { numerator: 1, denominator: 1 },
};

/**
 * A decimal as written (`0.5`, `2`, `1.25`) as the exact ratio it names, reduced (`0.5` is 1/2), with no float in
 * between.
 */
export function decimalRatio(text: string): Ratio {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (!match) throw new RangeError(`not a plain decimal: ${text}`);
  const places = match[2] ?? '';
  let numerator = Number(match[1]! + places);
  let denominator = 10 ** places.length;
  if (!Number.isSafeInteger(numerator) || !Number.isSafeInteger(denominator))
    throw new RangeError(`too many digits: ${text}`);
  const divisor = gcd(numerator, denominator);
  numerator /= divisor;
  denominator /= divisor;
  return { numerator, denominator };
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a === 0 ? 1 : a;
}

/** A ratio as a decimal text again (1/2 → `0.5`): exact, as every ratio read from a decimal ends. */
export function ratioText(ratio: Ratio): string {
  const whole = Math.floor(ratio.numerator / ratio.denominator);
  let rest = ratio.numerator % ratio.denominator;
  if (rest === 0) return String(whole);
  let digits = '';
  // A ratio read from a decimal has a denominator of 2s and 5s: it ends within as many places as it had.
  for (let place = 0; rest !== 0 && place < 12; place++) {
    rest *= 10;
    digits += String(Math.floor(rest / ratio.denominator));
    rest %= ratio.denominator;
  }
  return `${whole}.${digits}`;
}
