import { Blob } from 'node:buffer';
import { FormData } from 'undici';
import type { BlobRef, ImageGenerationInput, MediaContext } from '../types.js';
import type { ImageEditInput, ImageVariationInput } from '../../../shared/schemas/media-inputs.js';
import type { CallContext } from '../types.js';

/**
 * GPT image models (`gpt-image-1`, `-1-mini`, `-1.5`, …) refuse
 * `response_format` (400 `unknown_parameter`) and always answer `b64_json`.
 */
export function isGptImageModel(upstreamModel: string): boolean {
  return upstreamModel.startsWith('gpt-image');
}

/** Streaming image answers (`stream`, `partial_images`) are SSE; these calls read one JSON body. */
const STREAM_FIELDS = ['stream', 'partial_images'];

/**
 * The client's fields as they came (unknown ones included), with the route's
 * upstream model. `response_format` is ours to decide: the gateway needs the
 * bytes and answers the client in the format it asked for itself.
 */
function prepareFields(fields: Record<string, unknown>, ctx: CallContext): Record<string, unknown> {
  const body: Record<string, unknown> = { ...fields, model: ctx.upstreamModel };
  for (const name of STREAM_FIELDS) delete body[name];
  if (isGptImageModel(ctx.upstreamModel)) delete body.response_format;
  else body.response_format = 'b64_json';
  return body;
}

export function buildOpenAIImageGenerationBody(input: ImageGenerationInput, ctx: CallContext): string {
  return JSON.stringify(prepareFields(input, ctx));
}

const EXTENSIONS: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp' };

/** OpenAI tells image types apart by the filename's extension too, so every part gets one. */
function filenameFor(ref: BlobRef, fallbackStem: string): string {
  if (ref.filename) return ref.filename;
  return `${fallbackStem}.${EXTENSIONS[ref.contentType.toLowerCase()] ?? 'png'}`;
}

function formValue(value: unknown): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return JSON.stringify(value);
}

/**
 * The multipart body of `/images/edits`: text fields, then the images (one
 * `image` part for a single image; `image[]` parts for several, as the
 * official SDKs send arrays), then the `mask`.
 */
export async function buildOpenAIImageEditForm(input: ImageEditInput, ctx: MediaContext): Promise<FormData> {
  const { images, mask, ...fields } = input;
  const form = new FormData();
  for (const [name, value] of Object.entries(prepareFields(fields, ctx))) {
    if (value !== undefined && value !== null) form.append(name, formValue(value));
  }
  const imageField = images.length === 1 ? 'image' : 'image[]';
  for (const [index, ref] of images.entries()) {
    const bytes = await ctx.blobs.get(ref.key);
    const stem = images.length === 1 ? 'image' : `image-${index + 1}`;
    form.append(imageField, new Blob([bytes], { type: ref.contentType }), filenameFor(ref, stem));
  }
  if (mask) {
    const bytes = await ctx.blobs.get(mask.key);
    form.append('mask', new Blob([bytes], { type: mask.contentType }), filenameFor(mask, 'mask'));
  }
  return form;
}

/** The multipart body of `/images/variations`: the text fields, then the one `image` part. */
export async function buildOpenAIImageVariationForm(input: ImageVariationInput, ctx: MediaContext): Promise<FormData> {
  const { image, ...fields } = input;
  const form = new FormData();
  for (const [name, value] of Object.entries(prepareFields(fields, ctx))) {
    if (value !== undefined && value !== null) form.append(name, formValue(value));
  }
  const bytes = await ctx.blobs.get(image.key);
  form.append('image', new Blob([bytes], { type: image.contentType }), filenameFor(image, 'image'));
  return form;
}
