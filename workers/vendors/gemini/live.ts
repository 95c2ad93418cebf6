import WebSocket, { type RawData } from 'ws';
import { GatewayError } from '../../../shared/errors.js';
import {
  boundOpening,
  closeThenTerminate,
  openRealtimeSocket,
  pingRealtimeSocket,
  realtimeSocketDefaults,
  realtimeSocketUrl,
  realtimeTransportError,
  sendUnlessStalled,
  type RealtimeSocketOptions,
} from '../realtime-socket.js';
import type {
  RealtimeClientEvent,
  RealtimeOpenContext,
  RealtimeVendorEvents,
  RealtimeVendorSession,
} from '../types.js';
import { geminiApi, GEMINI_API_VERSION } from './api.js';
import { mapLiveClose } from './live-errors.js';
import { GeminiLiveTranslator, type LiveTranslatorOptions } from './live-translate.js';
import { mapGeminiError } from './map-gemini-error.js';

/*
 * Gemini Live, the Gemini API's bidirectional streaming method, as the protocol stands (in our words):
 *
 * - One WebSocket per session at `/ws/google.ai.generativelanguage.<version>.GenerativeService.BidiGenerateContent`
 *   on the API's host, the key in `x-goog-api-key` (or `?key=`). Every frame is one JSON object with exactly one
 *   top-level field.
 * - The client's first message is `setup` and it is sent once: `model` (`models/<id>`), `generationConfig`
 *   (`responseModalities`: one of AUDIO or TEXT; `speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName`;
 *   `maxOutputTokens`, sampling settings), `systemInstruction` (a Content of text parts), `tools`
 *   (`functionDeclarations`, Google Search), `realtimeInputConfig` (`automaticActivityDetection`: on by default,
 *   `disabled: true` for client-marked turns; its sensitivity, padding and silence), `inputAudioTranscription` and
 *   `outputAudioTranscription` (empty objects switch them on), session resumption and context compression. The
 *   server answers `setupComplete`; nothing in the setup can change on that socket afterwards (resumption on a
 *   new socket is Google's way to change it, the model excepted).
 * - Then the client sends any of: `realtimeInput` — `audio` (a Blob: base64 `data`, `mimeType`
 *   `audio/pcm;rate=16000`, 16-bit little-endian mono), `video`, `text`, `activityStart`/`activityEnd` (only with
 *   automatic detection off; the end of an activity is the end of the user's turn), `audioStreamEnd` (the
 *   microphone went quiet: detection flushes); `clientContent` — `turns` (Contents appended to the context) and
 *   `turnComplete` (true: generate now); `toolResponse` — `functionResponses`, each `{id, name, response}` with
 *   the id of the call it answers.
 * - The server sends: `serverContent` — `modelTurn.parts` (audio as `inlineData` `audio/pcm;rate=24000`, text, or
 *   thoughts marked `thought`), `inputTranscription`/`outputTranscription` (`{text, finished}`, in no fixed order
 *   with the model's parts), `generationComplete` (the model is done generating), `turnComplete` (the turn is over;
 *   after an interruption it follows `interrupted`), `interrupted` (user activity cut the model off);
 *   `toolCall` — `functionCalls` (`{id, name, args}`) the model waits on; `toolCallCancellation` — `ids` of calls
 *   that are void after an interruption; `usageMetadata` — the turn's tokens (`promptTokenCount`,
 *   `responseTokenCount`, `cachedContentTokenCount`, `thoughtsTokenCount`, `toolUsePromptTokenCount`, each with
 *   details by modality), one report per turn, not a running total; `goAway` — `timeLeft` before the server ends
 *   the connection; `sessionResumptionUpdate` when resumption is on.
 * - The server ends a session with a close code and a reason in Google's words (`live-errors.ts`).
 *
 * This adapter opens the socket and completes a `setup` with OpenAI's session defaults within the connect
 * deadline, so a refused key, an unknown model or an unreachable vendor is an answer at the client's upgrade.
 * Since clients send their settings in a `session.update` after `session.created`, a change of settings before the
 * conversation begins opens a fresh socket with the new setup (and closes the first); after it begins, a change is
 * refused with an error event. The translation both ways is `live-translate.ts`; settings `live-setup.ts`; usage
 * `live-usage.ts`.
 */

