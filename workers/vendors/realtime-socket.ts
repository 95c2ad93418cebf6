import WebSocket from 'ws';
import type { IncomingMessage } from 'node:http';
import { GatewayError, isGatewayError } from '../../shared/errors.js';
import type { VendorErrorMapper } from './http.js';
import type { RealtimeOpenContext } from './types.js';

/**
 * A vendor's realtime WebSocket as every realtime adapter holds one (OpenAI's Realtime API, Gemini Live): opened
 * without compression or redirects and with a cap on a frame; its opening bounded by the connect deadline and the
 * session's abort signal, a refused upgrade read (bounded in size and time) as the vendor's HTTP error; once open,
 * pinged, a ping unanswered by the next one taking the vendor for gone; a vendor that stops taking what is written
 * taken for stuck; a close asked here given a grace before the socket is destroyed. What a vendor's protocol says
 * (its handshake, its events, its close codes) stays in its adapter.
 */

export interface RealtimeSocketOptions {
  /** How often the vendor is pinged; a ping unanswered by the next one ends the session. */
  pingIntervalMs?: number;
  /** How long a close asked here may take before the socket is destroyed. */
  closeGraceMs?: number;
  /** Bytes written but not yet taken by the vendor past which it is taken for stuck. */
  maxBufferedBytes?: number;
}

export const realtimeSocketDefaults: Required<RealtimeSocketOptions> = {
  pingIntervalMs: 15_000,
  closeGraceMs: 3_000,
  maxBufferedBytes: 16 * 1024 * 1024,
};

/** Enough of a refused upgrade's body for any error message. */
const MAX_REFUSAL_BODY_BYTES = 64 * 1024;
/** The most a refused upgrade's body is waited for. */
const MAX_REFUSAL_WAIT_MS = 5_000;

/** A vendor's base URL as a WebSocket URL (https → wss, and http → ws for local servers), `path` after its own path. */
export function realtimeSocketUrl(baseUrl: string, path: string): URL {
  const url = new URL(baseUrl);
  if (url.protocol === 'https:') url.protocol = 'wss:';
  else if (url.protocol === 'http:') url.protocol = 'ws:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${path}`;
  return url;
}

/** Opens the socket; `maxPayload` caps a frame taken from the vendor. */
export function openRealtimeSocket(url: string, headers: Record<string, string>, maxPayload: number): WebSocket {
  return new WebSocket(url, {
    headers,
    maxPayload,
    // Base64 audio barely compresses; deflating it would only cost CPU on both ends.
    perMessageDeflate: false,
    followRedirects: false,
  });
}

/** A socket that failed to connect or broke: the vendor could not be reached. */
export function realtimeTransportError(error: unknown): GatewayError {
  if (isGatewayError(error)) return error;
  // Host names stay out of the message: base URLs can be internal.
  return new GatewayError(502, 'The upstream vendor could not be reached.', {
    type: 'server_error',
    code: 'vendor_unreachable',
    retryable: true,
    cause: error,
  });
}

function openTimeoutError(): GatewayError {
  return new GatewayError(504, 'The upstream vendor did not open the realtime session in time.', {
    type: 'server_error',
    code: 'vendor_timeout',
    retryable: true,
  });
}

/** Reads a refused upgrade's answer (bounded in size and time) and maps it as the vendor's HTTP errors are. */
function readRefusal(
  response: IncomingMessage,
  secrets: readonly string[],
  deadlineMs: number,
  mapError: VendorErrorMapper,
): Promise<GatewayError> {
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
      resolve(mapError({ status: response.statusCode ?? 502, headers: response.headers, bodyText }, secrets));
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

/**
 * Bounds a socket's opening: `fail` is called with a 504 at the connect deadline, with the signal's reason when the
 * session is aborted, or with the vendor's error (`mapError`) when it refuses the upgrade. Returns what stops the
 * deadline and the abort once the vendor's handshake is done (the refusal's listener is the caller's to remove).
 */
export function boundOpening(
  socket: WebSocket,
  ctx: Pick<RealtimeOpenContext, 'signal' | 'connectTimeoutMs' | 'log'>,
  secrets: readonly string[],
  mapError: VendorErrorMapper,
  fail: (error: unknown) => void,
): () => void {
  const deadline = setTimeout(() => fail(openTimeoutError()), ctx.connectTimeoutMs);
  const onAbort = () => fail(ctx.signal.reason);
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  socket.once('unexpected-response', (_request, response) => {
    void readRefusal(response, secrets, Math.min(ctx.connectTimeoutMs, MAX_REFUSAL_WAIT_MS), mapError).then((error) => {
      ctx.log.debug(
        { upstreamStatus: response.statusCode, err: error },
        'upstream vendor refused the realtime session',
      );
      fail(error);
    });
  });
  return () => {
    clearTimeout(deadline);
    ctx.signal.removeEventListener('abort', onAbort);
  };
}

/** An open socket's pings: `answered` on each pong; `silent` when a ping is still unanswered as the next is due. */
export interface RealtimePinger {
  answered(): void;
  stop(): void;
}

export function pingRealtimeSocket(intervalMs: number, ping: () => void, silent: () => void): RealtimePinger {
  let awaitingPong = false;
  const timer = setInterval(() => {
    if (awaitingPong) {
      silent();
      return;
    }
    awaitingPong = true;
    ping();
  }, intervalMs);
  timer.unref();
  return {
    answered() {
      awaitingPong = false;
    },
    stop() {
      clearInterval(timer);
    },
  };
}

/**
 * Writes `data` unless more than `maxBufferedBytes` still wait to be taken by the vendor: false, nothing written, then.
 */
export function sendUnlessStalled(socket: WebSocket, data: string, maxBufferedBytes: number): boolean {
  if (socket.bufferedAmount > maxBufferedBytes) return false;
  socket.send(data);
  return true;
}

/** Closes the socket, and destroys it once `graceMs` has passed without the vendor answering the close. */
export function closeThenTerminate(socket: WebSocket, graceMs: number, code: number, reason?: string): NodeJS.Timeout {
  socket.close(code, reason);
  const timer = setTimeout(() => socket.terminate(), graceMs);
  timer.unref();
  return timer;
}
