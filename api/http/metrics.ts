import type { Context, Middleware } from 'koa';
import type { QueueDepth } from '../../shared/scheduling/index.js';
import { clientClosedEarly, clientClosedStatus } from './client-closed.js';
import type { Config } from '../../shared/config.js';
import { countFrames } from '../../shared/reply.js';
import {
  activeMetrics,
  initMetrics,
  metricsContentType,
  renderMetrics,
  type GatewayMetrics,
} from '../../shared/metrics.js';
import { GatewayError } from '../../shared/errors.js';
import { metricsLoopbackOnly, metricsScrapeAllowed } from '../../shared/metrics-process.js';

/**
 * The api's metrics: every HTTP request (by route template, resolved model
 * and status class), the queue depths its backpressure already reads, and
 * the hooks the request path calls (admission refusals, stream chunks,
 * disconnects). `GET /metrics` answers on the api's own port, outside `/v1`,
 * without an API key: at its exact path only, to METRICS_TOKEN's bearer, or
 * without one to loopback only.
 */

/** What the request path leaves on `ctx.state` for the request metrics. */
export interface MetricsState {
  /** The catalog id the request resolved (set by the endpoint route): the only model a label may name. */
  metricsModel?: string;
  /** `performance.now()` when the first byte of a streamed answer went out. */
  metricsFirstByte?: number;
  metricsStarted?: number;
}

/** What the request metrics read of a request's state. */
type Noted = { state: MetricsState };

/**
 * What the request metrics read of a request's state besides their own notes: the key it came with (labels per key),
 * once past it.
 */
type Counted = MetricsState & { keyId?: string };

const statusClass = (status: number) => (status >= 100 && status < 600 ? `${Math.floor(status / 100)}xx` : '5xx');

/** Resumes of a stream: the chat resume, and a stored response read as a stream. */
const chatResume = '/v1/chat/completions/:id/stream';
const responseRead = '/v1/responses/:id';

/** Where the queue depths come from: the backpressure's last refresh. */
export interface QueueDepthSource {
  depths(): Iterable<[string, QueueDepth]>;
  backlogs(): Iterable<[queue: string, tier: string, account: string, waiting: number]>;
  /** The lanes with jobs waiting that no worker serves with a configured cap. */
  stranded(): ReadonlyArray<{ queue: string; waiting: number }>;
}

export interface ApiMetrics {
  /** Outermost middleware: counts and times every request. */
  requests: Middleware<Counted>;
  /** `GET /metrics`. */
  scrape: Middleware;
}

/**
 * `routeOf` names the route template a request took (a queued endpoint's
 * path, a router's pattern), never its raw path, so the labels stay bounded.
 */
export function apiMetrics(
  config: Pick<Config, 'metrics'>,
  depths: QueueDepthSource,
  routeOf: (ctx: Context) => string | undefined,
): ApiMetrics {
  const metrics = initMetrics(config.metrics);
  metrics.queueDepths = () => depths.depths();
  metrics.backlogs = () => depths.backlogs();
  metrics.strandedLanes = () => depths.stranded().map(({ queue, waiting }): [string, number] => [queue, waiting]);
  return {
    requests: async (ctx, next) => {
      const started = performance.now();
      ctx.state.metricsStarted = started;
      let failed = false;
      try {
        await next();
      } catch (error) {
        failed = true;
        throw error;
      } finally {
        record(metrics, ctx, routeOf(ctx), started, failed);
      }
    },
    scrape: async (ctx, next) => {
      // Only the path as sent, byte for byte: every other spelling (`/metrics/`, `//metrics`, `/%6Detrics`,
      // `/x/../metrics`) is an unknown URL, as a balancer that refuses `/metrics` by its exact path expects.
      if (ctx.originalUrl.split('?')[0] !== '/metrics') return next();
      const token = config.metrics.token;
      // The socket's own peer, never ctx.ip: with TRUST_PROXY that is X-Forwarded-For, which any client writes.
      if (!metricsScrapeAllowed(ctx.get('authorization') || undefined, token, ctx.req.socket.remoteAddress)) {
        if (token === undefined) throw new GatewayError(403, metricsLoopbackOnly, { code: 'metrics_loopback_only' });
        ctx.set('www-authenticate', 'Bearer');
        throw new GatewayError(401, 'GET /metrics needs Authorization: Bearer <METRICS_TOKEN>.', {
          code: 'invalid_metrics_token',
        });
      }
      ctx.set('content-type', metricsContentType);
      ctx.set('cache-control', 'no-store');
      ctx.body = await renderMetrics();
    },
  };
}

