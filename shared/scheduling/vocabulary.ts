/**
 * The scheduler's words, for every part to use: the tiers a request is served in, first served first. A leaf (it
 * imports nothing), so the console's bundle reads the same list the server does.
 */
export const serviceTiers = ['priority', 'default', 'flex'] as const;
export type ServiceTier = (typeof serviceTiers)[number];
