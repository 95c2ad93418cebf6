import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import {
  accessRefusalMessage,
  mayUseModel,
  namesKey,
  type AccessNow,
  type CurrentAccess,
} from '../../shared/access/index.js';
import type { Catalog, CatalogModel } from '../../shared/catalog.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { SettledStatus } from '../../shared/money/usage.js';
import {
  decodeRealtime,
  realtimeBeatMs,
  realtimeClockMs,
  realtimePeerDeadMs,
  type RealtimeClose,
  type RealtimeJobData,
  type RealtimeStarted,
} from '../../shared/realtime.js';
import type { CancelRegistry } from '../cancel-registry.js';
import type { ChannelRouter, ResolvedRoute } from '../channel-router.js';
import { adapterMethod } from '../vendors/registry.js';
import type { VendorHttp } from '../vendors/types.js';
import { frameRelayed, sessionClosed, sessionOpened } from './metrics.js';
import { SessionBilling, type LimitsNow, type SessionBillingDeps } from './session-billing.js';
import { countTextTokens } from '../../shared/tokens.js';
import { realtimeAudioOutputTokens } from '../../shared/money/realtime.js';
import type { SessionBus } from './session-bus.js';
import type { RealtimeClientEvent, RealtimeServerEvent, RealtimeVendorSession } from '../vendors/types.js';

/**
 * One Realtime session, the whole life of its job: the vendor's socket opened through its channel's adapter, the
 * session's up channel heard (subscribed before `started` is said), events relayed both ways, each response billed
 * as it ends, beats both ways, and one end, whoever causes it: the client or its api (`close` up, or the api silent
 * for `realtimePeerDeadMs`), the vendor (its socket closing: `close` down, with an error when it failed), the account
 * (a next response it cannot cover: `insufficient_quota`), the key (revoked, its account disabled, expired, its
 * models narrowed: what it may do is read again at every step, `CurrentAccess`), REALTIME_MAX_SESSION_MS, a cancel, or
 * the worker stopping (1012). A response under way at the end is cancelled at the vendor and its `response.done` (with
 * the vendor's usage) waited for, at most `cancelWaitMs`, and billed (past the wait: the output counted as it passed
 * and the worst case of its input); then the vendor's socket is closed, so nothing runs on a vendor's meter unwatched
 * and nothing that ran goes unbilled.
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
  /** What a key may do now, read again at each step of its sessions (and told of each change). */
  access: CurrentAccess;
}

/**
 * How long a session that ends while a response is under way waits for that response's `response.done` after asking
 * the vendor to cancel it (the usage to bill it by), before its socket is closed and the response billed at what is
 * known. Past Gemini's own wait for a cancelled turn's end (5 s, workers/vendors/gemini/live-translate.ts), so its
 * usage is the one billed.
 */
export const cancelWaitMs = 6_000;

/** Output text kept per response for the count a cut-off response is billed by (past it, 4 characters a token). */
const maxCountedText = 1_000_000;

/**
 * The output a response under way has sent, as its deltas passed: what it is billed by if its `response.done` never
 * comes.
 */
interface Underway {
  text: string;
  /** Characters past `maxCountedText`, counted at 4 a token. */
  overflow: number;
  audioBytes: number;
}

/** What a session's job returns: how it went, for the queue's dashboard. */
export interface RealtimeJobResult {
  reason: string;
  responses: number;
  costMicros: number;
}

