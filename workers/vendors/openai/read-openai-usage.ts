import type { Usage } from '../types.js';

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
