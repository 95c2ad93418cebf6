import { z } from 'zod';
import {
  boundedArray,
  choiceCountSchema,
  logitBiasSchema,
  modelSchema,
  penaltySchema,
  seedSchema,
  stopSchema,
  streamOptionsSchema,
  temperatureSchema,
  tokenArraySchema,
  topPSchema,
  userSchema,
} from './common.js';

/** `POST /v1/completions` (legacy). */
export const completionRequestSchema = z.looseObject({
  model: modelSchema,
  // A batch is at most 2,048 prompts, as for embeddings: each becomes its own choice.
  prompt: z.union([
    z.string(),
    boundedArray(z.string(), 1, 2048),
    tokenArraySchema,
    boundedArray(tokenArraySchema, 1, 2048),
  ]),
  suffix: z.string().nullish(),
  max_tokens: z.number().int().min(0).nullish(),
  temperature: temperatureSchema,
  top_p: topPSchema,
  n: choiceCountSchema,
  stream: z.boolean().nullish(),
  stream_options: streamOptionsSchema,
  logprobs: z.number().int().min(0).max(5).nullish(),
  echo: z.boolean().nullish(),
  stop: stopSchema,
  presence_penalty: penaltySchema,
  frequency_penalty: penaltySchema,
  best_of: z.number().int().min(0).max(20).nullish(),
  logit_bias: logitBiasSchema,
  seed: seedSchema,
  user: userSchema,
});

export type CompletionRequest = z.infer<typeof completionRequestSchema>;
