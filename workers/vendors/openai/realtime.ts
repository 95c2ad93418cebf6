import WebSocket, { type RawData } from 'ws';
import type { IncomingMessage } from 'node:http';
import { GatewayError, isGatewayError } from '../../../shared/errors.js';
import type {
  RealtimeClientEvent,
  RealtimeOpenContext,
  RealtimeServerEvent,
  RealtimeVendorEvents,
  RealtimeVendorSession,
} from '../types.js';
import { openaiApi } from './api.js';
import { mapOpenAIError, readVendorError, scrubSecrets } from './map-openai-error.js';

/**
 * OpenAI's Realtime API (`wss://…/v1/realtime?model=…`) as a vendor session: the worker's events go to OpenAI and
 * OpenAI's come back untouched, since the client speaks OpenAI's GA protocol already. Each vendor frame is parsed once
 * (the relay bills from `response.done`) and each client event written once; nothing else happens per frame.
 *
 * Opening waits for OpenAI's `session.created` within `ctx.connectTimeoutMs`: a refusal at the upgrade (bad key, rate
 * limit, unknown model) is an HTTP answer mapped as the chat adapter maps one, and an `error` event before
 * `session.created` is read the same way. Once open, a vendor that stops answering pings, drops the connection or
 * stops reading what is sent ends the session with an error, so no session outlives its socket unnoticed.
 */

export interface OpenAIRealtimeOptions {
  /** How often the vendor is pinged; a ping unanswered by the next one ends the session. */
  pingIntervalMs?: number;
  /** How long a close asked here may take before the socket is destroyed. */
  closeGraceMs?: number;
  /** Bytes written but not yet taken by the vendor past which it is taken for stuck. */
  maxBufferedBytes?: number;
}

const DEFAULTS: Required<OpenAIRealtimeOptions> = {
  pingIntervalMs: 15_000,
  closeGraceMs: 3_000,
  maxBufferedBytes: 16 * 1024 * 1024,
};

/** The largest frame accepted from the vendor: OpenAI's own cap on an appended chunk is 15 MiB. */
const MAX_VENDOR_FRAME_BYTES = 32 * 1024 * 1024;
/** Enough of a refused upgrade's body for any error message. */
const MAX_REFUSAL_BODY_BYTES = 64 * 1024;

