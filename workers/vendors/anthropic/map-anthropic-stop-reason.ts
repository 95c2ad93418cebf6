export type OpenAIFinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call';

/**
 * Anthropic `stop_reason` → OpenAI `finish_reason`. `pause_turn` (a server
 * tool paused a long turn) ends this answer like a normal stop; unknown
 * future reasons do too. A legacy `functions` client expects `function_call`.
 */
export function mapAnthropicStopReason(stopReason: unknown, legacyFunctions = false): OpenAIFinishReason {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return legacyFunctions ? 'function_call' : 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}
