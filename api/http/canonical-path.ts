import type { Middleware } from 'koa';
import Router from '@koa/router';
import { GatewayError } from '../../shared/errors.js';

/*
 * One rule for what a request path is, applied once, before any guard or
 * route looks at it. Guards that match a prefix and routes that match a
 * pattern must see the same string, or a spelling one of them does not know
 * (`/ADMIN`, `/admin//x`, `/%61dmin`, `/v1/../admin`) walks past the guard
 * and into the route. So the path is made canonical here and every matcher
 * in the api compares it exactly, letter case included:
 *
 * - percent-encoded unreserved characters (letters, digits, `-._~`) are
 *   decoded, and the hex of every other escape is upper-cased (RFC 3986
 *   §6.2.2.1–2); a malformed escape or an encoded NUL is a 400;
 * - runs of slashes become one;
 * - `.` and `..` segments are removed (RFC 3986 §5.2.4; `..` stops at the root);
 * - letter case is kept: every router is case-sensitive, so `/ADMIN/...`
 *   matches nothing and answers 404, as an unknown path does.
 */

const unreserved = /[A-Za-z0-9\-._~]/;

/** The canonical form of a path, or undefined when it cannot be one (a malformed escape, an encoded NUL). */
export function canonicalPath(raw: string): string | undefined {
  let decoded = '';
  for (let i = 0; i < raw.length; i++) {
    const char = raw[i]!;
    if (char !== '%') {
      decoded += char;
      continue;
    }
    const hex = raw.slice(i + 1, i + 3);
    if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return undefined;
    const byte = String.fromCharCode(parseInt(hex, 16));
    if (byte === '\0') return undefined;
    decoded += unreserved.test(byte) ? byte : `%${hex.toUpperCase()}`;
    i += 2;
  }
  const out: string[] = [];
  for (const segment of decoded.split('/')) {
    if (segment === '' || segment === '.') continue;
    if (segment === '..') out.pop();
    else out.push(segment);
  }
  // A trailing slash (or a last `.` / `..` segment) keeps the path a directory, as the routers' non-strict matching
  // expects.
  const trailing = decoded.length > 1 && /(?:\/|\/\.|\/\.\.)$/.test(decoded) && out.length > 0;
  return `/${out.join('/')}${trailing ? '/' : ''}`;
}

/** Rewrites `ctx.path` to its canonical form (the query string is kept); a path that has none is a 400. */
export function canonicalizePath(): Middleware {
  return async (ctx, next) => {
    const raw = ctx.path;
    const canonical = canonicalPath(raw);
    if (canonical === undefined) {
      throw new GatewayError(400, 'The request path is not a valid URL path (a malformed or NUL percent-escape).', {
        code: 'invalid_path',
      });
    }
    if (canonical !== raw) ctx.path = canonical;
    await next();
  };
}

/**
 * Every router of the api: case-sensitive, so that a route and the prefix
 * guard in front of it (`router.use`, which @koa/router always matches
 * case-sensitively) agree on what they see.
 */
export function createRouter<State = Record<string, unknown>>(prefix?: string): Router<State> {
  return new Router<State>({ prefix, sensitive: true });
}
