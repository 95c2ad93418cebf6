import type { CatalogModel } from '../../shared/catalog.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { ChatCompletionRequest, ChatMessage } from '../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../shared/schemas/embeddings.js';
import { countChatPromptTokensAsync, countTextTokensAsync, IMAGE_TOKENS_HIGH_DETAIL } from '../../shared/tokens.js';

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
/**
 * Prompts whose byte bound is at most this are counted exactly for billing and rate limits (a few µs); longer ones are
 * estimated by that bound.
 */
const exactCountBytes = 4096;

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
    if ('function_call' in message && message.function_call)
      bound += Buffer.byteLength(JSON.stringify(message.function_call));
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
          `The model \`${model.id}\` does not accept ${needs} input; ${part.type} parts are only supported by ` +
            `models with ${needs} input.`,
          `messages[${i}].content[${j}].type`,
          'unsupported_content_type',
        );
      }
    });
  });
}

/**
 * The checks return the prompt's tokens as admission reserves them: counted
 * when counting was needed or is cheap, else the byte bound (never fewer than
 * the real count, so a reservation always covers the prompt).
 */
export async function checkChatContext(model: CatalogModel, body: ChatCompletionRequest): Promise<number> {
  return (await chatContext(model, body)).tokens;
}

/** As `checkChatContext`, saying too whether the tokens were counted (`exact`) or are the byte bound. */
export async function chatContext(
  model: CatalogModel,
  body: ChatCompletionRequest,
): Promise<{ tokens: number; exact: boolean }> {
  const completion = body.max_completion_tokens ?? body.max_tokens ?? 0;
  const tools = body.tools ?? body.functions ?? null;
  const bound = byteBound(body.messages, tools);
  if (!model.context_window || bound + completion <= model.context_window) {
    return bound <= exactCountBytes
      ? { tokens: await countChatPromptTokensAsync(body.messages, tools), exact: true }
      : { tokens: bound, exact: false };
  }
  // Counted up to what fits: a prompt that fits was counted whole.
  const prompt = await countChatPromptTokensAsync(body.messages, tools, model.context_window - completion);
  if (prompt + completion > model.context_window) throw contextError(model, prompt, completion, 'messages');
  return { tokens: prompt, exact: true };
}

/** Byte bounds of a list of prompts or inputs (token arrays are their own count). */
function bounds(list: ReadonlyArray<string | number[]>): number[] {
  return list.map((item) => (typeof item === 'string' ? Buffer.byteLength(item) : item.length));
}

/** One prompt's tokens: counted when it may not fit, or when the whole request is small; else its byte bound. */
async function tokensOf(input: string | number[], bound: number, limit: number, exact: boolean): Promise<number> {
  if (typeof input !== 'string') return input.length;
  return exact || bound > limit ? countTextTokensAsync(input, limit) : bound;
}

export async function checkCompletionContext(model: CatalogModel, body: CompletionRequest): Promise<number> {
  const completion = body.max_tokens ?? completionDefaultMaxTokens;
  const prompts: Array<string | number[]> =
    typeof body.prompt === 'string' ? [body.prompt] : (body.prompt as Array<string | number[]>);
  // Token arrays are already tokens; string prompts are bounded by bytes first.
  const list = typeof prompts[0] === 'number' ? [body.prompt as number[]] : prompts;
  const window = model.context_window || Number.MAX_SAFE_INTEGER;
  const sizes = bounds(list);
  const exact = sizes.reduce((sum, size) => sum + size, 0) <= exactCountBytes;
  let total = 0;
  for (const [i, prompt] of list.entries()) {
    const count = await tokensOf(prompt, sizes[i]!, window - completion, exact);
    if (count + completion > window) throw contextError(model, count, completion, 'prompt');
    total += count;
  }
  return total;
}

export async function checkEmbeddingContext(model: CatalogModel, body: EmbeddingRequest): Promise<number> {
  const window = model.context_window || Number.MAX_SAFE_INTEGER;
  const inputs: Array<string | number[]> =
    typeof body.input === 'string' ? [body.input] : (body.input as Array<string | number[]>);
  const list = typeof inputs[0] === 'number' ? [body.input as number[]] : inputs;
  const sizes = bounds(list);
  const exact = sizes.reduce((sum, size) => sum + size, 0) <= exactCountBytes;
  let total = 0;
  for (const [i, input] of list.entries()) {
    const count = await tokensOf(input, sizes[i]!, window, exact);
    total += count;
    if (count > window) {
      throw new GatewayError(
        400,
        `This model's maximum context length is ${window} tokens, however you requested more than that (at least ` +
          `${count} tokens) in input ${i}. Please reduce your input.`,
        { param: 'input', code: 'context_length_exceeded' },
      );
    }
  }
  return total;
}