/** Why a session ended, as its row's `finish_reason` and the metrics say it. */
export type EndReason =
  | 'client_closed'
  | 'api_gone'
  | 'vendor_closed'
  | 'vendor_failed'
  | 'insufficient_quota'
  | 'access_refused'
  | 'model_not_allowed'
  | 'max_duration'
  | 'cancelled'
  | 'worker_shutdown'
  | 'internal_error'
  | 'refused';

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
  /**
   * Client events held while a settlement or a check of the key's access decides whether the next response may run:
   * none reaches the vendor before the verdict. Let go when the last pending decision (`deciding`) is made.
   */
  private held: RealtimeClientEvent[] | undefined;
  private deciding = 0;
  /** Responses under way by id (from `response.created` to `response.done`), with the output counted so far. */
  private readonly underway = new Map<string, Underway>();
  /** Resolves when nothing is under way any more (or the vendor's socket went), while an ending waits for it. */
  private drained: (() => void) | undefined;
  private vendorGone = false;
  /** Epoch ms past which an ending waits no longer for a cancelled response's end (a stop's deadline). */
  private drainBy: number | undefined;
  private unlisten: (() => void) | undefined;
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

  /**
   * Ends the session from this side (worker shutdown): the api is told with `code`, the vendor's socket closed (a
   * response under way cancelled and billed first, waited for no later than `until`, the stop's deadline).
   */
  stop(code: number, reason: string, until?: number): void {
    if (until !== undefined) this.drainBy = until - 1_000;
    this.end({
      reason: 'worker_shutdown',
      status: 'failed',
      errorCode: 'worker_shutdown',
      close: {
        code,
        reason,
        error: {
          type: 'server_error',
          code: 'worker_shutdown',
          message: 'The gateway worker holding this session is shutting down; open a new session.',
        },
      },
    });
  }

  async run(): Promise<RealtimeJobResult> {
    const { deps, data } = this;
    const firstRun =
      (this.job.attemptsStarted ?? 1) <= 1 && this.job.attemptsMade === 0 && (this.job.stalledCounter ?? 0) === 0;
    if (!firstRun) {
      this.log.warn('a realtime session whose worker was lost is not opened again');
      await deps.bus.send(
        this.sessionId,
        'close',
        JSON.stringify({
          code: 1011,
          reason: 'worker lost',
          error: {
            type: 'server_error',
            code: 'worker_lost',
            message: 'The gateway worker holding this session was lost.',
          },
        } satisfies RealtimeClose),
      );
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
      this.unlisten?.();
      for (const timer of this.timers) clearInterval(timer);
    }
  }

  /** The vendor's socket, then `started`; a failure is `refused` with its error, and the job ends. */
  private async open(signal: AbortSignal): Promise<boolean> {
    const { deps, data } = this;
    let model: CatalogModel | undefined;
    try {
      model = deps.catalog.get(data.model);
      if (!model)
        throw new GatewayError(404, `The model \`${data.model}\` is no longer in the catalog.`, {
          code: 'model_not_found',
        });
      const route = (this.route = deps.router.route(model));
      const openRealtime = adapterMethod(route.protocol, 'openRealtime');
      const connectTimeoutMs = Math.max(
        1,
        Math.min(deps.config.vendorTimeouts.connectMs || defaultConnectTimeoutMs, data.deadline - Date.now()),
      );
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
        await this.refuse(
          this.ending
            ? undefined
            : new GatewayError(499, 'The session was cancelled before it opened.', { code: 'cancelled' }),
        );
        return false;
      }
    } catch (caught) {
      const error =
        caught instanceof GatewayError
          ? caught
          : signal.aborted
            ? new GatewayError(499, 'The session was cancelled before it opened.', { code: 'cancelled' })
            : new GatewayError(503, 'The vendor could not open a Realtime session.', {
                type: 'server_error',
                code: 'vendor_unavailable',
                cause: caught,
              });
      if (!(caught instanceof GatewayError))
        this.log.warn({ err: caught }, 'could not open the vendor realtime session');
      await this.refuse(error);
      return false;
    }
    const route = this.route!;
    this.billing = new SessionBilling({ ...deps.billing, config: deps.config }, data, model, route.channel);
    this.billing.hold();
    sessionOpened(route.channel.vendor);
    await deps.bus.send(
      this.sessionId,
      'started',
      JSON.stringify({ worker: deps.workerName, vendor: route.channel.vendor } satisfies RealtimeStarted),
    );
    this.started = true;
    // A change to the key or its account (revoked, disabled, its limit, budgets or models) is acted on at once, idle or
    // not.
    this.unlisten = deps.access.listen((message) => {
      if (namesKey(message, data.keyId, data.accountId)) this.recheck();
    });
    this.log.info(
      { vendor: route.channel.vendor, channel: route.channel.id, model: data.model },
      'realtime session opened',
    );
    for (const event of this.early.splice(0)) this.fromVendor(event);
    this.lastHeard = Date.now();
    this.timers.push(setInterval(() => this.beat(), realtimeBeatMs));
    const cap = setTimeout(
      () =>
        this.end({
          reason: 'max_duration',
          status: 'completed',
          close: {
            code: 1000,
            reason: 'maximum session duration',
            error: {
              type: 'invalid_request_error',
              code: 'session_expired',
              message:
                `Your session hit the maximum duration of ` +
                `${Math.round(deps.config.realtimeWorker.maxSessionMs / 60_000)} minutes.`,
            },
          },
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
        if (startsResponse(event) && this.started) {
          // What the key may do is read again before a response can start (a `response.create`, or a function call's
          // output, on which a vendor such as Gemini goes on by itself): the event, and every one after it, waits for
          // the verdict, so they reach the vendor in the order the client sent them.
          this.held = [event];
          this.recheck();
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
        this.refuseEvent(
          event,
          'conversation_already_has_active_response',
          'The session already has a response in progress; through this gateway a session runs one response at a ' +
            'time. Wait for its response.done (or cancel it) and ask again.',
        );
        return;
      }
      this.asked = true;
    }
    this.vendorSession.send(event);
    frameRelayed('up', stampMs === undefined ? undefined : realtimeClockMs() - stampMs);
  }

  /** A vendor event: relayed down (with the client's model name), a response's end billed. */
  private fromVendor(event: RealtimeServerEvent): void {
    if (!this.started) {
      if (!this.ending) this.early.push(event);
      return;
    }
    this.track(event);
    if (this.ending) {
      // Nobody listens any more: what the vendor still says is read for the bill only (a cancelled response's end).
      if (event.type === 'response.done') this.settle(event);
      if (!this.busy()) this.drained?.();
      return;
    }
    if (
      (event.type === 'session.created' || event.type === 'session.updated') &&
      event.session &&
      typeof event.session === 'object'
    ) {
      (event.session as Record<string, unknown>).model = this.data.clientModel ?? this.data.model;
    }
    void this.deps.bus.send(this.sessionId, 'event', JSON.stringify(event), realtimeClockMs());
    frameRelayed('down');
    if (event.type === 'response.done') this.settle(event);
  }

  /** Which responses are asked for and under way, and the output each has sent (counted as its deltas pass). */
  private track(event: RealtimeServerEvent): void {
    switch (event.type) {
      case 'response.created': {
        this.billing?.responseCreated(event);
        this.asked = false;
        this.responding += 1;
        const id = responseId(event);
        if (id !== undefined && !this.underway.has(id)) this.underway.set(id, { text: '', overflow: 0, audioBytes: 0 });
        return;
      }
      case 'response.done': {
        this.responding = Math.max(0, this.responding - 1);
        const id = responseId(event);
        if (id !== undefined) this.underway.delete(id);
        return;
      }
      case 'error':
        // A refused `response.create` never starts: an error while one is asked for frees the next.
        this.asked = false;
        return;
      case 'response.output_text.delta':
      case 'response.text.delta':
      case 'response.output_audio_transcript.delta':
      case 'response.audio_transcript.delta': {
        const counted = typeof event.response_id === 'string' ? this.underway.get(event.response_id) : undefined;
        if (counted && typeof event.delta === 'string') {
          const room = Math.max(0, maxCountedText - counted.text.length);
          counted.text += event.delta.slice(0, room);
          counted.overflow += Math.max(0, event.delta.length - room);
        }
        return;
      }
      case 'response.output_audio.delta':
      case 'response.audio.delta': {
        const counted = typeof event.response_id === 'string' ? this.underway.get(event.response_id) : undefined;
        if (counted && typeof event.delta === 'string') counted.audioBytes += base64Bytes(event.delta);
        return;
      }
      default:
        return;
    }
  }

  /** Whether a response is asked for or under way. */
  private busy(): boolean {
    return this.asked || this.responding > 0;
  }

  /** An `error` event of the gateway's own for a client event it did not pass on. */
  private refuseEvent(event: RealtimeClientEvent, code: string, message: string): void {
    const error = {
      type: 'invalid_request_error',
      code,
      message,
      param: null,
      event_id: typeof event.event_id === 'string' ? event.event_id : null,
    };
    void this.deps.bus.send(
      this.sessionId,
      'event',
      JSON.stringify({ type: 'error', event_id: `event_${randomUUID().replaceAll('-', '').slice(0, 22)}`, error }),
      realtimeClockMs(),
    );
    frameRelayed('down');
  }

  /**
   * Bills a response as its `response.done` arrives, the reservation renewed for the next under the limits in force
   * now (the key's access read just before). Until the settlement says whether the next response may run, the
   * client's events are held (a `response.create` must not start one nobody reserved for).
   */
  private settle(event: RealtimeServerEvent): void {
    const billing = this.billing;
    if (!billing) return;
    if (this.ending) {
      // The session is ending: billed, nothing renewed.
      this.settling = this.settling.then(async () => void (await billing.settle(event, undefined)));
      return;
    }
    this.decide(async () => {
      const now = await this.accessNow();
      const stop = this.refusalOf(now);
      const next = await billing.settle(event, stop || this.ending ? undefined : this.limitsOf(now));
      if (this.ending) return false;
      const ending = stop ?? (next === 'not_covered' ? this.quotaEnding(billing) : undefined);
      if (ending) this.end(ending);
      return ending === undefined;
    });
  }

  /**
   * Reads what the key may do now and acts on it: refused (revoked, its account disabled, expired) or its model no
   * longer allowed → the session ends (an `error` event, close 1008); else the reservation held for the next response
   * is admitted again under the key's limit and budgets as they are now, and the session ends when they cannot cover
   * it. Client events are held meanwhile. Called on each change heard of the key or its account, and before each
   * `response.create` is passed on.
   */
  private recheck(): void {
    const billing = this.billing;
    if (this.ending || !this.started || !billing) return;
    this.decide(async () => {
      if (this.ending) return false;
      const now = await this.accessNow();
      if (this.ending) return false;
      const stop = this.refusalOf(now);
      if (stop) {
        this.end(stop);
        return false;
      }
      const limits = this.limitsOf(now);
      if (billing.needsReadmit(limits) && (await billing.readmit(limits)) === 'not_covered') {
        if (!this.ending) this.end(this.quotaEnding(billing));
        return false;
      }
      return !this.ending;
    });
  }

  /**
   * One decision on the session's queue of them (settlements and checks, in turn), client events held until the last.
   */
  private decide(decision: () => Promise<boolean>): void {
    this.held ??= [];
    this.deciding += 1;
    this.settling = this.settling.then(async () => {
      let goOn = false;
      try {
        goOn = await decision();
      } catch (error) {
        // Nothing the client asked is passed on undecided: the session ends.
        this.log.error({ err: error }, 'a realtime session decision failed');
        this.end({
          reason: 'internal_error',
          status: 'failed',
          errorCode: 'internal_error',
          close: {
            code: 1011,
            reason: 'internal error',
            error: {
              type: 'server_error',
              code: 'internal_error',
              message: 'The gateway could not decide whether the session may go on; open a new session.',
            },
          },
        });
      } finally {
        this.deciding -= 1;
      }
      if (!goOn || this.ending || this.deciding > 0) return;
      const held = this.held ?? [];
      this.held = undefined;
      for (const each of held) this.toVendor(each, undefined);
    });
  }

  /** What the key may do now (undefined when it could not be read: the limits captured at the upgrade hold). */
  private async accessNow(): Promise<AccessNow | undefined> {
    try {
      return await this.deps.access.of(this.data.keyId);
    } catch (error) {
      this.log.warn({ err: error }, "could not read the key's access; the limits of the upgrade hold");
      return undefined;
    }
  }

  /** The limits a reservation is held to now. */
  private limitsOf(now: AccessNow | undefined): LimitsNow {
    if (now && 'access' in now)
      return {
        keyLimitMicros: now.access.limitMicros,
        budgets: now.access.budgets ?? [],
        accountName: now.access.accountName,
      };
    return {
      keyLimitMicros: this.data.keyLimitMicros,
      budgets: this.data.budgets ?? [],
      accountName: this.data.accountName,
    };
  }

  /** The end a key's access calls for, if any: refused, or the session's model no longer allowed. */
  private refusalOf(now: AccessNow | undefined): Ending | undefined {
    if (!now) return undefined;
    if ('refused' in now) {
      return {
        reason: 'access_refused',
        status: 'cancelled',
        errorCode: 'invalid_api_key',
        close: {
          code: 1008,
          reason: 'invalid api key',
          error: { type: 'invalid_request_error', code: 'invalid_api_key', message: accessRefusalMessage(now.refused) },
        },
      };
    }
    if (!mayUseModel(now.access, this.data.model)) {
      const model = this.data.clientModel ?? this.data.model;
      return {
        reason: 'model_not_allowed',
        status: 'cancelled',
        errorCode: 'model_not_allowed',
        close: {
          code: 1008,
          reason: 'model not allowed',
          error: {
            type: 'invalid_request_error',
            code: 'model_not_allowed',
            message: `This API key may no longer use the model \`${model}\`.`,
          },
        },
      };
    }
    return undefined;
  }

  private quotaEnding(billing: SessionBilling): Ending {
    return {
      reason: 'insufficient_quota',
      status: 'completed',
      errorCode: 'insufficient_quota',
      close: {
        code: 1008,
        reason: 'insufficient quota',
        error: {
          type: 'insufficient_quota',
          code: 'insufficient_quota',
          message:
            billing.refusal ??
            "You exceeded your current quota: the account's balance cannot cover the session's next response. " +
              'Add credits to the account.',
        },
      },
    };
  }

  /** The vendor ended the session. */
  private vendorClosed(end: { code: number; reason: string; error?: GatewayError }): void {
    this.vendorGone = true;
    this.drained?.();
    if (!this.started) {
      // Closed during the handshake: the open rejects or resolves; nothing is relayed yet.
      if (!this.ending)
        this.end({ reason: 'vendor_failed', status: 'failed', errorCode: end.error?.code ?? 'vendor_closed' });
      return;
    }
    const error = end.error;
    this.end({
      reason: error ? 'vendor_failed' : 'vendor_closed',
      status: error ? 'failed' : 'completed',
      ...(error ? { errorCode: error.code ?? error.type } : {}),
      close: error
        ? {
            code: 1011,
            reason: end.reason || 'vendor failed',
            error: { type: error.type, code: error.code ?? 'vendor_error', message: error.message },
          }
        : {
            code: end.code >= 1000 && end.code < 5000 && end.code !== 1005 && end.code !== 1006 ? end.code : 1000,
            reason: end.reason,
          },
    });
  }

  /**
   * The one end: the api told (unless it ended it), the job left to finish. With nothing under way the vendor's socket
   * is closed at once; a response under way is first cancelled at the vendor (`finish` waits for its end).
   */
  private end(ending: Ending): void {
    if (this.ending) return;
    this.ending = ending;
    this.held = undefined;
    if (this.vendorSession && this.started && !this.vendorGone && this.busy()) {
      try {
        this.vendorSession.send({
          type: 'response.cancel',
          event_id: `event_gw_${randomUUID().replaceAll('-', '').slice(0, 20)}`,
        });
      } catch (error) {
        this.log.warn({ err: error }, 'could not ask the vendor to cancel the response under way');
      }
    } else this.vendorSession?.close();
    this.resolveEnded(ending);
  }

  /**
   * A response under way when the session ended: its `response.done` (the cancel's answer, with the vendor's usage)
   * waited for at most `cancelWaitMs`, then the vendor's socket closed; a response whose end never came is billed at
   * the output counted as it passed and the worst case of its input.
   */
  private async drain(): Promise<void> {
    if (this.busy() && !this.vendorGone && this.vendorSession) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.drained = resolve;
        timer = setTimeout(
          resolve,
          Math.max(0, Math.min(cancelWaitMs, (this.drainBy ?? Number.POSITIVE_INFINITY) - Date.now())),
        );
      });
      clearTimeout(timer);
      this.drained = undefined;
      if (this.busy())
        this.log.warn(
          { vendor_gone: this.vendorGone },
          'the vendor did not end the cancelled response in time: billed at what is known',
        );
    }
    this.vendorSession?.close();
    const billing = this.billing;
    if (!billing) return;
    for (const [id, counted] of this.underway) {
      if (billing.isSettled(id)) continue;
      const output = {
        text: countTextTokens(counted.text) + Math.ceil(counted.overflow / 4),
        audio: realtimeAudioOutputTokens(counted.audioBytes),
      };
      this.settling = this.settling.then(() => billing.settleUnfinished(id, output));
    }
    this.underway.clear();
  }

  private async finish(ending: Ending): Promise<RealtimeJobResult> {
    const { deps } = this;
    if (ending.close) await deps.bus.send(this.sessionId, 'close', JSON.stringify(ending.close));
    // A response under way is ended at the vendor and billed before its socket closes.
    await this.drain();
    // Responses whose end arrived are billed before the session's row sums them.
    await this.settling;
    const vendor = this.route?.channel.vendor;
    sessionClosedMetric(vendor, ending.reason);
    await this.billing?.end({
      opened: this.opened,
      queueMs: (this.job.processedOn ?? this.opened) - this.job.timestamp,
      reason: ending.reason,
      status: ending.status,
      errorCode: ending.errorCode,
    });
    const sums = this.billing?.sums;
    this.log.info(
      {
        reason: ending.reason,
        responses: sums?.responses ?? 0,
        cost_micros: sums?.costMicros ?? 0,
        duration_ms: Date.now() - this.opened,
      },
      'realtime session ended',
    );
    return { reason: ending.reason, responses: sums?.responses ?? 0, costMicros: sums?.costMicros ?? 0 };
  }
}

function sessionClosedMetric(vendor: string | undefined, reason: string): void {
  if (vendor !== undefined) sessionClosed(vendor, reason);
}

function responseId(event: RealtimeServerEvent): string | undefined {
  const id = (event.response as Record<string, unknown> | undefined)?.id;
  return typeof id === 'string' ? id : undefined;
}

/** The bytes a base64 text decodes to (without decoding it). */
function base64Bytes(text: string): number {
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((text.length * 3) / 4) - padding);
}

/**
 * A client event that may start a response: `response.create`, or a function call's output (a vendor may go on by
 * itself).
 */
function startsResponse(event: RealtimeClientEvent): boolean {
  if (event.type === 'response.create') return true;
  const item = (event as { item?: { type?: unknown } }).item;
  return event.type === 'conversation.item.create' && item?.type === 'function_call_output';
}