export interface GeminiLiveOptions extends LiveTranslatorOptions, RealtimeSocketOptions {
  /** How long the session may last, for `session.expires_at`. */
  maxSessionMs?: number;
}

/** The largest frame taken from Gemini (its audio chunks are a few kilobytes). */
const MAX_VENDOR_FRAME_BYTES = 16 * 1024 * 1024;

/**
 * `https://generativelanguage.googleapis.com` →
 * `wss://…/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent`.
 */
export function geminiLiveUrl(baseUrl: string): string {
  return realtimeSocketUrl(
    baseUrl,
    `/ws/google.ai.generativelanguage.${GEMINI_API_VERSION}.GenerativeService.BidiGenerateContent`,
  ).toString();
}

const badFrame = () =>
  new GatewayError(502, 'The upstream vendor sent a frame that is not a Gemini Live message.', {
    type: 'server_error',
    code: 'vendor_bad_response',
    retryable: false,
  });

function parseFrame(data: RawData): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Array.isArray(data) ? Buffer.concat(data).toString('utf8') : data.toString());
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Opens a socket and completes `setup` on it within the connect deadline. Resolves with the socket once
 * `setupComplete` came; rejects with the GatewayError for a refused upgrade, a close, a failure, the deadline or
 * the abort signal. The socket is the caller's from then on (its listeners here are removed).
 */
function connectLive(
  ctx: RealtimeOpenContext,
  setup: Record<string, unknown>,
  secrets: readonly string[],
): Promise<WebSocket> {
  if (ctx.signal.aborted) return Promise.reject(ctx.signal.reason);
  return new Promise((resolve, reject) => {
    let settled = false;
    const socket = openRealtimeSocket(
      geminiLiveUrl(ctx.channel.baseUrl),
      geminiApi.headers(ctx.channel.apiKey),
      MAX_VENDOR_FRAME_BYTES,
    );
    const stopBounding = boundOpening(socket, ctx, secrets, mapGeminiError, fail);

    function settle() {
      settled = true;
      stopBounding();
      socket
        .removeAllListeners('open')
        .removeAllListeners('message')
        .removeAllListeners('close')
        .removeAllListeners('unexpected-response');
      socket.removeAllListeners('error');
    }
    function fail(error: unknown) {
      if (settled) return;
      settle();
      // A socket that failed may still emit an error; nobody listens to it any more.
      socket.on('error', () => {});
      socket.terminate();
      reject(error);
    }

    socket.on('error', (error) => fail(realtimeTransportError(error)));
    socket.once('open', () => socket.send(JSON.stringify({ setup })));
    socket.on('close', (code, reason) => fail(mapLiveClose(code, reason.toString(), secrets)));
    socket.on('message', (data) => {
      const message = parseFrame(data);
      if (message === undefined) return fail(badFrame());
      if (message.setupComplete === undefined) return fail(badFrame());
      settle();
      resolve(socket);
    });
  });
}

