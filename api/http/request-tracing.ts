import type { Context, Middleware } from 'koa';
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  trace,
  type Context as TraceContext,
  type Span,
} from '@opentelemetry/api';
import type { GatewayJobData } from '../../shared/jobs.js';
import type { ReplyMessage } from '../../shared/reply.js';
import { carrierOf, getTracer, markFailed, type TraceCarrier } from '../../shared/tracing.js';
import type { RequestIdState } from './envelope.js';

/**
 * The api's spans of one request (installed only when tracing is on, see
 * shared/tracing.ts):
 * - the server span, `<METHOD> <route template>`, child of the client's
 *   `traceparent` when it sends one;
 * - `admission`, from the request's arrival at an endpoint that queues jobs
 *   until its job is queued: authentication, reading and validating the body,
 *   the model, the reservation and the enqueue (it ends in error when the
 *   request is refused);
 * - `relay`, from the job's enqueue until the client has the answer: the
 *   held connection, a plain body or an SSE stream.
 * The job carries the server span's context, so the worker's spans are its children.
 */
export interface RequestTrace {
  span: Span;
  /** The server span's context: what the admission, the relay and the job descend from. */
  context: TraceContext;
  /** Open until the job is queued. */
  admission: Span | undefined;
  relay: Span | undefined;
  /** Reply messages the relay delivered. */
  replies: number;
}

/** What tracing adds to a request's state (when it is on). */
export interface TraceState {
  trace?: RequestTrace;
}

/** What the server span is told of the routes above the plumbing. */
export interface TracedRoutes {
  /**
   * The route template a request took (a queued endpoint's path, a router's pattern), never its raw path: the span's
   * name.
   */
  routeOf(ctx: Context): string | undefined;
  /** Whether a request goes to an endpoint that queues a job: its admission is a span of its own. */
  queues(method: string, path: string): boolean;
}

/** Probes an orchestrator polls every few seconds: traced, they would drown the requests. */
const untraced = new Set(['/healthz', '/readyz', '/metrics']);

/** The server span around every request (probes aside); put first, so it sees the status the client gets. */
export function traceRequests(routes: TracedRoutes): Middleware<TraceState & Partial<RequestIdState>> {
  const tracer = getTracer();
  return (ctx, next) => {
    if (untraced.has(ctx.path)) return next();
    const parent = propagation.extract(ROOT_CONTEXT, ctx.req.headers);
    const span = tracer.startSpan(ctx.method, { kind: SpanKind.SERVER }, parent);
    const spanContext = trace.setSpan(parent, span);
    const state: RequestTrace = { span, context: spanContext, admission: undefined, relay: undefined, replies: 0 };
    if (routes.queues(ctx.method, ctx.path)) state.admission = tracer.startSpan('admission', undefined, spanContext);
    ctx.state.trace = state;
    ctx.res.once('close', () => finish(ctx, routes, state));
    return context.with(spanContext, next);
  };
}

/** The carrier a job takes along, so the worker's spans join this request's trace. */
export function jobTraceCarrier(state: RequestTrace): TraceCarrier | undefined {
  return carrierOf(state.context);
}

/** The job is queued: admission is over. */
export function traceQueued(state: RequestTrace, data: GatewayJobData, queue: string): void {
  const admission = state.admission;
  if (!admission) return;
  state.admission = undefined;
  if (admission.isRecording()) {
    admission.setAttributes({
      'switchyard.request_id': data.requestId,
      'switchyard.endpoint': data.endpoint,
      'switchyard.model': data.model,
      'switchyard.queue': queue,
      'switchyard.stream': data.stream,
      'switchyard.mode': data.async ? 'async' : data.background ? 'background' : 'held',
      ...(data.accountId ? { 'switchyard.account_id': data.accountId } : {}),
      'switchyard.key_id': data.keyId,
    });
  }
  admission.end();
}

/** What the relay span watches of a held request's reply: whether it streams, and each message delivered to it. */
export interface TracedReply {
  readonly stream: boolean;
  deliver(message: ReplyMessage): void;
}

/**
 * The request is held for its answer: the relay span follows what the reply channel delivers until the client has it.
 */
export function traceRelay(state: RequestTrace, reply: TracedReply): void {
  const span = getTracer().startSpan('relay', undefined, state.context);
  state.relay = span;
  if (!span.isRecording()) return;
  span.setAttribute('switchyard.stream', reply.stream);
  const deliver = reply.deliver.bind(reply);
  reply.deliver = (message: ReplyMessage) => {
    if (state.replies++ === 0) span.addEvent('first reply', { 'switchyard.reply.kind': message.kind });
    if (message.kind === 'error') markFailed(span, wireError(message.payload));
    deliver(message);
  };
}

function wireError(payload: string): { code?: string; message?: string } {
  try {
    return (JSON.parse(payload) as { error?: { code?: string; message?: string } }).error ?? {};
  } catch {
    return {};
  }
}

/** The response is over (sent, or the connection closed): every span of the request ends. */
function finish(ctx: Context & { state: Partial<RequestIdState> }, routes: TracedRoutes, state: RequestTrace): void {
  const { span } = state;
  const status = ctx.res.statusCode;
  const clientGone = !ctx.res.writableFinished;
  const error = status >= 400 ? bodyError(ctx) : undefined;
  if (state.admission) {
    // Refused (or the client left) before its job was queued.
    if (error) markFailed(state.admission, error);
    else if (clientGone)
      markFailed(state.admission, { code: 'client_gone' }, 'the client left before the request was queued');
    state.admission.end();
  }
  if (state.relay) {
    if (state.relay.isRecording()) {
      state.relay.setAttributes({
        'switchyard.replies': state.replies,
        ...(clientGone ? { 'switchyard.client_gone': true } : {}),
      });
      if (error) markFailed(state.relay, error);
    }
    state.relay.end();
  }
  if (span.isRecording()) {
    const route = routes.routeOf(ctx);
    span.updateName(route ? `${ctx.method} ${route}` : ctx.method);
    span.setAttributes({
      // OpenTelemetry's HTTP semantic conventions, by name (their package is large to load for four strings).
      'http.request.method': ctx.method,
      'url.path': ctx.path,
      'http.response.status_code': status,
      ...(route ? { 'http.route': route } : {}),
      ...(ctx.state.requestId ? { 'switchyard.request_id': ctx.state.requestId } : {}),
      ...(clientGone ? { 'switchyard.client_gone': true } : {}),
    });
    // A server span is in error for a 5xx only: a 4xx is the client's.
    if (status >= 500) markFailed(span, error ?? {}, undefined);
  }
  span.end();
}

/** The OpenAI-shaped error the envelope answered with. */
function bodyError(ctx: Context): { code?: string; message?: string; name?: string } | undefined {
  const body = ctx.body as { error?: { code?: string | null; type?: string; message?: string } } | null | undefined;
  const error = body && typeof body === 'object' && !Buffer.isBuffer(body) ? body.error : undefined;
  if (!error) return { name: `http_${ctx.res.statusCode}` };
  return {
    ...(error.code ? { code: error.code } : error.type ? { code: error.type } : {}),
    ...(error.message ? { message: error.message } : {}),
  };
}
