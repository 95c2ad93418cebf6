import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import type { Logger } from '../../shared/logger.js';
import { GatewayError, type WireError } from '../../shared/errors.js';
import {
  decodeRealtime,
  realtimeClockMs,
  realtimePeerDeadMs,
  type RealtimeClose,
  type RealtimeStarted,
} from '../../shared/realtime.js';
import type { Config } from '../../shared/config.js';
import type { SessionChannels } from './channels.js';
import { downLatency, framesRelayed, sessionClosed, sessionOpened } from './metrics.js';

/**
 * One Realtime session as the api holds it: first the wait for its worker (`started`, `refused`, or nothing before
 * the start deadline), then the client's WebSocket relayed to and from the worker over the session's channels.
 *
 * Up, each client frame is checked (a text frame, at most REALTIME_MAX_FRAME_BYTES, within
 * REALTIME_MAX_FRAMES_PER_SECOND, a JSON object with a string `type`) and sent on untouched with its arrival stamp;
 * a frame that fails gets an `error` event as OpenAI writes them, and the session lives on. Down, each server event
 * is handed to the client's socket as it came, and the latency the relay added is measured at that moment. The
 * session ends once, whichever side ends it: the worker's `close` (its `error` event first, then its code), the
 * client's close, the client idle for REALTIME_IDLE_MS, a client that stops reading (its socket's buffer past a
 * bound) or stops answering pings, a worker silent for `realtimePeerDeadMs` (an `error` event and 1011), or the api
 * shutting down (1001). Every end the worker did not say itself is said to it (`close` up).
 */

/** What the client's socket may hold unsent before the client is taken for one that does not read. */
export const maxClientBufferedBytes = 8 * 1024 * 1024;
/**
 * A ping to the client this often; no pong by the next ping but one, and the socket is cut (a dead peer found in ≤ 30
 * s).
 */
export const clientPingMs = 10_000;
const pongDeadlineMs = 20_000;
/** Server events that arrive between `started` and the upgrade's completion (a few: `session.created`). */
const maxEarlyEvents = 1000;

/** The close codes a server may send (RFC 6455 §7.4); any other the worker names becomes 1011. */
function sendableCode(code: number): number {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999)
    ? code
    : 1011;
}

/** A close reason fits a control frame: 123 bytes at most. */
function shortReason(reason: string): string {
  if (Buffer.byteLength(reason) <= 123) return reason;
  let cut = reason.slice(0, 120);
  while (Buffer.byteLength(cut) > 120) cut = cut.slice(0, -1);
  return `${cut}…`;
}

const idPrefix = randomBytes(4).toString('hex');
let idCounter = 0;
/** A server event's id, as OpenAI's look (`event_…`): unique within the process, no random draw per event. */
export function serverEventId(): string {
  return `event_${idPrefix}${(idCounter++).toString(36).padStart(8, '0')}`;
}

/** An `error` server event as OpenAI writes one (RealtimeServerEventError). */
export function errorEvent(
  error: { type: string; code: string | null; message: string; param?: string | null },
  clientEventId: string | null = null,
): string {
  return JSON.stringify({
    type: 'error',
    event_id: serverEventId(),
    error: {
      type: error.type,
      code: error.code,
      message: error.message,
      param: error.param ?? null,
      event_id: clientEventId,
    },
  });
}

export type SessionLimits = Config['realtimeClient'];

/** How the wait for the worker ended. */
export type StartOutcome = { started: RealtimeStarted } | { refused: GatewayError };

export class RealtimeSession {
  readonly started: Promise<StartOutcome>;
  private settleStart!: (outcome: StartOutcome) => void;
  private phase: 'starting' | 'upgrading' | 'open' | 'ended' = 'starting';
  private ws: WebSocket | undefined;
  private early: string[] = [];
  private vendor: string | undefined;
  /** Last message of any kind from the worker, and last frame from the client (performance.now()). */
  private lastDown = performance.now();
  private lastClient = performance.now();
  private frameWindow = -1;
  private framesInWindow = 0;
  private pingSentAt: number | undefined;
  private readonly onEnd: () => void;