/** `https://api.openai.com/v1` → `wss://api.openai.com/v1/realtime?model=<model>` (http → ws for local servers). */
export function openAIRealtimeUrl(baseUrl: string, upstreamModel: string): string {
  const url = new URL(baseUrl);
  if (url.protocol === 'https:') url.protocol = 'wss:';
  else if (url.protocol === 'http:') url.protocol = 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/realtime`;
  url.searchParams.set('model', upstreamModel);
  return url.toString();
}

/** Close codes a peer may not send in a close frame: they say the connection failed without one. */
const UNSENDABLE_CODES = new Set([1004, 1005, 1006, 1015]);

function vendorClosedError(code: number, reason: string, secrets: readonly string[]): GatewayError {
  const said = reason ? `: ${scrubSecrets(reason, secrets)}` : '';
  return new GatewayError(502, `The upstream vendor ended the realtime session (close ${code}${said}).`, {
    type: 'server_error',
    code: 'vendor_error',
    retryable: false,
  });
}

/** An `error` event OpenAI sends instead of `session.created` (a refused key or model on an accepted socket). */
function mapOpeningErrorEvent(event: RealtimeServerEvent, secrets: readonly string[]): GatewayError {
  const fields = readVendorError(event);
  const code = fields?.code ?? '';
  const status = code === 'invalid_api_key' ? 401 : code === 'rate_limit_exceeded' || code === 'session_limit_reached' ? 429 : code === 'model_not_found' ? 404 : 400;
  return mapOpenAIError({ status, headers: {}, bodyText: JSON.stringify({ error: fields }) }, secrets);
}

/** Reads a refused upgrade's answer (bounded in size and time) and maps it as any OpenAI HTTP error. */
function readRefusal(response: IncomingMessage, secrets: readonly string[], deadlineMs: number): Promise<GatewayError> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      response.removeAllListeners('data');
      response.destroy();
      const bodyText = Buffer.concat(chunks).toString('utf8');
      resolve(mapOpenAIError({ status: response.statusCode ?? 502, headers: response.headers, bodyText }, secrets));
    };
    const timer = setTimeout(finish, deadlineMs);
    response.on('data', (chunk: Buffer) => {
      if (size >= MAX_REFUSAL_BODY_BYTES) return;
      chunks.push(chunk);
      size += chunk.length;
      if (size >= MAX_REFUSAL_BODY_BYTES) finish();
    });
    response.once('end', finish);
    response.once('error', finish);
    response.once('close', finish);
  });
}

function transportError(error: unknown): GatewayError {
  if (isGatewayError(error)) return error;
  // Host names stay out of the message: base URLs can be internal.
  return new GatewayError(502, 'The upstream vendor could not be reached.', {
    type: 'server_error',
    code: 'vendor_unreachable',
    retryable: true,
    cause: error,
  });
}

function timeoutError(): GatewayError {
  return new GatewayError(504, 'The upstream vendor did not open the realtime session in time.', {
    type: 'server_error',
    code: 'vendor_timeout',
    retryable: true,
  });
}

function parseFrame(data: RawData): RealtimeServerEvent | undefined {
  try {
    const value: unknown = JSON.parse(typeof data === 'string' ? data : data.toString());
    return typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string'
      ? (value as RealtimeServerEvent)
      : undefined;
  } catch {
    return undefined;
  }
}

/** Opens a Realtime session with OpenAI (or an OpenAI-compatible server) on the channel. */
export function openOpenAIRealtime(
  ctx: RealtimeOpenContext,
  events: RealtimeVendorEvents,
  options: OpenAIRealtimeOptions = {},
): Promise<RealtimeVendorSession> {
  const settings = { ...DEFAULTS, ...options };
  const secrets = ctx.channel.apiKey ? [ctx.channel.apiKey] : [];
  if (ctx.signal.aborted) return Promise.reject(ctx.signal.reason);

  return new Promise((resolve, reject) => {
    let opening = true;
    let ended = false;
    let closeAsked = false;
    let awaitingPong = false;
    let pingTimer: NodeJS.Timeout | undefined;
    let graceTimer: NodeJS.Timeout | undefined;

    const socket = new WebSocket(openAIRealtimeUrl(ctx.channel.baseUrl, ctx.upstreamModel), {
      headers: openaiApi.headers(ctx.channel.apiKey),
      maxPayload: MAX_VENDOR_FRAME_BYTES,
      // Base64 audio barely compresses; deflating it would only cost CPU on both ends.
      perMessageDeflate: false,
      followRedirects: false,
    });

    const openDeadline = setTimeout(() => failOpening(timeoutError()), ctx.connectTimeoutMs);
    const onAbort = () => failOpening(ctx.signal.reason);
    ctx.signal.addEventListener('abort', onAbort, { once: true });

    function stopOpening() {
      opening = false;
      clearTimeout(openDeadline);
      ctx.signal.removeEventListener('abort', onAbort);
    }

    function failOpening(error: unknown) {
      if (!opening) return;
      stopOpening();
      ended = true;
      socket.removeAllListeners('message');
      socket.terminate();
      reject(error);
    }

    /** The session ends on the vendor's side (or is taken for dead): said once, never after a close asked here. */
    function endSession(code: number, reason: string, error?: GatewayError) {
      if (ended) return;
      ended = true;
      clearInterval(pingTimer);
      socket.removeAllListeners('message');
      if (socket.readyState !== WebSocket.CLOSED) socket.terminate();
      if (!closeAsked) events.closed(error === undefined ? { code, reason } : { code, reason, error });
    }

    socket.once('unexpected-response', (_request, response) => {
      void readRefusal(response, secrets, Math.min(ctx.connectTimeoutMs, 5_000)).then((error) => {
        ctx.log.debug({ upstreamStatus: response.statusCode, err: error }, 'upstream vendor refused the realtime session');
        failOpening(error);
      });
    });

    socket.on('error', (error) => {
      if (opening) failOpening(transportError(error));
      else endSession(1011, 'vendor connection failed', transportError(error));
    });

    socket.on('close', (code, reasonBytes) => {
      clearTimeout(graceTimer);
      const reason = reasonBytes.toString();
      if (opening) {
        failOpening(new GatewayError(502, 'The upstream vendor closed the realtime session before it opened.', {
          type: 'server_error',
          code: 'vendor_error',
          retryable: true,
          cause: { code, reason: scrubSecrets(reason, secrets) },
        }));
        return;
      }
      if (code === 1000 || code === 1001) endSession(code, reason);
      else endSession(UNSENDABLE_CODES.has(code) ? 1011 : code, reason, vendorClosedError(code, reason, secrets));
    });

    socket.on('pong', () => {
      awaitingPong = false;
    });

    socket.on('message', (data, isBinary) => {
      const event = isBinary ? undefined : parseFrame(data);
      if (!opening) {
        if (event) events.event(event);
        else ctx.log.warn({ sessionId: ctx.sessionId }, 'upstream vendor sent a realtime frame that is not an event; dropped');
        return;
      }
      if (event?.type === 'session.created') {
        stopOpening();
        startPinging();
        events.event(event);
        resolve(session);
      } else if (event?.type === 'error') {
        failOpening(mapOpeningErrorEvent(event, secrets));
      } else {
        failOpening(new GatewayError(502, 'The upstream vendor did not start the realtime session with session.created.', {
          type: 'server_error',
          code: 'vendor_bad_response',
          retryable: true,
        }));
      }
    });

    function startPinging() {
      pingTimer = setInterval(() => {
        if (awaitingPong) {
          endSession(1011, 'vendor stopped answering', new GatewayError(502, 'The upstream vendor stopped answering the realtime session.', {
            type: 'server_error',
            code: 'vendor_timeout',
            retryable: false,
          }));
          return;
        }
        awaitingPong = true;
        socket.ping();
      }, settings.pingIntervalMs);
      pingTimer.unref();
    }

    const session: RealtimeVendorSession = {
      send(event: RealtimeClientEvent) {
        if (ended || closeAsked) return;
        if (socket.bufferedAmount > settings.maxBufferedBytes) {
          endSession(1011, 'vendor stopped reading', new GatewayError(502, 'The upstream vendor stopped reading the realtime session.', {
            type: 'server_error',
            code: 'vendor_timeout',
            retryable: false,
          }));
          return;
        }
        socket.send(JSON.stringify(event));
      },
      close() {
        if (closeAsked) return;
        closeAsked = true;
        clearInterval(pingTimer);
        if (ended || socket.readyState === WebSocket.CLOSED) return;
        socket.close(1000);
        // A vendor that never answers the close frame is not waited on.
        graceTimer = setTimeout(() => socket.terminate(), settings.closeGraceMs);
        graceTimer.unref();
      },
    };
  });
}
