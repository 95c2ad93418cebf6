import type { KeyAccess } from '../accounts.js';
import type { SchedulingConfig } from '../config.js';
import { GatewayError } from '../errors.js';
import { servingTier } from './service-tier.js';
import type { ServiceTier } from './vocabulary.js';

/**
 * Which tier a request is queued in: the one it asks for where its account may use it. An admin grants tiers per
 * account (`service_tiers`, the admin API and the console); an account without its own list has
 * SERVICE_TIERS_GRANTED (`default,flex`: `priority` is not granted unless an admin grants it). A request for a tier
 * not granted is served as `default` (SERVICE_TIER_NOT_GRANTED=downgrade, and its answer's `service_tier` says
 * `default`) or refused 403 `service_tier_not_granted` (`refuse`). What it is then billed at and echoed as is the
 * tier it was served in (`shared/scheduling/served-tier.ts`).
 */
export function grantedTier(
  asked: ServiceTier,
  access: Pick<KeyAccess, 'tiers'>,
  config: Pick<SchedulingConfig, 'tiersGranted' | 'tierNotGranted'>,
): ServiceTier {
  if (asked === 'default') return asked;
  const granted = access.tiers ?? config.tiersGranted;
  if (granted.includes(asked)) return asked;
  if (config.tierNotGranted === 'refuse') {
    throw new GatewayError(
      403,
      `This account may not use the ${asked} service tier; an admin grants it. Ask for another tier or none.`,
      {
        type: 'invalid_request_error',
        code: 'service_tier_not_granted',
        param: 'service_tier',
      },
    );
  }
  return 'default';
}

/**
 * The tier a request is queued in, decided once, before anything reads the tier: the one its body's `service_tier`
 * asks for (`servingTier`: `auto`, `scale` and none are `default`, `fast` is `priority`) where its account may use it.
 * A tier not granted is served as `default` (the body's field then says `default`, as the answer will), or refused.
 */
export function grantRequestTier(
  body: { service_tier?: string | null | undefined },
  access: Pick<KeyAccess, 'tiers'>,
  config: Pick<SchedulingConfig, 'tiersGranted' | 'tierNotGranted'>,
): ServiceTier {
  const asked = servingTier(body.service_tier);
  const granted = grantedTier(asked, access, config);
  if (granted !== asked) body.service_tier = 'default';
  return granted;
}
