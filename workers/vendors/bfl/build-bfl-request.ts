import { invalidRequest } from '../../../shared/errors.js';
import type { ImageGenerationInput } from '../media-types.js';

export type BflOutputFormat = 'png' | 'jpeg' | 'webp';

/** The body of one BFL task. One task makes one image, so `n` becomes that many identical submissions. */
export interface BflTaskRequest {
  prompt: string;
  width?: number;
  height?: number;
  aspect_ratio?: string;
  output_format: BflOutputFormat;
  raw?: boolean;
}

type SizeRule =
  /** Pixel sizes, each side a multiple of `multiple` within [min, max], the product at most `maxPixels`. */
  | { kind: 'dimensions'; multiple: number; min: number; max: number; maxPixels: number }
  /** A `W:H` string; the vendor picks the pixel size (about 1 MP for Kontext, 4 MP for ultra). */
  | { kind: 'aspect_ratio' };

/** What each family of endpoints takes, as data. Names not listed get the FLUX.1 pro/dev rules. */
interface EndpointRule {
  pattern: RegExp;
  /** `null`: the endpoint edits an input image, so `/images/generations` cannot serve it. */
  size: SizeRule | null;
  formats: readonly BflOutputFormat[];
  /** OpenAI `quality: "hd"` asks for `raw: true` (a less processed, more natural look), as LiteLLM maps it. */
  rawForHd?: boolean;
}

// The legacy client checked multiples of 32 between 256 and 1440 for pro/dev; FLUX.2 takes multiples of 16 up to 4 MP.
const FLUX_1_DIMENSIONS: SizeRule = { kind: 'dimensions', multiple: 32, min: 256, max: 1440, maxPixels: 1440 * 1440 };
const FLUX_2_DIMENSIONS: SizeRule = { kind: 'dimensions', multiple: 16, min: 64, max: 4096, maxPixels: 4 * 1024 * 1024 };

const ENDPOINT_RULES: readonly EndpointRule[] = [
  { pattern: /^flux-pro-1\.1-ultra$/, size: { kind: 'aspect_ratio' }, formats: ['png', 'jpeg'], rawForHd: true },
  { pattern: /^flux-kontext(-|$)/, size: { kind: 'aspect_ratio' }, formats: ['png', 'jpeg'] },
  { pattern: /^flux-2-/, size: FLUX_2_DIMENSIONS, formats: ['png', 'jpeg', 'webp'] },
  { pattern: /^flux-(pro-1\.0-)?(fill|expand|canny|depth)$/, size: null, formats: ['png', 'jpeg'] },
];
const DEFAULT_RULE: EndpointRule = { pattern: /^/, size: FLUX_1_DIMENSIONS, formats: ['png', 'jpeg'] };

/** BFL documents aspect ratios between 21:9 and 9:21. */
const WIDEST_RATIO = 21 / 9;

/** Ratios BFL's docs and examples use; a size close to one of them is sent as that ratio (what the vendor's presets are). */
const NAMED_RATIOS: ReadonlyArray<readonly [number, number]> = [
  [21, 9], [16, 9], [3, 2], [4, 3], [5, 4], [1, 1], [4, 5], [3, 4], [2, 3], [9, 16], [9, 21],
];
/** How far (as a log ratio, ~5%) a size may be from a named ratio and still be called by its name. */
const NAMED_RATIO_TOLERANCE = 0.05;

export function findEndpointRule(endpoint: string): EndpointRule {
  return ENDPOINT_RULES.find((rule) => rule.pattern.test(endpoint)) ?? DEFAULT_RULE;
}

/** `WxH` as numbers; `auto` or no size means the vendor's default. */
export function parseImageSize(size: string | null | undefined): { width: number; height: number } | undefined {
  if (size == null || size === 'auto') return undefined;
  const match = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  if (match === null) throw invalidRequest(`Invalid size '${size}'. Expected 'WIDTHxHEIGHT' (e.g. '1024x1024') or 'auto'.`, 'size');
  const width = Number(match[1]);
  const height = Number(match[2]);
  if (width === 0 || height === 0) throw invalidRequest(`Invalid size '${size}': both sides must be positive.`, 'size');
  return { width, height };
}

