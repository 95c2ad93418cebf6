import { z } from 'zod';
import { formNumber, modelSchema } from './common.js';

/** `POST /v1/images/generations`. Per-family rules (sizes, n, quality) are checked against the catalog entry. */
export const imageGenerationRequestSchema = z.looseObject({
  model: modelSchema.default('dall-e-2'),
  prompt: z.string().min(1).max(32_000),
  n: z.number().int().min(1).max(10).nullish(),
  size: z.string().nullish(),
  quality: z.enum(['standard', 'hd', 'low', 'medium', 'high', 'auto']).nullish(),
  response_format: z.enum(['url', 'b64_json']).nullish(),
  style: z.enum(['vivid', 'natural']).nullish(),
  background: z.enum(['transparent', 'opaque', 'auto']).nullish(),
  output_format: z.enum(['png', 'jpeg', 'webp']).nullish(),
  output_compression: z.number().int().min(0).max(100).nullish(),
  moderation: z.enum(['low', 'auto']).nullish(),
  user: z.string().nullish(),
});
export type ImageGenerationRequest = z.infer<typeof imageGenerationRequestSchema>;

/** The text fields of `POST /v1/images/edits` (multipart); files arrive apart. */
export const imageEditFieldsSchema = z.looseObject({
  model: modelSchema.default('dall-e-2'),
  prompt: z.string().min(1).max(32_000),
  n: formNumber().pipe(z.number().int().min(1).max(10)).nullish(),
  size: z.string().nullish(),
  quality: z.enum(['standard', 'hd', 'low', 'medium', 'high', 'auto']).nullish(),
  response_format: z.enum(['url', 'b64_json']).nullish(),
  background: z.enum(['transparent', 'opaque', 'auto']).nullish(),
  output_format: z.enum(['png', 'jpeg', 'webp']).nullish(),
  input_fidelity: z.enum(['high', 'low']).nullish(),
  user: z.string().nullish(),
});
export type ImageEditFields = z.infer<typeof imageEditFieldsSchema>;

/** The sizes `POST /v1/images/variations` takes (the spec's, whatever else the model makes). */
export const variationSizes = ['256x256', '512x512', '1024x1024'] as const;

/**
 * The text fields of `POST /v1/images/variations` (multipart); the image
 * arrives apart. An absent size is the spec's default, 1024x1024, made
 * explicit: the vendor makes that size, so the job is billed for it.
 */
export const imageVariationFieldsSchema = z.looseObject({
  model: modelSchema.default('dall-e-2'),
  n: formNumber().pipe(z.number().int().min(1).max(10)).nullish(),
  size: z
    .enum(variationSizes)
    .nullish()
    .transform((size) => size ?? '1024x1024'),
  response_format: z.enum(['url', 'b64_json']).nullish(),
  user: z.string().nullish(),
});
export type ImageVariationFields = z.infer<typeof imageVariationFieldsSchema>;
