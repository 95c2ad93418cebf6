import type { CatalogModel } from '../../shared/catalog.js';
import { invalidRequest } from '../../shared/errors.js';

interface ImageOptions {
  size?: string | null;
  n?: number | null;
  quality?: string | null;
  style?: string | null;
  background?: string | null;
  output_format?: string | null;
  output_compression?: number | null;
  moderation?: string | null;
}

const familyOptions = ['style', 'background', 'output_format', 'output_compression', 'moderation'] as const;

/**
 * Checks an image request against the model's family (sizes, n, quality and
 * the options only some families take) before any vendor call, naming the
 * allowed values in the message.
 */
export function checkImageRequest(model: CatalogModel, body: ImageOptions): void {
  const sizes = model.image_sizes;
  if (body.size != null && sizes && sizes.length > 0 && !sizes.includes(body.size)) {
    throw invalidRequest(
      `Invalid size '${body.size}' for \`${model.id}\`. Supported sizes: ${sizes.join(', ')}.`,
      'size',
      'invalid_size',
    );
  }
  const maxImages = model.max_images ?? 10;
  if (body.n != null && body.n > maxImages) {
    throw invalidRequest(
      `\`${model.id}\` makes at most ${maxImages} image${maxImages === 1 ? '' : 's'} per request; n was ${body.n}.`,
      'n',
    );
  }
  const qualities = model.image_qualities;
  if (body.quality != null && qualities && !qualities.includes(body.quality)) {
    throw invalidRequest(
      `Invalid quality '${body.quality}' for \`${model.id}\`. Supported: ${qualities.join(', ')}.`,
      'quality',
    );
  }
  const options = model.image_options ?? [];
  for (const option of familyOptions) {
    if (body[option] != null && !options.includes(option)) {
      throw invalidRequest(`\`${model.id}\` does not take '${option}'.`, option, 'unsupported_parameter');
    }
  }
}

/** OpenAI's rule for a variation's image: "less than 4MB", so 4 MiB itself is refused. */
export const variationMaxBytes = 4 * 1024 * 1024;

export function checkVariable(model: CatalogModel): void {
  if (!model.supports_variations) {
    throw invalidRequest(
      `\`${model.id}\` does not make image variations; use dall-e-2.`,
      'model',
      'model_not_supported',
    );
  }
}

export function checkEditable(model: CatalogModel): void {
  if (!model.supports_edits)
    throw invalidRequest(
      `\`${model.id}\` cannot edit images; use dall-e-2 or a GPT image model.`,
      'model',
      'model_not_supported',
    );
}

type ImageFormat = 'png' | 'jpeg' | 'webp';

interface Upload {
  head: Buffer;
  bytes: number;
}

/** The format a file's first bytes say it is (its name and declared type can lie). */
export function sniffImage(head: Buffer): ImageFormat | undefined {
  if (head.length >= 8 && head.readUInt32BE(0) === 0x89504e47 && head.readUInt32BE(4) === 0x0d0a1a0a) return 'png';
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return 'jpeg';
  if (head.length >= 12 && head.toString('latin1', 0, 4) === 'RIFF' && head.toString('latin1', 8, 12) === 'WEBP')
    return 'webp';
  return undefined;
}

/** A PNG's width and height, from its IHDR chunk (always the first, at byte 8). */
export function pngDimensions(head: Buffer): { width: number; height: number } | undefined {
  if (sniffImage(head) !== 'png' || head.length < 24 || head.toString('latin1', 12, 16) !== 'IHDR') return undefined;
  return { width: head.readUInt32BE(16), height: head.readUInt32BE(20) };
}

const mb = (bytes: number) => `${Math.round((bytes / 1024 / 1024) * 10) / 10} MB`;

/**
 * Checks edit uploads against the model's rules before they ride the queue:
 * real image files of a format it takes, under its size cap, square where it
 * must be, not too many; a mask a PNG of the first image's dimensions.
 */
