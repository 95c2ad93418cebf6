import type { GatewayError } from '../../../shared/errors.js';
import {
  inlineVendorError,
  mapVendorError,
  type UpstreamErrorResponse,
  type VendorErrorFields,
} from '../vendor-errors.js';

export { scrubSecrets, parseRetryAfterMs } from '../vendor-errors.js';
export type { UpstreamErrorResponse };

/** Reads `{"error":{message,type,code,param}}`, tolerating vendors that send a bare string or odd types. */
export function readVendorError(value: unknown): VendorErrorFields | null {
  if (typeof value !== 'object' || value === null) return null;
  const error = (value as { error?: unknown }).error;
  if (typeof error === 'string') return { message: error, type: null, code: null, param: null };
  if (typeof error !== 'object' || error === null) return null;
  const fields = error as Record<string, unknown>;
  return {
    message: asText(fields.message),
    type: asText(fields.type),
    code: asText(fields.code),
    param: asText(fields.param),
  };
}

function asText(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return String(value);
  return null;
}

function parseVendorError(bodyText: string): VendorErrorFields | null {
  try {
    return readVendorError(JSON.parse(bodyText));
  } catch {
    return null;
  }
}

/**
 * Maps a non-2xx answer of an OpenAI-compatible vendor; `insufficient_quota` is the operator's problem, never retried.
 */
export function mapOpenAIError(response: UpstreamErrorResponse, knownSecrets: readonly string[] = []): GatewayError {
  const vendor = parseVendorError(response.bodyText);
  const quota = vendor?.code === 'insufficient_quota' || vendor?.type === 'insufficient_quota';
  return mapVendorError(response, vendor, knownSecrets, { quota });
}

/** An `{"error":…}` payload inside a 200 stream or body. */
export function mapOpenAIInlineError(payload: unknown, knownSecrets: readonly string[] = []): GatewayError {
  return inlineVendorError(readVendorError(payload)?.message ?? null, knownSecrets);
}
