import { readFileSync } from 'node:fs';

/**
 * The money's Redis scripts, kept as `.lua` files beside this module (the
 * build copies them into dist/) and read once, at the first import. Each is
 * sent with `money.lua` before it: the reservation's encoding, the GCRA
 * arithmetic and the integer formatting are written there once and shared.
 */
const read = (name: string) => readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8');
const library = read('money');
const script = (name: string) => `${library}\n${read(name)}`;

/** Checks rate limits, the key's limit and the balance, and reserves the worst case: `reserve()`. */
export const reserveLua = script('reserve');
/** Replaces a reservation by the actual cost once per request id, and appends the usage entry: `settle()`. */
export const settleLua = script('settle');
/** Admits and settles at once a request whose price is known before it is served (a cache hit): `charge()`. */
export const chargeLua = script('charge');
/** Gives back a reservation nothing will settle: `releaseReservation()`. */
export const releaseLua = script('release');
/** Applies one ledger entry to the account's bill, idempotently: the account store's credit. */
export const creditLua = script('credit');
/** Opens an account's bill, or sets whether it is unlimited. */
export const openBillLua = script('open-bill');
