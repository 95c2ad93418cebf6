/**
 * The mock's images: real PNG files of the requested size, a gradient whose
 * colours come from a hash of the prompt (and, for edits, of the uploads), so
 * the same request always yields the same bytes and different prompts differ.
 *
 * Markers in the prompt, as for chat:
 *   [mock:error:<status>]  fail with that status before any work.
 *   [mock:slow:<ms>]       take <ms> before answering, reporting progress
 *                          (25, 50, 75) on the way; ends at once on abort.
 *   [mock:refuse]          a 400 `content_policy_violation`, as a vendor's
 *                          safety system answers.
 */
import { createHash } from 'node:crypto';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { GatewayError, invalidRequest } from '../../../shared/errors.js';
import { countTextTokens } from '../../../shared/tokens.js';
import type { GeneratedImage, ImageGenerationInput, ImageResult, MediaContext } from '../types.js';
import type { ImageEditInput, ImageVariationInput } from '../../../shared/schemas/media-inputs.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { sleep } from '../sleep.js';
import { encodeGradientPng, type Rgb } from './png.js';

const DEFAULT_SIDE = 1024;
/** Bounds what a mock call may allocate; real vendors stop at 4096 too. */
const MAX_SIDE = 4096;
const PROGRESS_STEPS = 4;
const refuseMarker = '[mock:refuse]';

/** Output tokens GPT image models bill for a 1024x1024 image, by quality; larger sizes scale by area. */
const OUTPUT_TOKENS_PER_MEGAPIXEL: Record<string, number> = { low: 272, medium: 1056, high: 4160 };
/** What a GPT image model bills per input image on edits (a rough constant: the mock does not tile images). */
const INPUT_IMAGE_TOKENS = 323;

export interface ImageSize {
  width: number;
  height: number;
}

/** `WIDTHxHEIGHT`; `auto` and no size at all mean 1024x1024. */
export function parseImageSize(size: string | null | undefined): ImageSize {
  if (size === undefined || size === null || size === 'auto') return { width: DEFAULT_SIDE, height: DEFAULT_SIDE };
  const match = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  const width = Number(match?.[1]);
  const height = Number(match?.[2]);
  if (!match || width < 1 || height < 1 || width > MAX_SIDE || height > MAX_SIDE) {
    throw invalidRequest(
      `Invalid size '${size}': use WIDTHxHEIGHT with sides up to ${MAX_SIDE}, or 'auto'.`,
      'size',
      'invalid_value',
    );
  }
  return { width, height };
}

// The mock plays the model family its id names, so billing and response paths see realistic shapes offline.
const isGptImageLike = (ctx: MediaContext) => /gpt-image/.test(ctx.upstreamModel) || /gpt-image/.test(ctx.model.id);
const isDallE3Like = (ctx: MediaContext) => /dall-e-3/.test(ctx.upstreamModel) || /dall-e-3/.test(ctx.model.id);

function cornersFrom(seed: Buffer): [Rgb, Rgb, Rgb, Rgb] {
  const colour = (offset: number): Rgb => [seed[offset]!, seed[offset + 1]!, seed[offset + 2]!];
  return [colour(0), colour(3), colour(6), colour(9)];
}

function refusal(): GatewayError {
  return new GatewayError(
    400,
    'Your request was rejected by the mock safety system: the prompt asked for a refusal ([mock:refuse]).',
    { type: 'invalid_request_error', code: 'content_policy_violation' },
  );
}

/** Applies the prompt's markers: a failure throws at once; a slow marker waits, reporting progress. */
async function actOnMarkers(prompt: string, ctx: MediaContext): Promise<void> {
  ctx.signal.throwIfAborted();
  const markers = readMockMarkers([prompt]);
  throwIfErrorMarker(markers);
  if (prompt.includes(refuseMarker)) throw refusal();
  if (markers.slowMs === undefined) return;
  for (let step = 1; step <= PROGRESS_STEPS; step++) {
    await sleep(markers.slowMs / PROGRESS_STEPS, ctx.signal);
    if (step < PROGRESS_STEPS) await ctx.progress(Math.round((step * 100) / PROGRESS_STEPS));
  }
}

