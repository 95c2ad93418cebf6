import { invalidRequest } from '../../../shared/errors.js';

/** The values OpenAI accepts for `reasoning_effort`. */
const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

export type GeminiThinkingLevel = 'minimal' | 'low' | 'medium' | 'high';
export type GeminiThinkingConfig = { thinkingBudget: number } | { thinkingLevel: GeminiThinkingLevel };

/**
 * `thinkingBudget` (thought tokens) per effort, for the Gemini 2.5 family,
 * whose Flash and Flash-Lite models accept 0 (off) or 512–24576:
 *
 * - none 0: thinking off;
 * - minimal 512: the smallest budget Flash-Lite accepts;
 * - low 1024, medium 8192: a short plan, and room for multi-step work
 *   (OpenAI's default effort) without Gemini's open-ended dynamic budget;
 * - high and xhigh 24576: the most Flash accepts.
 *
 * Gemini 2.5 Pro takes 128–32768 and cannot turn thinking off, so there
 * `none` is its floor and xhigh its ceiling (`PRO_2_5`).
 */
export const THINKING_BUDGETS: Readonly<Record<ReasoningEffort, number>> = {
  none: 0,
  minimal: 512,
  low: 1024,
  medium: 8192,
  high: 24576,
  xhigh: 24576,
};
const PRO_2_5 = { min: 128, max: 32768 };

/**
 * `thinkingLevel` per effort for Gemini 3 and later (WIRE.md: `thinkingLevel`
 * on Gemini 3; Google answers 400 to a request holding both it and
 * `thinkingBudget`). Flash models take all four levels. Pro models take only
 * `low` and `high`, and none can turn thinking off, so `none` is the lowest
 * level a model has; on Pro, `medium` is `high` (Gemini's own default there,
 * as `medium` is OpenAI's).
 */
const FLASH_LEVELS: Readonly<Record<ReasoningEffort, GeminiThinkingLevel>> = {
  none: 'minimal',
  minimal: 'minimal',
  low: 'low',
  medium: 'medium',
  high: 'high',
  xhigh: 'high',
};
const PRO_LEVELS: Readonly<Record<ReasoningEffort, GeminiThinkingLevel>> = {
  none: 'low',
  minimal: 'low',
  low: 'low',
  medium: 'high',
  high: 'high',
  xhigh: 'high',
};

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

/** The model id without a collection prefix (`models/…`, `tunedModels/…`), lower-cased. */
const baseName = (upstreamModel: string) => upstreamModel.slice(upstreamModel.lastIndexOf('/') + 1).toLowerCase();

/** Gemini 3 or later: `gemini-3-pro-preview`, `gemini-3.1-flash-…`, … */
function majorVersion(name: string): number | undefined {
  const match = /^gemini-(\d+)(?:[.-]|$)/.exec(name);
  return match === null ? undefined : Number(match[1]);
}

/** `generationConfig.thinkingConfig` for an effort on the upstream model. */
export function geminiThinkingConfig(effort: ReasoningEffort, upstreamModel: string): GeminiThinkingConfig {
  const name = baseName(upstreamModel);
  const major = majorVersion(name);
  if (major !== undefined && major >= 3) {
    return { thinkingLevel: (name.includes('flash') ? FLASH_LEVELS : PRO_LEVELS)[effort] };
  }
  const budget = THINKING_BUDGETS[effort];
  if (name.startsWith('gemini-2.5-pro')) {
    return { thinkingBudget: effort === 'xhigh' ? PRO_2_5.max : Math.min(Math.max(budget, PRO_2_5.min), PRO_2_5.max) };
  }
  return { thinkingBudget: budget };
}
