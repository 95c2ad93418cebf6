import type { Context } from 'koa';
import { endpointNames, endpoints } from '../../shared/endpoints.js';

/** Paths of the endpoints whose POST becomes a job: served without the router, their path is their template. */
const queuedPaths = new Set<string>(endpointNames.map((name) => endpoints[name].path));

/** Whether this request goes through admission into a queue. */
export const isQueuedRequest = (ctx: Context): boolean => ctx.method === 'POST' && queuedPaths.has(ctx.path);

/**
 * The route template a request matched (a router's, or a queued endpoint's
 * exact path); undefined for any other URL. Never the raw path (ids, bogus
 * URLs), so what names a metric's label or a span stays bounded.
 */
export function routeTemplate(ctx: Context): string | undefined {
  const matched = (ctx as { _matchedRoute?: unknown })._matchedRoute;
  if (typeof matched === 'string') return matched;
  return isQueuedRequest(ctx) ? ctx.path : undefined;
}
