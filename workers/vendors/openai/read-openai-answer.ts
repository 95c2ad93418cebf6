import type { AnswerChoice, AnswerEvent, FinishReason, Usage } from '../../answers/events.js';

/* What an OpenAI-shaped answer says, read into the answer model: its usage, and its choices (streamed deltas or whole messages). */

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

/**
 * Reads an OpenAI `usage` object for billing. Embeddings report no
 * `completion_tokens`, and some compatible vendors omit `total_tokens`; the
 * missing counts are filled so billing always sees three numbers. Extra
 * fields (token details) are kept.
 */
export function readOpenAIUsage(value: unknown): Usage | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const raw = value as Record<string, unknown>;
  const promptTokens = count(raw.prompt_tokens);
  const completionTokens = count(raw.completion_tokens);
  const totalTokens = count(raw.total_tokens);
  if (promptTokens === undefined && completionTokens === undefined && totalTokens === undefined) return undefined;
  const prompt = promptTokens ?? 0;
  const completion = completionTokens ?? Math.max(0, (totalTokens ?? prompt) - prompt);
  return {
    ...raw,
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: totalTokens ?? prompt + completion,
  };
}

const finishReasons = new Set<string>(['stop', 'length', 'tool_calls', 'content_filter', 'function_call']);

/** An OpenAI finish reason; one the model does not know (a compatible vendor's own) reads as `stop`. */
export function readFinishReason(value: unknown): FinishReason {
  return typeof value === 'string' && finishReasons.has(value) ? (value as FinishReason) : 'stop';
}

type Fields = Record<string, unknown>;
const isObject = (value: unknown): value is Fields =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/**
 * The events of one streamed choice (a chat `delta`, or a legacy completion's
 * `text`), appended to `out`. Returns whether the choice finished.
 */
export function readOpenAIChoice(value: unknown, out: AnswerEvent[]): boolean {
  if (!isObject(value)) return false;
  const choice = typeof value.index === 'number' ? value.index : 0;
  const completionText = text(value.text);
  if (completionText !== undefined && completionText !== '') out.push({ type: 'text', choice, text: completionText });
  const delta = value.delta;
  if (isObject(delta)) {
    if (delta.role === 'assistant') out.push({ type: 'role', choice });
    // DeepSeek and xAI name the model's reasoning `reasoning_content`; some compatible APIs `reasoning`.
    const reasoning = text(delta.reasoning_content) ?? text(delta.reasoning);
    if (reasoning !== undefined && reasoning !== '') out.push({ type: 'reasoning', choice, text: reasoning });
    const content = text(delta.content);
    if (content !== undefined && content !== '') out.push({ type: 'text', choice, text: content });
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) {
        if (!isObject(call)) continue;
        const fn = isObject(call.function) ? call.function : {};
        const name = text(fn.name);
        out.push({
          type: 'tool-call',
          choice,
          index: typeof call.index === 'number' ? call.index : 0,
          ...(text(call.id) !== undefined ? { id: text(call.id) } : {}),
          ...(name !== undefined ? { name } : {}),
          arguments: text(fn.arguments) ?? '',
        });
      }
    }
    if (isObject(delta.function_call)) {
      const name = text(delta.function_call.name);
      out.push({
        type: 'tool-call',
        choice,
        index: 0,
        ...(name !== undefined ? { name } : {}),
        arguments: text(delta.function_call.arguments) ?? '',
      });
    }
  }
  if (value.finish_reason == null) return false;
  out.push({ type: 'finish', choice, reason: readFinishReason(value.finish_reason) });
  return true;
}

/** One choice of a plain answer (a chat `message`, or a legacy completion's `text`). */
export function readOpenAIAnswerChoice(value: unknown, position: number): AnswerChoice {
  const fields = isObject(value) ? value : {};
  const index = typeof fields.index === 'number' ? fields.index : position;
  const finishReason = readFinishReason(fields.finish_reason);
  const message = fields.message;
  if (!isObject(message)) return { index, text: text(fields.text) ?? null, toolCalls: [], finishReason };
  const toolCalls: AnswerChoice['toolCalls'] = [];
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls) {
      if (!isObject(call) || !isObject(call.function)) continue;
      toolCalls.push({
        id: text(call.id) ?? '',
        name: text(call.function.name) ?? '',
        arguments: text(call.function.arguments) ?? '',
      });
    }
  }
  if (isObject(message.function_call)) {
    toolCalls.push({
      id: '',
      name: text(message.function_call.name) ?? '',
      arguments: text(message.function_call.arguments) ?? '',
    });
  }
  return { index, text: text(message.content) ?? null, toolCalls, finishReason };
}
