import type { Config } from '../config.js';
import type { EndpointRequest } from '../endpoints.js';
import type { Metered, PriceList, WorstCase } from './pricing.js';
import type { ServiceTier } from '../scheduling/vocabulary.js';
import { isMockChannel, mockAnswers, type ChannelConfig, type VendorConfig } from '../vendors.js';

/**
 * What a request is charged, decided here only: at admission its worst case,
 * at settlement what it used, by the same rule. A model the catalog holds
 * without a price (an operator's addition; the start-up log names such
 * models) is served free, and so is every mock answer unless MOCK_BILLING
 * asks for it. Everything else is charged at its price list's prices.
 */

/** The one rule: no price, or a mock answer (MOCK_BILLING off), is free; the rest is charged. */
function charged(prices: PriceList, modelId: string, mockAnswered: boolean, mockBilled: boolean): boolean {
  return prices.has(modelId) && (mockBilled || !mockAnswered);
}

/**
 * The most a request may cost, reserved as it is queued (`tokens` counts against tokens-per-minute even when free):
 * a chat or Responses request at the dearest tier it may be billed at (`tiersBilledFor` its band: a flex one at the
 * default price, a priority one at the priority price), since the tier it is billed at is known only once served.
 */
export function worstCase(
  config: VendorConfig,
  prices: PriceList,
  request: EndpointRequest,
  modelId: string,
  firstVendor: string | undefined,
  promptTokens: number,
): WorstCase {
  // Before routing, the mock answers if it serves the model's first route or stands in for every vendor.
  return charged(prices, modelId, mockAnswers(config, firstVendor), config.mock.billed)
    ? prices.worstCaseMicros(modelId, request, promptTokens)
    : { micros: 0, tokens: promptTokens };
}

/**
 * What a finished request costs: what it used at the prices of the tier that served it
 * (`shared/scheduling/served-tier.ts`), or 0 when it is served free.
 */
export function actualCost(
  config: { mock: Pick<Config['mock'], 'billed'> },
  prices: PriceList,
  modelId: string,
  channel: Pick<ChannelConfig, 'vendor' | 'protocol'> | undefined,
  metered: Metered,
  tier: ServiceTier | undefined,
): number {
  // A job that never reached a channel used nothing: its cost comes to 0 either way.
  return charged(prices, modelId, channel !== undefined && isMockChannel(channel), config.mock.billed)
    ? prices.costMicros(modelId, metered, tier)
    : 0;
}
