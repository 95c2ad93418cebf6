import { invalidRequest } from '../../../shared/errors.js';
import type { AnthropicMessage, AnthropicToolChoice } from './anthropic-types.js';

import {
  MIN_THINKING_BUDGET,
  REASONING_EFFORTS,
  THINKING_BUDGETS,
  type ReasoningEffort,
} from '../../../shared/thinking-budgets.js';

export { MIN_THINKING_BUDGET, THINKING_BUDGETS, type ReasoningEffort };

/**
 * The request's `reasoning_effort`, or undefined when absent. The chat schema
 * lets the field through unchecked (OpenAI-compatible vendors get it as is), so
 * a value OpenAI would refuse is refused here too instead of being guessed at.
 */
export function readReasoningEffort(value: unknown): ReasoningEffort | undefined {
  if (value == null) return undefined;
  if (typeof value === 'string' && (REASONING_EFFORTS as readonly string[]).includes(value))
    return value as ReasoningEffort;
  throw invalidRequest(`reasoning_effort must be one of ${REASONING_EFFORTS.join(', ')}.`, 'reasoning_effort');
}

export type ThinkingPlan =
  | { enabled: true; budget: number; maxTokens: number }
  /** `reason` says why the effort could not be honoured (logged with the dropped fields). */
  | { enabled: false; reason?: string };

export interface ThinkingInputs {
  effort: ReasoningEffort | undefined;
  /** The `max_tokens` the request would have without thinking: what the client wants for the visible answer. */
  outputTokens: number;
  /** The catalog's `max_output_tokens`; 0 means unknown. */
  modelLimit: number;
  messages: readonly AnthropicMessage[];
  toolChoice: AnthropicToolChoice | undefined;
}

/**
 * Decides whether extended thinking goes on, and with which budget and
 * `max_tokens`. Anthropic counts thinking inside `max_tokens` and requires
 * 1024 ≤ budget_tokens < max_tokens, so `max_tokens` is raised to budget +
 * the wanted output, capped at the model's known limit (never below what the
 * client asked for: that one is the client's to get refused). A budget that
 * does not fit under the cap shrinks to max_tokens - 1; below 1024 thinking
 * stays off. It also stays off where Anthropic refuses it:
 *
 * - a forced tool choice (`any`/`tool`): only `auto` and `none` are accepted
 *   with thinking. The forced call is what the client asked for; thinking
 *   only tunes how well it is made, so thinking is what gives way.
 * - an assistant turn last (prefill): the reply cannot be prefilled while thinking.
 * - the last assistant turn holds `tool_use` (the client is answering tool
 *   calls): Anthropic then wants that turn's thinking blocks replayed
 *   unchanged, and an OpenAI-shaped history cannot carry them.
 */
export function planThinking({ effort, outputTokens, modelLimit, messages, toolChoice }: ThinkingInputs): ThinkingPlan {
  if (effort === undefined || effort === 'none') return { enabled: false };
  if (toolChoice?.type === 'any' || toolChoice?.type === 'tool') {
    return { enabled: false, reason: 'extended thinking cannot be combined with a forced tool choice' };
  }
  const last = messages[messages.length - 1];
  if (last?.role === 'assistant')
    return { enabled: false, reason: 'extended thinking cannot continue a prefilled assistant turn' };
  const lastAssistant = [...messages].reverse().find((message) => message.role === 'assistant');
  if (lastAssistant?.content.some((block) => block.type === 'tool_use')) {
    return {
      enabled: false,
      reason: 'extended thinking needs the thinking blocks of the tool-calling turn, which the history does not carry',
    };
  }

  const wanted = THINKING_BUDGETS[effort];
  const limit = modelLimit > 0 ? modelLimit : Number.POSITIVE_INFINITY;
  const maxTokens = Math.max(outputTokens, Math.min(wanted + outputTokens, limit));
  const budget = Math.min(wanted, maxTokens - 1);
  if (budget < MIN_THINKING_BUDGET) {
    return {
      enabled: false,
      reason: `max_tokens ${maxTokens} leaves no room for the minimum thinking budget of ${MIN_THINKING_BUDGET}`,
    };
  }
  return { enabled: true, budget, maxTokens };
}
