import { z } from 'zod';
import { boundedArray, modelSchema } from './common.js';

/**
 * Anthropic's Messages API (`POST /v1/messages`) as clients send it: the
 * Anthropic SDKs and Claude Code. The schema checks what the gateway reads
 * (roles, block types it translates, numbers it passes on) and keeps every
 * other field: fields it does not know (`context_management`,
 * `output_config`, a newer block's extras) travel to Anthropic as written and
 * are left out for the vendors that have no such thing.
 */

const cacheControl = z.looseObject({ type: z.string() }).nullish();

const base64Source = z.looseObject({ type: z.literal('base64'), media_type: z.string().min(1), data: z.string() });
const urlSource = z.looseObject({ type: z.literal('url'), url: z.string().min(1) });
const textSource = z.looseObject({ type: z.literal('text'), media_type: z.string().optional(), data: z.string() });
const fileSource = z.looseObject({ type: z.literal('file'), file_id: z.string() });
const contentSource = z.looseObject({ type: z.literal('content'), content: z.unknown() });

export const messagesTextBlockSchema = z.looseObject({
  type: z.literal('text'),
  text: z.string(),
  cache_control: cacheControl,
});
const imageBlock = z.looseObject({
  type: z.literal('image'),
  source: z.discriminatedUnion('type', [base64Source, urlSource, fileSource]),
  cache_control: cacheControl,
});
const documentBlock = z.looseObject({
  type: z.literal('document'),
  source: z.discriminatedUnion('type', [base64Source, urlSource, textSource, fileSource, contentSource]),
  title: z.string().nullish(),
  context: z.string().nullish(),
  cache_control: cacheControl,
});
const toolUseBlock = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: z.unknown(),
  cache_control: cacheControl,
});
/** The block types this schema checks: one of these that fails its check is refused, not taken for another kind. */
const knownBlockTypes = new Set([
  'text',
  'image',
  'document',
  'tool_use',
  'tool_result',
  'thinking',
  'redacted_thinking',
]);
/**
 * Blocks of types the gateway does not translate (server tool results, search results, containers…): kept for
 * Anthropic, left out for other vendors.
 */
const otherBlock = z.looseObject({
  type: z
    .string()
    .min(1)
    .refine((type) => !knownBlockTypes.has(type), { message: 'is a known block type whose fields are wrong' }),
});

const toolResultBlock = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z
    .union([
      z.string(),
      z.array(
        z.union([z.discriminatedUnion('type', [messagesTextBlockSchema, imageBlock, documentBlock]), otherBlock]),
      ),
    ])
    .optional(),
  is_error: z.boolean().optional(),
  cache_control: cacheControl,
});
const thinkingBlock = z.looseObject({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string().optional(),
});
const redactedThinkingBlock = z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() });
export const messagesContentBlockSchema = z.union([
  z.discriminatedUnion('type', [
    messagesTextBlockSchema,
    imageBlock,
    documentBlock,
    toolUseBlock,
    toolResultBlock,
    thinkingBlock,
    redactedThinkingBlock,
  ]),
  otherBlock,
]);

/**
 * `system` turns inside the conversation are Anthropic's mid-conversation system messages (a beta Claude Code uses).
 */
export const messagesMessageSchema = z.looseObject({
  role: z.enum(['user', 'assistant', 'system']),
  content: z.union([z.string(), boundedArray(messagesContentBlockSchema, 0, 100_000)]),
});

/**
 * A client tool (`input_schema`), or a server tool Anthropic runs itself (a versioned `type` such as
 * `web_search_20250305`).
 */
export const messagesToolSchema = z.looseObject({
  type: z.string().nullish(),
  name: z.string().min(1).max(128),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()).optional(),
  cache_control: cacheControl,
});

/** The MCP connector's toolset (`mcp-client-2025-11-20`): a server of `mcp_servers`, its tools turned on or off. */
export const messagesMcpToolsetSchema = z.looseObject({
  type: z.literal('mcp_toolset'),
  mcp_server_name: z.string().min(1).max(64),
});

/** A tool as a request lists it: a toolset of an MCP server, or a client or server tool. */
const requestToolSchema = z.union([messagesMcpToolsetSchema, messagesToolSchema]);

export const messagesToolChoiceSchema = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({
    type: z.literal('tool'),
    name: z.string().min(1),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  z.looseObject({ type: z.literal('none') }),
]);

/** `enabled` with a budget, `disabled`, or `adaptive` (the model decides; Claude Code sends it, with `display`). */
export const messagesThinkingSchema = z.union([
  z.looseObject({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1) }),
  z.looseObject({ type: z.literal('disabled') }),
  z.looseObject({ type: z.literal('adaptive') }),
]);

const systemSchema = z.union([z.string(), z.array(messagesTextBlockSchema)]);

export const messagesRequestSchema = z.looseObject({
  model: modelSchema,
  max_tokens: z.number().int().min(1),
  messages: boundedArray(messagesMessageSchema, 1, 100_000),
  system: systemSchema.optional(),
  stop_sequences: z.array(z.string()).max(16).optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  metadata: z.looseObject({ user_id: z.string().max(256).nullish() }).optional(),
  tools: z.array(requestToolSchema).max(1024).optional(),
  tool_choice: messagesToolChoiceSchema.optional(),
  thinking: messagesThinkingSchema.optional(),
  service_tier: z.enum(['auto', 'standard_only']).optional(),
});

/** `POST /v1/messages/count_tokens`: a Messages request without `max_tokens` (and nothing to sample). */
export const countTokensRequestSchema = z.looseObject({
  model: modelSchema,
  messages: boundedArray(messagesMessageSchema, 1, 100_000),
  system: systemSchema.optional(),
  tools: z.array(requestToolSchema).max(1024).optional(),
  tool_choice: messagesToolChoiceSchema.optional(),
  thinking: messagesThinkingSchema.optional(),
});

export type MessagesRequest = z.infer<typeof messagesRequestSchema>;
export type CountTokensRequest = z.infer<typeof countTokensRequestSchema>;
export type MessagesMessage = z.infer<typeof messagesMessageSchema>;
export type MessagesContentBlock = z.infer<typeof messagesContentBlockSchema>;
export type MessagesTool = z.infer<typeof messagesToolSchema>;
export type MessagesToolChoice = z.infer<typeof messagesToolChoiceSchema>;