const greatestCommonDivisor = (a: number, b: number): number => (b === 0 ? a : greatestCommonDivisor(b, a % b));

/**
 * The size's shape as `W:H`: a named ratio when the size is within ~5% of one
 * (`2752x1536` is BFL's own 16:9 output, `1184x880` Kontext's 4:3), else the
 * reduced ratio itself.
 */
export function convertSizeToAspectRatio(width: number, height: number): string {
  const ratio = Math.log(width / height);
  let best: readonly [number, number] | undefined;
  let bestDistance = Infinity;
  for (const named of NAMED_RATIOS) {
    const distance = Math.abs(ratio - Math.log(named[0] / named[1]));
    if (distance < bestDistance) {
      best = named;
      bestDistance = distance;
    }
  }
  if (best !== undefined && bestDistance <= NAMED_RATIO_TOLERANCE) return `${best[0]}:${best[1]}`;
  const divisor = greatestCommonDivisor(width, height);
  return `${width / divisor}:${height / divisor}`;
}

function checkDimensions(size: { width: number; height: number }, rule: Extract<SizeRule, { kind: 'dimensions' }>, endpoint: string): void {
  const { width, height } = size;
  const label = `${width}x${height}`;
  if (width % rule.multiple !== 0 || height % rule.multiple !== 0) {
    throw invalidRequest(`Invalid size '${label}' for ${endpoint}: width and height must be multiples of ${rule.multiple}.`, 'size');
  }
  if (width < rule.min || height < rule.min || width > rule.max || height > rule.max || width * height > rule.maxPixels) {
    throw invalidRequest(
      `Invalid size '${label}' for ${endpoint}: each side must be between ${rule.min} and ${rule.max} pixels, at most ${rule.maxPixels} pixels in all.`,
      'size',
    );
  }
}

function checkAspectRatio(size: { width: number; height: number }, endpoint: string): string {
  const ratio = size.width / size.height;
  // A small margin, so sizes BFL itself produces for 21:9 (e.g. 1568x672) are not refused by rounding.
  if (ratio > WIDEST_RATIO * 1.02 || ratio < 1 / (WIDEST_RATIO * 1.02)) {
    throw invalidRequest(`Invalid size '${size.width}x${size.height}' for ${endpoint}: the aspect ratio must be between 21:9 and 9:21.`, 'size');
  }
  return convertSizeToAspectRatio(size.width, size.height);
}

/**
 * Maps an OpenAI image request to the body of one BFL task for `endpoint`
 * (the route's upstream model, e.g. `flux-pro-1.1`). OpenAI's default format
 * is PNG, BFL's JPEG: the format is always sent so clients get what OpenAI
 * would give them. Fields with no BFL counterpart (`style`, `background`,
 * `user`) are not sent; `response_format` is the gateway's concern.
 */
export function buildBflRequest(input: ImageGenerationInput, endpoint: string): BflTaskRequest {
  const rule = findEndpointRule(endpoint);
  if (rule.size === null) {
    throw invalidRequest(`The model '${input.model}' edits an input image; use /v1/images/edits.`, 'model');
  }
  const outputFormat = input.output_format ?? 'png';
  if (!rule.formats.includes(outputFormat)) {
    throw invalidRequest(`output_format '${outputFormat}' is not supported by ${endpoint}; use one of: ${rule.formats.join(', ')}.`, 'output_format');
  }
  const body: BflTaskRequest = { prompt: input.prompt, output_format: outputFormat };
  const size = parseImageSize(input.size);
  if (size !== undefined && rule.size.kind === 'dimensions') {
    checkDimensions(size, rule.size, endpoint);
    body.width = size.width;
    body.height = size.height;
  } else if (size !== undefined) {
    body.aspect_ratio = checkAspectRatio(size, endpoint);
  }
  if (rule.rawForHd === true && input.quality === 'hd') body.raw = true;
  return body;
}
