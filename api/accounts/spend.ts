import type { Redis } from 'ioredis';
import type { KeyAccess } from '../../shared/accounts.js';
import {
  charge,
  limitsInForce,
  moneyRefusal,
  refusedForMoney,
  reserve,
  type KeyLimitsInForce,
  type RateLimitState,
  type Reservation,
  type ReserveOutcome,
  type SettlePolicy,
} from '../../shared/money/billing.js';
import type { UsageEntry } from '../../shared/money/usage.js';
import type { Config } from '../../shared/config.js';
import { GatewayError, invalidApiKey } from '../../shared/errors.js';
import { admissionRefused } from '../http/metrics.js';

/** What a request may cost at most, and how many tokens it counts against a tokens-per-minute limit. */
export interface SpendEstimate {
  micros: number;
  tokens: number;
}

/** OpenAI's reset format: `17ms`, `1.5s`, `6m0s`. */
export function formatReset(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${Math.round(seconds * 10) / 10}s`;
  return `${Math.floor(seconds / 60)}m${Math.round(seconds % 60)}s`;
}

function rateHeaders(outcome: ReserveOutcome): Record<string, string> {
  const headers: Record<string, string> = {};
  const put = (kind: 'requests' | 'tokens', state: RateLimitState | undefined) => {
    if (!state) return;
    headers[`x-ratelimit-limit-${kind}`] = String(state.limit);
    headers[`x-ratelimit-remaining-${kind}`] = String(state.remaining);
    headers[`x-ratelimit-reset-${kind}`] = formatReset(state.resetMs);
  };
  put('requests', outcome.requests);
  put('tokens', outcome.tokens);
  return headers;
}

/**
 * Which of the key's rates a reservation counts: a request that shares another's call uses no tokens; one counted
 * already is not counted twice.
 */
export interface CountedRates {
  requests: boolean;
  tokens: boolean;
}

/**
 * Reserves a request's worst-case cost against its key's limit and its
 * account's balance, together with the key's rate limits, in one Redis
 * script call. A refusal is the 429 OpenAI sends: `insufficient_quota`
 * (the official clients do not retry it: `x-should-retry: false`) or
 * `rate_limit_exceeded` with when to retry. Either way the answer carries
 * the key's rate-limit headers: returned when the request goes on, carried by
 * the error when it is refused.
 */
export async function reserveSpend(
  redis: Redis,
  config: Pick<Config, 'defaultKeyRpm' | 'defaultKeyTpm'>,
  access: KeyAccess,
  requestId: string,
  estimate: SpendEstimate,
  deadline: number,
  /** The job's queue key when its add is sent right behind (see `Reservation.gate`). */
  gate?: string,
  counted: CountedRates = { requests: true, tokens: true },
): Promise<Record<string, string>> {
  const { reservation, limits } = reservationOf(config, access, requestId, estimate, deadline, counted);
  return admitted(await reserve(redis, { ...reservation, ...(gate ? { gate } : {}) }, limits), access);
}

/** What a request reserves and under which limits, as `reserve()` (or the whole admission's script) takes them. */
export function reservationOf(
  config: Pick<Config, 'defaultKeyRpm' | 'defaultKeyTpm'>,
  access: KeyAccess,
  requestId: string,
  estimate: SpendEstimate,
  deadline: number,
  counted: CountedRates = { requests: true, tokens: true },
): { reservation: Reservation; limits: KeyLimitsInForce } {
  const { rpm, tpm, ...money } = limitsInForce(access, config);
  return {
    reservation: {
      requestId,
      keyId: access.keyId,
      accountId: access.accountId,
      micros: estimate.micros,
      tokens: counted.tokens ? estimate.tokens : 0,
      deadline,
    },
    limits: { ...money, ...(counted.requests && rpm ? { rpm } : {}), ...(counted.tokens && tpm ? { tpm } : {}) },
  };
}

/**
 * Admits and bills in one step a request whose price is known before it is served (a cache hit): the key's rate of
 * requests, its limit and the balance hold as for any request; refused, the same 429s as `reserveSpend`.
 */
export async function chargeSpend(
  redis: Redis,
  config: Pick<Config, 'defaultKeyRpm' | 'defaultKeyTpm'>,
  access: KeyAccess,
  usage: UsageEntry,
  policy: SettlePolicy,
): Promise<Record<string, string>> {
  const { tpm: _tokens, ...limits } = limitsInForce(access, config);
  return admitted(await charge(redis, usage, limits, policy), access);
}

/** The rate-limit headers of an admitted request, or the refusal the client gets (thrown). */
export function admitted(outcome: ReserveOutcome, access: KeyAccess): Record<string, string> {
  const headers = rateHeaders(outcome);
  if (outcome.ok) return headers;
  admissionRefused(outcome.reason, access.keyId);
  switch (outcome.reason) {
    case 'rpm':
    case 'tpm': {
      const seconds = Math.max(1, Math.ceil(outcome.retryAfterMs / 1000));
      const kind = outcome.reason === 'rpm' ? 'requests' : 'tokens';
      const state = outcome.reason === 'rpm' ? outcome.requests : outcome.tokens;
      throw new GatewayError(
        429,
        `Rate limit reached for this API key: ${state?.limit ?? 'its'} ${kind} per minute. Please try again in ${formatReset(outcome.retryAfterMs)}.`,
        {
          type: kind,
          code: 'rate_limit_exceeded',
          headers: {
            ...headers,
            'retry-after': String(seconds),
            'retry-after-ms': String(Math.ceil(outcome.retryAfterMs)),
          },
        },
      );
    }
    case 'key_limit':
    case 'account_balance':
    case 'budget': {
      throw new GatewayError(429, refusedForMoney(outcome, access.accountName), {
        type: 'insufficient_quota',
        code: 'insufficient_quota',
        headers: { ...headers, 'x-should-retry': 'false' },
      });
    }
    default:
      throw invalidApiKey(moneyRefusal('no_access'));
  }
}