  constructor(
    readonly id: string,
    readonly keyId: string,
    private readonly channels: SessionChannels,
    private readonly limits: SessionLimits,
    readonly log: Logger,
    /** Called once when the session ends, however it ends (its per-key count, its entry in the gateway). */
    onEnd: () => void,
  ) {
    this.onEnd = onEnd;
    this.started = new Promise((resolve) => (this.settleStart = resolve));
  }

  get ended(): boolean {
    return this.phase === 'ended';
  }

  /** Every message on the session's down channel. */
  down(raw: string): void {
    this.lastDown = performance.now();
    const message = decodeRealtime(raw);
    if (!message) {
      this.log.warn({ raw: raw.slice(0, 200) }, 'unreadable realtime down message');
      return;
    }
    switch (message.kind) {
      case 'beat':
        return;
      case 'started':
        return this.onStarted(message.payload);
      case 'refused':
        return this.onRefused(message.payload);
      case 'event':
        return this.onEvent(message.payload, message.stampMs);
      case 'close':
        return this.onClose(message.payload);
      default:
        this.log.warn({ kind: message.kind }, 'unknown realtime down message');
    }
  }

  private onStarted(payload: string): void {
    let started: RealtimeStarted;
    try {
      started = JSON.parse(payload) as RealtimeStarted;
    } catch {
      started = { worker: 'unknown', vendor: 'unknown' };
    }
    if (this.phase === 'starting') {
      this.phase = 'upgrading';
      this.vendor = typeof started.vendor === 'string' ? started.vendor : 'unknown';
      this.settleStart({ started });
      return;
    }
    // A worker that started after the api stopped waiting: it is told at once (the up channel is heard by then).
    if (this.phase === 'ended') void this.channels.close(this.id, { code: 1001, reason: 'the client is gone' });
  }

  private onRefused(payload: string): void {
    if (this.phase !== 'starting') return;
    let refused: GatewayError;
    try {
      refused = GatewayError.fromWire(JSON.parse(payload) as WireError);
    } catch {
      refused = new GatewayError(502, 'The session could not be started.', {
        type: 'server_error',
        code: 'server_error',
      });
    }
    this.settleStart({ refused });
  }

  private onEvent(payload: string, stampMs: number | undefined): void {
    if (this.phase === 'open') return this.toClient(payload, stampMs);
    if (this.phase === 'upgrading' && this.early.length < maxEarlyEvents) this.early.push(payload);
  }

  private onClose(payload: string): void {
    let end: RealtimeClose;
    try {
      end = JSON.parse(payload) as RealtimeClose;
    } catch {
      end = { code: 1011, reason: 'the session ended' };
    }
    if (this.phase === 'starting') {
      // Ended before it started: answered at the upgrade like a refusal.
      const error = end.error;
      this.settleStart({
        refused: new GatewayError(502, error?.message ?? `The session ended before it started: ${end.reason}`, {
          type: error?.type ?? 'server_error',
          code: error?.code ?? 'server_error',
        }),
      });
      return;
    }
    if (this.phase === 'upgrading') {
      // Kept for the moment the socket opens: the client then gets the error and the close, as a session that ran.
      this.pendingClose = end;
      return;
    }
    if (this.phase !== 'open') return;
    this.closeClient(end, false);
  }

  private pendingClose: RealtimeClose | undefined;

  /** The wait is over without a session (refused, timed out, the client left): nothing more is heard. */
  abandon(): void {
    if (this.phase === 'ended') return;
    this.phase = 'ended';
    this.channels.forget(this.id);
    this.onEnd();
  }

