import { GatewayError } from '../../shared/errors.js';

/** What a vendor answered with a non-2xx status. */
export interface UpstreamErrorResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  bodyText: string;
}

/** The vendor's own account of an error, read from its error body by the vendor's module. */
export interface VendorErrorFields {
  message: string | null;
  type: string | null;
  code: string | null;
  param: string | null;
}

const REDACTED = '[redacted]';

// Vendor error text can quote the key it was sent ("Incorrect API key provided: sk-…"),
// and whatever reaches a client also reaches its logs.
const SECRET_PATTERNS: RegExp[] = [
  /\bBearer\s+[^\s"',;]+/gi,
  /\b(?:sk|xai|gsk)[-_][A-Za-z0-9_*-]{6,}/g,
  /\bAIza[0-9A-Za-z_-]{20,}/g,
  // Long opaque tokens (hex, base64, base64url): a run of 32+ such characters holding both letters and digits.
  /(?<![A-Za-z0-9+/_=-])(?=[A-Za-z0-9+/_-]*\d)(?=[A-Za-z0-9+/_-]*[A-Za-z])[A-Za-z0-9+/_-]{32,}={0,2}/g,
];

/** Replaces anything that looks like a credential, and every known secret, with `[redacted]`. */
export function scrubSecrets(text: string, knownSecrets: readonly string[] = []): string {
  let scrubbed = text;
  for (const secret of knownSecrets) {
    // Short "secrets" (empty or placeholder keys) would shred ordinary words.
    if (secret.length >= 8) scrubbed = scrubbed.split(secret).join(REDACTED);
  }
  for (const pattern of SECRET_PATTERNS) {
    scrubbed = scrubbed.replace(pattern, (match) => (/^bearer\s/i.test(match) ? `Bearer ${REDACTED}` : REDACTED));
  }
  return scrubbed;
}

function header(headers: UpstreamErrorResponse['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** `retry-after-ms` wins (OpenAI sends it), then `retry-after` as seconds or an HTTP date. */
export function parseRetryAfterMs(
  headers: UpstreamErrorResponse['headers'],
  now: number = Date.now(),
): number | undefined {
  const milliseconds = header(headers, 'retry-after-ms');
  if (milliseconds !== undefined && milliseconds.trim() !== '') {
    const value = Number(milliseconds);
    if (Number.isFinite(value) && value >= 0) return Math.ceil(value);
  }
  const retryAfter = header(headers, 'retry-after')?.trim();
  if (retryAfter === undefined || retryAfter === '') return undefined;
  const seconds = Number(retryAfter);
  if (Number.isFinite(seconds)) return seconds >= 0 ? Math.ceil(seconds * 1000) : undefined;
  const date = Date.parse(retryAfter);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

function retryHeaders(retryAfterMs: number | undefined): Record<string, string> {
  return retryAfterMs === undefined ? {} : { 'retry-after': String(Math.ceil(retryAfterMs / 1000)) };
}

const quotaExhausted = (cause: unknown) =>
  new GatewayError(503, 'The upstream vendor refused the request: quota exhausted.', {
    type: 'server_error',
    code: 'vendor_quota_exhausted',
    retryable: false,
    cause,
  });

/**
 * Maps one non-2xx vendor answer to the error the client gets. Only 4xx
 * request errors and 429s echo the vendor's (scrubbed) message: those
 * describe the client's request; everything else is ours. `quota` marks an
 * answer the vendor's module recognised as an exhausted account (never retried).
 */
export function mapVendorError(
  response: UpstreamErrorResponse,
  vendor: VendorErrorFields | null,
  knownSecrets: readonly string[] = [],
  options: { quota?: boolean } = {},
): GatewayError {
  const { status, headers, bodyText } = response;
  const vendorMessage = vendor?.message ? scrubSecrets(vendor.message, knownSecrets) : null;
  // The raw vendor answer travels only as `cause`, for logs; it is scrubbed there too.
  const cause = { status, body: scrubSecrets(bodyText.slice(0, 2000), knownSecrets) };

  if (options.quota) return quotaExhausted(cause);
  if (status === 429) {
    const retryAfterMs = parseRetryAfterMs(headers);
    return new GatewayError(429, vendorMessage ?? 'The upstream vendor is rate limiting requests.', {
      type: 'rate_limit_exceeded',
      code: vendor?.code ?? 'rate_limit_exceeded',
      retryable: true,
      retryAfterMs,
      headers: retryHeaders(retryAfterMs),
      cause,
    });
  }

  if (status === 402) return quotaExhausted(cause);

  if (status === 401 || status === 403) {
    return new GatewayError(502, 'The upstream vendor rejected the gateway credentials.', {
      type: 'server_error',
      code: 'vendor_auth_failed',
      retryable: false,
      cause,
    });
  }

  if (status === 408) {
    return new GatewayError(504, 'The upstream vendor timed out.', {
      type: 'server_error',
      code: 'vendor_timeout',
      retryable: true,
      cause,
    });
  }

  if (status >= 500 || status === 529) {
    const retryAfterMs = parseRetryAfterMs(headers);
    return new GatewayError(502, `Upstream vendor error: ${vendorMessage ?? `HTTP ${status}`}`, {
      type: 'server_error',
      code: 'vendor_error',
      retryable: true,
      retryAfterMs,
      cause,
    });
  }

  if (status >= 400) {
    return new GatewayError(status, vendorMessage ?? `The upstream vendor rejected the request (HTTP ${status}).`, {
      type: 'invalid_request_error',
      code: vendor?.code ?? (status === 404 ? 'model_not_found' : null),
      param: vendor?.param ?? null,
      retryable: false,
      cause,
    });
  }

  // 1xx/3xx: undici follows no redirects, so a redirect means the base URL is wrong.
  return new GatewayError(502, `The upstream vendor answered with an unexpected HTTP ${status}.`, {
    type: 'server_error',
    code: 'vendor_bad_response',
    retryable: false,
    cause,
  });
}

/** An error reported inside a 200 answer or stream: the vendor failed after accepting the request. */
export function inlineVendorError(message: string | null, knownSecrets: readonly string[] = []): GatewayError {
  const text = message ? scrubSecrets(message, knownSecrets) : 'unknown error';
  return new GatewayError(502, `Upstream vendor error: ${text}`, {
    type: 'server_error',
    code: 'vendor_error',
    retryable: true,
  });
}
