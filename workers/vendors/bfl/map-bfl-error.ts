import { GatewayError } from '../../../shared/errors.js';
import { mapVendorError, scrubSecrets, type UpstreamErrorResponse, type VendorErrorFields } from '../vendor-errors.js';

/** BFL request fields and the OpenAI parameter the client sent them as. */
const PARAM_BY_FIELD: Readonly<Record<string, string>> = {
  prompt: 'prompt',
  width: 'size',
  height: 'size',
  aspect_ratio: 'size',
  output_format: 'output_format',
  raw: 'quality',
  input_image: 'image',
  input_image_2: 'image',
  input_image_3: 'image',
  input_image_4: 'image',
  image: 'image',
  mask: 'mask',
};

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** One FastAPI validation item, `{loc: ["body","width"], msg: "…"}`, as `width: …`. */
function describeValidationItem(item: unknown): { text: string; field: string | undefined } | undefined {
  if (!isObject(item) || typeof item.msg !== 'string') return undefined;
  const location = Array.isArray(item.loc) ? item.loc.filter((part) => part !== 'body').map(String) : [];
  const field = location[location.length - 1];
  return { text: location.length > 0 ? `${location.join('.')}: ${item.msg}` : item.msg, field };
}

/**
 * Reads BFL's error bodies: FastAPI's `{"detail": [{loc, msg, type}]}` on
 * validation (422), else `{"detail": "…"}` or `{"message": "…"}`.
 */
export function readBflError(value: unknown): VendorErrorFields | null {
  if (!isObject(value)) return null;
  const { detail } = value;
  if (Array.isArray(detail)) {
    const items = detail.map(describeValidationItem).filter((item) => item !== undefined);
    if (items.length === 0) return null;
    const field = items[0]!.field;
    const param = field === undefined ? null : (PARAM_BY_FIELD[field] ?? null);
    return { message: items.map((item) => item.text).join('; '), type: null, code: null, param };
  }
  const message =
    typeof detail === 'string'
      ? detail
      : isObject(detail) && typeof detail.message === 'string'
        ? detail.message
        : typeof value.message === 'string'
          ? value.message
          : typeof value.error === 'string'
            ? value.error
            : null;
  return message === null ? null : { message, type: null, code: null, param: null };
}

function parseBody(bodyText: string): unknown {
  try {
    return JSON.parse(bodyText);
  } catch {
    return null;
  }
}

/**
 * Maps a non-2xx BFL answer. A 422 is the client's invalid request, so it
 * becomes OpenAI's 400 with BFL's message (and the OpenAI parameter behind the
 * field); 401/403 (our key), 402 (credits), 429 and 5xx follow the shared mapping.
 */
export function mapBflError(response: UpstreamErrorResponse, knownSecrets: readonly string[] = []): GatewayError {
  const vendor = readBflError(parseBody(response.bodyText));
  const status = response.status === 422 ? 400 : response.status;
  return mapVendorError({ ...response, status }, vendor, knownSecrets);
}

/** Every string in a `details` value (`{"Moderation Reasons": ["Derivative Works"]}`, a string, a list), joined. */
export function describeBflDetails(details: unknown, limit = 300): string | undefined {
  const texts: string[] = [];
  const collect = (value: unknown, depth: number) => {
    if (typeof value === 'string' && value.trim() !== '') texts.push(value.trim());
    else if (Array.isArray(value) && depth < 4) value.forEach((item) => collect(item, depth + 1));
    else if (isObject(value) && depth < 4) Object.values(value).forEach((item) => collect(item, depth + 1));
  };
  collect(details, 0);
  if (texts.length === 0) return undefined;
  const text = texts.join(', ');
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}

/**
 * `Content Moderated` / `Request Moderated`: the prompt or the picture broke the vendor's policy; OpenAI's 400 for
 * that.
 */
export function bflModerationError(
  status: string,
  details: unknown,
  knownSecrets: readonly string[] = [],
): GatewayError {
  const reason = describeBflDetails(details);
  const what = status === 'Content Moderated' ? 'The generated image was blocked' : 'The request was rejected';
  const message = `${what} by the image vendor's content moderation${reason ? ` (${scrubSecrets(reason, knownSecrets)})` : ''}. Change the prompt and try again.`;
  return new GatewayError(400, message, {
    type: 'invalid_request_error',
    code: 'content_policy_violation',
    cause: { status, details },
  });
}

/**
 * `Error` / `Failed`: the vendor gave up on this task. Not retried by the job:
 * a retry would resume polling the same failed task; a new request makes a new one.
 */
export function bflTaskFailedError(status: string, details: unknown): GatewayError {
  return new GatewayError(
    500,
    'The image vendor failed to generate the image. Please retry the request; changing the prompt may help.',
    {
      type: 'server_error',
      code: 'vendor_task_failed',
      retryable: false,
      cause: { status, details },
    },
  );
}

/**
 * `Task not found`: the vendor no longer knows a task we submitted (results
 * are kept only for a while, or the task lives in another region). No silent
 * resubmit: the vendor may already have charged for it, and the client should
 * decide whether to pay again.
 */
export function bflTaskLostError(taskId: string): GatewayError {
  return new GatewayError(500, 'The image vendor lost track of the generation task. Please retry the request.', {
    type: 'server_error',
    code: 'vendor_task_lost',
    retryable: false,
    cause: { taskId },
  });
}
