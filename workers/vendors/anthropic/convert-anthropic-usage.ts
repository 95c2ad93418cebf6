import type { Usage } from '../../answers/events.js';

/** Anthropic's token counts. `input_tokens` excludes the cached ones, which are counted apart. */
export interface AnthropicUsageCounts {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

export const emptyUsageCounts = (): AnthropicUsageCounts => ({
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
});

function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/**
 * Copies the counts present in an Anthropic `usage` object into `counts`.
 * Streams report input counts in `message_start` and cumulative output
 * counts (sometimes the input ones again) in `message_delta`: later values win.
 */
export function readAnthropicUsage(value: unknown, counts: AnthropicUsageCounts): void {
  if (typeof value !== 'object' || value === null) return;
  const raw = value as Record<string, unknown>;
  counts.input_tokens = count(raw.input_tokens) ?? counts.input_tokens;
  counts.output_tokens = count(raw.output_tokens) ?? counts.output_tokens;
  counts.cache_creation_input_tokens = count(raw.cache_creation_input_tokens) ?? counts.cache_creation_input_tokens;
  counts.cache_read_input_tokens = count(raw.cache_read_input_tokens) ?? counts.cache_read_input_tokens;
}

/**
 * OpenAI semantics: prompt tokens are every input token, cached or not; the
 * cache reads are detailed as `cached_tokens`, the cache writes (priced above
 * input) as `cache_write_tokens` when there are any, which billing charges
 * at the write price.
 */
export function convertAnthropicUsage(counts: AnthropicUsageCounts): Usage {
  const prompt = counts.input_tokens + counts.cache_creation_input_tokens + counts.cache_read_input_tokens;
  return {
    prompt_tokens: prompt,
    completion_tokens: counts.output_tokens,
    total_tokens: prompt + counts.output_tokens,
    prompt_tokens_details: {
      cached_tokens: counts.cache_read_input_tokens,
      ...(counts.cache_creation_input_tokens > 0 ? { cache_write_tokens: counts.cache_creation_input_tokens } : {}),
    },
  };
}
