import { z } from 'zod';

/**
 * OpenAI's `service_tier` (Chat Completions and Responses) and the tier that
 * serves a request. A request names one of the API's values; the gateway
 * serves it in one of three strict bands: `priority` waits only behind other
 * priority work, `default` behind priority, `flex` takes only capacity nothing
 * else wants. `auto`, `scale` and an absent field are served as `default`;
 * `fast` is OpenAI's other name for `priority`.
 */
export const serviceTiers = ['priority', 'default', 'flex'] as const;
export type ServiceTier = (typeof serviceTiers)[number];

export const requestedServiceTierSchema = z.enum(['auto', 'default', 'flex', 'scale', 'priority', 'fast']).nullish();
export type RequestedServiceTier = z.infer<typeof requestedServiceTierSchema>;

/** The band a request is served in. */
export function servingTier(requested: RequestedServiceTier | string | null | undefined): ServiceTier {
  if (requested === 'priority' || requested === 'fast') return 'priority';
  if (requested === 'flex') return 'flex';
  return 'default';
}
