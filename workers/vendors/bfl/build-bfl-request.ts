import { invalidRequest } from '../../../shared/errors.js';
import type { BlobRef, ImageGenerationInput } from '../types.js';
import type { ImageEditInput } from '../../../shared/schemas/media-inputs.js';

export type BflOutputFormat = 'png' | 'jpeg' | 'webp';

/** The body of one BFL task. One task makes one image, so `n` becomes that many identical submissions. */
export interface BflTaskRequest {
  prompt: string;
  width?: number;
  height?: number;
  aspect_ratio?: string;
  output_format: BflOutputFormat;
  raw?: boolean;
  /** Kontext: the image to edit (base64); `input_image_2`… carry further reference images. */
  input_image?: string;
  [reference: `input_image_${number}`]: string | undefined;
  /** Fill: the image and the black-and-white mask of the area to repaint (base64). */
  image?: string;
  mask?: string;
}

/** The fields of a task body that carry an uploaded file. */
export type BflUploadField = 'input_image' | `input_image_${number}` | 'image' | 'mask';

/** An upload the body still needs, read from the blob store only when a task is submitted. */
export interface BflUpload {
  field: BflUploadField;
  ref: BlobRef;
  role: 'image' | 'mask';
}

/** An edit task: the body without its uploads, and the uploads that complete it. */
export interface BflEditRequest {
  body: BflTaskRequest;
  uploads: BflUpload[];
}

type SizeRule =
  /** Pixel sizes, each side a multiple of `multiple` within [min, max], the product at most `maxPixels`. */
  | { kind: 'dimensions'; multiple: number; min: number; max: number; maxPixels: number }
  /** A `W:H` string; the vendor picks the pixel size (about 1 MP for Kontext, 4 MP for ultra). */
  | { kind: 'aspect_ratio' };

type EditRule =
  /** Kontext: the uploads go as `input_image`, `input_image_2`…, at most `maxImages`; no mask. */
  | { kind: 'reference'; maxImages: number }
  /** Fill: one image and a mask; the output keeps the image's size. */
  | { kind: 'inpaint' };

/** What each family of endpoints takes, as data. Names not listed get the FLUX.1 pro/dev rules. */
interface EndpointRule {
  pattern: RegExp;
  /** `null`: the endpoint edits an input image, so `/images/generations` cannot serve it. */
  size: SizeRule | null;
  formats: readonly BflOutputFormat[];
  /** OpenAI `quality: "hd"` asks for `raw: true` (a less processed, more natural look), as LiteLLM maps it. */
  rawForHd?: boolean;
  /** How `/images/edits` maps to the endpoint; absent: the gateway does not edit with it. */
  edit?: EditRule;
}

// The legacy client checked multiples of 32 between 256 and 1440 for pro/dev; FLUX.2 takes multiples of 16 up to 4 MP.
const FLUX_1_DIMENSIONS: SizeRule = { kind: 'dimensions', multiple: 32, min: 256, max: 1440, maxPixels: 1440 * 1440 };
const FLUX_2_DIMENSIONS: SizeRule = {
  kind: 'dimensions',
  multiple: 16,
  min: 64,
  max: 4096,
  maxPixels: 4 * 1024 * 1024,
};

const ENDPOINT_RULES: readonly EndpointRule[] = [
  { pattern: /^flux-pro-1\.1-ultra$/, size: { kind: 'aspect_ratio' }, formats: ['png', 'jpeg'], rawForHd: true },
  // Kontext takes `input_image` plus up to three more references (`input_image_2` … `input_image_4`).
  {
    pattern: /^flux-kontext(-|$)/,
    size: { kind: 'aspect_ratio' },
    formats: ['png', 'jpeg'],
    edit: { kind: 'reference', maxImages: 4 },
  },
  { pattern: /^flux-2-/, size: FLUX_2_DIMENSIONS, formats: ['png', 'jpeg', 'webp'] },
  { pattern: /^flux-(pro-1\.0-)?fill$/, size: null, formats: ['png', 'jpeg'], edit: { kind: 'inpaint' } },
  { pattern: /^flux-(pro-1\.0-)?(expand|canny|depth)$/, size: null, formats: ['png', 'jpeg'] },
];
const DEFAULT_RULE: EndpointRule = { pattern: /^/, size: FLUX_1_DIMENSIONS, formats: ['png', 'jpeg'] };

/** BFL documents aspect ratios between 21:9 and 9:21. */
const WIDEST_RATIO = 21 / 9;

/**
 * Ratios BFL's docs and examples use; a size close to one of them is sent as that ratio (what the vendor's presets
 * are).
 */
