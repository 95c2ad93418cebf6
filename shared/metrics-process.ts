import { createHash, timingSafeEqual } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { Gauge } from 'prom-client';
import type { RedisTarget } from './config.js';
import type { Logger } from './logger.js';
import { activeMetrics, metricsContentType, metricsPrefix, renderMetrics, type MetricsJson } from './metrics.js';
import { createRedis } from './redis.js';

/**
 * How a scrape reaches metrics kept outside the api's process:
 * - `npm start` with its workers in a child process: the api asks the child
 *   over the IPC channel `fork` opened (one message each way per scrape) and
 *   serves both merged on its own `/metrics`;
 * - `--role=worker` with `METRICS_PORT`: the worker process answers
 *   `GET /metrics` on a listener of its own, and `GET /readyz` there for a
 *   health check (200 while it reaches Redis, else 503).
 */

const ask = 'switchyard:metrics?';
const answer = 'switchyard:metrics';
/** A child that has not answered by then is left out of this scrape (restarting, or stuck). */
const askTimeoutMs = 2000;

interface MetricsRequest {
  type: typeof ask;
  id: number;
}

interface MetricsAnswer {
  type: typeof answer;
  id: number;
  metrics: MetricsJson;
}

/** In the forked worker process: answers the parent's metrics requests. */
export function answerMetricsOverIpc(): void {
  if (!process.send) return;
  process.on('message', (message: unknown) => {
    if ((message as MetricsRequest | null)?.type !== ask) return;
    const { id } = message as MetricsRequest;
    const registry = activeMetrics()?.registry;
    void (registry ? registry.getMetricsAsJSON() : Promise.resolve([] as MetricsJson)).then(
      (metrics) => process.send?.({ type: answer, id, metrics } satisfies MetricsAnswer),
      () => process.send?.({ type: answer, id, metrics: [] } satisfies MetricsAnswer),
    );
  });
}

/**
 * In the api of `npm start`: the worker process's metrics, asked for at each
 * scrape. `attach` is called with every child the supervisor launches.
 */
export class WorkerProcessMetrics {
  private child: ChildProcess | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, (metrics: MetricsJson | undefined) => void>();
  private up: Gauge | undefined;

  attach(child: ChildProcess): void {
    this.child = child;
    child.on('message', (message: unknown) => {
      if ((message as MetricsAnswer | null)?.type !== answer) return;
      const { id, metrics } = message as MetricsAnswer;
      this.pending.get(id)?.(restoreNonFinite(metrics));
    });
    child.once('exit', () => {
      if (this.child === child) this.child = undefined;
    });
  }

  /** The child's metrics, or undefined when there is none or it did not answer in time. */
  async collect(): Promise<MetricsJson | undefined> {
    const metrics = await this.request();
    this.upGauge()?.set(metrics ? 1 : 0);
    return metrics;
  }

  private upGauge(): Gauge | undefined {
    const registry = activeMetrics()?.registry;
    if (!registry) return undefined;
    this.up ??= new Gauge({
      name: `${metricsPrefix}worker_process_up`,
      help:
        'Whether the worker process of `npm start` answered this scrape (1) or not (0: its metrics are missing ' +
        'from it).',
      registers: [registry],
    });
    return this.up;
  }

  private request(): Promise<MetricsJson | undefined> {
    const child = this.child;
    if (!child?.connected) return Promise.resolve(undefined);
    const id = ++this.nextId;
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(undefined), askTimeoutMs);
      const finish = (metrics: MetricsJson | undefined) => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(metrics);
      };
      this.pending.set(id, finish);
      try {
        child.send({ type: ask, id } satisfies MetricsRequest, (error) => error && finish(undefined));
      } catch {
        finish(undefined);
      }
    });
  }
}

/** JSON has no NaN or ±Infinity: they crossed the channel as null, and come back as NaN. */
function restoreNonFinite(metrics: MetricsJson): MetricsJson {
  for (const metric of metrics) for (const value of metric.values) if (value.value === null) value.value = Number.NaN;
  return metrics;
}

/**
 * Whether a scrape may read the metrics. With METRICS_TOKEN, only with
 * `Authorization: Bearer <token>` (compared in constant time), from anywhere.
 * Without it, only from this machine: `peer`, the socket's own remote
 * address, is a loopback one. Never a forwarded address (X-Forwarded-For,
 * whatever TRUST_PROXY says): any client can write one. The metrics name
 * every account's traffic, so they are not for whoever finds the port.
 */
