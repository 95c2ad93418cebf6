import { request, type Dispatcher, type FormData } from 'undici';
import { GatewayError, isGatewayError } from '../../shared/errors.js';
import type { CallContext } from './types.js';
import type { UpstreamErrorResponse } from './vendor-errors.js';

/** A started upstream call: status and headers are in, the body is still to be read. */
export interface VendorResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

/** What a vendor's `api.ts` holds: its routes under the channel's base URL, and the headers they take. */
export interface VendorApi {
  /** The channel's key the way the vendor takes it, with any header every call carries (an API version). */
  headers(apiKey: string): Record<string, string>;
  /** A function where the route names a model, a task or a job. */
  paths: Record<string, string | ((...parts: never[]) => string)>;
}

/** One POST to a vendor. */
export interface VendorRequest {
  url: string;
  /** The vendor's own (key, version); content type and `accept` are the helpers'. */
  headers: Record<string, string>;
  /** JSON text, or a multipart form (uploads) whose boundary undici sets. */
  body: string | FormData;
}

/** A vendor's reading of its own error bodies (`map-<vendor>-error.ts`), handed to the helpers below. */
export type VendorErrorMapper = (response: UpstreamErrorResponse, knownSecrets: readonly string[]) => GatewayError;

export function joinUrl(baseUrl: string, path: string): string {
  return `${baseUrl.replace(/\/+$/, '')}${path}`;
}

/** A call to `path` under the channel's base URL, with the channel's key as `api` sends it. */
export function vendorRequest(api: VendorApi, ctx: CallContext, path: string, body: string | FormData): VendorRequest {
  return { url: joinUrl(ctx.channel.baseUrl, path), headers: api.headers(ctx.channel.apiKey), body };
}

/**
 * POSTs and resolves once the status and headers are in. A refusal (non-2xx)
 * is thrown as the vendor's `mapError` reads it; for a 2xx the caller owns
 * the body and must read or discard it.
 */
export async function postVendor(
  ctx: CallContext,
  { url, headers, body }: VendorRequest,
  mapError: VendorErrorMapper,
  /** What the answer is: JSON, an event stream, or bytes of a media type (speech's audio). */
  accept: 'application/json' | 'text/event-stream' | `audio/${string}` = 'application/json',
): Promise<VendorResponse> {
  ctx.signal.throwIfAborted();
  const sent = { ...headers, ...(typeof body === 'string' ? { 'content-type': 'application/json' } : {}), accept };
  let response: VendorResponse;
  try {
    const answer = await request(url, {
      method: 'POST',
      dispatcher: ctx.http.agent,
      signal: ctx.signal,
      headers: sent,
      body,
    });
    response = { status: answer.statusCode, headers: answer.headers, body: answer.body };
  } catch (error) {
    throw mapTransportError(error, ctx);
  }
  await requireOk(response, ctx, mapError);
  ctx.answered?.(response.headers);
  return response;
}

/** A JSON answer: the text as the vendor sent it (some are handed on as they are) and the object it holds. */
export interface JsonAnswer {
  text: string;
  json: Record<string, unknown>;
}

/** POSTs and reads the JSON object answered; a refusal is thrown as `mapError` reads it. */
export async function postJson(
  ctx: CallContext,
  request: VendorRequest,
  mapError: VendorErrorMapper,
): Promise<JsonAnswer> {
  const response = await postVendor(ctx, request, mapError);
  const text = await readBodyText(response, ctx);
  return { text, json: parseJsonObject(text) };
}

/**
 * The one status check of vendor answers: a 2xx passes; anything else is read
 * (capped), mapped by the vendor's `mapError`, logged and thrown.
 */
export async function requireOk(
  response: VendorResponse,
  ctx: CallContext,
  mapError: VendorErrorMapper,
): Promise<VendorResponse> {
  if (response.status < 200 || response.status >= 300) throw await readRefusal(response, ctx, mapError);
  return response;
}

async function readRefusal(
  response: VendorResponse,
  ctx: CallContext,
  mapError: VendorErrorMapper,
): Promise<GatewayError> {
  const bodyText = await readCappedText(response, ctx);
  const error = mapError({ status: response.status, headers: response.headers, bodyText }, [ctx.channel.apiKey]);
  const upstreamRequestId = response.headers['request-id'] ?? response.headers['x-request-id'];
  ctx.log.debug(
    { upstreamStatus: response.status, upstreamRequestId, err: error },
    'upstream vendor refused the request',
  );
  return error;
}

const TIMEOUT_CODES = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
]);

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
  if (
    (typeof code === 'string' && TIMEOUT_CODES.has(code)) ||
    (error as { name?: unknown } | null)?.name === 'TimeoutError'
  ) {
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

/** Reads a whole body as text, mapping transport failures as `postVendor` does. */
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
