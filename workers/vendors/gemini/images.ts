import { GatewayError } from '../../../shared/errors.js';
import { postJson, vendorRequest } from '../http.js';
import type { GeneratedImage, ImageGenerationInput, ImageResult, MediaContext, VendorAdapter } from '../types.js';
import { scrubSecrets } from '../vendor-errors.js';
import { geminiApi } from './api.js';
import { buildGeminiImageRequest } from './build-gemini-image-request.js';
import { readBlockReason, readCandidates, readText } from './gemini-response.js';
import { mapGeminiError, mapGeminiInlineError } from './map-gemini-error.js';

/** Finish reasons meaning a safety filter stopped the image: the client's prompt, not a vendor fault. */
const POLICY_FINISH_REASONS = new Set([
  'SAFETY',
  'IMAGE_SAFETY',
  'PROHIBITED_CONTENT',
  'IMAGE_PROHIBITED_CONTENT',
  'BLOCKLIST',
  'SPII',
]);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * An `inlineData` image part as bytes. Thought parts are skipped: Gemini 3 shows drafts there before the final image.
 */
export function readInlineImage(part: unknown): GeneratedImage | undefined {
  if (!isObject(part) || part.thought === true || !isObject(part.inlineData)) return undefined;
  const { mimeType, data } = part.inlineData;
  if (typeof mimeType !== 'string' || !mimeType.startsWith('image/') || typeof data !== 'string' || data === '')
    return undefined;
  return { bytes: Buffer.from(data, 'base64'), contentType: mimeType };
}

interface OneImage {
  image: GeneratedImage;
  usage: { input: number; output: number; total: number } | undefined;
}

/** Token counts of one call; thoughts count as output, as Google bills them. */
function readUsage(payload: Record<string, unknown>): OneImage['usage'] {
  const metadata = payload.usageMetadata;
  if (!isObject(metadata)) return undefined;
  const count = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) ? value : 0);
  const input = count(metadata.promptTokenCount);
  const output = count(metadata.candidatesTokenCount) + count(metadata.thoughtsTokenCount);
  return { input, output, total: count(metadata.totalTokenCount) || input + output };
}

const contentPolicyError = (message: string, cause: unknown) =>
  new GatewayError(400, message, { type: 'invalid_request_error', code: 'content_policy_violation', cause });

/**
 * Why an answer holds no image. A blocked prompt or a safety finish reason is
 * OpenAI's 400 `content_policy_violation`; anything else (the model chose to
 * answer in words, `NO_IMAGE`, `IMAGE_OTHER`) is a 500 the client may retry,
 * quoting the model's words, which often say why.
 */
function noImageError(payload: Record<string, unknown>, ctx: MediaContext): GatewayError {
  const blockReason = readBlockReason(payload);
  if (blockReason !== undefined) {
    return contentPolicyError(
      `The prompt was blocked by the image model's safety filters (${blockReason}). Change the prompt and try again.`,
      { blockReason },
    );
  }
  const candidate = readCandidates(payload)[0];
  const finishReason = candidate?.finishReason ?? null;
  if (finishReason !== null && POLICY_FINISH_REASONS.has(finishReason)) {
    return contentPolicyError(
      `The image was blocked by the image model's safety filters (${finishReason}). Change the prompt and try again.`,
      { finishReason },
    );
  }
  const text = (candidate?.parts ?? [])
    .map(readText)
    .filter((part) => part !== undefined)
    .join('')
    .trim();
  const quoted =
    text === '' ? '' : `: "${scrubSecrets(text.length > 300 ? `${text.slice(0, 300)}…` : text, [ctx.channel.apiKey])}"`;
  const reason = finishReason === null ? '' : ` (finish reason ${finishReason})`;
  return new GatewayError(
    500,
    `The image model answered without an image${reason}${quoted}. Please retry the request; rephrasing the ` +
      `prompt may help.`,
    {
      type: 'server_error',
      code: 'vendor_no_image',
      retryable: false,
      cause: { finishReason },
    },
  );
}

/**
 * One `generateContent` call; Gemini makes one image per call. The first image part of the first candidate is the
 * answer.
 */
async function generateOneImage(body: string, ctx: MediaContext): Promise<OneImage> {
  const { json: payload } = await postJson(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.generate(ctx.upstreamModel), body),
    mapGeminiError,
  );
  if (payload.error != null && payload.candidates === undefined)
    throw mapGeminiInlineError(payload, [ctx.channel.apiKey]);
  const candidate = readCandidates(payload)[0];
  const image = candidate?.parts.map(readInlineImage).find((part) => part !== undefined);
  if (image === undefined) throw noImageError(payload, ctx);
  return { image, usage: readUsage(payload) };
}

/**
 * OpenAI `/images/generations` on Gemini image models through
 * `generateContent`. `n` images are `n` calls, one after another (the
 * channel's concurrency cap counts this job once), with progress reported
 * after each. Usage is summed in GPT-image form (`input_tokens`, `output_tokens`).
 */
export const generateGeminiImages: NonNullable<VendorAdapter['generateImages']> = async (
  input: ImageGenerationInput,
  ctx: MediaContext,
): Promise<ImageResult> => {
  // Imagen answers on `:predict` with another body; sent to `generateContent` it would fail with a confusing vendor
  // 404.
  if (/(^|\/)imagen-/.test(ctx.upstreamModel)) {
    throw new GatewayError(400, `The model '${input.model}' (Imagen) is not served by this gateway yet.`, {
      code: 'unsupported_endpoint',
      param: 'model',
    });
  }
  const body = JSON.stringify(buildGeminiImageRequest(input, ctx.upstreamModel));
  const count = input.n ?? 1;
  const images: GeneratedImage[] = [];
  let usage: { input_tokens: number; output_tokens: number; total_tokens: number } | undefined;
  for (let index = 0; index < count; index += 1) {
    const one = await generateOneImage(body, ctx);
    images.push(one.image);
    if (one.usage !== undefined) {
      usage ??= { input_tokens: 0, output_tokens: 0, total_tokens: 0 };
      usage.input_tokens += one.usage.input;
      usage.output_tokens += one.usage.output;
      usage.total_tokens += one.usage.total;
    }
    if (images.length < count) await ctx.progress(Math.floor((100 * images.length) / count));
  }
  return usage === undefined ? { images } : { images, usage };
};