interface Plan {
  prompt: string;
  count: number;
  size: ImageSize;
  /** Mixed into every image's seed: distinguishes edits of different uploads. */
  salt: string;
  inputImages: number;
  quality: string | null | undefined;
}

async function renderImages(plan: Plan, ctx: MediaContext): Promise<ImageResult> {
  const images: GeneratedImage[] = [];
  const revisedPrompt = isDallE3Like(ctx) ? `A detailed, high-quality image of: ${plan.prompt}` : undefined;
  for (let index = 0; index < plan.count; index++) {
    // Encoding is synchronous: give other jobs of this worker a turn between images, and notice a cancel.
    if (index > 0) await yieldToEventLoop();
    ctx.signal.throwIfAborted();
    const seed = createHash('sha256').update(`${plan.salt}\u0000${plan.prompt}\u0000${index}`).digest();
    const bytes = encodeGradientPng(plan.size.width, plan.size.height, cornersFrom(seed));
    images.push({ bytes, contentType: 'image/png', ...(revisedPrompt ? { revised_prompt: revisedPrompt } : {}) });
  }
  if (!isGptImageLike(ctx)) return { images };

  const quality = plan.quality === 'low' || plan.quality === 'high' ? plan.quality : 'medium';
  const megapixels = (plan.size.width * plan.size.height) / (DEFAULT_SIDE * DEFAULT_SIDE);
  const outputTokens = Math.round(OUTPUT_TOKENS_PER_MEGAPIXEL[quality]! * megapixels) * plan.count;
  const textTokens = countTextTokens(plan.prompt);
  const imageTokens = plan.inputImages * INPUT_IMAGE_TOKENS;
  return {
    images,
    usage: {
      input_tokens: textTokens + imageTokens,
      output_tokens: outputTokens,
      total_tokens: textTokens + imageTokens + outputTokens,
      input_tokens_details: { text_tokens: textTokens, image_tokens: imageTokens },
    },
    extra: { background: 'opaque', output_format: 'png', size: `${plan.size.width}x${plan.size.height}`, quality },
  };
}

export async function generateMockImages(input: ImageGenerationInput, ctx: MediaContext): Promise<ImageResult> {
  const size = parseImageSize(input.size);
  await actOnMarkers(input.prompt, ctx);
  return renderImages(
    { prompt: input.prompt, count: input.n ?? 1, size, salt: 'generation', inputImages: 0, quality: input.quality },
    ctx,
  );
}

/** Variations of the uploaded image: deterministic per image, so the same upload varies the same way. */
export async function varyMockImages(input: ImageVariationInput, ctx: MediaContext): Promise<ImageResult> {
  const size = parseImageSize(input.size);
  const bytes = await ctx.blobs.get(input.image.key);
  ctx.signal.throwIfAborted();
  return renderImages(
    {
      prompt: 'variation',
      count: input.n ?? 1,
      size,
      salt: createHash('sha256').update('variation').update(bytes).digest('hex'),
      inputImages: 1,
      quality: undefined,
    },
    ctx,
  );
}

export async function editMockImages(input: ImageEditInput, ctx: MediaContext): Promise<ImageResult> {
  if (input.images.length === 0) {
    throw invalidRequest("Missing required parameter: 'image'.", 'image', 'missing_required_parameter');
  }
  const size = parseImageSize(input.size);
  await actOnMarkers(input.prompt, ctx);
  // Reading the uploads proves they are there, and lets the result depend on them as a real edit would.
  const hash = createHash('sha256').update('edit');
  for (const ref of [...input.images, ...(input.mask ? [input.mask] : [])]) {
    hash.update(await ctx.blobs.get(ref.key));
    ctx.signal.throwIfAborted();
  }
  return renderImages(
    {
      prompt: input.prompt,
      count: input.n ?? 1,
      size,
      salt: hash.digest('hex'),
      inputImages: input.images.length,
      quality: input.quality,
    },
    ctx,
  );
}
