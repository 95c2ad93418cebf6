import { randomBytes } from 'node:crypto';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { WebSocketServer, type WebSocket } from 'ws';
import type { KeyAccess } from '../../shared/accounts.js';
import type { Catalog, CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import { GatewayError, invalidApiKey, modelNotFound } from '../../shared/errors.js';
import { accessRefusalMessage } from '../../shared/access/index.js';
import type { GatewayJobData } from '../../shared/jobs.js';
import type { Logger } from '../../shared/logger.js';
import type { PriceList } from '../../shared/money/pricing.js';
import { releaseReservation } from '../../shared/money/billing.js';
import { realtimeReservationMicros } from '../../shared/money/realtime.js';
import { realtimeQueueName } from '../../shared/realtime-queue.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { RealtimeJobData } from '../../shared/realtime.js';
import { realtimeBeatMs } from '../../shared/realtime.js';
import type { KeyCache } from '../accounts/key-store.js';
import type { SpendEstimate } from '../accounts/spend.js';
import { canonicalPath } from '../http/canonical-path.js';
import { writeRawError } from '../http/raw-http-errors.js';
import type { Backpressure } from '../../shared/scheduling/index.js';
import { enqueue, type Enqueued, type JobPlan } from '../requests/enqueue.js';
import { checkModelAllowed } from '../requests/endpoint-route.js';
import type { ModelResolver } from '../requests/model-resolver.js';
import { SessionChannels } from './channels.js';
import { upgradeRefused } from './metrics.js';
import { RealtimeSession } from './session.js';

/**
 * `GET /v1/realtime?model=…` (OpenAI's Realtime API over WebSocket): everything up to the 101.
 *
 * The upgrade is answered only once the session exists: the key (`Authorization: Bearer`, or a browser's
 * `openai-insecure-api-key.<key>` subprotocol), the model (a realtime one the key may use), admission as every request
 * has it (the waiting room, the key's rates, a reservation of the first response's worst case against its limit and
 * the balance), then the session's job queued on the `realtime` queue at its account's fair place, and a worker that
 * took it and opened the vendor's socket (`started`). Anything else is an HTTP status on the bare socket, in OpenAI's
 * error body, never a socket opened then closed: 400, 401, 403, 404, 429 (with `retry-after` and the key's
 * `x-ratelimit-*`), 503 when no worker starts it within REALTIME_START_WAIT_MS (the job is then taken out of the
 * queue, or the worker holding it told to stop, so no vendor socket opens for nobody). The client leaving during the
 * wait cancels the same way. The session itself is `RealtimeSession`'s.
 */

export const realtimePath = '/v1/realtime';
/** A finished session's job is kept as briefly as a held request's (the record has the session). */
const keepCompleted = { age: 60, count: 1000 };
const keepFailed = { age: 3600, count: 5000 };
/** The subprotocol OpenAI's browser clients offer beside the key; answered back when offered. */
const realtimeSubprotocol = 'realtime';
const keySubprotocol = 'openai-insecure-api-key.';
const tokenChars = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const wsKey = /^[+/0-9A-Za-z]{22}==$/;

export interface RealtimeDeps {
  config: Config;
  redis: Redis;
  /** The api's one subscriber connection (the reply hub's). */
  subscriber: Redis;
  queues: QueueShards;
  backpressure: Backpressure;
  keys: KeyCache;
  catalog: Catalog;
  /** Vendors this gateway has channels for. */
  servingVendors: ReadonlySet<string>;
  /** The models of the other endpoints, to tell a model that exists but is not a realtime one. */
  models: ModelResolver;
  prices: PriceList;
  /** This api's reply channel (its liveness for the workers). */
  replyTo: string;
  log: Logger;
}

/** The subprotocols of a `Sec-WebSocket-Protocol` header, as ws reads them; undefined when the header is malformed. */
function parseSubprotocols(header: string | undefined): string[] | undefined {
  if (header === undefined) return [];
  const names = header.split(',').map((name) => name.trim());
  return names.every((name) => tokenChars.test(name)) ? names : undefined;
}

/** The client's key: the Authorization header, else the browser's subprotocol. */
function clientKey(req: IncomingMessage, protocols: string[]): { key?: string; malformed: boolean } {
  const header = req.headers.authorization;
  if (header !== undefined && header !== '') {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
    return bearer ? { key: bearer, malformed: false } : { malformed: true };
  }
  const offered = protocols.find((name) => name.startsWith(keySubprotocol));
  const key = offered?.slice(keySubprotocol.length);
  return key ? { key, malformed: false } : { malformed: false };
}

/** The same error with the session's id (`x-request-id`) among its headers, as every /v1 answer has it. */
function withRequestId(error: GatewayError, requestId: string): GatewayError {
  return new GatewayError(error.status, error.message, {
    type: error.type,
    code: error.code,
    param: error.param,
    headers: { ...error.headers, 'x-request-id': requestId },
  });
}

/** The longest model name the upgrade reads: catalog ids are far shorter, and an error echoes at most this. */
const maxModelChars = 256;

/**
 * The `model` of the upgrade's query, read from the query string alone (a URL parser would take a path starting
 * `//` for a host, and refuse some as one): exactly once, non-empty, without NUL, of a name's length. A name given
 * twice is refused rather than one of them picked, so that the gateway and anything in front of it cannot read
 * different models out of one request.
 */
function askedModel(url: string): string {
  const at = url.indexOf('?');
  const named = at < 0 ? [] : new URLSearchParams(url.slice(at + 1)).getAll('model');
  if (named.length > 1)
    throw new GatewayError(400, "The parameter 'model' was given more than once; name one model.", {
      param: 'model',
      code: 'invalid_value',
    });
  const asked = named[0];
  if (asked === undefined || asked === '')
    throw new GatewayError(400, "Missing required parameter: 'model'.", {
      param: 'model',
      code: 'missing_required_parameter',
    });
  if (asked.includes('\0'))
    throw new GatewayError(400, "Invalid 'model': it must not contain a NUL character.", {
      param: 'model',
      code: 'invalid_value',
    });
  if (asked.length > maxModelChars)
    throw new GatewayError(400, `Invalid 'model': a model name is at most ${maxModelChars} characters.`, {
      param: 'model',
      code: 'invalid_value',
    });
  return asked;
}

/**
 * Whether an upgrade request is one for the Realtime API (the canonical path, a trailing slash as the routers allow it,
 * any query).
 */
export function isRealtimeUpgrade(req: IncomingMessage): boolean {
  const path = canonicalPath((req.url ?? '/').split('?', 1)[0]!);
  return path === realtimePath || path === `${realtimePath}/`;
}

export class RealtimeGateway {
  private readonly channels: SessionChannels;
  private readonly sessions = new Set<RealtimeSession>();
  /** Sessions open or being opened, per key (MAX_REALTIME_SESSIONS_PER_KEY). */
  private readonly perKey = new Map<string, number>();
  /** Upgrades waiting for their worker: ended with a 503 on shutdown. */
  private readonly waiting = new Set<(error: GatewayError) => void>();
  /** Rate-limit headers (and the request id) for an upgrade's 101. */
  private readonly upgradeHeaders = new WeakMap<IncomingMessage, Record<string, string>>();
  private readonly realtimeModels = new Map<string, CatalogModel>();
  private readonly wss: WebSocketServer;
  private readonly ticker: NodeJS.Timeout;
  private draining = false;

  constructor(private readonly deps: RealtimeDeps) {
    this.channels = new SessionChannels(deps.subscriber, deps.redis, deps.log);
    const limits = deps.config.realtimeClient;
    // Frames past the soft cap are read, refused with an `error` event and dropped; past twice it, ws closes the
    // socket with 1009 as soon as the frame's header says its length, before buffering it.
    this.wss = new WebSocketServer({
      noServer: true,
      clientTracking: false,
      perMessageDeflate: false,
      maxPayload: limits.maxFrameBytes * 2,
      handleProtocols: (protocols) => (protocols.has(realtimeSubprotocol) ? realtimeSubprotocol : false),
    });
    this.wss.on('headers', (headers, req) => {
      for (const [name, value] of Object.entries(this.upgradeHeaders.get(req) ?? {})) headers.push(`${name}: ${value}`);
    });
    // Realtime models with a vendor that serves them here, and the aliases that name one.
    for (const model of deps.catalog.all()) {
      if (model.capability === 'realtime' && model.routes.some((route) => deps.servingVendors.has(route.vendor)))
        this.realtimeModels.set(model.id, model);
    }
    for (const [alias, id] of deps.config.modelAliases) {
      const model = this.realtimeModels.get(id);
      if (model) this.realtimeModels.set(alias, model);
    }
    this.ticker = setInterval(() => this.tick(), realtimeBeatMs);
    this.ticker.unref();
  }

  /**
   * Takes the server's upgrades for the Realtime path; every other upgrade goes on to the listeners that were there
   * (the job events, api/jobs/events.ts), which answer every path they do not know with a 404.
   */
  attach(server: Server): void {
    const others = server.listeners('upgrade') as ((req: IncomingMessage, socket: Duplex, head: Buffer) => void)[];
    server.removeAllListeners('upgrade');
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (!isRealtimeUpgrade(req)) {
        for (const listener of others) listener.call(server, req, socket, head);
        return;
      }
      void this.upgrade(req, socket, head);
    });
  }

  /** Open sessions (and upgrades waiting for their worker). */
  get size(): number {
    return this.sessions.size + this.waiting.size;
  }

  /** Shutdown: new upgrades get a 503, those waiting a 503, every open session 1001 (its worker told). */
  drain(): void {
    this.draining = true;
    const shuttingDown = new GatewayError(503, 'The server is shutting down; open the session again.', {
      type: 'server_error',
      code: 'server_shutting_down',
      headers: { 'retry-after': '1' },
    });
    for (const abort of [...this.waiting]) abort(shuttingDown);
    for (const session of [...this.sessions]) session.shutdown();
  }

  close(): void {
    clearInterval(this.ticker);
    this.drain();
    this.wss.close();
  }

  private tick(): void {
    const now = performance.now();
    for (const session of this.sessions) if (!session.tick(now)) this.sessions.delete(session);
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    // Node leaves an upgraded socket without an error listener: a reset during the wait must not end the process.
    socket.on('error', (error) => this.deps.log.debug({ err: error }, 'realtime client socket error'));
    const sessionId = `sess_${randomBytes(12).toString('hex')}`;
    const log = this.deps.log.child({ session: sessionId });
    try {
      await this.open(sessionId, req, socket, head, log);
    } catch (caught) {
      const error =
        caught instanceof GatewayError
          ? caught
          : new GatewayError(500, 'The session could not be opened.', { type: 'server_error', code: 'server_error' });
      if (!(caught instanceof GatewayError)) log.error({ err: caught }, 'realtime upgrade failed');
      else log.info({ status: error.status, code: error.code }, 'realtime upgrade refused');
      upgradeRefused(error.status);
      // A client that left (499) is not answered: its socket is only let go.
      if (error.status === 499) socket.destroy();
      else if (!socket.destroyed) writeRawError(socket, withRequestId(error, sessionId));
    }
  }

  private async open(
    sessionId: string,
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    log: Logger,
  ): Promise<void> {
    const { config } = this.deps;
    if (this.draining)
      throw new GatewayError(503, 'The server is shutting down; open the session again.', {
        type: 'server_error',
        code: 'server_shutting_down',
        headers: { 'retry-after': '1' },
      });
    // The handshake's own headers first: ws would answer a malformed one itself, after the session was started.
    if (req.method !== 'GET')
      throw new GatewayError(405, 'The Realtime API is opened with GET and a WebSocket upgrade.', {
        code: 'method_not_allowed',
      });
    if (req.headers.upgrade?.toLowerCase() !== 'websocket')
      throw new GatewayError(400, 'The Realtime API needs `Upgrade: websocket`.', { code: 'invalid_upgrade' });
    const version = req.headers['sec-websocket-version'];
    if (!wsKey.test(req.headers['sec-websocket-key'] ?? '') || (version !== '13' && version !== '8')) {
      throw new GatewayError(
        400,
        'The WebSocket handshake is malformed (Sec-WebSocket-Key, Sec-WebSocket-Version 13).',
        { code: 'invalid_upgrade', headers: { 'sec-websocket-version': '13' } },
      );
    }
    const protocols = parseSubprotocols(req.headers['sec-websocket-protocol']);
    if (!protocols)
      throw new GatewayError(400, 'The Sec-WebSocket-Protocol header is malformed.', { code: 'invalid_upgrade' });

    // The key, looked up as every request's is.
    const { key, malformed } = clientKey(req, protocols);
    if (key === undefined) {
      throw invalidApiKey(
        malformed
          ? 'The Authorization header must be "Bearer <API key>".'
          : 'You did not provide an API key. Send it as "Authorization: Bearer <API key>", or in a browser as the ' +
              'subprotocol "openai-insecure-api-key.<API key>" beside "realtime".',
      );
    }
    const verdict = await this.deps.keys.check(key);
    if ('refused' in verdict) {
      if (verdict.refused === 'expired')
        throw invalidApiKey(
          `The API key provided expired at ${new Date(verdict.expiresAt * 1000).toISOString()}. Create a new key ` +
            `or extend this one.`,
        );
      if (verdict.refused === 'disabled') throw invalidApiKey(accessRefusalMessage('disabled'));
      throw invalidApiKey(
        'Incorrect API key provided. Create keys in the console (/console), with `npm run keys -- create`, or ' +
          'with the admin API.',
      );
    }
    const { access } = verdict;

    // The model: a realtime one, and one the key may use.
    const asked = askedModel(req.url ?? '/');
    const model = this.realtimeModels.get(asked);
    if (!model) {
      const other = this.deps.models.get(asked);
      if (other) {
        throw new GatewayError(
          400,
          `The model \`${asked}\` is a ${other.capability} model and is not supported by ${realtimePath}; use a ` +
            `realtime model.`,
          { param: 'model', code: 'model_not_supported' },
        );
      }
      throw modelNotFound(asked);
    }
    checkModelAllowed(access, model.id);

    // Its key's sessions here: counted before anything is awaited, so that upgrades racing each other count each other.
    const held = this.perKey.get(access.keyId) ?? 0;
    if (held >= config.realtimeClient.maxSessionsPerKey) {
      throw new GatewayError(
        429,
        `This API key already holds ${held} Realtime sessions here; close one before opening another.`,
        {
          type: 'rate_limit_exceeded',
          code: 'too_many_sessions',
          headers: { 'retry-after': '1' },
        },
      );
    }
    this.perKey.set(access.keyId, held + 1);
    let counted = true;
    const uncount = () => {
      if (!counted) return;
      counted = false;
      const left = (this.perKey.get(access.keyId) ?? 1) - 1;
      if (left > 0) this.perKey.set(access.keyId, left);
      else this.perKey.delete(access.keyId);
    };
    const session = new RealtimeSession(sessionId, access.keyId, this.channels, config.realtimeClient, log, () => {
      uncount();
      this.sessions.delete(session);
    });
    try {
      await this.admitAndStart(session, req, socket, head, access, model, asked, log);
    } catch (error) {
      session.abandon();
      uncount();
      throw error;
    }
  }

  private async admitAndStart(
    session: RealtimeSession,
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    access: KeyAccess,
    model: CatalogModel,
    asked: string,
    log: Logger,
  ): Promise<void> {
    const { config, redis, queues } = this.deps;
    const arrived = Date.now();
    const startBy = arrived + config.realtimeClient.startWaitMs;
    const sessionId = session.id;
    const weight = access.weight ?? 1;
    // The waiting room of the realtime queue: an account past its share is refused here, before anything is reserved.
    this.deps.backpressure.admit('realtime', undefined, access.accountId, weight);
    // Its vendor's Realtime lane when the vendor's sessions are capped, else its shard of the `realtime` queue.
    const queue = queues.queueNamed(realtimeQueueName(config, model, sessionId));
    const estimate = this.firstResponseEstimate(model);
    const data: RealtimeJobData = {
      requestId: sessionId,
      jobId: sessionId,
      keyId: access.keyId,
      accountId: access.accountId,
      endpoint: 'realtime',
      model: model.id,
      clientModel: asked,
      stream: false,
      deadline: startBy,
      replyTo: this.deps.replyTo,
      arrived,
      // Each renewal of the reservation is held to the key's spending limit as the first one was.
      ...(access.limitMicros !== undefined ? { keyLimitMicros: access.limitMicros } : {}),
      ...(access.budgets ? { budgets: access.budgets, accountName: access.accountName ?? '' } : {}),
    };
    const plan: JobPlan = {
      id: sessionId,
      queue: 'realtime',
      mode: 'held',
      // The realtime job's own shape (shared/realtime.ts); enqueue reads only its ids and writes its claim.
      data: data as unknown as GatewayJobData,
      payload: {},
      options: { jobId: sessionId, attempts: 1, removeOnComplete: keepCompleted, removeOnFail: keepFailed },
      // The reservation's deadline too: the worker holding the session moves it on while the session lives.
      deadline: startBy,
    };

    // Ends the wait: the client left, the deadline passed, or the api shuts down.
    let stop!: (why: { error?: GatewayError; reason: string }) => void;
    const stopped = new Promise<{ error?: GatewayError; reason: string }>((resolve) => (stop = resolve));
    const timer = setTimeout(
      () =>
        stop({
          reason: 'no worker started the session in time',
          error: new GatewayError(
            503,
            `No worker could start the session within ${Math.round(config.realtimeClient.startWaitMs / 1000)} s; ` +
              `retry shortly.`,
            {
              type: 'server_error',
              code: 'overloaded',
              headers: { 'retry-after': '1' },
            },
          ),
        }),
      Math.max(0, startBy - Date.now()),
    );
    // Gone is closed, or half-closed: a WebSocket client never ends its side before the 101, and ws would refuse the
    // socket then (without a word to this wait, which would hold the key's count for ever).
    const onClientGone = () => stop({ reason: 'the client left during the start' });
    socket.once('close', onClientGone);
    socket.once('end', onClientGone);
    const abort = (error: GatewayError) => stop({ error, reason: 'the api is shutting down' });
    this.waiting.add(abort);
    let enqueued: Enqueued | undefined;
    try {
      // The down channel is heard before the job can be taken: `started` cannot be missed.
      const listening = this.channels.listen(sessionId, (message) => session.down(message));
      const first = await Promise.race([listening.then(() => undefined), stopped]);
      if (first) throw first.error ?? new GatewayError(499, first.reason);
      const fair = {
        accountId: access.accountId,
        weight,
        tokens: estimate.tokens,
        tier: 'default' as const,
        contended: true,
      };
      const queued = enqueue({ config, redis }, queue, plan, { spend: { access, estimate }, fair }, log);
      const outcome = await Promise.race([queued.then((value) => ({ queued: value })), stopped]);
      if (!('queued' in outcome)) {
        // Stopped while the add was under way: the job is taken out once it is in.
        void queued.then(
          (value) => this.giveUp(sessionId, queue, value, log),
          () => undefined,
        );
        throw outcome.error ?? new GatewayError(499, outcome.reason);
      }
      enqueued = outcome.queued;
      log.info(
        { model: model.id, account: access.accountId, queue: queue.name, reservedMicros: estimate.micros },
        'realtime session queued',
      );
      const result = await Promise.race([session.started, stopped]);
      if ('started' in result) {
        this.upgradeHeaders.set(req, { ...enqueued.headers, 'x-request-id': sessionId });
        const ws = await new Promise<WebSocket | undefined>((resolve) => {
          if (socket.destroyed || !socket.readable || !socket.writable) return resolve(undefined);
          this.wss.handleUpgrade(req, socket, head, resolve);
          // ws destroys a socket it finds closing without calling back (it completes the upgrade synchronously).
          if (socket.destroyed) resolve(undefined);
        });
        if (!ws) {
          // The worker opened the vendor's socket for a client that is gone: it closes it at once.
          void this.channels.close(sessionId, { code: 1001, reason: 'the client left as the session started' });
          throw new GatewayError(499, 'the client left as the session started');
        }
        this.sessions.add(session);
        session.attach(ws, socket);
        log.info(
          { worker: result.started.worker, vendor: result.started.vendor, startMs: Date.now() - arrived },
          'realtime session started',
        );
        return;
      }
      if ('refused' in result) {
        // Nothing ran: what was reserved is given back (a worker's own release first is harmless: one release holds).
        void releaseReservation(redis, access.accountId, sessionId).catch((error: unknown) =>
          log.warn({ err: error }, 'could not release the reservation of a refused session'),
        );
        throw result.refused;
      }
      await this.giveUp(sessionId, queue, enqueued, log);
      throw result.error ?? new GatewayError(499, result.reason);
    } catch (error) {
      // After the 101 nothing here throws; before it, a session that will not run is told to its worker if it has one.
      if (enqueued && error instanceof GatewayError && error.status === 499)
        log.info('realtime client left during the start; session cancelled');
      throw error;
    } finally {
      clearTimeout(timer);
      socket.off('close', onClientGone);
      socket.off('end', onClientGone);
      this.waiting.delete(abort);
    }
  }

  /**
   * Nobody will use the session: its job taken out of the queue if it still waits there (its reservation given back),
   * else the worker holding it told to stop, on its up channel and on the cancel channel every worker hears.
   */
  private async giveUp(sessionId: string, queue: Queue, enqueued: Enqueued, log: Logger): Promise<void> {
    const removed = await queue.remove(sessionId).then(
      (count) => count === 1,
      () => false,
    );
    if (removed) {
      enqueued.abandon();
      log.info('realtime session taken out of the queue before any worker started it');
      return;
    }
    await Promise.all([
      this.channels.close(sessionId, { code: 1001, reason: 'the client is gone' }),
      this.channels.cancel(sessionId),
    ]);
    log.info('realtime session given up while a worker held it; the worker was told to stop');
  }

  /**
   * The first response's worst case, reserved at the upgrade (the worker renews it after each response:
   * shared/money/realtime.ts says the bound). The tokens counted against a tokens-per-minute limit: the most output
   * of one response (a session's start has no prompt yet).
   */
  private firstResponseEstimate(model: CatalogModel): SpendEstimate {
    return {
      micros: realtimeReservationMicros(this.deps.config, this.deps.prices, model),
      tokens: model.max_output_tokens,
    };
  }
}
