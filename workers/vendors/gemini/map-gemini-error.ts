import type { GatewayError } from '../../../shared/errors.js';
import {
  inlineVendorError,
  mapVendorError,
  type UpstreamErrorResponse,
  type VendorErrorFields,
} from '../vendor-errors.js';

/** Google's error envelope: `{error: {code, message, status, details}}` (`status` is the RPC status name). */
export interface GeminiErrorFields {
  code: number | null;
  message: string | null;
  status: string | null;
  details: unknown[];
}

const RETRY_INFO = 'type.googleapis.com/google.rpc.RetryInfo';
const ERROR_INFO = 'type.googleapis.com/google.rpc.ErrorInfo';

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Reads the envelope; the non-SSE stream route wraps it in an array, so a one-element array is accepted too. */
export function readGeminiError(payload: unknown): GeminiErrorFields | null {
  const envelope = Array.isArray(payload) ? payload[0] : payload;
  const error = isObject(envelope) ? envelope.error : undefined;
  if (!isObject(error)) return null;
  return {
    code: typeof error.code === 'number' ? error.code : null,
    message: typeof error.message === 'string' ? error.message : null,
    status: typeof error.status === 'string' ? error.status : null,
    details: Array.isArray(error.details) ? error.details : [],
  };
}

/** `RetryInfo.retryDelay` is a protobuf Duration in JSON form: `"34.4s"`. */
export function readRetryDelayMs(details: readonly unknown[]): number | undefined {
  for (const detail of details) {
    if (!isObject(detail) || detail['@type'] !== RETRY_INFO || typeof detail.retryDelay !== 'string') continue;
    const match = /^(\d+(?:\.\d+)?)s$/.exec(detail.retryDelay.trim());
    if (match !== null) return Math.ceil(Number(match[1]) * 1000);
  }
  return undefined;
}

/**
 * A bad key is a 400 INVALID_ARGUMENT on Gemini (reason API_KEY_INVALID), not
 * a 401: passed on as a 400 it would blame the client for our configuration.
 */
function isKeyRejected(fields: GeminiErrorFields): boolean {
  const reasons = fields.details
    .filter(isObject)
    .filter((detail) => detail['@type'] === ERROR_INFO)
    .map((detail) => detail.reason);
  return reasons.includes('API_KEY_INVALID') || /API key (not valid|expired)/i.test(fields.message ?? '');
}

/** Error texts may quote the request URL, and with it a `?key=` another client put there. */
const scrubKeyParameters = (text: string) => text.replace(/([?&]key=)[^&\s"'#]+/gi, '$1[redacted]');

function parseBody(bodyText: string): unknown {
  try {
    return JSON.parse(bodyText);
  } catch {
    return null;
  }
}

/**
 * Maps a non-2xx Gemini answer: 429 RESOURCE_EXHAUSTED stays a retryable 429
 * that waits as long as RetryInfo says; 400 INVALID_ARGUMENT and
 * FAILED_PRECONDITION are the client's 400 with Google's message; 401/403
 * (and a rejected key) are our misconfiguration (502); 404 stays 404;
 * 5xx are retryable.
 */
export function mapGeminiError(response: UpstreamErrorResponse, knownSecrets: readonly string[] = []): GatewayError {
  const bodyText = scrubKeyParameters(response.bodyText);
  const fields = readGeminiError(parseBody(bodyText));
  const status = fields !== null && isKeyRejected(fields) ? 401 : response.status;
  const retryDelayMs = fields === null ? undefined : readRetryDelayMs(fields.details);
  // Passed as `retry-after-ms`, which wins over a coarser `retry-after` header in the shared mapping.
  const headers =
    retryDelayMs === undefined ? response.headers : { ...response.headers, 'retry-after-ms': String(retryDelayMs) };
  // Google's RPC status names are not OpenAI error codes; the shared mapping picks OpenAI's per status.
  const vendor: VendorErrorFields | null =
    fields === null ? null : { message: fields.message, type: fields.status, code: null, param: null };
  return mapVendorError({ status, headers, bodyText }, vendor, knownSecrets);
}

/** An `{error: …}` payload inside a 200 answer or an SSE stream; its own `code` decides the mapping. */
export function mapGeminiInlineError(payload: unknown, knownSecrets: readonly string[] = []): GatewayError {
  const fields = readGeminiError(payload);
  if (fields?.code != null && fields.code >= 400 && fields.code <= 599) {
    return mapGeminiError({ status: fields.code, headers: {}, bodyText: JSON.stringify(payload) }, knownSecrets);
  }
  return inlineVendorError(fields?.message == null ? null : scrubKeyParameters(fields.message), knownSecrets);
}
