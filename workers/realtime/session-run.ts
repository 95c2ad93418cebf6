import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import type { Catalog, CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { SettledStatus } from '../../shared/money/usage.js';
import { decodeRealtime, realtimeBeatMs, realtimeClockMs, realtimePeerDeadMs, type RealtimeClose, type RealtimeJobData, type RealtimeStarted } from '../../shared/realtime.js';
import type { CancelRegistry } from '../cancel-registry.js';
import type { ChannelRouter, ResolvedRoute } from '../channel-router.js';
import { adapterMethod } from '../vendors/registry.js';
import type { VendorHttp } from '../vendors/types.js';
import { frameRelayed, sessionClosed, sessionOpened } from './metrics.js';
import { SessionBilling, type SessionBillingDeps } from './session-billing.js';
import type { SessionBus } from './session-bus.js';
import type { RealtimeClientEvent, RealtimeServerEvent, RealtimeVendorSession } from '../vendors/types.js';

/**
 * One Realtime session, the whole life of its job: the vendor's socket opened through its channel's adapter, the
 * session's up channel heard (subscribed before `started` is said), events relayed both ways, each response billed
 * as it ends, beats both ways, and one end, whoever causes it: the client or its api (`close` up, or the api silent
 * for `realtimePeerDeadMs`), the vendor (its socket closing: `close` down, with an error when it failed), the account
 * (a next response it cannot cover: `insufficient_quota`), REALTIME_MAX_SESSION_MS, a cancel, or the worker
 * stopping (1012). The vendor's socket is closed at once in every case, so nothing runs on a vendor's meter unwatched.
 *
 * A job is run once: a session whose worker died is not opened again (the api has told its client already: its
 * worker fell silent), and BullMQ's stalled check fails such a job rather than handing it on (`maxStalledCount: 0`).
 */

export interface SessionRunDeps {
  config: Pick<Config, 'mock' | 'usageBufferRecords' | 'realtimeWorker' | 'vendorTimeouts' | 'alerts'>;
  catalog: Catalog;
  router: ChannelRouter;
  cancels: CancelRegistry;
  bus: SessionBus;
  billing: Omit<SessionBillingDeps, 'config'>;
  vendorHttp: VendorHttp;
  log: Logger;
  /** This process, as `started` names it. */
  workerName: string;
}

/** What a session's job returns: how it went, for the queue's dashboard. */
export interface RealtimeJobResult {
  reason: string;
  responses: number;
  costMicros: number;
}

/** Why a session ended, as its row's `finish_reason` and the metrics say it. */
export type EndReason = 'client_closed' | 'api_gone' | 'vendor_closed' | 'vendor_failed' | 'insufficient_quota' | 'max_duration' | 'cancelled' | 'worker_shutdown' | 'refused';

interface Ending {
  reason: EndReason;
  /** Told to the api (a `close` down), unless it was the api that ended it. */
  close?: RealtimeClose;
  status: SettledStatus;
  errorCode?: string;
}

const defaultConnectTimeoutMs = 10_000;

export class SessionRun {
  private readonly data: RealtimeJobData;
  private readonly sessionId: string;
  private readonly log: Logger;
  private vendorSession: RealtimeVendorSession | undefined;
  private billing: SessionBilling | undefined;
  private route: ResolvedRoute | undefined;
  /** Set once `started` is published: vendor events before it wait in `early`. */
  private started = false;
  private readonly early: RealtimeServerEvent[] = [];
  /** Client events held while a settlement decides whether the next response is covered. */
  private held: RealtimeClientEvent[] | undefined;
  /** A client's `response.create` passed on and not yet answered (`response.created`, or an error). */
  private asked = false;
  /** Responses under way: from their `response.created` to their `response.done`. */
  private responding = 0;
  private settling: Promise<void> = Promise.resolve();
  private lastHeard = Date.now();
  private readonly timers: NodeJS.Timeout[] = [];
  private ending: Ending | undefined;
  private readonly ended: Promise<Ending>;
  private resolveEnded!: (ending: Ending) => void;
  private readonly opened = Date.now();

  constructor(
    private readonly deps: SessionRunDeps,
    private readonly job: Job<RealtimeJobData>,
  ) {
    this.data = job.data;
    this.sessionId = job.id ?? job.data.jobId;
    this.log = deps.log.child({ session: this.sessionId, reqId: this.data.requestId });
    this.ended = new Promise((resolve) => (this.resolveEnded = resolve));
  }

  /** Ends the session from this side (worker shutdown): the api is told with `code`, the vendor's socket closed. */
  stop(code: number, reason: string): void {
    this.end({ reason: 'worker_shutdown', status: 'failed', errorCode: 'worker_shutdown', close: { code, reason, error: { type: 'server_error', code: 'worker_shutdown', message: 'The gateway worker holding this session is shutting down; open a new session.' } } });
  }

  async run(): Promise<RealtimeJobResult> {
    const { deps, data } = this;
    const firstRun = (this.job.attemptsStarted ?? 1) <= 1 && this.job.attemptsMade === 0 && (this.job.stalledCounter ?? 0) === 0;
    if (!firstRun) {
      this.log.warn('a realtime session whose worker was lost is not opened again');
      await deps.bus.send(this.sessionId, 'close', JSON.stringify({ code: 1011, reason: 'worker lost', error: { type: 'server_error', code: 'worker_lost', message: 'The gateway worker holding this session was lost.' } } satisfies RealtimeClose));
      return { reason: 'worker_lost', responses: 0, costMicros: 0 };
    }
    if (Date.now() > data.deadline) {
      this.log.info('the api stopped waiting for this realtime session before a worker took it; not opened');
      return { reason: 'start_wait_over', responses: 0, costMicros: 0 };
    }
    const controller = deps.cancels.start(this.sessionId);
    const onCancel = () => this.end({ reason: 'cancelled', status: 'cancelled' });
    controller.signal.addEventListener('abort', onCancel, { once: true });
    try {
      await deps.bus.listen(this.sessionId, (message) => this.fromApi(message));
      const opened = await this.open(controller.signal);
      if (!opened) return { reason: 'refused', responses: 0, costMicros: 0 };
      const ending = await this.ended;
      return await this.finish(ending);
    } finally {
      controller.signal.removeEventListener('abort', onCancel);
      deps.cancels.finish(this.sessionId);
      deps.bus.forget(this.sessionId);
      for (const timer of this.timers) clearInterval(timer);
    }
  }

  /** The vendor's socket, then `started`; a failure is `refused` with its error, and the job ends. */
  private async open(signal: AbortSignal): Promise<boolean> {
    const { deps, data } = this;
    let model: CatalogModel | undefined;
    try {
      model = deps.catalog.get(data.model);
      if (!model) throw new GatewayError(404, `The model \`${data.model}\` is no longer in the catalog.`, { code: 'model_not_found' });
      const route = (this.route = deps.router.route(model));
      const openRealtime = adapterMethod(route.protocol, 'openRealtime');
      const connectTimeoutMs = Math.max(1, Math.min(deps.config.vendorTimeouts.connectMs || defaultConnectTimeoutMs, data.deadline - Date.now()));
      const session = await openRealtime(
        {
          sessionId: this.sessionId,
          channel: route.channel,
          upstreamModel: route.upstreamModel,
          model: route.model,
          clientModel: data.clientModel ?? data.model,
          log: this.log,
          http: deps.vendorHttp,
          signal,
          connectTimeoutMs,
        },
        { event: (event) => this.fromVendor(event), closed: (end) => this.vendorClosed(end) },
      );
      this.vendorSession = session;
      if (signal.aborted || this.ending) {
        session.close();
        await this.refuse(this.ending ? undefined : new GatewayError(499, 'The session was cancelled before it opened.', { code: 'cancelled' }));
        return false;
      }
    } catch (caught) {
      const error = caught instanceof GatewayError ? caught : signal.aborted ? new GatewayError(499, 'The session was cancelled before it opened.', { code: 'cancelled' }) : new GatewayError(503, 'The vendor could not open a Realtime session.', { type: 'server_error', code: 'vendor_unavailable', cause: caught });
      if (!(caught instanceof GatewayError)) this.log.warn({ err: caught }, 'could not open the vendor realtime session');
      await this.refuse(error);
      return false;
    }
    const route = this.route!;
    this.billing = new SessionBilling({ ...deps.billing, config: deps.config }, data, model, route.channel);
    this.billing.hold();
    sessionOpened(route.channel.vendor);
    await deps.bus.send(this.sessionId, 'started', JSON.stringify({ worker: deps.workerName, vendor: route.channel.vendor } satisfies RealtimeStarted));
    this.started = true;
    this.log.info({ vendor: route.channel.vendor, channel: route.channel.id, model: data.model }, 'realtime session opened');
    for (const event of this.early.splice(0)) this.fromVendor(event);
    this.lastHeard = Date.now();
    this.timers.push(setInterval(() => this.beat(), realtimeBeatMs));
    const cap = setTimeout(
      () =>
        this.end({
          reason: 'max_duration',
          status: 'completed',
          close: { code: 1000, reason: 'maximum session duration', error: { type: 'invalid_request_error', code: 'session_expired', message: `Your session hit the maximum duration of ${Math.round(deps.config.realtimeWorker.maxSessionMs / 60_000)} minutes.` } },
        }),
      deps.config.realtimeWorker.maxSessionMs,
    );
    this.timers.push(cap);
    return true;
  }

  private async refuse(error: GatewayError | undefined): Promise<void> {
    if (error) {
      this.log.info({ status: error.status, code: error.code }, 'realtime session refused');
      await this.deps.bus.send(this.sessionId, 'refused', JSON.stringify(error.toWire()));
    }
    sessionClosedMetric(undefined, 'refused');
  }

  /** Beats to the api, and the api's silence noticed. */
  private beat(): void {
    if (this.ending) return;
    if (Date.now() - this.lastHeard > realtimePeerDeadMs) {
      this.log.warn('the api holding this realtime session fell silent: closing the vendor socket');
      this.end({ reason: 'api_gone', status: 'failed', errorCode: 'api_gone' });
      return;
    }
    void this.deps.bus.send(this.sessionId, 'beat');
  }

  /** A message on the up channel. */
  private fromApi(message: string): void {
    this.lastHeard = Date.now();
    const decoded = decodeRealtime(message);
    if (!decoded || this.ending) return;
    switch (decoded.kind) {
      case 'event': {
        let event: RealtimeClientEvent;
        try {
          event = JSON.parse(decoded.payload) as RealtimeClientEvent;
        } catch {
          return; // the api checked it; a frame that still fails to parse is dropped
        }
        if (event === null || typeof event !== 'object' || typeof event.type !== 'string') return;
        if (this.held) {
          this.held.push(event);
          return;
        }
        this.toVendor(event, decoded.stampMs);
        return;
      }
      case 'close': {
        let close: Partial<RealtimeClose> = {};
        try {
          close = JSON.parse(decoded.payload) as RealtimeClose;
        } catch {
          close = {};
        }
        this.log.info({ code: close.code, reason: close.reason }, 'the client side ended the realtime session');
        this.end({ reason: 'client_closed', status: 'completed' });
        return;
      }
      default:
        return; // a beat: heard
    }
  }

  private toVendor(event: RealtimeClientEvent, stampMs: number | undefined): void {
    if (!this.vendorSession || !this.started) return;
    if (event.type === 'response.create') {
      // One response at a time: the reservation covers one response's worst case, so a second asked for while one
      // is asked or under way (an out-of-band response, say) is refused as OpenAI refuses one in its conversation.
      if (this.asked || this.responding > 0) {
        this.refuseEvent(event, 'conversation_already_has_active_response', 'The session already has a response in progress; through this gateway a session runs one response at a time. Wait for its response.done (or cancel it) and ask again.');
        return;
      }
      this.asked = true;
    }
    this.vendorSession.send(event);
    frameRelayed('up', stampMs === undefined ? undefined : realtimeClockMs() - stampMs);
  }

  /** A vendor event: relayed down (with the client's model name), a response's end billed. */
  private fromVendor(event: RealtimeServerEvent): void {
    if (this.ending) return;
    if (!this.started) {
      this.early.push(event);
      return;
    }
    if ((event.type === 'session.created' || event.type === 'session.updated') && event.session && typeof event.session === 'object') {
      (event.session as Record<string, unknown>).model = this.data.clientModel ?? this.data.model;
    }
    if (event.type === 'response.created') {
      this.billing?.responseCreated(event);
      this.asked = false;
      this.responding += 1;
    } else if (event.type === 'response.done') this.responding = Math.max(0, this.responding - 1);
    // A refused `response.create` never starts: an error while one is asked for frees the next.
    else if (event.type === 'error') this.asked = false;
    void this.deps.bus.send(this.sessionId, 'event', JSON.stringify(event), realtimeClockMs());
    frameRelayed('down');
    if (event.type === 'response.done') this.settle(event);
  }

  /** An `error` event of the gateway's own for a client event it did not pass on. */
  private refuseEvent(event: RealtimeClientEvent, code: string, message: string): void {
    const error = { type: 'invalid_request_error', code, message, param: null, event_id: typeof event.event_id === 'string' ? event.event_id : null };
    void this.deps.bus.send(this.sessionId, 'event', JSON.stringify({ type: 'error', event_id: `event_${randomUUID().replaceAll('-', '').slice(0, 22)}`, error }), realtimeClockMs());
    frameRelayed('down');
  }

  /**
   * Bills a response as its `response.done` arrives. Until the settlement says whether the account covers another
   * response, the client's events are held (a `response.create` must not start one nobody reserved for).
   */
  private settle(event: RealtimeServerEvent): void {
    const billing = this.billing;
    if (!billing) return;
    this.held ??= [];
    this.settling = this.settling.then(async () => {
      const next = await billing.settle(event);
      if (next === 'not_covered') {
        this.end({
          reason: 'insufficient_quota',
          status: 'completed',
          errorCode: 'insufficient_quota',
          close: {
            code: 1008,
            reason: 'insufficient quota',
            error: {
              type: 'insufficient_quota',
              code: 'insufficient_quota',
              message: billing.refusal ?? "You exceeded your current quota: the account's balance cannot cover the session's next response. Add credits to the account.",
            },
          },
        });
        return;
      }
      const held = this.held ?? [];
      this.held = undefined;
      for (const each of held) this.toVendor(each, undefined);
    });
  }

  /** The vendor ended the session. */
  private vendorClosed(end: { code: number; reason: string; error?: GatewayError }): void {
    if (!this.started) {
      // Closed during the handshake: the open rejects or resolves; nothing is relayed yet.
      if (!this.ending) this.end({ reason: 'vendor_failed', status: 'failed', errorCode: end.error?.code ?? 'vendor_closed' });
      return;
    }
    const error = end.error;
    this.end({
      reason: error ? 'vendor_failed' : 'vendor_closed',
      status: error ? 'failed' : 'completed',
      ...(error ? { errorCode: error.code ?? error.type } : {}),
      close: error
        ? { code: 1011, reason: end.reason || 'vendor failed', error: { type: error.type, code: error.code ?? 'vendor_error', message: error.message } }
        : { code: end.code >= 1000 && end.code < 5000 && end.code !== 1005 && end.code !== 1006 ? end.code : 1000, reason: end.reason },
    });
  }

  /** The one end: the vendor's socket closed at once, the api told (unless it ended it), the job left to finish. */
  private end(ending: Ending): void {
    if (this.ending) return;
    this.ending = ending;
    this.vendorSession?.close();
    this.resolveEnded(ending);
  }

  private async finish(ending: Ending): Promise<RealtimeJobResult> {
    const { deps } = this;
    if (ending.close) await deps.bus.send(this.sessionId, 'close', JSON.stringify(ending.close));
    // Responses whose end arrived are billed before the session's row sums them.
    await this.settling;
    const vendor = this.route?.channel.vendor;
    sessionClosedMetric(vendor, ending.reason);
    await this.billing?.end({ opened: this.opened, queueMs: (this.job.processedOn ?? this.opened) - this.job.timestamp, reason: ending.reason, status: ending.status, errorCode: ending.errorCode });
    const sums = this.billing?.sums;
    this.log.info({ reason: ending.reason, responses: sums?.responses ?? 0, cost_micros: sums?.costMicros ?? 0, duration_ms: Date.now() - this.opened }, 'realtime session ended');
    return { reason: ending.reason, responses: sums?.responses ?? 0, costMicros: sums?.costMicros ?? 0 };
  }
}

function sessionClosedMetric(vendor: string | undefined, reason: string): void {
  if (vendor !== undefined) sessionClosed(vendor, reason);
}
