import { invalidRequest } from '../../../shared/errors.js';
import type { ImageGenerationInput } from '../types.js';

/** The aspect ratios Gemini image models accept in `imageConfig.aspectRatio`. */
export const GEMINI_ASPECT_RATIOS = ['1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9'] as const;
export type GeminiAspectRatio = (typeof GEMINI_ASPECT_RATIOS)[number];
export type GeminiImageSize = '1K' | '2K' | '4K';

export interface GeminiImageRequest {
  contents: Array<{ role: 'user'; parts: Array<{ text: string }> }>;
  generationConfig: {
    responseModalities: ['TEXT', 'IMAGE'];
    imageConfig?: { aspectRatio: GeminiAspectRatio; imageSize?: GeminiImageSize };
  };
}

/**
 * Which image settings each model generation takes, as data. 2.0's image
 * preview has no `imageConfig` (it makes 1024x1024 only); 2.5 Flash Image
 * takes an aspect ratio at one resolution; Gemini 3 image models also take
 * `imageSize`. The first matching rule wins.
 */
const IMAGE_CONFIG_RULES: ReadonlyArray<{ pattern: RegExp; aspectRatio: boolean; imageSize: boolean }> = [
  { pattern: /gemini-2\.0-/, aspectRatio: false, imageSize: false },
  { pattern: /gemini-3/, aspectRatio: true, imageSize: true },
  { pattern: /^/, aspectRatio: true, imageSize: false },
];

/** `WxH`; `auto` or none leaves the shape to the model. */
function parseSize(size: string | null | undefined): { width: number; height: number } | undefined {
  if (size == null || size === 'auto') return undefined;
  const match = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  if (match === null || Number(match[1]) === 0 || Number(match[2]) === 0) {
    throw invalidRequest(`Invalid size '${size}'. Expected 'WIDTHxHEIGHT' (e.g. '1024x1024') or 'auto'.`, 'size');
  }
  return { width: Number(match[1]), height: Number(match[2]) };
}

/** The nearest of Gemini's ratios, compared on a log scale so 2:1 and 1:2 are equally far from 1:1. */
export function convertSizeToGeminiAspectRatio(width: number, height: number): GeminiAspectRatio {
  const target = Math.log(width / height);
  let best: GeminiAspectRatio = '1:1';
  let bestDistance = Infinity;
  for (const ratio of GEMINI_ASPECT_RATIOS) {
    const [w, h] = ratio.split(':').map(Number) as [number, number];
    const distance = Math.abs(target - Math.log(w / h));
    if (distance < bestDistance) {
      best = ratio;
      bestDistance = distance;
    }
  }
  return best;
}

/** By pixel count: 1K is about 1 MP at any ratio (1584x672 too), 2K about 4 MP, 4K about 16 MP. */
export function convertSizeToGeminiImageSize(width: number, height: number): GeminiImageSize {
  const pixels = width * height;
  if (pixels <= 2 * 1024 * 1024) return '1K';
  if (pixels <= 8 * 1024 * 1024) return '2K';
  return '4K';
}

/**
 * One `generateContent` body asking for an image: the prompt as the user
 * turn, `responseModalities: ["TEXT","IMAGE"]` (image-only answers are
 * refused by some of these models), and, when the client gave a size and the
 * model takes it, `imageConfig` with the nearest aspect ratio (and resolution
 * class on Gemini 3).
 */
export function buildGeminiImageRequest(input: ImageGenerationInput, upstreamModel: string): GeminiImageRequest {
  const request: GeminiImageRequest = {
    contents: [{ role: 'user', parts: [{ text: input.prompt }] }],
    generationConfig: { responseModalities: ['TEXT', 'IMAGE'] },
  };
  const size = parseSize(input.size);
  const rule = IMAGE_CONFIG_RULES.find((candidate) => candidate.pattern.test(upstreamModel))!;
  if (size === undefined || !rule.aspectRatio) return request;
  request.generationConfig.imageConfig = {
    aspectRatio: convertSizeToGeminiAspectRatio(size.width, size.height),
    ...(rule.imageSize ? { imageSize: convertSizeToGeminiImageSize(size.width, size.height) } : {}),
  };
  return request;
}