/** Opens a Gemini Live session on the channel, spoken to the worker in OpenAI's GA Realtime events. */
export async function openGeminiLive(
  ctx: RealtimeOpenContext,
  events: RealtimeVendorEvents,
  options: GeminiLiveOptions = {},
): Promise<RealtimeVendorSession> {
  const settings = { ...realtimeSocketDefaults, ...options };
  const secrets = ctx.channel.apiKey ? [ctx.channel.apiKey] : [];
  let socket: WebSocket;
  let ended = false;
  let closeAsked = false;
  let goAwayLeft: string | undefined;
  /** Aborts a reconfiguration's connect when the session ends meanwhile. */
  const ending = new AbortController();

  const translator = new GeminiLiveTranslator(
    {
      sessionId: ctx.sessionId,
      clientModel: ctx.clientModel,
      upstreamModel: ctx.upstreamModel,
      maxSessionMs: options.maxSessionMs,
    },
    {
      vendor: (message) => {
        if (ended) return;
        if (!sendUnlessStalled(socket, JSON.stringify(message), settings.maxBufferedBytes)) {
          endSession(
            1011,
            'vendor not reading',
            new GatewayError(502, "The upstream vendor stopped taking the session's audio.", {
              type: 'server_error',
              code: 'vendor_stalled',
              retryable: false,
            }),
          );
        }
      },
      emit: (event) => {
        if (!ended) events.event(event);
      },
      reconfigure: async (setup) => {
        const signal = AbortSignal.any([ctx.signal, ending.signal]);
        const next = await connectLive({ ...ctx, signal }, setup, secrets);
        if (ended) {
          next.terminate();
          throw new GatewayError(499, 'The session ended.', { code: 'session_closed' });
        }
        const previous = socket;
        previous.removeAllListeners('message').removeAllListeners('close');
        previous.on('error', () => {});
        closeThenTerminate(previous, settings.closeGraceMs, 1000, 'settings changed');
        attach(next);
      },
    },
    options,
  );

  socket = await connectLive(ctx, translator.initialSetup(), secrets);
  const pinger = pingRealtimeSocket(
    settings.pingIntervalMs,
    () => socket.ping(),
    () =>
      endSession(
        1011,
        'vendor stopped answering',
        new GatewayError(502, 'The upstream vendor stopped answering.', {
          type: 'server_error',
          code: 'vendor_timeout',
          retryable: false,
        }),
      ),
  );
  attach(socket);

  function attach(next: WebSocket) {
    socket = next;
    pinger.answered();
    next.on('pong', () => {
      if (socket === next) pinger.answered();
    });
    next.on('message', (data) => {
      if (ended || socket !== next) return;
      const message = parseFrame(data);
      if (message === undefined) return endSession(1011, 'bad vendor frame', badFrame());
      if (message.goAway !== undefined) {
        const left = (message.goAway as { timeLeft?: unknown }).timeLeft;
        goAwayLeft = typeof left === 'string' ? left : 'unknown';
        ctx.log.warn({ timeLeft: goAwayLeft }, 'Gemini Live will end the session soon (goAway)');
      }
      translator.fromVendor(message);
    });
    next.on('error', (error) => {
      if (socket === next) endSession(1011, 'vendor connection failed', realtimeTransportError(error));
    });
    next.on('close', (code, reasonBytes) => {
      if (socket !== next) return;
      const reason = reasonBytes.toString();
      const error =
        goAwayLeft !== undefined && (code === 1000 || code === 1001 || code === 1006)
          ? new GatewayError(
              503,
              'The upstream vendor ended the realtime session (it went away); start a new session.',
              { type: 'server_error', code: 'vendor_going_away', retryable: true },
            )
          : mapLiveClose(code, reason, secrets);
      endSession(code, reason, error);
    });
  }

  function endSession(code: number, reason: string, error?: GatewayError) {
    if (ended) return;
    ended = true;
    ending.abort();
    pinger.stop();
    translator.dispose();
    socket.removeAllListeners('message');
    if (socket.readyState !== WebSocket.CLOSED) socket.terminate();
    if (!closeAsked) events.closed(error === undefined ? { code, reason } : { code, reason, error });
  }

  translator.start();

  return {
    send(event: RealtimeClientEvent) {
      if (!ended) translator.fromClient(event);
    },
    close() {
      if (ended) return;
      closeAsked = true;
      ended = true;
      ending.abort();
      pinger.stop();
      translator.dispose();
      socket.removeAllListeners('message');
      socket.on('error', () => {});
      if (socket.readyState === WebSocket.OPEN)
        closeThenTerminate(socket, settings.closeGraceMs, 1000, 'session ended');
      else socket.terminate();
    },
  };
}
