import type { ParameterizedContext } from 'koa';
import type { AuthState } from '../accounts/auth.js';
import type { GatewayState } from '../http/context.js';
import type { RouteState } from './endpoint-paths.js';
import type { RequestLogState } from './request-log.js';

/**
 * A request's state, put together from the part each middleware declares
 * beside itself: the plumbing's (request id and logger, trace, metrics'
 * notes), the request log's notes and the route taken.
 */
export type RequestState = GatewayState & RequestLogState & RouteState;

/** Past the API key (or the console's playground key): the key and its access too. */
export type KeyedState = RequestState & AuthState;

/** A request past the API key (every /v1 route but the signed file links, and the console's playground). */
export type KeyedContext = ParameterizedContext<KeyedState>;
