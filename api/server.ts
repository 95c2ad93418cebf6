import type { Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import Koa from 'koa';
import { canonicalizePath } from './http/canonical-path.js';
import compose from 'koa-compose';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { createRedis } from '../shared/redis.js';
import { loadCatalog } from '../shared/catalog.js';
import { PriceList } from '../shared/money/pricing.js';
import { GatewayError } from '../shared/errors.js';
import { replyChannel } from '../shared/redis-keys.js';
import { cappedVendors, knowLanes, Backpressure } from '../shared/scheduling/index.js';
import { queueNames } from '../shared/queues.js';
import { QueueShards } from '../shared/queue-shards.js';
import { resolveChannels } from '../shared/vendors.js';
import { envelope } from './http/envelope.js';
import { traceRequests } from './http/request-tracing.js';
import { tracingEnabled } from '../shared/tracing.js';
import { authenticate } from './accounts/auth.js';
import { KeyCache, KeyStore } from './accounts/key-store.js';
import { accessChangedChannel } from '../shared/redis-keys.js';
import { CurrentAccess } from '../shared/access/index.js';
import { ReplyHub } from './relay/reply-hub.js';
import { apiMetrics } from './http/metrics.js';
import { ModelResolver } from './requests/model-resolver.js';
import { v1Routes } from './requests/v1-routes.js';
import { queuedEndpoint, routeTemplate } from './requests/endpoint-paths.js';
import { noteArrival, noteError } from './requests/request-log.js';
import { adminRoutes } from './accounts/admin-api.js';
import { mcpRoutes } from './mcp/routes.js';
import { mappedTeamNames } from './accounts/oidc-people.js';
import { endpointDispatch } from './requests/endpoint-route.js';
import { geminiMethodRoutes, googleModelRoutes } from './gemini/routes.js';
import { batchRoutes } from './batches/anthropic-routes.js';
import { startBatchSweeps } from './batches/sweep.js';
import { listenForRefills } from './batches/refill.js';
import { openAIBatchRoutes } from './batches/openai-routes.js';
import { advanceOpenAIBatch } from './batches/openai-finalize.js';
import { jobRoutes } from './jobs/routes.js';
import { responseRoutes } from './responses/routes.js';
import { EventLogs } from './relay/event-log.js';
import { ResponseCache } from './cache/response-cache.js';
import { JobEvents } from './jobs/events.js';
import { RealtimeGateway } from './realtime/upgrade.js';
import { LoopStallMonitor } from './http/loop-stall.js';
import { createNodeServer } from './http/node-server.js';
import { probeRoutes, recordProbe, refuseWhileDraining } from './http/readiness.js';
import { closeUnreadRequests } from './http/request-body.js';
import { createBlobStore } from '../storage/create-blob-store.js';
import { openHotRecord } from '../storage/record/hot-state.js';
import { channelFacts, recordChannelsInEffect } from '../storage/record/channels-in-effect.js';
import { consoleRoutes } from './console/routes.js';
import { queueDashboard } from './console/queue-dashboard.js';
import { SessionStore, SigninThrottle } from './console/sessions.js';
import { ConsoleAssets, defaultConsoleDir } from './console/assets.js';
import type { AccountStore } from './accounts/account-store.js';
import { isSignedBlobPath, resolveUrlSecret } from '../storage/blob-urls.js';
import { AccountFileStore } from '../storage/account-files.js';
import { fileRoutes } from './files/routes.js';
import { closeMarginMs, closeRedisBy, settledBy } from '../shared/stop-deadline.js';
import { openMcpRegistry, secretBox } from '../storage/record/mcp-servers.js';
import { McpServerAdmin } from './mcp/server-admin.js';
import { McpQueueDepths } from './mcp/depths.js';
import { McpQueues } from '../shared/mcp/queues.js';

export interface ApiServer {
  server: Server;
  instanceId: string;
  listen(port: number, host: string): Promise<number>;
  /**
   * Drain: new requests get a 503 (and `/readyz` says not ready) while the
   * ones in flight finish, until `until` (epoch ms; default the grace period
   * from now), a hard deadline; then close, within `closeMarginMs` more
   * whether Redis and the record answer or not.
   */
  shutdown(until?: number): Promise<void>;
  /** Requests in flight now (held or streamed answers). */
  readonly inFlight: number;
}

/** ADMIN_EMAIL + ADMIN_PASSWORD: the first admin, made at start, or set back to admin with that password. */
export async function ensureConsoleAdmin(accounts: AccountStore, config: Config, log: Logger): Promise<void> {
  const { adminEmail, adminPassword } = config.console;
  if (!adminEmail && !adminPassword) return;
  if (!adminEmail || !adminPassword)
    throw new Error('Invalid configuration: ADMIN_EMAIL and ADMIN_PASSWORD are set together or not at all');
  if (adminPassword.length < 8) throw new Error('Invalid configuration: ADMIN_PASSWORD must be at least 8 characters');
  const existing = await accounts.findByEmail(adminEmail);
  if (existing) {
    await accounts.update(existing.id, { role: 'admin', password: adminPassword, disabled: false });
    log.info({ account: existing.id }, 'console admin from ADMIN_EMAIL updated');
  } else {
    const made = await accounts.create({
      email: adminEmail,
      password: adminPassword,
      role: 'admin',
      name: 'Administrator',
    });
    log.info({ account: made.id }, 'console admin from ADMIN_EMAIL created');
  }
}

/**
 * OIDC_ONLY leaves passwords to the break-glass admins: said at start when there are none (allowed: the provider is
 * then the only way in), and for each break-glass email that names no admin with a password.
 */
export async function warnBreakGlass(accounts: AccountStore, config: Config, log: Logger): Promise<void> {
  const oidc = config.console.oidc;
  if (!oidc?.only) return;
  if (oidc.breakGlass.length === 0) {
    log.warn(
      'OIDC_ONLY is on with no OIDC_BREAK_GLASS admin: nobody can sign in to the console while the identity ' +
        'provider is unreachable',
    );
    return;
  }
  for (const email of oidc.breakGlass) {
    const account = await accounts.findByEmail(email);
    const hasPassword = account
      ? await accounts.record.selectFrom('accounts').select('password').where('id', '=', account.id).executeTakeFirst()
      : undefined;
    if (!account || account.role !== 'admin' || account.disabled || !hasPassword?.password) {
      log.warn(
        { email },
        'this OIDC_BREAK_GLASS email is not an enabled admin account with a password: it cannot sign in with a ' +
          'password',
      );
    }
  }
}

export interface ApiServerOptions {
  /** The built console (default: dist/console beside the code). */
  consoleDir?: string;
  /**
   * Whether this api's own workers take jobs (`npm start`'s, in its process or
   * their own): `/readyz` says not ready until they do. Left out (`--role=api`),
   * the workers are elsewhere and the api is ready once it is up.
   */
  workersReady?: () => boolean;
}

export async function createApiServer(config: Config, log: Logger, options: ApiServerOptions = {}): Promise<ApiServer> {
  const instanceId = `api-${randomBytes(6).toString('hex')}`;
  // Commands fail fast while Redis is away (the client gets a 503) instead of queueing until it returns.
  const redis = createRedis(config.redis, { connectionName: instanceId, maxRetriesPerRequest: 1 });
  const subscriber = createRedis(config.redis, { connectionName: `${instanceId}-sub` });
  const queues = new QueueShards(redis, config.queueShards, queueNames, cappedVendors(config));

  // The record (PostgreSQL): accounts and keys are written there first; Redis holds their hot copy, loaded from it when
  // lost.
  const { record, hot, close: closeRecord } = await openHotRecord(config.databaseUrl, redis, log, 'the api');
  // The keys cap and the default rates bound what the console's members set on their keys.
  const keyStore = new KeyStore(redis, record, hot, config);
  // Keys made with no account (and every key made before accounts existed) bill the unlimited default account.
  await keyStore.accounts.ensureDefault();
  await ensureConsoleAdmin(keyStore.accounts, config, log);
  await warnBreakGlass(keyStore.accounts, config, log);
  // The channels are configuration: a start with other ones is a change the audit log keeps (channels-in-effect.ts).
  await recordChannelsInEffect(record, channelFacts(resolveChannels(config))).then(
    (row) =>
      row &&
      log.info({ audit: row.id }, 'the channels changed since the record last saw them: written to the audit log'),
    (error: unknown) =>
      log.error(
        { err: error },
        'the audit log could not record the channels this api serves with (channels_not_audited): they are ' +
          'compared again at the next start',
      ),
  );
  const keyCache = new KeyCache(keyStore, config.keyCacheTtlMs);
  // The upstream MCP servers (the file's and those an admin added), followed live (shared/mcp/registry.ts).
  const mcpServers = openMcpRegistry({ config, redis, record, log });
  await mcpServers.start();
  const mcpAdmin = new McpServerAdmin({ record, redis, registry: mcpServers, box: secretBox(config) });
  const hub = new ReplyHub(subscriber, redis, replyChannel(instanceId), log);
  // What keys may do now, as admitted work reads it again at its next step (a request that waited on another's call).
  const access = new CurrentAccess(redis);
  const accessChanged = (message: string) => {
    keyCache.forget(message);
    access.changed(message);
  };
  hub.on(accessChangedChannel, accessChanged);
  keyStore.onAccessChanged = accessChanged;
  hub.onReconnect = () => {
    keyCache.clear();
    access.clear();
  };
  const backpressure = new Backpressure(
    redis,
    queues,
    config.maxWaiting,
    log,
    undefined,
    config.scheduling.waitingFloor,
  );
  // The lanes this api routes to are known, so that one nobody serves any more is found (shared/scheduling/lanes.ts).
  if (queues.laneNames.length > 0) {
    await knowLanes(
      redis,
      queues.laneQueues().map(([, queue]) => queue.name),
    );
    log.info({ lanes: queues.laneNames }, 'capped vendors wait in lanes of their own');
  }
  const catalog = loadCatalog(config.catalogFile);
  const servingVendors = new Set(resolveChannels(config).keys());
  const models = new ModelResolver(catalog, servingVendors, config.modelAliases);
  const prices = PriceList.load(catalog, config);
  const unpriced = catalog
    .all()
    .filter((model) => !prices.has(model.id))
    .map((model) => model.id);
  if (unpriced.length > 0) log.warn({ models: unpriced }, 'these catalog models have no price: they are served free');
  const blobs = createBlobStore(config);
  const urlSecret = await resolveUrlSecret(redis, config.blobUrlSecret);
  const jobEvents = new JobEvents(hub, {
    redis,
    queues,
    blobs,
    keys: keyCache,
    log,
    videoExpirySeconds: config.asyncResultTtlSeconds,
    maxSocketsPerKey: config.maxEventSocketsPerKey,
  });

  let draining = false;
  const loopStalls = new LoopStallMonitor();
  const app = new Koa({ proxy: config.trustProxy });
  app.silent = true;
  const probes = probeRoutes({
    redisReachable: () =>
      redis.ping().then(
        () => true,
        () => false,
      ),
    recordReachable: recordProbe(record),
    workersReady: () => options.workersReady?.() ?? true,
    subscriberConnected: () => hub.connected,
    draining: () => draining,
    vendors: servingVendors.size > 0,
    loopStalls,
    strandedLanes: () => backpressure.stranded(),
  });

  // Tracing on: a server span around everything (it sees the status the envelope answers); off, nothing at all.
  if (tracingEnabled())
    app.use(
      traceRequests({ routeOf: routeTemplate, queues: (method, path) => queuedEndpoint(method, path) !== undefined }),
    );
  // Prometheus: every request counted and timed (around the envelope, so it sees the status answered); GET /metrics
  // among the probes. The MCP servers' tool calls count as the `mcp` capability's depth (what its workers' autoscaler
  // reads). One handle per server's queue in this api, for the calls it queues and the depths it reads.
  const mcpQueues = new McpQueues(redis, mcpServers);
  const mcpDepths = new McpQueueDepths({ registry: mcpServers, queues: mcpQueues, log });
  mcpDepths.start();
  const depths = {
    depths: () => [...backpressure.depths(), ...mcpDepths.depths()],
    backlogs: () => backpressure.backlogs(),
    stranded: () => backpressure.stranded(),
  };
  const metrics = apiMetrics(config, depths, routeTemplate);
  probes.get('/metrics', metrics.scrape);
  app.use(metrics.requests);
  app.use(closeUnreadRequests);
  app.use(envelope(log, { arrived: noteArrival, failed: noteError }));
  // Every guard and route below sees the one canonical path (api/http/canonical-path.ts).
  app.use(canonicalizePath());
  const logs = new EventLogs(redis, log);
  const cache = new ResponseCache(redis, config, log);
  cache.listen(hub);
  const relayDeps = { config, redis, queues, hub, backpressure, models, prices, logs, cache, access };
  const endpointDeps = { ...relayDeps, blobs };
  // OpenAI's Batch API on the batch engine, over the account's files (api/batches/openai-*.ts).
  const openaiBatchDeps = { ...endpointDeps, files: new AccountFileStore(redis, blobs), log };
  // Batches' windows refilled when a worker asks, an OpenAI batch's files written once it ends (api/batches/refill.ts).
  listenForRefills(hub, redis, queues, log, {
    keepMs: config.batches.resultsKeepMs,
    advance: (id) => advanceOpenAIBatch(openaiBatchDeps, id),
  });
  const jobs = jobRoutes({ ...relayDeps, blobs, urlSecret });
  const assets = new ConsoleAssets(options.consoleDir ?? defaultConsoleDir());
  if (!assets.built)
    log.warn({ dir: assets.dir }, 'the console is not built: /console answers 503 until `npm run build` runs');
  const sessions = new SessionStore(redis, config.console.sessionIdleSeconds, config.console.sessionMaxSeconds);
  const refuseNew = refuseWhileDraining(() => draining);
  // Everything outside /v1: probes (answered while draining), then the admin API and the console.
  const elsewhere = compose<Koa.Context>([
    probes.routes(),
    refuseNew,
    // /admin/queues (and its way in from the console, /console/queue-dashboard): every queue shard the api has.
    queueDashboard({ queues: queues.all(), config, sessions, accounts: keyStore.accounts }),
    // MCP: the upstream servers' tools, for the gateway's keys (api/mcp/routes.ts).
    mcpRoutes({ config, redis, keys: keyCache, hub, queues, log }, mcpServers, mcpQueues).routes(),
    adminRoutes(keyStore, config.adminToken, mappedTeamNames(config.console.oidc), mcpAdmin).routes(),
    consoleRoutes({
      ...relayDeps,
      blobs,
      keyStore,
      sessions,
      throttle: new SigninThrottle(redis),
      assets,
      mcp: mcpAdmin,
      mcpServers,
    }).routes(),
  ] as Koa.Middleware[]);
  // /v1 past the API key: a POST to an endpoint row goes to the route every row gets (one lookup by path, the
  // hot path); every other /v1 URL goes through the routers.
  const v1 = v1Routes({ models, record });
  // Google's model methods (`…/models/{model}:{method}`), under /v1beta and, as the GenAI SDKs call them, under /v1.
  const geminiMethods = geminiMethodRoutes(endpointDeps);
  const keyed = compose<Koa.Context>([
    authenticate(keyCache),
    geminiMethods,
    // A Responses or Messages request may name the MCP servers its tool loop runs on.
    endpointDispatch({ ...endpointDeps, mcpServers }),
    jobs.authed.routes(),
    fileRoutes({ config, files: new AccountFileStore(redis, blobs), record, redis }).routes(),
    batchRoutes({ ...endpointDeps, record }, log).routes(),
    openAIBatchRoutes({ ...openaiBatchDeps, record }).routes(),
    responseRoutes(endpointDeps).routes(),
    v1.routes(),
    v1.allowedMethods(),
  ] as Koa.Middleware[]);
  // /v1beta, Google's Gemini API, past the API key: the model methods, the models list, Google's 404 for the rest.
  const google = compose<Koa.Context>([
    authenticate(keyCache),
    geminiMethods,
    googleModelRoutes({ models }),
  ] as Koa.Middleware[]);
  const signedFiles = jobs.public.routes() as Koa.Middleware;
  app.use(async (ctx, next) => {
    if (ctx.req.httpVersion === '1.1' && !ctx.req.headers.host) {
      throw new GatewayError(400, 'An HTTP/1.1 request must carry a Host header.', { code: 'invalid_http_request' });
    }
    const path = ctx.path;
    if (path.startsWith('/v1beta/') || path === '/v1beta') return refuseNew(ctx, () => google(ctx, next));
    if (!path.startsWith('/v1/') && path !== '/v1') return elsewhere(ctx, next);
    return refuseNew(ctx, () => (isSignedBlobPath(path, ctx.querystring) ? signedFiles(ctx, next) : keyed(ctx, next)));
  });

  await hub.start();
  hub.startHeartbeat(config.orphanAfterMs);
  // Batches canceled or past their deadline are ended by a sweep (one api at a time).
  const batchSweeps = startBatchSweeps(
    { redis, queues, config, log, openai: openaiBatchDeps },
    config.batches.sweepIntervalMs,
  );
  await backpressure.start();

  const server = createNodeServer(config.clientTimeouts, app.callback());
  jobEvents.attach(server);
  // `GET /v1/realtime` (api/realtime/): its upgrades taken before the job events' listener sees them.
  const realtime = new RealtimeGateway({
    config,
    redis,
    subscriber,
    queues,
    backpressure,
    keys: keyCache,
    catalog,
    servingVendors,
    models,
    prices,
    replyTo: hub.channel,
    log,
  });
  realtime.attach(server);

  return {
    server,
    instanceId,
    listen: (port, host) =>
      new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          const address = server.address();
          resolve(typeof address === 'object' && address ? address.port : port);
        });
      }),
    get inFlight() {
      return hub.size;
    },
    shutdown: (until = Date.now() + config.shutdownGraceMs) =>
      shutdownApi(
        {
          log,
          server,
          hub,
          jobEvents,
          logs,
          loopStalls,
          backpressure,
          queues,
          redis,
          subscriber,
          closeRecord,
          drain: () => (
            (draining = true),
            batchSweeps.stop(),
            mcpServers.stop(),
            mcpDepths.stop(),
            void mcpQueues.close(),
            realtime.close()
          ),
        },
        until,
      ),
  };
}

