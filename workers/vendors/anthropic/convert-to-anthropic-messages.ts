import { invalidRequest } from '../../../shared/errors.js';
import type { ChatMessage } from '../../../shared/schemas/chat.js';
import type {
  AnthropicContentBlock,
  AnthropicMessage,
  AnthropicTextBlock,
  AnthropicToolResultBlock,
  AnthropicToolUseBlock,
} from './anthropic-types.js';
import { convertImageUrl } from './convert-image-url.js';

export interface AnthropicPrompt {
  system: AnthropicTextBlock[];
  messages: AnthropicMessage[];
  /** Message fields with no Anthropic counterpart that the client set (for the dropped-params warning). */
  dropped: string[];
}

type Message<Role extends ChatMessage['role']> = Extract<ChatMessage, { role: Role }>;
type TextParts = { type: 'text'; text: string }[];

/**
 * A turn being built. Anthropic wants `tool_result` blocks before anything
 * else in a user turn, so they are kept apart and put first when the turn closes.
 */
interface OpenTurn {
  role: 'user' | 'assistant';
  results: AnthropicToolResultBlock[];
  blocks: AnthropicContentBlock[];
}

/**
 * Converts OpenAI chat messages to an Anthropic prompt:
 * - `system` and `developer` messages, wherever they are, become the top-level system text, in order;
 * - consecutive messages that land on the same Anthropic role become one turn
 *   (tool results, then a user message after them, make one user turn);
 * - `tool` and legacy `function` messages become `tool_result` blocks, assistant
 *   `tool_calls` and legacy `function_call` become `tool_use` blocks after the text.
 */
export function convertToAnthropicMessages(messages: readonly ChatMessage[]): AnthropicPrompt {
  const system: AnthropicTextBlock[] = [];
  const turns: AnthropicMessage[] = [];
  let open: OpenTurn | undefined;
  let namesDropped = false;
  // A legacy `function` message answers the assistant `function_call` before it; ids are ours to invent.
  let pendingFunctionCall: { id: string; name: string } | undefined;

  const close = () => {
    if (open === undefined) return;
    const content = open.results.length === 0 ? open.blocks : [...open.results, ...open.blocks];
    if (content.length > 0) turns.push({ role: open.role, content });
    open = undefined;
  };
  const turn = (role: OpenTurn['role']): OpenTurn => {
    if (open?.role === role) return open;
    close();
    open = { role, results: [], blocks: [] };
    return open;
  };

  messages.forEach((message, index) => {
    if ('name' in message && message.name !== undefined && message.role !== 'function') namesDropped = true;
    switch (message.role) {
      case 'system':
      case 'developer':
        pushText(system, message.content);
        break;
      case 'user':
        turn('user').blocks.push(...convertUserContent(message, index));
        break;
      case 'tool':
        turn('user').results.push({
          type: 'tool_result',
          tool_use_id: message.tool_call_id,
          content: convertToolContent(message.content),
        });
        break;
      case 'function': {
        if (pendingFunctionCall === undefined || pendingFunctionCall.name !== message.name) {
          throw invalidRequest(
            `A \`function\` message must answer the assistant \`function_call\` of \`${message.name}\` just before it.`,
            `messages[${index}]`,
          );
        }
        turn('user').results.push({
          type: 'tool_result',
          tool_use_id: pendingFunctionCall.id,
          content: message.content ?? '',
        });
        pendingFunctionCall = undefined;
        break;
      }
      case 'assistant': {
        const blocks = convertAssistantContent(message);
        message.tool_calls?.forEach((call, callIndex) => {
          const param = `messages[${index}].tool_calls[${callIndex}].function.arguments`;
          blocks.push({
            type: 'tool_use',
            id: call.id,
            name: call.function.name,
            input: parseArguments(call.function.arguments, param),
          });
        });
        if (message.function_call != null) {
          const call = message.function_call;
          const use: AnthropicToolUseBlock = {
            type: 'tool_use',
            id: `call_function_${index}`,
            name: call.name,
            input: parseArguments(call.arguments, `messages[${index}].function_call.arguments`),
          };
          pendingFunctionCall = { id: use.id, name: use.name };
          blocks.push(use);
        }
        // An assistant message with nothing to say would be an empty turn, which Anthropic refuses.
        if (blocks.length > 0) turn('assistant').blocks.push(...blocks);
        break;
      }
    }
  });
  close();
  return { system, messages: turns, dropped: namesDropped ? ['messages[].name'] : [] };
}

function pushText(target: AnthropicTextBlock[], content: string | TextParts): void {
  if (typeof content === 'string') target.push({ type: 'text', text: content });
  else for (const part of content) target.push({ type: 'text', text: part.text });
}

function convertUserContent(message: Message<'user'>, index: number): AnthropicContentBlock[] {
  if (typeof message.content === 'string') return [{ type: 'text', text: message.content }];
  return message.content.map((part, partIndex): AnthropicContentBlock => {
    const param = `messages[${index}].content[${partIndex}]`;
    switch (part.type) {
      case 'text':
        return { type: 'text', text: part.text };
      case 'image_url':
        // `detail` has no counterpart: Anthropic sizes images itself, so dropping it changes no meaning.
        return convertImageUrl(part.image_url.url, `${param}.image_url.url`);
      case 'input_audio':
        throw invalidRequest('Audio input is not supported by this model.', param);
      case 'file':
        throw invalidRequest(
          'File parts are not supported by this model; send PDFs as a base64 data URL in an image_url part.',
          param,
        );
    }
  });
}

function convertAssistantContent(message: Message<'assistant'>): AnthropicContentBlock[] {
  const blocks: AnthropicContentBlock[] = [];
  const content = message.content;
  // Anthropic refuses empty text blocks; an empty string said nothing anyway.
  if (typeof content === 'string') {
    if (content.length > 0) blocks.push({ type: 'text', text: content });
  } else if (content != null) {
    for (const part of content) {
      const text = part.type === 'text' ? part.text : part.refusal;
      if (text.length > 0) blocks.push({ type: 'text', text });
    }
  }
  // A refusal given only in the `refusal` field is still what the assistant said.
  if (blocks.length === 0 && message.refusal) blocks.push({ type: 'text', text: message.refusal });
  return blocks;
}

function convertToolContent(content: string | TextParts): string | AnthropicTextBlock[] {
  if (typeof content === 'string') return content;
  return content.map((part) => ({ type: 'text', text: part.text }));
}

/** Tool arguments travel as JSON text in OpenAI and as an object in Anthropic. */
function parseArguments(text: string, param: string): Record<string, unknown> {
  let input: unknown;
  try {
    input = JSON.parse(text || '{}');
  } catch {
    throw invalidRequest('Tool call arguments must be valid JSON.', param);
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw invalidRequest('Tool call arguments must be a JSON object.', param);
  }
  return input as Record<string, unknown>;
}
