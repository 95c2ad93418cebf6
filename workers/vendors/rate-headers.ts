/**
 * What a vendor's answer says of its key's rate limits: the headers OpenAI (and the vendors that speak its API)
 * and Anthropic send with every answer, not only with a 429. A channel whose requests or tokens left in the window
 * read 0 is saturated until the window resets: the router rests it (as it would after a 429) so the next prompt goes
 * to the next channel of its own order, without spending a call on a refusal.
 *
 * - OpenAI: `x-ratelimit-remaining-{requests,tokens}`, `x-ratelimit-reset-{requests,tokens}` as durations (`1s`,
 *   `6m0s`, `20ms`).
 * - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-remaining` and `…-reset` as RFC 3339
 *   times.
 */

type Headers = Record<string, string | string[] | undefined>;

const openaiLimits = ['requests', 'tokens'] as const;
const anthropicLimits = ['requests', 'tokens', 'input-tokens', 'output-tokens'] as const;

/** The longest a header may rest a channel: a reset further off is read as this (a wrong clock must not park a key). */
export const maxSaturatedRestMs = 60_000;
/** A limit at 0 whose reset is unreadable or past rests its channel this long. */
const unknownResetMs = 1_000;

/**
 * How long from `now` the answer's key has nothing left of some limit; undefined when every limit has room (or none is
 * told).
 */
export function saturatedForMs(headers: Headers, now = Date.now()): number | undefined {
  let longest: number | undefined;
  const exhausted = (remaining: string | undefined, resetMs: number | undefined) => {
    if (remaining === undefined || Number(remaining.trim()) !== 0 || remaining.trim() === '') return;
    const ms = resetMs !== undefined && resetMs > 0 ? Math.min(resetMs, maxSaturatedRestMs) : unknownResetMs;
    longest = Math.max(longest ?? 0, ms);
  };
  for (const limit of openaiLimits) {
    exhausted(one(headers[`x-ratelimit-remaining-${limit}`]), durationMs(one(headers[`x-ratelimit-reset-${limit}`])));
  }
  for (const limit of anthropicLimits) {
    const reset = one(headers[`anthropic-ratelimit-${limit}-reset`]);
    const at = reset === undefined ? NaN : Date.parse(reset);
    exhausted(one(headers[`anthropic-ratelimit-${limit}-remaining`]), Number.isFinite(at) ? at - now : undefined);
  }
  return longest;
}

function one(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

const durationUnits: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1 };

/** A duration as OpenAI writes one (`1h2m3.5s`, `6m0s`, `250ms`); undefined when it is not one. */
export function durationMs(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const trimmed = text.trim();
  if (trimmed === '' || trimmed.length > 40 || !/^(?:\d+(?:\.\d+)?(?:ms|h|m|s))+$/.test(trimmed)) return undefined;
  let total = 0;
  for (const [, amount, unit] of trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g))
    total += Number(amount) * durationUnits[unit!]!;
  return Math.ceil(total);
}
