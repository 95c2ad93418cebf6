import { invalidRequest } from '../../../shared/errors.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext } from '../types.js';
import { planThinking, readReasoningEffort } from './anthropic-thinking.js';
import type { AnthropicRequestBody, AnthropicTextBlock, AnthropicWebSearchTool } from './anthropic-types.js';
import { convertToAnthropicMessages } from './convert-to-anthropic-messages.js';
import { convertToAnthropicTools } from './convert-to-anthropic-tools.js';

/** Anthropic's sampling temperature range is 0–1; OpenAI's is 0–2. */
const MAX_TEMPERATURE = 1;
/** Used when neither the client nor the catalog gives a `max_tokens`, which Anthropic requires. */
const FALLBACK_MAX_TOKENS = 4096;

/**
 * Anthropic has no JSON mode without a schema (its structured outputs need a
 * closed schema), so `json_object` is asked for in the system prompt.
 */
export const JSON_OBJECT_INSTRUCTION =
  'Respond with a single valid JSON object and nothing else: no prose before or after it, no code fences.';

/**
 * Request fields this module maps (or that only steer the gateway). Every
 * other field the client set has no Anthropic counterpart and is reported
 * in one warning when dropped.
 */
const MAPPED_FIELDS = new Set([
  'model',
  'messages',
  'stream',
  'stream_options',
  'n',
  'temperature',
  'top_p',
  'max_tokens',
  'max_completion_tokens',
  'stop',
  'user',
  'response_format',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'functions',
  'function_call',
  'reasoning_effort',
  'web_search_options',
]);

function maxTokens(request: ChatCompletionRequest, ctx: CallContext): number {
  const requested = request.max_completion_tokens ?? request.max_tokens;
  if (requested != null) return requested;
  const model = ctx.model;
  if (model.default_max_tokens !== undefined) return model.default_max_tokens;
  // A catalog entry with max_output_tokens 0 does not know its limit.
  return model.max_output_tokens > 0 ? Math.min(FALLBACK_MAX_TOKENS, model.max_output_tokens) : FALLBACK_MAX_TOKENS;
}

function droppedFields(request: ChatCompletionRequest): string[] {
  const dropped: string[] = [];
  for (const key of Object.keys(request)) {
    if (!MAPPED_FIELDS.has(key) && request[key] != null) dropped.push(key);
  }
  return dropped;
}

/**
 * Chat's `web_search_options` as Anthropic's web search tool: the user's approximate place carries over; the context
 * size has no counterpart.
 */
function webSearchTool(options: NonNullable<ChatCompletionRequest['web_search_options']>): AnthropicWebSearchTool {
  const place = options.user_location?.approximate;
  return {
    type: 'web_search_20250305',
    name: 'web_search',
    ...(place ? { user_location: { type: 'approximate', ...place } } : {}),
  };
}

/** One plain text stays a string (what the SDKs send); several keep their order as blocks. */
function toSystem(blocks: AnthropicTextBlock[]): string | AnthropicTextBlock[] | undefined {
  if (blocks.length === 0) return undefined;
  return blocks.length === 1 ? blocks[0]!.text : blocks;
}

/**
 * Builds the Messages API body for an OpenAI chat request. Values that would
 * change the answer's meaning if ignored or clamped (`n` > 1, temperature
 * above 1, unsupported content) are refused with a 400 naming the param;
 * fields with no counterpart that only tune sampling or output extras are
 * dropped with one warning. `reasoning_effort` becomes extended thinking
 * (see `planThinking`), which also raises `max_tokens` to make room for it.
 */
export function buildAnthropicRequest(
  request: ChatCompletionRequest,
  ctx: CallContext,
  stream: boolean,
): AnthropicRequestBody {
  if (request.n != null && request.n > 1) {
    throw invalidRequest('This model returns one choice per request; `n` must be 1.', 'n');
  }
  if (request.temperature != null && request.temperature > MAX_TEMPERATURE) {
    throw invalidRequest(
      `temperature ${request.temperature} is out of range for this model: its vendor accepts 0 to 1.`,
      'temperature',
    );
  }

  const effort = readReasoningEffort(request.reasoning_effort);
  const prompt = convertToAnthropicMessages(request.messages);
  const tools = convertToAnthropicTools(request);
  const outputTokens = maxTokens(request, ctx);
  const thinking = planThinking({
    effort,
    outputTokens,
    // A client's own max_tokens counts thinking too, as OpenAI's does for reasoning (and as its
    // reservation was made): thinking fits inside it. Only the gateway's default is raised, up to the model's limit.
    modelLimit: request.max_completion_tokens ?? request.max_tokens ?? ctx.model.max_output_tokens,
    messages: prompt.messages,
    toolChoice: tools.tool_choice,
  });
  const body: AnthropicRequestBody = {
    model: ctx.upstreamModel,
    max_tokens: thinking.enabled ? thinking.maxTokens : outputTokens,
    messages: prompt.messages,
  };
  const dropped = droppedFields(request);
  if (thinking.enabled) {
    body.thinking = { type: 'enabled', budget_tokens: thinking.budget };
  } else if (thinking.reason !== undefined) {
    dropped.push('reasoning_effort');
  }

  const format = request.response_format;
  if (format?.type === 'json_schema' && format.json_schema.schema !== undefined) {
    body.output_config = { format: { type: 'json_schema', schema: format.json_schema.schema } };
  } else if (format?.type === 'json_object' || format?.type === 'json_schema') {
    prompt.system.push({ type: 'text', text: JSON_OBJECT_INSTRUCTION });
  }
  const system = toSystem(prompt.system);
  if (system !== undefined) body.system = system;

  if (thinking.enabled) {
    // With thinking on, Anthropic refuses any temperature but 1 (and top_p below
    // 0.95): the thinking is tuned for the default sampling. Both are left out
    // (the default is what thinking needs) and reported as dropped.
    if (request.temperature != null) dropped.push('temperature');
    if (request.top_p != null) dropped.push('top_p');
  } else {
    if (request.temperature != null) body.temperature = request.temperature;
    if (request.top_p != null) body.top_p = request.top_p;
  }
  if (request.stop != null) body.stop_sequences = typeof request.stop === 'string' ? [request.stop] : request.stop;
  if (request.user != null) body.metadata = { user_id: request.user };
  if (tools.tools !== undefined) body.tools = tools.tools;
  // The vendor's own web search (a Responses web_search tool, chat's web_search_options): Anthropic's search tool.
  if (request.web_search_options != null)
    body.tools = [...(body.tools ?? []), webSearchTool(request.web_search_options)];
  if (tools.tool_choice !== undefined) body.tool_choice = tools.tool_choice;
  if (stream) body.stream = true;

  dropped.push(...prompt.dropped);
  if (dropped.length > 0) {
    const skipped = !thinking.enabled && thinking.reason !== undefined ? { thinkingSkipped: thinking.reason } : {};
    ctx.log.warn(
      { reqId: ctx.requestId, dropped, ...skipped },
      'request fields with no Anthropic counterpart were dropped',
    );
  }
  return body;
}