export function checkEditUploads(model: CatalogModel, images: Upload[], mask: Upload | undefined): void {
  const rules = model.edit_input;
  if (!rules) return;
  if (rules.max_images !== undefined && images.length > rules.max_images) {
    throw invalidRequest(
      `\`${model.id}\` edits at most ${rules.max_images} image${rules.max_images === 1 ? '' : 's'} per request; ${images.length} were sent.`,
      'image',
    );
  }
  images.forEach((image, index) => {
    const param = images.length > 1 ? `image[${index}]` : 'image';
    const format = sniffImage(image.head);
    if (!format || !rules.formats.includes(format)) {
      const allowed = rules.formats.map((f) => f.toUpperCase()).join(', ');
      throw invalidRequest(
        `Invalid image file for '${param}': ${format ? `a ${format.toUpperCase()} image` : 'not an image this API can read'}; \`${model.id}\` takes ${allowed}.`,
        param,
        'invalid_image_format',
      );
    }
    if (rules.max_bytes !== undefined && image.bytes > rules.max_bytes) {
      throw invalidRequest(
        `Invalid image file for '${param}': ${mb(image.bytes)}; \`${model.id}\` takes images under ` +
          `${mb(rules.max_bytes)}.`,
        param,
        'image_too_large',
      );
    }
    const size = pngDimensions(image.head);
    if (rules.square && size && size.width !== size.height) {
      throw invalidRequest(
        `Invalid image file for '${param}': ${size.width}x${size.height}; \`${model.id}\` edits square images only.`,
        param,
        'invalid_image_dimensions',
      );
    }
  });
  if (!mask) return;
  const maskSize = pngDimensions(mask.head);
  if (!maskSize)
    throw invalidRequest(
      'Invalid mask: it must be a PNG image (its transparent areas mark what to edit).',
      'mask',
      'invalid_image_format',
    );
  if (rules.max_bytes !== undefined && mask.bytes > rules.max_bytes) {
    throw invalidRequest(
      `Invalid mask: ${mb(mask.bytes)}; \`${model.id}\` takes masks under ${mb(rules.max_bytes)}.`,
      'mask',
      'image_too_large',
    );
  }
  const first = images[0] && pngDimensions(images[0].head);
  if (first && (first.width !== maskSize.width || first.height !== maskSize.height)) {
    throw invalidRequest(
      `Invalid mask: ${maskSize.width}x${maskSize.height}, but the image is ${first.width}x${first.height}; they ` +
        `must match.`,
      'mask',
      'invalid_image_dimensions',
    );
  }
}

interface FieldUpload extends Upload {
  field: string;
}

/**
 * Checks a variation's uploads before they ride the queue, as OpenAI would:
 * exactly one file, `image`, a PNG by its content whose size can be read
 * (the vendor refuses what it cannot measure), under 4 MB, and square.
 */
export function checkVariationUpload(model: CatalogModel, files: readonly FieldUpload[]): void {
  const images = files.filter((file) => file.field === 'image');
  if (images.length === 0)
    throw invalidRequest(
      "Missing required parameter: 'image' (send one square PNG as a multipart part).",
      'image',
      'missing_required_parameter',
    );
  if (images.length > 1)
    throw invalidRequest(
      `A variation starts from exactly one image; ${images.length} 'image' parts were sent.`,
      'image',
    );
  const other = files.find((file) => file.field !== 'image');
  if (other)
    throw invalidRequest(
      `Unexpected file '${other.field}': a variation takes one file, 'image'.`,
      other.field,
      'unknown_parameter',
    );
  const image = images[0]!;
  const format = sniffImage(image.head);
  if (format !== 'png') {
    throw invalidRequest(
      `Invalid image file for 'image': ${format ? `a ${format.toUpperCase()} image` : 'not an image this API can read'}; \`${model.id}\` makes variations of PNG images only.`,
      'image',
      'invalid_image_format',
    );
  }
  const size = pngDimensions(image.head);
  if (!size)
    throw invalidRequest(
      "Invalid image file for 'image': a PNG without a readable header (IHDR).",
      'image',
      'invalid_image',
    );
  if (image.bytes >= variationMaxBytes) {
    throw invalidRequest(
      `Invalid image file for 'image': ${mb(image.bytes)}; a variation's image must be less than 4 MB.`,
      'image',
      'image_too_large',
    );
  }
  if (size.width !== size.height) {
    throw invalidRequest(
      `Invalid image file for 'image': ${size.width}x${size.height}; a variation's image must be square.`,
      'image',
      'invalid_image_dimensions',
    );
  }
}
