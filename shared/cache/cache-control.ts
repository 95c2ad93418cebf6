/**
 * The request's `Cache-Control` (RFC 9111 §5.2.1), as the cache reads it. Read here rather than by
 * `http-cache-semantics`: that library decides whether a stored response, by its own headers, may be reused for a
 * request (method, URL, `Vary`, revalidation), and keeps its directive parser to itself. This cache has no stored
 * response headers to hand it (the key is the request's canonical form, and the time an answer is kept is the
 * request's `max-age`), and its parser reads directive names case-sensitively and any number as `max-age` (`-1`,
 * `1.5`), where RFC 9111 compares names case-insensitively and takes delta-seconds as digits only, bounded at 2^31.
 * What is left to write is the few lines below.
 */

/** What a request's `Cache-Control` asks: absent fields ask nothing. */
export interface CacheDirective {
  /** `max-age=N`: an answer up to N seconds old will do (and the answer is kept that long). */
  maxAgeS?: number;
  /** `no-cache`: ask the vendor again, and store its answer. */
  noCache: boolean;
  /** `no-store`: neither read nor write. */
  noStore: boolean;
}

/** Reads a `Cache-Control` request header; directives this cache has no use for are ignored, as RFC 9111 says. */
export function readCacheControl(header: string): CacheDirective {
  const directive: CacheDirective = { noCache: false, noStore: false };
  for (const part of header.split(',')) {
    const [name = '', value] = part.trim().split('=', 2) as [string, string | undefined];
    const key = name.trim().toLowerCase();
    if (key === 'no-cache') directive.noCache = true;
    else if (key === 'no-store') directive.noStore = true;
    else if (key === 'max-age' && value !== undefined) {
      // delta-seconds: digits only (RFC 9111 §1.2.2), quoted or not; an empty value means nothing.
      const digits = value.trim().replace(/^"(.*)"$/, '$1');
      // A value past what is represented is 2^31 (RFC 9111 §1.2.2), however many digits it has.
      if (/^\d+$/.test(digits)) {
        const significant = digits.replace(/^0+(?=\d)/, '');
        directive.maxAgeS = significant.length > 10 ? 2 ** 31 : Math.min(Number(significant), 2 ** 31);
      }
    }
  }
  return directive;
}
