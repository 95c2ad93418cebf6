import { GatewayError } from '../../../shared/errors.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from '../types.js';
import { createAnthropicMessage } from './anthropic-response.js';
import { streamAnthropicMessage } from './anthropic-stream.js';
import { buildAnthropicRequest } from './build-anthropic-request.js';

export { AnthropicStreamTranslator } from './anthropic-stream.js';
export { buildAnthropicRequest, JSON_OBJECT_INSTRUCTION } from './build-anthropic-request.js';
export { mapAnthropicError, mapAnthropicStreamError } from './map-anthropic-error.js';
export { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';

/** Anthropic serves chat only; the catalog never routes other capabilities here, but a misconfiguration must fail clearly. */
const unsupported = (what: string) =>
  new GatewayError(400, `This model is served by the Anthropic Messages API, which has no ${what} endpoint.`, {
    code: 'unsupported_endpoint',
    param: 'model',
  });

/** The Anthropic Messages API behind the OpenAI chat completions shape. */
export const anthropicAdapter: VendorAdapter = {
  async createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<VendorResult> {
    const call = buildAnthropicRequest(request, ctx, false);
    return createAnthropicMessage(JSON.stringify(call.body), ctx, call.legacyFunctions);
  },
  streamChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent> {
    // Built inside the stream so a refused request throws from the first `next()`, like an HTTP error.
    return streamAnthropicMessage(() => buildAnthropicRequest(request, ctx, true), ctx);
  },
  async createCompletion(): Promise<VendorResult> {
    throw unsupported('legacy completions');
  },
  // A stream that fails on its first `next()`, as the interface asks of refused requests.
  async *streamCompletion(): AsyncGenerator<StreamEvent> {
    throw unsupported('legacy completions');
  },
  async createEmbeddings(): Promise<VendorResult> {
    throw unsupported('embeddings');
  },
};
