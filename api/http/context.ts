import type { ParameterizedContext } from 'koa';
import type { RequestIdState } from './envelope.js';
import type { MetricsState } from './metrics.js';
import type { TraceState } from './request-tracing.js';

/**
 * What the plumbing leaves on every request's state: the envelope's request
 * id and logger, the trace, the metrics' notes. The rest of the api adds its
 * own parts beside these (api/requests/request-context.ts puts the whole
 * together).
 */
export type GatewayState = RequestIdState & TraceState & MetricsState;

/** Any request's context, as the plumbing sees it. */
export type GatewayContext = ParameterizedContext<GatewayState>;
