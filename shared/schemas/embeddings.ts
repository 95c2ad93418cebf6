import { z } from 'zod';
import { boundedArray, modelSchema, tokenArraySchema, userSchema } from './common.js';

const nonEmptyString = z.string().min(1, 'must not be an empty string');

/** `POST /v1/embeddings`. */
export const embeddingRequestSchema = z.looseObject({
  model: modelSchema,
  input: z.union([
    nonEmptyString,
    boundedArray(nonEmptyString, 1, 2048),
    tokenArraySchema,
    boundedArray(tokenArraySchema, 1, 2048),
  ]),
  encoding_format: z.enum(['float', 'base64']).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: userSchema,
});

export type EmbeddingRequest = z.infer<typeof embeddingRequestSchema>;
