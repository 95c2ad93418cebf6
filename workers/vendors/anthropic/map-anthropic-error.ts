import type { GatewayError } from '../../../shared/errors.js';
import {
  inlineVendorError,
  mapVendorError,
  type UpstreamErrorResponse,
  type VendorErrorFields,
} from '../vendor-errors.js';

interface AnthropicErrorFields extends VendorErrorFields {
  /** The account cannot spend: the operator's problem, never retried. */
  quota: boolean;
}

/** The HTTP status Anthropic uses for each error type, for errors that arrive inside a 200 stream. */
const STATUS_BY_TYPE = new Map<string, number>([
  ['invalid_request_error', 400],
  ['authentication_error', 401],
  ['billing_error', 402],
  ['permission_error', 403],
  ['not_found_error', 404],
  ['request_too_large', 413],
  ['rate_limit_error', 429],
  ['api_error', 500],
  ['timeout_error', 504],
  ['overloaded_error', 529],
]);

// An empty prepaid balance comes back as a 400 invalid_request_error, not as a billing error.
const LOW_CREDIT = /credit balance is too low/i;

/** Reads `{"type":"error","error":{"type","message","details"?}}`. */
export function readAnthropicError(value: unknown): AnthropicErrorFields | null {
  if (typeof value !== 'object' || value === null) return null;
  const error = (value as { error?: unknown }).error;
  if (typeof error !== 'object' || error === null) return null;
  const fields = error as { type?: unknown; message?: unknown; details?: unknown };
  const message = typeof fields.message === 'string' ? fields.message : null;
  const type = typeof fields.type === 'string' ? fields.type : null;
  const details = fields.details as { error_code?: unknown } | null | undefined;
  const quota =
    details?.error_code === 'enforced_spend_limit_reached' ||
    type === 'billing_error' ||
    (message !== null && LOW_CREDIT.test(message));
  // `code` and `param` stay null: Anthropic has neither, and its error type is not an OpenAI code.
  return { message, type, code: null, param: null, quota };
}

function parseAnthropicError(bodyText: string): AnthropicErrorFields | null {
  try {
    return readAnthropicError(JSON.parse(bodyText));
  } catch {
    return null;
  }
}

/** Maps a non-2xx Messages API answer (429/529 retryable, spend limits as quota, auth as our 502). */
export function mapAnthropicError(response: UpstreamErrorResponse, knownSecrets: readonly string[] = []): GatewayError {
  const vendor = parseAnthropicError(response.bodyText);
  return mapVendorError(response, vendor, knownSecrets, { quota: vendor?.quota === true });
}

/**
 * An `error` event after the 200: mapped as the status Anthropic gives that
 * error type would be (so `overloaded_error` is a retryable 502, like a 529).
 */
export function mapAnthropicStreamError(payload: unknown, knownSecrets: readonly string[] = []): GatewayError {
  const vendor = readAnthropicError(payload);
  const status = vendor?.type == null ? undefined : STATUS_BY_TYPE.get(vendor.type);
  if (vendor === null || status === undefined) return inlineVendorError(vendor?.message ?? null, knownSecrets);
  const bodyText = JSON.stringify(payload);
  return mapVendorError({ status, headers: {}, bodyText }, vendor, knownSecrets, { quota: vendor.quota });
}