const NAMED_RATIOS: ReadonlyArray<readonly [number, number]> = [
  [21, 9],
  [16, 9],
  [3, 2],
  [4, 3],
  [5, 4],
  [1, 1],
  [4, 5],
  [3, 4],
  [2, 3],
  [9, 16],
  [9, 21],
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
  if (match === null)
    throw invalidRequest(`Invalid size '${size}'. Expected 'WIDTHxHEIGHT' (e.g. '1024x1024') or 'auto'.`, 'size');
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

function checkDimensions(
  size: { width: number; height: number },
  rule: Extract<SizeRule, { kind: 'dimensions' }>,
  endpoint: string,
): void {
  const { width, height } = size;
  const label = `${width}x${height}`;
  if (width % rule.multiple !== 0 || height % rule.multiple !== 0) {
    throw invalidRequest(
      `Invalid size '${label}' for ${endpoint}: width and height must be multiples of ${rule.multiple}.`,
      'size',
    );
  }
  if (
    width < rule.min ||
    height < rule.min ||
    width > rule.max ||
    height > rule.max ||
    width * height > rule.maxPixels
  ) {
    throw invalidRequest(
      `Invalid size '${label}' for ${endpoint}: each side must be between ${rule.min} and ${rule.max} pixels, at ` +
        `most ${rule.maxPixels} pixels in all.`,
      'size',
    );
  }
}

function checkAspectRatio(size: { width: number; height: number }, endpoint: string): string {
  const ratio = size.width / size.height;
  // A small margin, so sizes BFL itself produces for 21:9 (e.g. 1568x672) are not refused by rounding.
  if (ratio > WIDEST_RATIO * 1.02 || ratio < 1 / (WIDEST_RATIO * 1.02)) {
    throw invalidRequest(
      `Invalid size '${size.width}x${size.height}' for ${endpoint}: the aspect ratio must be between 21:9 and 9:21.`,
      'size',
    );
  }
  return convertSizeToAspectRatio(size.width, size.height);
}

/** The image fields generations and edits share. */
type CommonImageFields = Pick<ImageGenerationInput, 'prompt' | 'size' | 'quality' | 'output_format'>;

/**
 * The body fields every task takes: prompt, output format, size. OpenAI's
 * default format is PNG, BFL's JPEG: the format is always sent so clients get
 * what OpenAI would give them. `size: null` is an endpoint that keeps the
 * input image's size, so only `auto` (or no size) is accepted.
 */
function buildCommonFields(
  input: CommonImageFields,
  endpoint: string,
  rule: EndpointRule,
  size: SizeRule | null,
): BflTaskRequest {
  const outputFormat = input.output_format ?? 'png';
  if (!rule.formats.includes(outputFormat)) {
    throw invalidRequest(
      `output_format '${outputFormat}' is not supported by ${endpoint}; use one of: ${rule.formats.join(', ')}.`,
      'output_format',
    );
  }
  const body: BflTaskRequest = { prompt: input.prompt, output_format: outputFormat };
  const requested = parseImageSize(input.size);
  if (requested !== undefined && size === null) {
    throw invalidRequest(
      `Invalid size '${input.size}' for ${endpoint}: the result keeps the size of the input image; send 'auto' ` +
        `or no size.`,
      'size',
    );
  }
  if (requested !== undefined && size?.kind === 'dimensions') {
    checkDimensions(requested, size, endpoint);
    body.width = requested.width;
    body.height = requested.height;
  } else if (requested !== undefined) {
    body.aspect_ratio = checkAspectRatio(requested, endpoint);
  }
  if (rule.rawForHd === true && input.quality === 'hd') body.raw = true;
  return body;
}

/**
 * Maps an OpenAI image request to the body of one BFL task for `endpoint`
 * (the route's upstream model, e.g. `flux-pro-1.1`). Fields with no BFL
 * counterpart (`style`, `background`, `user`) are not sent; `response_format`
 * is the gateway's concern.
 */
export function buildBflRequest(input: ImageGenerationInput, endpoint: string): BflTaskRequest {
  const rule = findEndpointRule(endpoint);
  if (rule.size === null) {
    const hint = rule.edit === undefined ? 'it is not served by /v1/images/generations' : 'use /v1/images/edits';
    throw invalidRequest(`The model '${input.model}' edits an input image; ${hint}.`, 'model');
  }
  return buildCommonFields(input, endpoint, rule, rule.size);
}

/** Which body field carries each upload, checked against what the endpoint takes. */
function planUploads(input: ImageEditInput, endpoint: string, edit: EditRule): BflUpload[] {
  const { images, mask } = input;
  if (images.length === 0)
    throw invalidRequest("Missing required parameter: 'image'.", 'image', 'missing_required_parameter');
  if (edit.kind === 'reference') {
    if (mask != null) {
      throw invalidRequest(
        `${endpoint} edits the whole image from the prompt and takes no mask. Remove 'mask', or use a FLUX Fill ` +
          `model to repaint a masked area.`,
        'mask',
      );
    }
    if (images.length > edit.maxImages) {
      throw invalidRequest(
        `${endpoint} takes at most ${edit.maxImages} input images; ${images.length} were sent.`,
        'image',
      );
    }
    return images.map((ref, index) => ({
      field: index === 0 ? 'input_image' : `input_image_${index + 1}`,
      ref,
      role: 'image',
    }));
  }
  if (mask == null) {
    throw invalidRequest(
      `${endpoint} repaints the area a mask marks: send 'mask' with the image.`,
      'mask',
      'missing_required_parameter',
    );
  }
  if (images.length > 1) throw invalidRequest(`${endpoint} edits one image; ${images.length} were sent.`, 'image');
  return [
    { field: 'image', ref: images[0]!, role: 'image' },
    { field: 'mask', ref: mask, role: 'mask' },
  ];
}

/**
 * Maps an OpenAI `/images/edits` request to the body of one BFL task, and
 * the uploads it still needs. Everything is checked here, before any upload
 * is read: Kontext takes up to four images and no mask, Fill one image and a
 * mask. Fields with no BFL counterpart (`background`, `input_fidelity`,
 * `user`) are not sent.
 */
export function buildBflEditRequest(input: ImageEditInput, endpoint: string): BflEditRequest {
  const rule = findEndpointRule(endpoint);
  if (rule.edit === undefined) {
    throw invalidRequest(
      `The model '${input.model}' does not edit images; FLUX Kontext and FLUX Fill models do.`,
      'model',
    );
  }
  const uploads = planUploads(input, endpoint, rule.edit);
  const body = buildCommonFields(input, endpoint, rule, rule.edit.kind === 'inpaint' ? null : rule.size);
  return { body, uploads };
}
