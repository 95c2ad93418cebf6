import type { GeneratedImage, ImageResult } from '../types.js';
import { imageGenerationFailed, mapOpenAIImageInlineError } from './map-openai-image-error.js';

/** Top-level fields GPT image models add to `ImagesResponse`; the gateway hands them to the client. */
const EXTRA_FIELDS = ['background', 'output_format', 'size', 'quality'] as const;

const CONTENT_TYPES: Record<string, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  jpg: 'image/jpeg',
  webp: 'image/webp',
};

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * One `data[]` item: `b64_json` becomes bytes, a `url` stays a URL for the
 * gateway to download (its content type is the download's). Items with
 * neither are dropped: they carry no image.
 */
function readImage(item: unknown, contentType: string): GeneratedImage | null {
  if (!isObject(item)) return null;
  const revised = typeof item.revised_prompt === 'string' ? { revised_prompt: item.revised_prompt } : {};
  if (typeof item.b64_json === 'string' && item.b64_json.length > 0) {
    const bytes = Buffer.from(item.b64_json, 'base64');
    if (bytes.length > 0) return { bytes, contentType, ...revised };
  }
  if (typeof item.url === 'string' && item.url.length > 0) return { url: item.url, ...revised };
  return null;
}

/**
 * Maps an OpenAI `ImagesResponse` (`{created, data:[{b64_json|url,
 * revised_prompt}], usage?, background?, output_format?, size?, quality?}`).
 * An answer without a single image is a failed generation, as is an error
 * body sent with a 2xx status.
 */
export function readOpenAIImages(fields: Json, knownSecrets: readonly string[] = []): ImageResult {
  if (fields.error != null && !Array.isArray(fields.data)) throw mapOpenAIImageInlineError(fields, knownSecrets);

  // dall-e answers carry no output_format: they are PNG.
  const format = typeof fields.output_format === 'string' ? fields.output_format.toLowerCase() : 'png';
  const contentType = CONTENT_TYPES[format] ?? `image/${format}`;
  const images: GeneratedImage[] = [];
  if (Array.isArray(fields.data)) {
    for (const item of fields.data) {
      const image = readImage(item, contentType);
      if (image !== null) images.push(image);
    }
  }
  if (images.length === 0) throw imageGenerationFailed({ status: 200, reason: 'the answer held no image' });

  const result: ImageResult = { images };
  if (isObject(fields.usage)) result.usage = fields.usage;
  const extra: Json = {};
  for (const name of EXTRA_FIELDS) if (fields[name] != null) extra[name] = fields[name];
  if (Object.keys(extra).length > 0) result.extra = extra;
  return result;
}
