import type { FinishReason } from '../../answers/events.js';

/**
 * Anthropic `stop_reason` → the answer's finish reason. `pause_turn` (a server
 * tool paused a long turn) ends this answer like a normal stop; unknown
 * future reasons do too. A legacy `functions` client's `function_call` is the
 * encoder's to write, from `tool_calls`.
 */
export function mapAnthropicStopReason(stopReason: unknown): FinishReason {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      return 'tool_calls';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}
