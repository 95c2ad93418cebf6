/**
 * The built-in offline vendor: deterministic answers for chat, legacy
 * completions, embeddings, moderations, images, transcriptions, translations, speech, videos and Realtime sessions
 * (realtime.ts), so a fresh checkout runs (and is tested) with no keys. Token counts are real
 * (o200k_base), so billing paths see real numbers.
 *
 * It imitates an OpenAI-compatible vendor: every chunk and body it renders
 * travels as `wire` (chat clients get exactly those bytes), next to the answer
 * events it says, which other encoders read.
 *
 * Markers, written anywhere in the last user message (chat), a prompt
 * (completions) or an input string (embeddings), steer the mock for tests
 * (the media files list the markers they read, and their own):
 *
 *   [mock:error:<status>]  fail with a GatewayError of that status (400-599),
 *                          before any output. Retryable for 429 and 5xx, so
 *                          the gateway's retry path can be exercised.
 *   [mock:slow:<ms>]       wait <ms> between stream chunks instead of
 *                          MOCK_STREAM_DELAY_MS (default 20); a non-stream
 *                          call waits <ms> once before answering.
 *
 * The pause between stream chunks is MOCK_STREAM_DELAY_MS, read on every
 * call. Every wait ends at once when `ctx.signal` aborts, rejecting with its reason.
 */
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext, VendorAdapter } from '../types.js';
import type { Answer } from '../../answers/events.js';
import { planChatCompletion, toChatAnswer } from './chat.js';
import { streamChatCompletion } from './chat-stream.js';
import { createCompletion, streamCompletion } from './completions.js';
import { createEmbeddings } from './embeddings.js';
import { editMockImages, generateMockImages, varyMockImages } from './images.js';
import { transcribeMock, translateMock } from './transcriptions.js';
import { generateMockVideo } from './videos.js';
import { openMockRealtime } from './realtime.js';
import { speakMock } from './speech.js';
import { moderateMock } from './moderations.js';
import { sleep } from '../sleep.js';

async function createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<Answer> {
  const plan = await planChatCompletion(request, ctx);
  if (plan.markers.slowMs !== undefined) await sleep(plan.markers.slowMs, ctx.signal);
  return toChatAnswer(plan);
}

export const mockAdapter: VendorAdapter = {
  chat: createChatCompletion,
  streamChat: streamChatCompletion,
  complete: createCompletion,
  streamCompletion,
  embed: createEmbeddings,
  generateImages: generateMockImages,
  editImages: editMockImages,
  varyImages: varyMockImages,
  transcribe: transcribeMock,
  translate: translateMock,
  generateVideo: generateMockVideo,
  speak: speakMock,
  moderate: moderateMock,
  openRealtime: openMockRealtime,
};

export { MOCK_EMBEDDING_DIMENSIONS } from './embeddings.js';
