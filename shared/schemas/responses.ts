import { z } from 'zod';
import { requestedServiceTierSchema } from '../scheduling/service-tier.js';
import { boundedArray, modelSchema, temperatureSchema, topPSchema, userSchema } from './common.js';

/*
 * `POST /v1/responses`: the request body as far as its shape goes. Input
 * items and tools are only required to be objects here; the translation to a
 * chat request (api/responses/translate.ts) checks them one by one, so an
 * error can name the exact item (`input[3].call_id`, `tools[1].type`).
 */

const formatName = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must contain only a-z, A-Z, 0-9, underscores and dashes, at most 64 characters');

export const textFormatSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: formatName,
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
    description: z.string().nullish(),
  }),
]);

const maxMetadataKeys = 16;
/** At most 16 pairs; the count is checked before any pair is. */
const metadataSchema = z
  .record(z.string(), z.unknown())
  .refine((value) => Object.keys(value).length <= maxMetadataKeys, {
    message: `at most ${maxMetadataKeys} keys are allowed`,
  })
  .pipe(z.record(z.string().max(64), z.string().max(512)));

export const responsesRequestSchema = z.looseObject({
  model: modelSchema,
  // Required unless previous_response_id is given: the translation checks that.
  input: z.union([z.string(), boundedArray(z.looseObject({}), 1, 10_000)]).optional(),
  instructions: z.string().nullish(),
  previous_response_id: z.string().nullish(),
  tools: boundedArray(z.looseObject({ type: z.string() }), 0, 128).nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string() })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  temperature: temperatureSchema,
  top_p: topPSchema,
  max_output_tokens: z.number().int().min(16).nullish(),
  text: z
    .looseObject({
      format: textFormatSchema.optional(),
      verbosity: z.enum(['low', 'medium', 'high']).nullish(),
    })
    .nullish(),
  reasoning: z
    .looseObject({
      effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullish(),
      summary: z.string().nullish(),
    })
    .nullish(),
  metadata: metadataSchema.nullish(),
  store: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  background: z.boolean().nullish(),
  user: userSchema,
  stream_options: z.looseObject({}).nullish(),
  include: z.array(z.string()).nullish(),
  truncation: z.enum(['auto', 'disabled']).nullish(),
  max_tool_calls: z.number().int().nullish(),
  service_tier: requestedServiceTierSchema,
  prompt_cache_key: z.string().nullish(),
  safety_identifier: z.string().nullish(),
});

export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;
export type TextFormat = z.infer<typeof textFormatSchema>;
