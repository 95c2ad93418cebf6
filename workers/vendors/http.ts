import { Agent, request, type FormData } from 'undici';
import type { buildConnector, Dispatcher } from 'undici';
import { GatewayError, isGatewayError } from '../../shared/errors.js';
import type { CallContext } from './types.js';
import { vendorCallSettings } from './call-settings.js';

/** A started upstream call: status and headers are in, the body is still to be read. */
export interface VendorResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

let agent: Agent | undefined;
/** Every agent built here, so that shutdown closes them all (the guarded one included). */
const agents = new Set<Agent>();

/**
 * A keep-alive agent with the vendor timeouts, closed by `closeVendorAgent`.
 * `connector` replaces undici's own (given the connect timeout to build on):
 * the guarded fetch checks every address it connects to there.
 */
export function createVendorAgent(connector?: (connectTimeoutMs: number) => buildConnector.connector): Agent {
  // Read when the agent is built, not at import: the worker hands its settings over after imports.
  const timeouts = vendorCallSettings().vendorTimeouts;
  const created = new Agent({
    connect: connector === undefined ? { timeout: timeouts.connectMs } : connector(timeouts.connectMs),
    headersTimeout: timeouts.firstByteMs,
    // undici's body timeout measures the gap between two body chunks: exactly an idle timeout.
    bodyTimeout: timeouts.idleMs,
    keepAliveTimeout: 30_000,
  });
  agents.add(created);
  return created;
}

/**
 * One keep-alive agent for the process; undici keeps a connection pool per origin inside it.
 * It connects anywhere: only URLs built from a channel's configured base URL may use it
 * directly; URLs a vendor hands back go through `guardedGet` (guarded-fetch.ts).
 */
export function vendorAgent(): Agent {
  agent ??= createVendorAgent();
  return agent;
}

/** Closes the pooled connections (worker shutdown); the next call builds new agents with the settings of then. */
export async function closeVendorAgent(): Promise<void> {
  const current = [...agents];
  agents.clear();
  agent = undefined;
  await Promise.all(current.map((each) => each.close()));
}

export function joinUrl(baseUrl: string, path: string): string {
  return `${baseUrl.replace(/\/+$/, '')}${path}`;
}

/**
 * POSTs a body and resolves once the status and headers are in. Whatever the
 * status, the caller owns the body and must read or destroy it.
 */
export async function postVendor(
  url: string,
  headers: Record<string, string>,
  body: string | Buffer | FormData,
  ctx: CallContext,
): Promise<VendorResponse> {
  ctx.signal.throwIfAborted();
  try {
    const response = await request(url, { method: 'POST', dispatcher: vendorAgent(), signal: ctx.signal, headers, body });
    return { status: response.statusCode, headers: response.headers, body: response.body };
  } catch (error) {
    throw mapTransportError(error, ctx);
  }
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

/**
 * Turns a failure of the HTTP exchange into what the caller acts on: the
 * abort reason when our own signal fired (client gone, not a vendor fault),
 * else a retryable GatewayError. The underlying error stays as `cause` for logs.
 */
export function mapTransportError(error: unknown, ctx: CallContext): unknown {
  if (ctx.signal.aborted) return ctx.signal.reason ?? error;
  if (isGatewayError(error)) return error;
  const code = (error as { code?: unknown } | null)?.code;
  // `TimeoutError`: a fetch's own total deadline (AbortSignal.timeout) fired, not the caller's signal.
  if ((typeof code === 'string' && TIMEOUT_CODES.has(code)) || (error as { name?: unknown } | null)?.name === 'TimeoutError') {
    return new GatewayError(504, 'The upstream vendor timed out.', {
      type: 'server_error',
      code: 'vendor_timeout',
      retryable: true,
      cause: error,
    });
  }
  // Host names stay out of the message: base URLs can be internal.
  return new GatewayError(502, 'The upstream vendor could not be reached.', {
    type: 'server_error',
    code: 'vendor_unreachable',
    retryable: true,
    cause: error,
  });
}

/** Reads a whole body as text, mapping transport failures like `postVendor` does. */
export async function readBodyText(response: VendorResponse, ctx: CallContext): Promise<string> {
  try {
    return await response.body.text();
  } catch (error) {
    throw mapTransportError(error, ctx);
  }
}

/**
 * Reads at most `limit` bytes of an error body: enough for any vendor error
 * message, and a misbehaving upstream cannot make us buffer megabytes of HTML.
 */
export async function readCappedText(response: VendorResponse, ctx: CallContext, limit = 64 * 1024): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response.body) {
      const buffer = chunk as Buffer;
      chunks.push(buffer);
      size += buffer.length;
      if (size >= limit) {
        response.body.destroy();
        break;
      }
    }
  } catch (error) {
    throw mapTransportError(error, ctx);
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8');
}

/** Releases a body the caller stopped reading; undici then closes that connection instead of reusing it. */
export function discardBody(response: VendorResponse): void {
  const body = response.body;
  if (body.destroyed) return;
  // Destroying an unread body makes undici emit an abort error; with no reader attached that
  // would be an unhandled 'error' event and take the whole worker down.
  body.on('error', () => undefined);
  body.destroy();
}

export const malformedResponse = (cause?: unknown) =>
  new GatewayError(502, 'The upstream vendor sent a malformed response.', {
    type: 'server_error',
    code: 'vendor_bad_response',
    retryable: true,
    cause,
  });

/** Parses a vendor's JSON body; anything that is not a JSON object is a malformed (retryable) answer. */
export function parseJsonObject(text: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw malformedResponse(error);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw malformedResponse();
  return parsed as Record<string, unknown>;
}

/** How long the tail of a finished stream may take before its connection is dropped instead of reused. */
const drainAfterEndMs = 2_000;

/**
 * Lets a connection go back to the pool after the stream's logical end
 * (`[DONE]`, `message_stop`): the body's last bytes usually arrive one read
 * later. Nobody waits for this; a drain that fails only costs the connection.
 */
export function drainInBackground(reader: AsyncIterator<unknown>, response: VendorResponse): void {
  const timer = setTimeout(() => discardBody(response), drainAfterEndMs);
  timer.unref();
  void (async () => {
    try {
      while (!(await reader.next()).done) {
        // Nothing after the logical end carries meaning.
      }
    } catch {
      // Only the connection is lost.
    } finally {
      clearTimeout(timer);
    }
  })();
}
