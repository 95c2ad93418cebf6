import type { CatalogModel } from '../shared/catalog.js';
import { invalidRequest } from '../shared/errors.js';

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
    throw invalidRequest(`Invalid size '${body.size}' for \`${model.id}\`. Supported sizes: ${sizes.join(', ')}.`, 'size', 'invalid_size');
  }
  const maxImages = model.max_images ?? 10;
  if (body.n != null && body.n > maxImages) {
    throw invalidRequest(`\`${model.id}\` makes at most ${maxImages} image${maxImages === 1 ? '' : 's'} per request; n was ${body.n}.`, 'n');
  }
  const qualities = model.image_qualities;
  if (body.quality != null && qualities && !qualities.includes(body.quality)) {
    throw invalidRequest(`Invalid quality '${body.quality}' for \`${model.id}\`. Supported: ${qualities.join(', ')}.`, 'quality');
  }
  const options = model.image_options ?? [];
  for (const option of familyOptions) {
    if (body[option] != null && !options.includes(option)) {
      throw invalidRequest(`\`${model.id}\` does not take '${option}'.`, option, 'unsupported_parameter');
    }
  }
}

export function checkEditable(model: CatalogModel): void {
  if (!model.supports_edits) throw invalidRequest(`\`${model.id}\` cannot edit images; use dall-e-2 or a GPT image model.`, 'model', 'model_not_supported');
}
