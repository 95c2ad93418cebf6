import { createServer, type RequestListener, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Config } from '../../shared/config.js';
import { answerClientError, answerConnect } from './raw-http-errors.js';
import { setBodyIdleTimeout } from './request-body.js';

/**
 * The api's Node server around its Koa callback, with the deadlines on what
 * a client sends (docs/configuration.md): its headers and its whole request
 * (Node's own, answered 408 by answerClientError), silence inside a body (the
 * body readers), an idle keep-alive connection. What the gateway sends is not
 * timed here: a request that has arrived waits for its answer, held or
 * streamed, until its REQUEST_DEADLINE_MS. Node checks the first two on a
 * timer, here a quarter of the shorter (at most every second).
 */
export function createNodeServer(deadlines: Config['clientTimeouts'], listener: RequestListener): Server {
  setBodyIdleTimeout(deadlines.bodyIdleMs);
  // Node would answer a request without Host with a bare 400; the Host check among the middleware answers it in the
  // OpenAI shape.
  const server = createServer(
    {
      requireHostHeader: false,
      requestTimeout: deadlines.requestMs,
      headersTimeout: Math.min(deadlines.headersMs, deadlines.requestMs),
      keepAliveTimeout: deadlines.keepAliveMs,
      connectionsCheckingInterval: Math.max(
        25,
        Math.min(1000, Math.floor(Math.min(deadlines.headersMs, deadlines.requestMs) / 4)),
      ),
    },
    listener,
  );
  server.on('clientError', answerClientError);
  server.on('connect', (_req, socket: Duplex) => answerConnect(socket));
  return server;
}
