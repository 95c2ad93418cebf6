import { malformedResponse, parseJsonObject, readBodyText } from '../http.js';
import type { CallContext, VendorResult } from '../types.js';
import { inlineVendorError } from '../vendor-errors.js';
import { postAnthropicMessages } from './api.js';
import { convertAnthropicUsage, emptyUsageCounts, readAnthropicUsage } from './convert-anthropic-usage.js';
import { readAnthropicError, readAnthropicErrorResponse } from './map-anthropic-error.js';
import { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';

interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

interface AssistantMessage {
  role: 'assistant';
  content: string | null;
  refusal: null;
  tool_calls?: ToolCall[];
  function_call?: { name: string; arguments: string };
}

/**
 * Turns an Anthropic `message` into an OpenAI `chat.completion` body. Text
 * blocks are concatenated; `tool_use` blocks become tool calls (or, for a
 * legacy `functions` client, the one `function_call`); thinking and server
 * tool blocks have no OpenAI counterpart and are left out.
 */
export function convertAnthropicMessage(fields: Record<string, unknown>, ctx: CallContext, legacyFunctions: boolean): VendorResult {
  if (fields.type === 'error') throw inlineVendorError(readAnthropicError(fields)?.message ?? null, [ctx.channel.apiKey]);
  if (!Array.isArray(fields.content)) throw malformedResponse();

  let text: string | null = null;
  const toolCalls: ToolCall[] = [];
  for (const block of fields.content as unknown[]) {
    if (typeof block !== 'object' || block === null) continue;
    const item = block as { type?: unknown; text?: unknown; id?: unknown; name?: unknown; input?: unknown };
    if (item.type === 'text' && typeof item.text === 'string') {
      text = text === null ? item.text : text + item.text;
    } else if (item.type === 'tool_use' && typeof item.id === 'string' && typeof item.name === 'string') {
      toolCalls.push({ id: item.id, type: 'function', function: { name: item.name, arguments: JSON.stringify(item.input ?? {}) } });
    }
  }

  const message: AssistantMessage = { role: 'assistant', content: text, refusal: null };
  if (toolCalls.length > 0) {
    if (legacyFunctions) message.function_call = toolCalls[0]!.function;
    else message.tool_calls = toolCalls;
  }
  const counts = emptyUsageCounts();
  readAnthropicUsage(fields.usage, counts);
  const usage = convertAnthropicUsage(counts);
  const id = typeof fields.id === 'string' ? fields.id : ctx.requestId;
  const body = {
    id: `chatcmpl-${id}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: ctx.model.id,
    choices: [{ index: 0, message, logprobs: null, finish_reason: mapAnthropicStopReason(fields.stop_reason, legacyFunctions) }],
    usage,
  };
  return { body: JSON.stringify(body), usage };
}

/** A non-stream Messages API call, answered in the OpenAI shape. */
export async function createAnthropicMessage(body: string, ctx: CallContext, legacyFunctions: boolean): Promise<VendorResult> {
  const response = await postAnthropicMessages(body, ctx, 'application/json');
  if (response.status < 200 || response.status >= 300) throw await readAnthropicErrorResponse(response, ctx);
  const fields = parseJsonObject(await readBodyText(response, ctx));
  return convertAnthropicMessage(fields, ctx, legacyFunctions);
}
