import WebSocket, { type RawData } from 'ws';
import { GatewayError } from '../../../shared/errors.js';
import type {
  RealtimeClientEvent,
  RealtimeOpenContext,
  RealtimeServerEvent,
  RealtimeVendorEvents,
  RealtimeVendorSession,
} from '../types.js';
import {
  boundOpening,
  closeThenTerminate,
  openRealtimeSocket,
  pingRealtimeSocket,
  realtimeSocketDefaults,
  realtimeSocketUrl,
  realtimeTransportError,
  sendUnlessStalled,
  type RealtimePinger,
  type RealtimeSocketOptions,
} from '../realtime-socket.js';
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

export type OpenAIRealtimeOptions = RealtimeSocketOptions;

/** The largest frame accepted from the vendor: OpenAI's own cap on an appended chunk is 15 MiB. */
const MAX_VENDOR_FRAME_BYTES = 32 * 1024 * 1024;

/** `https://api.openai.com/v1` → `wss://api.openai.com/v1/realtime?model=<model>` (http → ws for local servers). */
export function openAIRealtimeUrl(baseUrl: string, upstreamModel: string): string {
  const url = realtimeSocketUrl(baseUrl, '/realtime');
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
  const status =
    code === 'invalid_api_key'
      ? 401
      : code === 'rate_limit_exceeded' || code === 'session_limit_reached'
        ? 429
        : code === 'model_not_found'
          ? 404
          : 400;
  return mapOpenAIError({ status, headers: {}, bodyText: JSON.stringify({ error: fields }) }, secrets);
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
  const settings = { ...realtimeSocketDefaults, ...options };
  const secrets = ctx.channel.apiKey ? [ctx.channel.apiKey] : [];
  if (ctx.signal.aborted) return Promise.reject(ctx.signal.reason);

  return new Promise((resolve, reject) => {
    let opening = true;
    let ended = false;
    let closeAsked = false;
    let pinger: RealtimePinger | undefined;
    let graceTimer: NodeJS.Timeout | undefined;

    const socket = openRealtimeSocket(
      openAIRealtimeUrl(ctx.channel.baseUrl, ctx.upstreamModel),
      openaiApi.headers(ctx.channel.apiKey),
      MAX_VENDOR_FRAME_BYTES,
    );
    const stopBounding = boundOpening(socket, ctx, secrets, mapOpenAIError, failOpening);

    function stopOpening() {
      opening = false;
      stopBounding();
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
      pinger?.stop();
      socket.removeAllListeners('message');
      if (socket.readyState !== WebSocket.CLOSED) socket.terminate();
      if (!closeAsked) events.closed(error === undefined ? { code, reason } : { code, reason, error });
    }

    socket.on('error', (error) => {
      if (opening) failOpening(realtimeTransportError(error));
      else endSession(1011, 'vendor connection failed', realtimeTransportError(error));
    });

    socket.on('close', (code, reasonBytes) => {
      clearTimeout(graceTimer);
      const reason = reasonBytes.toString();
      if (opening) {
        failOpening(
          new GatewayError(502, 'The upstream vendor closed the realtime session before it opened.', {
            type: 'server_error',
            code: 'vendor_error',
            retryable: true,
            cause: { code, reason: scrubSecrets(reason, secrets) },
          }),
        );
        return;
      }
      if (code === 1000 || code === 1001) endSession(code, reason);
      else endSession(UNSENDABLE_CODES.has(code) ? 1011 : code, reason, vendorClosedError(code, reason, secrets));
    });

    socket.on('pong', () => pinger?.answered());

    socket.on('message', (data, isBinary) => {
      const event = isBinary ? undefined : parseFrame(data);
      if (!opening) {
        if (event) events.event(event);
        else
          ctx.log.warn(
            { sessionId: ctx.sessionId },
            'upstream vendor sent a realtime frame that is not an event; dropped',
          );
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
        failOpening(
          new GatewayError(502, 'The upstream vendor did not start the realtime session with session.created.', {
            type: 'server_error',
            code: 'vendor_bad_response',
            retryable: true,
          }),
        );
      }
    });

    function startPinging() {
      pinger = pingRealtimeSocket(
        settings.pingIntervalMs,
        () => socket.ping(),
        () =>
          endSession(
            1011,
            'vendor stopped answering',
            new GatewayError(502, 'The upstream vendor stopped answering the realtime session.', {
              type: 'server_error',
              code: 'vendor_timeout',
              retryable: false,
            }),
          ),
      );
    }

    const session: RealtimeVendorSession = {
      send(event: RealtimeClientEvent) {
        if (ended || closeAsked) return;
        if (!sendUnlessStalled(socket, JSON.stringify(event), settings.maxBufferedBytes)) {
          endSession(
            1011,
            'vendor stopped reading',
            new GatewayError(502, 'The upstream vendor stopped reading the realtime session.', {
              type: 'server_error',
              code: 'vendor_timeout',
              retryable: false,
            }),
          );
        }
      },
      close() {
        if (closeAsked) return;
        closeAsked = true;
        pinger?.stop();
        if (ended || socket.readyState === WebSocket.CLOSED) return;
        // A vendor that never answers the close frame is not waited on.
        graceTimer = closeThenTerminate(socket, settings.closeGraceMs, 1000);
      },
    };
  });
}