function record(
  metrics: GatewayMetrics,
  ctx: Context & { state: Counted },
  template: string | undefined,
  started: number,
  failed: boolean,
): void {
  const now = performance.now();
  const route = template ?? 'other';
  const s = ctx.state;
  const model = s.metricsModel ?? '';
  // A client that hung up before any answer: counted apart (status_class="499"), and in no latency.
  const closed = clientClosedEarly(ctx);
  const status = closed ? clientClosedStatus : failed ? 500 : ctx.respond === false ? ctx.res.statusCode : ctx.status;
  const cls = closed ? String(clientClosedStatus) : statusClass(status);
  const counter = metrics.perKey
    ? metrics.httpRequests.get(route, model, cls, s.keyId ?? '')
    : metrics.httpRequests.get(route, model, cls);
  counter.inc();
  if (closed) return;
  metrics.httpDuration.get(route, cls).observe((now - started) / 1000);
  // A plain answer goes out as the middleware returns; a streamed one said when its first chunk did.
  const firstByte = s.metricsFirstByte ?? (ctx.respond === false ? undefined : now);
  if (firstByte !== undefined) metrics.httpFirstByte.get(route, model).observe((firstByte - started) / 1000);
  if (
    cls === '2xx' &&
    (route === chatResume || (route === responseRead && ctx.method === 'GET' && isTrue(ctx.query.stream)))
  ) {
    metrics.streamResumes.get(route).inc();
  }
}

const isTrue = (value: unknown) => value === 'true' || value === '1';

/** The endpoint route resolved the request's model in the catalog: from now on it may label the request. */
export function noteModel(ctx: Noted, modelId: string): void {
  ctx.state.metricsModel = modelId;
}

/** The first byte of a streamed answer that writes its own response went out now. */
export function markFirstByte(ctx: Noted): void {
  const s = ctx.state;
  if (s.metricsFirstByte === undefined && s.metricsStarted !== undefined) s.metricsFirstByte = performance.now();
}

/**
 * A batch of frames a worker published was written to the client: SSE frames, counted by their blank lines, or
 * the elements of a streamed JSON array (Google's default stream form: `[` opens the first, `,\r\n` each next).
 */
export function streamChunksRelayed(ctx: Noted, frames: string, form: 'sse' | 'array' = 'sse'): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  markFirstByte(ctx);
  metrics.streamChunks.inc(form === 'sse' ? countFrames(frames) : countArrayElements(frames));
}

/** The elements a piece of a streamed JSON array begins: its opening one, and one after each separator. */
function countArrayElements(piece: string): number {
  let count = piece.startsWith('[') ? 1 : 0;
  for (let at = piece.indexOf(',\r\n'); at >= 0; at = piece.indexOf(',\r\n', at + 3)) count++;
  return count;
}

export type DisconnectKind = 'held' | 'stream' | 'follow';

/** The client left before its answer was complete. */
export function clientDisconnected(kind: DisconnectKind): void {
  activeMetrics()?.clientDisconnects.get(kind).inc();
}

/** Admission refused a request: its quota (`key_limit`, `account_balance`) or its rate limits (`rpm`, `tpm`). */
export function admissionRefused(reason: string, keyId: string): void {
  const metrics = activeMetrics();
  if (!metrics) return;
  const rate = reason === 'rpm' || reason === 'tpm';
  if (!rate && reason !== 'key_limit' && reason !== 'account_balance') return;
  const children = rate ? metrics.rateLimitRefusals : metrics.quotaRefusals;
  (metrics.perKey ? children.get(reason, keyId) : children.get(reason)).inc();
}
