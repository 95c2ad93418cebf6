import type { VendorAdapter } from '../types.js';
import { createGeminiEmbeddings } from './gemini-embeddings.js';
import { createGeminiChatCompletion } from './gemini-response.js';
import { streamGeminiChatCompletion } from './gemini-stream.js';
import { generateGeminiImages } from './images.js';
import { openGeminiLive } from './live.js';
import { embedNativeGemini } from './native-gemini-embeddings.js';
import { countNativeGeminiTokens, streamNativeGemini } from './native-gemini.js';
import { speakWithGemini } from './speech.js';

export { buildGeminiRequest } from './build-gemini-request.js';
export { convertJsonSchema } from './convert-json-schema.js';
export { GeminiStreamConverter } from './gemini-stream.js';
export { encodeFloat32Base64 } from './gemini-embeddings.js';
export { mapGeminiError } from './map-gemini-error.js';
export { createToolCallId, readThoughtSignature, SKIP_THOUGHT_SIGNATURE } from './thought-signature.js';

/**
 * Google Gemini (Generative Language API): OpenAI chat requests become
 * `generateContent` / `streamGenerateContent` calls answered as answer events,
 * embeddings go through `batchEmbedContents`, and images through the image
 * models' `generateContent`. A client that speaks Gemini's own API is sent
 * its request as written and gets Gemini's own chunks, token counts and
 * embeddings (`native-gemini.ts`, `native-gemini-embeddings.ts`). Legacy
 * completions are not served: Gemini has no raw-prompt endpoint, so the
 * registry refuses them.
 */
export const geminiAdapter: VendorAdapter = {
  chat: createGeminiChatCompletion,
  streamChat: streamGeminiChatCompletion,
  nativeGemini: streamNativeGemini,
  countGeminiTokens: countNativeGeminiTokens,
  embedGemini: embedNativeGemini,
  embed: createGeminiEmbeddings,
  generateImages: generateGeminiImages,
  openRealtime: (ctx, events) => openGeminiLive(ctx, events),
  speak: speakWithGemini,
};
