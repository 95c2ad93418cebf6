/**
 * OpenAI's `reasoning_effort` and Anthropic's thinking budgets, one table for both directions: the Anthropic
 * adapter turns an effort into a budget, and the Messages API's translation turns a budget back into an effort.
 */

/** The values OpenAI accepts for `reasoning_effort`. */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/** Anthropic refuses a `thinking.budget_tokens` below this. */
export const MIN_THINKING_BUDGET = 1024;

/**
 * Extended-thinking budget (`thinking.budget_tokens`) per OpenAI effort.
 *
 * - minimal 1024: Anthropic's floor, nothing smaller is accepted;
 * - low 2048: a short plan before answering;
 * - medium 4096 (OpenAI's default effort): LiteLLM's "high" preset, enough
 *   for most multi-step questions without a long wait;
 * - high 16384: Anthropic's suggested start for complex tasks;
 * - xhigh 32000: just under the 32k above which Anthropic advises batch
 *   processing, since longer thinking tends to hit network timeouts.
 *
 * `none` asks for no thinking: the field is not sent (thinking is off by default).
 */
export const THINKING_BUDGETS: Readonly<Record<Exclude<ReasoningEffort, 'none'>, number>> = {
  minimal: 1024,
  low: 2048,
  medium: 4096,
  high: 16384,
  xhigh: 32000,
};
