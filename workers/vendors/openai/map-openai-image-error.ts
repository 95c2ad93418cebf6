import { GatewayError } from '../../../shared/errors.js';
import {
  parseRetryAfterMs,
  scrubSecrets,
  type UpstreamErrorResponse,
  type VendorErrorFields,
} from '../vendor-errors.js';
import { mapOpenAIError, readVendorError } from './map-openai-error.js';

/**
 * What OpenAI advises when an image generation fails on its side: it is
 * usually transient, and a prompt the image model keeps failing on can
 * succeed once reworded.
 */
export const IMAGE_GENERATION_FAILED_MESSAGE =
  'The image could not be generated: the upstream vendor failed while generating it. ' +
  'Retry the request; if it keeps failing, try again with a changed prompt.';

/** A generation that failed at the vendor (5xx, or an answer without images); retried before the client hears of it. */
export function imageGenerationFailed(cause?: unknown, retryAfterMs?: number): GatewayError {
  return new GatewayError(500, IMAGE_GENERATION_FAILED_MESSAGE, {
    type: 'server_error',
    code: 'server_error',
    retryable: true,
    ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
    cause,
  });
}

// dall-e: code `content_policy_violation`; GPT image models: type `image_generation_user_error`
// with code `moderation_blocked`. Both messages speak of "our safety system".
function isContentPolicyRefusal(vendor: VendorErrorFields | null): vendor is VendorErrorFields {
  if (vendor === null) return false;
  if (vendor.code === 'content_policy_violation' || vendor.code === 'moderation_blocked') return true;
  if (vendor.type === 'image_generation_user_error') return true;
  return vendor.message !== null && /\bsafety system\b/i.test(vendor.message);
}

/**
 * The vendor's reason is the client's to read (it describes the client's
 * prompt or image), so it is passed on, scrubbed; never retried.
 */
function contentPolicyViolation(
  vendor: VendorErrorFields,
  knownSecrets: readonly string[],
  cause: unknown,
): GatewayError {
  const reason = vendor.message
    ? scrubSecrets(vendor.message, knownSecrets)
    : 'The request was rejected by the safety system.';
  return new GatewayError(400, reason, {
    type: 'invalid_request_error',
    code: 'content_policy_violation',
    param: vendor.param,
    retryable: false,
    cause,
  });
}

function parseVendorError(bodyText: string): VendorErrorFields | null {
  try {
    return readVendorError(JSON.parse(bodyText));
  } catch {
    return null;
  }
}

// Statuses whose meaning does not depend on the body: auth, quota, rate limits, timeouts.
const STATUS_DECIDES = new Set([401, 402, 403, 408, 429]);

/**
 * Maps a non-2xx answer of the OpenAI image endpoints: safety refusals and
 * failed generations get the image-specific errors; everything else the
 * usual OpenAI mapping (429 retryable, insufficient quota, auth…).
 */
export function mapOpenAIImageError(
  response: UpstreamErrorResponse,
  knownSecrets: readonly string[] = [],
): GatewayError {
  const vendor = parseVendorError(response.bodyText);
  const cause = { status: response.status, body: scrubSecrets(response.bodyText.slice(0, 2000), knownSecrets) };
  if (
    response.status >= 400 &&
    response.status < 500 &&
    !STATUS_DECIDES.has(response.status) &&
    isContentPolicyRefusal(vendor)
  ) {
    return contentPolicyViolation(vendor, knownSecrets, cause);
  }
  if (response.status >= 500) return imageGenerationFailed(cause, parseRetryAfterMs(response.headers));
  return mapOpenAIError(response, knownSecrets);
}

/** An `{"error":…}` body sent with a 2xx status (proxies and compatible vendors do this). */
export function mapOpenAIImageInlineError(payload: unknown, knownSecrets: readonly string[] = []): GatewayError {
  const vendor = readVendorError(payload);
  const cause = { status: 200, body: scrubSecrets(JSON.stringify(payload).slice(0, 2000), knownSecrets) };
  if (isContentPolicyRefusal(vendor)) return contentPolicyViolation(vendor, knownSecrets, cause);
  return imageGenerationFailed(cause);
}
