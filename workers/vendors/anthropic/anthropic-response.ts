import type { Answer, ToolCall } from '../../answers/events.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { CallContext } from '../types.js';
import { inlineVendorError } from '../vendor-errors.js';
import { anthropicApi } from './api.js';
import { convertAnthropicUsage, emptyUsageCounts, readAnthropicUsage } from './convert-anthropic-usage.js';
import { mapAnthropicError, readAnthropicError } from './map-anthropic-error.js';
import { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';

/**
 * Turns an Anthropic `message` into a plain answer. Text blocks are
 * concatenated; `tool_use` blocks become tool calls (the encoder writes the
 * one `function_call` of a legacy `functions` client); thinking and server
 * tool blocks have no OpenAI counterpart and are left out. No model is set:
 * the client sees the model id it asked for, not the upstream one.
 */
export function convertAnthropicMessage(fields: Record<string, unknown>, ctx: CallContext): Answer {
  if (fields.type === 'error')
    throw inlineVendorError(readAnthropicError(fields)?.message ?? null, [ctx.channel.apiKey]);
  if (!Array.isArray(fields.content)) throw malformedResponse();

  let text: string | null = null;
  const toolCalls: ToolCall[] = [];
  for (const block of fields.content as unknown[]) {
    if (typeof block !== 'object' || block === null) continue;
    const item = block as { type?: unknown; text?: unknown; id?: unknown; name?: unknown; input?: unknown };
    if (item.type === 'text' && typeof item.text === 'string') {
      text = text === null ? item.text : text + item.text;
    } else if (item.type === 'tool_use' && typeof item.id === 'string' && typeof item.name === 'string') {
      // Anthropic gives the input as an object; OpenAI clients parse `arguments` as JSON text.
      toolCalls.push({ id: item.id, name: item.name, arguments: JSON.stringify(item.input ?? {}) });
    }
  }

  const counts = emptyUsageCounts();
  readAnthropicUsage(fields.usage, counts);
  const id = typeof fields.id === 'string' ? fields.id : ctx.requestId;
  return {
    id: `chatcmpl-${id}`,
    created: Math.floor(Date.now() / 1000),
    choices: [{ index: 0, text, toolCalls, finishReason: mapAnthropicStopReason(fields.stop_reason) }],
    usage: convertAnthropicUsage(counts),
  };
}

/** A non-stream Messages API call, as a plain answer. */
export async function createAnthropicMessage(body: string, ctx: CallContext): Promise<Answer> {
  const { json } = await postJson(
    ctx,
    vendorRequest(anthropicApi, ctx, anthropicApi.paths.messages, body),
    mapAnthropicError,
  );
  return convertAnthropicMessage(json, ctx);
}