  /** The upgrade completed: the client's socket is the session's from now on. */
  attach(ws: WebSocket, socket: Duplex): void {
    if (this.phase !== 'upgrading') {
      ws.terminate();
      return;
    }
    this.ws = ws;
    this.phase = 'open';
    this.lastClient = this.lastPing = performance.now();
    sessionOpened(this.vendor ?? 'unknown');
    this.log.info({ vendor: this.vendor }, 'realtime session open');
    ws.on('message', (data, isBinary) => this.fromClient(data, isBinary));
    ws.on('pong', () => (this.pingSentAt = undefined));
    ws.on('close', (code, reason) => {
      if (this.phase !== 'open') return;
      const why = reason.toString() || 'client closed';
      this.log.info({ code }, 'realtime client closed the session');
      void this.channels.close(this.id, {
        code: code === 1005 || code === 1006 ? 1000 : code,
        reason: shortReason(why),
      });
      this.finish();
    });
    // A frame past maxPayload or against the protocol: ws has sent its close frame (1009, 1002…) and reports it here.
    // It would go on reading, and dropping, the rest of the frame while it waits for the client's close frame;
    // instead the socket stops reading, says its goodbye, and is cut a second on (as api/jobs/events.ts does).
    ws.on('error', (error) => {
      this.log.info({ err: error }, 'realtime client socket closed on a bad frame');
      process.nextTick(() => socket.pause());
      socket.end();
      setTimeout(() => ws.terminate(), 1000).unref();
    });
    const early = this.early;
    this.early = [];
    for (const payload of early) this.toClient(payload, undefined);
    if (this.pendingClose) this.closeClient(this.pendingClose, false);
  }

  private fromClient(data: RawData, isBinary: boolean): void {
    if (this.phase !== 'open') return;
    const now = performance.now();
    this.lastClient = now;
    const window = Math.floor(now / 1000);
    if (window !== this.frameWindow) {
      this.frameWindow = window;
      this.framesInWindow = 0;
    }
    this.framesInWindow++;
    if (this.framesInWindow > this.limits.maxFramesPerSecond) {
      // One error a second says it; the rest of that second's frames are dropped without one (no echo flood).
      if (this.framesInWindow === this.limits.maxFramesPerSecond + 1) {
        this.refuseFrame(
          'rate_limit_exceeded',
          `More than ${this.limits.maxFramesPerSecond} client events in one second: this event and the rest sent ` +
            `within this second are dropped.`,
          null,
        );
      }
      return;
    }
    const bytes = Array.isArray(data) ? data.reduce((sum, part) => sum + part.length, 0) : data.byteLength;
    if (bytes > this.limits.maxFrameBytes) {
      return this.refuseFrame(
        'event_too_large',
        `The client event is ${bytes} bytes, more than the ${this.limits.maxFrameBytes} a session accepts; it ` +
          `was dropped.`,
        null,
      );
    }
    if (isBinary) {
      return this.refuseFrame(
        'invalid_json',
        'Binary frames are not accepted: send each client event as a JSON text frame.',
        null,
      );
    }
    const text = Array.isArray(data)
      ? Buffer.concat(data).toString('utf8')
      : Buffer.isBuffer(data)
        ? data.toString('utf8')
        : Buffer.from(data).toString('utf8');
    let event: unknown;
    try {
      event = JSON.parse(text);
    } catch (error) {
      return this.refuseFrame('invalid_json', `The client event is not valid JSON: ${(error as Error).message}`, null);
    }
    if (event === null || typeof event !== 'object' || Array.isArray(event)) {
      return this.refuseFrame('invalid_json', 'A client event must be a JSON object with a string `type`.', null);
    }
    const { type, event_id: eventId } = event as { type?: unknown; event_id?: unknown };
    const clientEventId = typeof eventId === 'string' ? eventId : null;
    if (typeof type !== 'string' || type === '') {
      return this.refuseFrame(
        'missing_required_parameter',
        "Missing required parameter: 'type'.",
        clientEventId,
        'type',
      );
    }
    framesRelayed('up');
    void this.channels.send(this.id, 'event', text, realtimeClockMs());
  }

  private refuseFrame(code: string, message: string, clientEventId: string | null, param: string | null = null): void {
    this.log.debug({ code }, 'realtime client event refused');
    this.sendToClient(errorEvent({ type: 'invalid_request_error', code, message, param }, clientEventId));
  }

