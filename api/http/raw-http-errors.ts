import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { GatewayError } from '../../shared/errors.js';
import { endAndLinger } from './linger.js';

/**
 * Answers on a bare socket, for requests Node handles before Koa sees them
 * (and a WebSocket upgrade refused, api/jobs/events.ts), with the error's headers:
 * the same OpenAI-shaped body as every other error, then the socket closes
 * after the same bounded linger as every answer that closes its connection
 * (a client that neither reads nor closes would otherwise keep it half-open).
 */
export function writeRawError(socket: Duplex, error: GatewayError): void {
  const body = JSON.stringify(error.toBody());
  const headers = Object.entries(error.headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  endAndLinger(
    socket,
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n${headers}connection: close\r\n\r\n${body}`,
  );
}

/** Headers or URL too large, a malformed request line, a request that never finished arriving. */
export function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  // A response already under way on this socket cannot take another status line (Node's own rule too).
  const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (error.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  if (error.code === 'HPE_HEADER_OVERFLOW') {
    writeRawError(
      socket,
      new GatewayError(431, 'The request headers (the URL included) are too large.', {
        code: 'request_header_too_large',
      }),
    );
  } else if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    writeRawError(socket, new GatewayError(408, 'The request took too long to arrive.', { code: 'request_timeout' }));
  } else {
    writeRawError(socket, new GatewayError(400, 'Malformed HTTP request.', { code: 'invalid_http_request' }));
  }
}

/** CONNECT is for proxies; without an answer Node would close the socket in silence. */
export function answerConnect(socket: Duplex): void {
  writeRawError(
    socket,
    new GatewayError(405, 'CONNECT is not supported: this is an API, not a proxy.', { code: 'method_not_allowed' }),
  );
}
