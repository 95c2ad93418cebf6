import { serializeList, Token } from 'structured-headers';

/**
 * The `Cache-Status` response header (RFC 9211): a Structured Field list (RFC 9651) with one member, this cache's
 * name and its parameters, built and serialised by `structured-headers`.
 */

/** The cache's name in the list: the member a client or a proxy reads this gateway's outcome from. */
const cacheName = new Token('Switchyard');

/** A parameter's value here: a token, an integer, or `true` (a parameter written bare: `hit`, `stored`). */
type StatusValue = Token | number | true;

/**
 * The member serialised, with a space after each `;` as RFC 9211's examples write it and as this header always came
 * (RFC 9651 reads the space; its serialiser writes none). No value here is a String, the only item that could hold a
 * `;`: every `;` in the serialised text is a parameter's.
 */
function cacheStatus(parameters: ReadonlyArray<readonly [string, StatusValue]>): string {
  return serializeList([[cacheName, new Map(parameters)]]).replaceAll(';', '; ');
}

/** A request served a stored answer, with the seconds it stays fresh: `Switchyard; hit; ttl=N`. */
export function hitStatus(ttlS: number): string {
  return cacheStatus([
    ['hit', true],
    ['ttl', ttlS],
  ]);
}

/**
 * A request served the answer of an identical request's vendor call (its leader's): `Switchyard; fwd=miss; collapsed`.
 */
export const collapsedStatus = cacheStatus([
  ['fwd', new Token('miss')],
  ['collapsed', true],
]);

/**
 * A request that went to the vendor: `fwd=request` when it asked to (`no-cache`), `fwd=miss` when nothing fresh was
 * stored; `stored` when its answer is kept (once it ends well).
 */
export function forwardedStatus(forward: 'request' | 'miss', stored: boolean): string {
  return cacheStatus([['fwd', new Token(forward)], ...(stored ? [['stored', true] as const] : [])]);
}