/** What an api's shutdown stops, in order. */
interface ApiParts {
  log: Logger;
  server: ReturnType<typeof createNodeServer>;
  hub: ReplyHub;
  jobEvents: JobEvents;
  logs: EventLogs;
  loopStalls: LoopStallMonitor;
  backpressure: Backpressure;
  queues: QueueShards;
  redis: Redis;
  subscriber: Redis;
  closeRecord: () => Promise<void>;
  /** From now on new requests are refused (503, `connection: close`). */
  drain(): void;
}

/** Drains the requests in flight until `until`, ends the rest with a 503, then closes everything, each step bounded. */
async function shutdownApi(parts: ApiParts, until: number): Promise<void> {
  const { log, server, hub, jobEvents, logs, loopStalls, backpressure, queues, redis, subscriber, closeRecord } = parts;
  // The listener stays open while draining: a new request (and a balancer's /readyz) gets a 503 with
  // `connection: close` rather than a refused connection, until the requests in flight are done.
  parts.drain();
  server.closeIdleConnections();
  while (hub.size > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  server.close();
  server.closeIdleConnections();
  hub.stop();
  // Past the drain every step is bounded: a Redis that is gone would hold a cancel, BullMQ's close and a QUIT for ever.
  const closeBy = Math.max(until, Date.now()) + closeMarginMs;
  if (hub.size > 0) {
    log.warn(
      { pending: hub.size },
      'grace period over; ending the requests in flight with an error and cancelling their jobs',
    );
    // Cut silently, a stream looks finished (HTTP 200) and its job runs on for nobody.
    const aborting = hub.abortAll(
      new GatewayError(503, 'The server shut down before the request finished; retry the request.', {
        type: 'server_error',
        code: 'server_shutting_down',
        headers: { 'retry-after': '1' },
      }),
    );
    if (!(await settledBy(aborting, closeBy)))
      log.warn('the jobs of the requests ended were not all cancelled in time: given up (they run for nobody)');
  }
  server.closeAllConnections();
  jobEvents.close();
  logs.close();
  loopStalls.stop();
  backpressure.stop();
  // With Redis away there is nothing to wait for: the queues' close is left to run on, and the connections dropped.
  const closing = queues.close();
  if (!(await settledBy(closing, redis.status === 'ready' ? closeBy : Date.now())))
    log.warn({ redis: redis.status }, 'the job queues did not close (Redis is not answering): given up');
  // The record first: its close raises the record's high-water mark in Redis too.
  await settledBy(closeRecord(), closeBy);
  await Promise.allSettled([closeRedisBy(subscriber, closeBy), closeRedisBy(redis, closeBy)]);
}

export type { Redis };
