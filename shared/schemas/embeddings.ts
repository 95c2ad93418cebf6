import { z } from 'zod';
import { tokenArraySchema, userSchema } from './common.js';

const nonEmptyString = z.string().min(1, 'must not be an empty string');

/** `POST /v1/embeddings`. */
export const embeddingRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([nonEmptyString, z.array(nonEmptyString).min(1).max(2048), tokenArraySchema, z.array(tokenArraySchema).min(1).max(2048)]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: userSchema,
});

export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>;
