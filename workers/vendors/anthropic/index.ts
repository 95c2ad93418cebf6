import type { Answer, AnswerEvent } from '../../answers/events.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext, VendorAdapter } from '../types.js';
import { createAnthropicMessage } from './anthropic-response.js';
import { streamAnthropicMessage } from './anthropic-stream.js';
import { buildAnthropicRequest } from './build-anthropic-request.js';
import { countNativeTokens, streamNativeMessages } from './native-messages.js';

export { AnthropicStreamTranslator } from './anthropic-stream.js';
export { buildAnthropicRequest, JSON_OBJECT_INSTRUCTION } from './build-anthropic-request.js';
export { mapAnthropicError, mapAnthropicStreamError } from './map-anthropic-error.js';
export { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';

/**
 * The Anthropic Messages API behind the OpenAI chat completions shape. It has
 * chat only: the registry refuses the other endpoints for it.
 */
export const anthropicAdapter: VendorAdapter = {
  async chat(request: ChatCompletionRequest, ctx: CallContext): Promise<Answer> {
    return createAnthropicMessage(JSON.stringify(buildAnthropicRequest(request, ctx, false)), ctx);
  },
  streamChat(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<AnswerEvent[]> {
    // Built inside the stream so a refused request throws from the first `next()`, like an HTTP error.
    return streamAnthropicMessage(() => buildAnthropicRequest(request, ctx, true), ctx);
  },
  nativeMessages: streamNativeMessages,
  countMessageTokens: countNativeTokens,
};