export function metricsScrapeAllowed(
  authorization: string | undefined,
  token: string | undefined,
  peer: string | undefined,
): boolean {
  if (token === undefined) return isLoopback(peer);
  const given = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
  if (given === undefined) return false;
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

/** 127.0.0.0/8, ::1, and the IPv4 loopback as an IPv6 socket sees it (`::ffff:127.x.y.z`). */
export function isLoopback(address: string | undefined): boolean {
  if (address === undefined) return false;
  const v4 = address.startsWith('::ffff:') ? address.slice('::ffff:'.length) : address;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4) || address === '::1';
}

/** Why a scrape without METRICS_TOKEN from another machine is refused, and what to do. */
export const metricsLoopbackOnly =
  'GET /metrics is served only to this machine (loopback) while METRICS_TOKEN is unset: set METRICS_TOKEN to ' +
  'scrape it from elsewhere.';

/** How long a readiness probe waits on Redis's PING (a container health check's timeout is a few seconds). */
export const readinessPingTimeoutMs = 1500;

/**
 * The worker's readiness: a PING over a connection of its own to the
 * worker's Redis. It fails at once while that connection is down (no offline
 * queue) and after `readinessPingTimeoutMs` when Redis takes it and does not
 * answer, so a worker cut off from Redis reports not ready.
 */
function redisReadiness(target: RedisTarget | string): { check(): Promise<boolean>; close(): void } {
  const redis = createRedis(target, {
    connectionName: 'worker-readiness',
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
  });
  return {
    async check() {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<boolean>(
        (resolve) => (timer = setTimeout(() => resolve(false), readinessPingTimeoutMs)),
      );
      const ping = redis.ping().then(
        (reply) => reply === 'PONG',
        () => false,
      );
      try {
        return await Promise.race([ping, timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
    close: () => redis.disconnect(),
  };
}

const text = { 'content-type': 'text/plain; charset=utf-8' };

/**
 * `METRICS_PORT`'s listener: `GET /metrics` (at that exact path, a query
 * string aside; behind METRICS_TOKEN when set, else to loopback peers only)
 * and, given the worker's Redis, `GET /readyz`: 200 `{"status":"ready"}`
 * while a PING reaches it, 503 `{"status":"not_ready"}` when not (open like
 * the api's `/readyz`: it says nothing but that). Anything else is a 404.
 */
export async function startMetricsListener(
  port: number,
  host: string,
  log: Logger,
  token?: string,
  readiness?: { redis: RedisTarget | string },
): Promise<{ port: number; close(): Promise<void> }> {
  const probe = readiness && redisReadiness(readiness.redis);
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const known = path === '/metrics' || (probe !== undefined && path === '/readyz');
    if (!known || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res
        .writeHead(known ? 405 : 404, known ? { ...text, allow: 'GET, HEAD' } : text)
        .end(known ? 'Method not allowed\n' : 'Not found\n');
      return;
    }
    if (path === '/readyz') {
      void probe!.check().then((redis) => {
        res.writeHead(redis ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(req.method === 'HEAD' ? undefined : JSON.stringify({ status: redis ? 'ready' : 'not_ready', redis }));
      });
      return;
    }
    if (!metricsScrapeAllowed(req.headers.authorization, token, req.socket.remoteAddress)) {
      if (token === undefined) res.writeHead(403, text).end(`Forbidden: ${metricsLoopbackOnly}\n`);
      else res.writeHead(401, { ...text, 'www-authenticate': 'Bearer' }).end('Unauthorized: METRICS_TOKEN is set\n');
      return;
    }
    renderMetrics().then(
      (body) =>
        res.writeHead(200, { 'content-type': metricsContentType }).end(req.method === 'HEAD' ? undefined : body),
      (error: unknown) => {
        log.warn({ err: error }, 'could not render metrics');
        res.writeHead(500, text).end('Could not render metrics\n');
      },
    );
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
  } catch (error) {
    probe?.close();
    throw error;
  }
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  log.info(
    { port: bound },
    `worker metrics listening on http://${host}:${bound}/metrics${probe ? ` (readiness: /readyz)` : ''}`,
  );
  return {
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        probe?.close();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
