import type { Usage } from '../../answers/events.js';

function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0;
}

/**
 * Gemini `usageMetadata` → OpenAI usage. OpenAI's completion tokens include
 * reasoning, Gemini's `candidatesTokenCount` does not, so thoughts are added.
 * Prompt tokens include cached ones on both sides, and the tokens of tool
 * results Gemini fetched itself (`toolUsePromptTokenCount`) are input too,
 * which keeps prompt + completion equal to Gemini's `totalTokenCount`.
 */
export function convertGeminiUsage(value: unknown): Usage | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const usage = value as Record<string, unknown>;
  const promptTokens = count(usage.promptTokenCount) + count(usage.toolUsePromptTokenCount);
  const reasoningTokens = count(usage.thoughtsTokenCount);
  const completionTokens = count(usage.candidatesTokenCount) + reasoningTokens;
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: count(usage.cachedContentTokenCount) },
    completion_tokens_details: { reasoning_tokens: reasoningTokens },
  };
}