  private toClient(payload: string, stampMs: number | undefined): void {
    if (!this.sendToClient(payload)) return;
    framesRelayed('down');
    if (stampMs !== undefined) downLatency(stampMs, realtimeClockMs());
  }

  /** Sends unless the client stopped reading: then its session ends (1008), its buffer bounded. */
  private sendToClient(payload: string): boolean {
    const ws = this.ws;
    if (!ws || this.phase !== 'open') return false;
    if (ws.bufferedAmount > maxClientBufferedBytes) {
      this.log.warn({ buffered: ws.bufferedAmount }, 'realtime client is not reading its events; closing the session');
      this.closeClient({ code: 1008, reason: 'the client is not reading its events' }, true);
      return false;
    }
    ws.send(payload);
    return true;
  }

  /**
   * Ends the client's side: the `error` event the end carries, then the close; `tellWorker` when the worker did not
   * end it itself.
   */
  private closeClient(end: RealtimeClose, tellWorker: boolean): void {
    const ws = this.ws;
    if (!ws || this.phase !== 'open') return;
    if (end.error) {
      // Past the buffer bound the error could not be read either: the close alone says it.
      if (ws.bufferedAmount <= maxClientBufferedBytes)
        ws.send(errorEvent({ type: end.error.type, code: end.error.code, message: end.error.message }));
    }
    this.log.info({ code: end.code, reason: end.reason, by: tellWorker ? 'api' : 'worker' }, 'realtime session closed');
    if (tellWorker)
      void this.channels.close(this.id, {
        code: end.code,
        reason: end.reason,
        ...(end.error ? { error: end.error } : {}),
      });
    this.finish();
    ws.close(sendableCode(end.code), shortReason(end.reason));
    // A client that never answers the close frame is cut after a bound (ws's own wait is 30 s).
    setTimeout(() => ws.terminate(), 5000).unref();
  }

  private finish(): void {
    if (this.phase === 'ended') return;
    const wasOpen = this.phase === 'open';
    this.phase = 'ended';
    this.channels.forget(this.id);
    if (wasOpen) sessionClosed(this.vendor ?? 'unknown');
    this.onEnd();
  }

  /**
   * The gateway's once-a-beat look at an open session: a beat up, the worker's silence, the client's idleness, the
   * pings. Returns false once the session has ended.
   */
  tick(now: number): boolean {
    if (this.phase === 'ended') return false;
    if (this.phase !== 'open') return true;
    void this.channels.send(this.id, 'beat');
    if (now - this.lastDown > realtimePeerDeadMs) {
      this.log.warn(
        { silentMs: Math.round(now - this.lastDown) },
        "realtime session's worker went silent; ending the session",
      );
      this.closeClient(
        {
          code: 1011,
          reason: "the session's worker stopped answering",
          error: {
            type: 'server_error',
            code: 'session_worker_lost',
            message:
              "The session's worker stopped answering; the session ended. What ran was billed; open a new session.",
          },
        },
        true,
      );
      return false;
    }
    if (now - this.lastClient > this.limits.idleMs) {
      this.closeClient({ code: 1000, reason: `idle for ${Math.round(this.limits.idleMs / 1000)} s` }, true);
      return false;
    }
    const ws = this.ws!;
    if (this.pingSentAt !== undefined && now - this.pingSentAt > pongDeadlineMs) {
      this.log.info('realtime client stopped answering pings; cutting its socket');
      void this.channels.close(this.id, { code: 1006, reason: 'the client stopped answering pings' });
      this.finish();
      ws.terminate();
      return false;
    }
    if (this.pingSentAt === undefined && now - this.lastPing >= clientPingMs) {
      this.lastPing = now;
      this.pingSentAt = now;
      ws.ping();
    }
    return true;
  }

  private lastPing = 0;

  /** The api is shutting down: 1001 to the client, and the worker told. */
  shutdown(): void {
    if (this.phase === 'open') this.closeClient({ code: 1001, reason: 'server shutting down' }, true);
  }
}
