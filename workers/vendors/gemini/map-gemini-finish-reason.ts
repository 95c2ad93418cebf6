export type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/** Every reason that means a filter withheld output (the image and Model Armor variants are the same case). */
const FILTERED = new Set([
  'SAFETY',
  'RECITATION',
  'BLOCKLIST',
  'PROHIBITED_CONTENT',
  'SPII',
  'IMAGE_SAFETY',
  'IMAGE_PROHIBITED_CONTENT',
  'IMAGE_RECITATION',
  'MODEL_ARMOR',
]);

/**
 * Gemini ends a turn that called functions with `STOP`, so the calls decide:
 * any function call makes it `tool_calls` unless the output was cut or
 * filtered. Everything unknown (OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL, …)
 * is a plain `stop`.
 */
export function mapGeminiFinishReason(reason: string | null | undefined, hasToolCalls: boolean): OpenAIFinishReason {
  if (reason === 'MAX_TOKENS') return 'length';
  if (reason != null && FILTERED.has(reason)) return 'content_filter';
  return hasToolCalls ? 'tool_calls' : 'stop';
}
