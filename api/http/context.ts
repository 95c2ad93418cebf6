import type { RouterContext } from '@koa/router';
import type { ParameterizedContext } from 'koa';
import type { AuthState } from '../accounts/auth.js';
import type { RouteState } from '../requests/endpoint-paths.js';
import type { RequestLogState } from '../requests/request-log.js';
import type { RequestIdState } from './envelope.js';
import type { MetricsState } from './metrics.js';
import type { TraceState } from './request-tracing.js';

/**
 * The gateway's request state, put together from the part each middleware
 * declares beside itself: the envelope's request id and logger, the request
 * log's notes, the trace, the metrics' notes, the route taken, and (past the
 * API key) the key and its access.
 */
export type GatewayState = RequestIdState & RequestLogState & TraceState & MetricsState & RouteState & Partial<AuthState>;

/** Any request's context. */
export type GatewayContext = ParameterizedContext<GatewayState>;

export type KeyedState = GatewayState & AuthState;

/** A request past the API key (every /v1 route but the signed file links). */
export type KeyedContext = ParameterizedContext<KeyedState>;

/** A /v1 route's context: a keyed request with the router's parameters. */
export type KeyedRouteContext = RouterContext<KeyedState>;
