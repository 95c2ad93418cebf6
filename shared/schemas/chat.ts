import { z } from 'zod';
import { requestedServiceTierSchema } from '../scheduling/service-tier.js';
import {
  choiceCountSchema,
  logitBiasSchema,
  modelSchema,
  penaltySchema,
  seedSchema,
  stopSchema,
  streamOptionsSchema,
  temperatureSchema,
  topPSchema,
  userSchema,
} from './common.js';

const functionNamePattern = /^[a-zA-Z0-9_-]{1,64}$/;
const functionName = z
  .string()
  .regex(functionNamePattern, 'must contain only a-z, A-Z, 0-9, underscores and dashes, at most 64 characters');

/**
 * An image a vendor (or, for some, the gateway) will fetch: `file:`, `ftp:`
 * or any other scheme would ask it to read where no client may point, so
 * only web URLs, inline data, and Cloud Storage references (Gemini takes
 * those; other vendors refuse them themselves) get past the api.
 */
const fetchableImageUrl = /^(?:(?:https?|gs):\/\/|data:)/i;
/** A scheme prefix: base64 never holds a colon, so inline data that starts like this is a URL in disguise. */
const urlScheme = /^[a-z][a-z0-9+.-]{0,31}:/i;
const inlineData = z.string().refine((value) => !urlScheme.test(value) || /^data:/i.test(value), {
  message: 'expected base64 data or a data: URL',
});

export const textPartSchema = z.looseObject({ type: z.literal('text'), text: z.string() });
export const imageUrlPartSchema = z.looseObject({
  type: z.literal('image_url'),
  image_url: z.looseObject({
    url: z
      .string()
      .min(1)
      .refine((url) => fetchableImageUrl.test(url), { message: 'expected an http(s) URL, a data: URL or a gs:// URI' }),
    detail: z.enum(['auto', 'low', 'high']).optional(),
  }),
});
export const inputAudioPartSchema = z.looseObject({
  type: z.literal('input_audio'),
  input_audio: z.looseObject({ data: inlineData, format: z.string() }),
});
export const filePartSchema = z.looseObject({
  type: z.literal('file'),
  file: z.looseObject({
    file_id: z.string().optional(),
    file_data: inlineData.optional(),
    filename: z.string().optional(),
  }),
});
const refusalPartSchema = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });

const userPartSchema = z.discriminatedUnion('type', [
  textPartSchema,
  imageUrlPartSchema,
  inputAudioPartSchema,
  filePartSchema,
]);
const textContent = z.union([z.string(), z.array(textPartSchema).min(1)]);

export const toolCallSchema = z.looseObject({
  id: z.string(),
  type: z.literal('function'),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

const systemMessage = z.looseObject({ role: z.literal('system'), content: textContent, name: z.string().optional() });
const developerMessage = z.looseObject({
  role: z.literal('developer'),
  content: textContent,
  name: z.string().optional(),
});
const userMessage = z.looseObject({
  role: z.literal('user'),
  content: z.union([z.string(), z.array(userPartSchema).min(1)]),
  name: z.string().optional(),
});
const assistantMessage = z
  .looseObject({
    role: z.literal('assistant'),
    content: z
      .union([z.string(), z.array(z.discriminatedUnion('type', [textPartSchema, refusalPartSchema]))])
      .nullish(),
    refusal: z.string().nullish(),
    name: z.string().optional(),
    tool_calls: z.array(toolCallSchema).optional(),
    function_call: z.looseObject({ name: z.string(), arguments: z.string() }).nullish(),
  })
  .refine((m) => m.content != null || (m.tool_calls && m.tool_calls.length > 0) || m.function_call != null, {
    message: 'an assistant message needs content unless it has tool_calls or function_call',
    path: ['content'],
  });
const toolMessage = z.looseObject({ role: z.literal('tool'), content: textContent, tool_call_id: z.string() });
const functionMessage = z.looseObject({
  role: z.literal('function'),
  content: z.string().nullable(),
  name: z.string(),
});

export const chatMessageSchema = z.discriminatedUnion('role', [
  systemMessage,
  developerMessage,
  userMessage,
  assistantMessage,
  toolMessage,
  functionMessage,
]);

export const functionDefinitionSchema = z.looseObject({
  name: functionName,
  description: z.string().optional(),
  parameters: z.record(z.string(), z.unknown()).optional(),
  strict: z.boolean().nullish(),
});

export const chatToolSchema = z.union([
  z.looseObject({ type: z.literal('function'), function: functionDefinitionSchema }),
  z.looseObject({ type: z.literal('custom'), custom: z.looseObject({ name: z.string() }) }),
]);

export const toolChoiceSchema = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) }),
  z.looseObject({ type: z.literal('allowed_tools'), allowed_tools: z.looseObject({}) }),
  z.looseObject({ type: z.literal('custom'), custom: z.looseObject({ name: z.string() }) }),
]);

export const responseFormatSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    json_schema: z.looseObject({
      name: functionName,
      description: z.string().optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

/** `POST /v1/chat/completions`. Unknown top-level fields pass through to OpenAI-compatible vendors. */
export const chatCompletionRequestSchema = z.looseObject({
  model: modelSchema,
  messages: z.array(chatMessageSchema).min(1),
  temperature: temperatureSchema,
  top_p: topPSchema,
  n: choiceCountSchema,
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  stop: stopSchema,
  seed: seedSchema,
  presence_penalty: penaltySchema,
  frequency_penalty: penaltySchema,
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  logit_bias: logitBiasSchema,
  user: userSchema,
  stream: z.boolean().nullish(),
  stream_options: streamOptionsSchema,
  response_format: responseFormatSchema.nullish(),
  tools: z.array(chatToolSchema).nullish(),
  tool_choice: toolChoiceSchema.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  service_tier: requestedServiceTierSchema,
  /**
   * OpenAI's web search for chat: passed to OpenAI's search models, Anthropic's web search tool, Gemini's grounding.
   */
  web_search_options: z
    .looseObject({
      search_context_size: z.enum(['low', 'medium', 'high']).nullish(),
      user_location: z
        .looseObject({ type: z.literal('approximate'), approximate: z.looseObject({}).nullish() })
        .nullish(),
    })
    .nullish(),
  functions: z.array(functionDefinitionSchema).min(1).max(128).nullish(),
  function_call: z.union([z.enum(['none', 'auto']), z.looseObject({ name: z.string() })]).nullish(),
});

export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;
export type ChatMessage = z.infer<typeof chatMessageSchema>;
export type ChatTool = z.infer<typeof chatToolSchema>;
