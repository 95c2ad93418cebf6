import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CompletionRequest } from '../../../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from '../types.js';
import { buildOpenAIBody, buildOpenAIEmbeddingBody, buildOpenAIStreamBody } from './build-openai-body.js';
import { createOpenAIResult } from './create-openai-result.js';
import { flattenBatches, streamOpenAIBatches } from './stream-openai-events.js';

export { closeVendorAgent as closeOpenAIAgent } from '../http.js';
export { mapOpenAIError, scrubSecrets } from './map-openai-error.js';

/** Chat completion stream, one array of events per network read (one publish per read in the worker). */
export function streamChatCompletionBatches(
  request: ChatCompletionRequest,
  ctx: CallContext,
): AsyncGenerator<StreamEvent[]> {
  return streamOpenAIBatches('/chat/completions', buildOpenAIStreamBody(request, ctx), ctx);
}

/** Legacy completion stream, batched like `streamChatCompletionBatches`. */
export function streamCompletionBatches(request: CompletionRequest, ctx: CallContext): AsyncGenerator<StreamEvent[]> {
  return streamOpenAIBatches('/completions', buildOpenAIStreamBody(request, ctx), ctx);
}

/** OpenAI and every OpenAI-compatible API (DeepSeek, xAI, vLLM, Ollama): requests and answers pass through. */
export const openaiAdapter: VendorAdapter = {
  createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<VendorResult> {
    return createOpenAIResult('/chat/completions', buildOpenAIBody(request, ctx), ctx);
  },
  streamChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent> {
    return flattenBatches(streamChatCompletionBatches(request, ctx));
  },
  createCompletion(request: CompletionRequest, ctx: CallContext): Promise<VendorResult> {
    return createOpenAIResult('/completions', buildOpenAIBody(request, ctx), ctx);
  },
  streamCompletion(request: CompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent> {
    return flattenBatches(streamCompletionBatches(request, ctx));
  },
  createEmbeddings(request: EmbeddingRequest, ctx: CallContext): Promise<VendorResult> {
    return createOpenAIResult('/embeddings', buildOpenAIEmbeddingBody(request, ctx), ctx);
  },
};
