import { endpointNames, endpoints, type Endpoint } from '../../shared/endpoints.js';
import { geminiEndpoint } from '../gemini/paths.js';

/**
 * Each queued endpoint by the path of its POST: the one place an endpoint row is registered with the api. Google's
 * rows have a template for a path (`/v1beta/models/{model}:generateContent`): they are found by the path's shape
 * (`api/gemini/paths.ts`), never by their template written out.
 */
const byPath = new Map<string, Endpoint>(
  endpointNames.filter((name) => endpoints[name].pipeline !== 'gemini').map((name) => [endpoints[name].path, name]),
);

/**
 * The endpoint row a request's method and path name, its trailing-slash form included; undefined for any other request.
 */
export function queuedEndpoint(method: string, path: string): Endpoint | undefined {
  if (method !== 'POST') return undefined;
  return (
    byPath.get(path) ??
    (path.length > 1 && path.endsWith('/') ? byPath.get(path.slice(0, -1)) : undefined) ??
    geminiEndpoint(method, path)
  );
}

/** What routing leaves on the request's state: the template of the route it took. */
export interface RouteState {
  /** A queued endpoint's path (its row's), set when the request is dispatched to it. */
  route?: string;
}

/**
 * The route template a request took (a queued endpoint's path, or a router's
 * pattern); undefined for any other URL. Never the raw path (ids, bogus
 * URLs), so what names a metric's label or a span stays bounded.
 */
export function routeTemplate(ctx: { state: RouteState }): string | undefined {
  if (ctx.state.route !== undefined) return ctx.state.route;
  const matched = (ctx as { _matchedRoute?: unknown })._matchedRoute;
  return typeof matched === 'string' ? matched : undefined;
}
