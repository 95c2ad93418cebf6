import type { CatalogModel } from '../shared/catalog.js';
import { GatewayError, invalidRequest } from '../shared/errors.js';
import type { ChatCompletionRequest, ChatMessage } from '../shared/schemas/chat.js';
import type { CompletionRequest } from '../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../shared/schemas/embeddings.js';
import { countChatPromptTokensAsync, countTextTokensAsync, IMAGE_TOKENS_HIGH_DETAIL } from '../shared/tokens.js';

/**
 * Refuses, before any vendor call, prompts that cannot fit the model's
 * context window. A byte-level BPE token is at least one UTF-8 byte, so the
 * byte length bounds the token count from above: requests that fit even by
 * that bound are never tokenized (the common case costs no tokenizer time).
 * The others are counted without holding the event loop (the count yields
 * every few milliseconds) and only as far as the limit: past it, the request
 * is refused whatever the rest holds.
 */
const perMessageOverhead = 8;
const replyPriming = 3;
const toolPreamble = 16;
const completionDefaultMaxTokens = 16;

function contextError(model: CatalogModel, prompt: number, completion: number, param: string): GatewayError {
  return new GatewayError(
    400,
    `This model's maximum context length is ${model.context_window} tokens. However, you requested more than that ` +
      `(at least ${prompt} tokens in the ${param}, ${completion} in the completion). ` +
      'Please reduce the length of the input or the completion.',
    { param, code: 'context_length_exceeded' },
  );
}

function textOf(content: ChatMessage['content']): { text: string; images: number } {
  if (content == null) return { text: '', images: 0 };
  if (typeof content === 'string') return { text: content, images: 0 };
  let text = '';
  let images = 0;
  for (const part of content) {
    if (part.type === 'text') text += part.text;
    else if (part.type === 'image_url') images++;
    else text += JSON.stringify(part);
  }
  return { text, images };
}

function byteBound(messages: readonly ChatMessage[], tools: unknown): number {
  let bound = replyPriming + (tools ? Buffer.byteLength(JSON.stringify(tools)) + toolPreamble : 0);
  for (const message of messages) {
    const { text, images } = textOf(message.content);
    bound += Buffer.byteLength(text) + images * IMAGE_TOKENS_HIGH_DETAIL + perMessageOverhead;
    if (typeof message.name === 'string') bound += Buffer.byteLength(message.name) + 1;
    if (message.role === 'tool') bound += Buffer.byteLength(message.tool_call_id);
    if ('tool_calls' in message && message.tool_calls) bound += Buffer.byteLength(JSON.stringify(message.tool_calls));
    if ('function_call' in message && message.function_call) bound += Buffer.byteLength(JSON.stringify(message.function_call));
  }
  return bound;
}

/** Image or audio parts sent to a model that cannot take them: 400 naming the part. */
export function checkModalities(model: CatalogModel, messages: readonly ChatMessage[]): void {
  messages.forEach((message, i) => {
    if (typeof message.content === 'string' || !Array.isArray(message.content)) return;
    message.content.forEach((part, j) => {
      const needs = part.type === 'image_url' ? 'image' : part.type === 'input_audio' ? 'audio' : undefined;
      if (needs && !model.input_modalities.includes(needs)) {
        throw invalidRequest(
          `The model \`${model.id}\` does not accept ${needs} input; ${part.type} parts are only supported by models with ${needs} input.`,
          `messages[${i}].content[${j}].type`,
          'unsupported_content_type',
        );
      }
    });
  });
}

export async function checkChatContext(model: CatalogModel, body: ChatCompletionRequest): Promise<void> {
  if (!model.context_window) return;
  const completion = body.max_completion_tokens ?? body.max_tokens ?? 0;
  const tools = body.tools ?? body.functions ?? null;
  if (byteBound(body.messages, tools) + completion <= model.context_window) return;
  const prompt = await countChatPromptTokensAsync(body.messages, tools, model.context_window - completion);
  if (prompt + completion > model.context_window) throw contextError(model, prompt, completion, 'messages');
}

export async function checkCompletionContext(model: CatalogModel, body: CompletionRequest): Promise<void> {
  if (!model.context_window) return;
  const completion = body.max_tokens ?? completionDefaultMaxTokens;
  const prompts: Array<string | number[]> = typeof body.prompt === 'string' ? [body.prompt] : (body.prompt as Array<string | number[]>);
  // Token arrays are already tokens; string prompts are bounded by bytes first.
  const list = typeof prompts[0] === 'number' ? [body.prompt as number[]] : prompts;
  for (const prompt of list) {
    const bound = typeof prompt === 'string' ? Buffer.byteLength(prompt) : prompt.length;
    if (bound + completion <= model.context_window) continue;
    const count = typeof prompt === 'string' ? await countTextTokensAsync(prompt, model.context_window - completion) : prompt.length;
    if (count + completion > model.context_window) throw contextError(model, count, completion, 'prompt');
  }
}

export async function checkEmbeddingContext(model: CatalogModel, body: EmbeddingRequest): Promise<void> {
  const window = model.context_window;
  if (!window) return;
  const inputs: Array<string | number[]> = typeof body.input === 'string' ? [body.input] : (body.input as Array<string | number[]>);
  const list = typeof inputs[0] === 'number' ? [body.input as number[]] : inputs;
  for (const [i, input] of list.entries()) {
    const bound = typeof input === 'string' ? Buffer.byteLength(input) : input.length;
    if (bound <= window) continue;
    const count = typeof input === 'string' ? await countTextTokensAsync(input, window) : input.length;
    if (count > window) {
      throw new GatewayError(
        400,
        `This model's maximum context length is ${window} tokens, however you requested more than that (at least ${count} tokens) in input ${i}. Please reduce your input.`,
        { param: 'input', code: 'context_length_exceeded' },
      );
    }
  }
}
