import { GatewayError } from '../../../shared/errors.js';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from '../types.js';
import { createGeminiEmbeddings } from './gemini-embeddings.js';
import { createGeminiChatCompletion } from './gemini-response.js';
import { streamGeminiChatCompletion } from './gemini-stream.js';

export { buildGeminiRequest } from './build-gemini-request.js';
export { convertJsonSchema } from './convert-json-schema.js';
export { GeminiStreamConverter } from './gemini-stream.js';
export { encodeFloat32Base64 } from './gemini-embeddings.js';
export { mapGeminiError } from './map-gemini-error.js';
export { createToolCallId, readThoughtSignature, SKIP_THOUGHT_SIGNATURE } from './thought-signature.js';

const notServed = () =>
  new GatewayError(400, 'Legacy completions are not served by Gemini models; use /v1/chat/completions.', {
    code: 'unsupported_endpoint',
    param: 'model',
  });

/**
 * Google Gemini (Generative Language API): OpenAI chat requests become
 * `generateContent` / `streamGenerateContent` calls and the answers come back
 * in OpenAI shapes; embeddings go through `batchEmbedContents`.
 */
export const geminiAdapter: VendorAdapter = {
  createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<VendorResult> {
    return createGeminiChatCompletion(request, ctx);
  },
  streamChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncIterable<StreamEvent> {
    return streamGeminiChatCompletion(request, ctx);
  },
  async createCompletion(): Promise<VendorResult> {
    throw notServed();
  },
  // A generator, so the refusal comes from the first next() as the interface promises.
  async *streamCompletion(): AsyncGenerator<StreamEvent> {
    throw notServed();
  },
  createEmbeddings(request: EmbeddingRequest, ctx: CallContext): Promise<VendorResult> {
    return createGeminiEmbeddings(request, ctx);
  },
};
