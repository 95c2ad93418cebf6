import type { VendorAdapter } from '../types.js';
import { openaiApi } from './api.js';
import { buildOpenAIBody, buildOpenAIEmbeddingBody, buildOpenAIStreamBody } from './build-openai-body.js';
import { createOpenAIAnswer, createOpenAIEmbeddings } from './create-openai-result.js';
import { editOpenAIImages, generateOpenAIImages, varyOpenAIImages } from './images.js';
import { openOpenAIRealtime } from './realtime.js';
import { streamOpenAIEvents } from './stream-openai-events.js';
import { transcribeWithOpenAI, translateWithOpenAI } from './transcriptions.js';
import { generateVideoWithOpenAI } from './videos.js';
import { speakWithOpenAI } from './speech.js';
import { moderateWithOpenAI } from './moderations.js';

export { mapOpenAIError, scrubSecrets } from './map-openai-error.js';

/**
 * OpenAI and every OpenAI-compatible API (DeepSeek, xAI, vLLM, Ollama):
 * requests pass through with the upstream model id (and `service_tier` only
 * as `ctx.serviceTier` sets it), answers come back in the client's own wire
 * form (carried as `wire`) with the events they mean, and the `service_tier`
 * they say (`serviceTier` of the answer or of its start event).
 */
export const openaiAdapter: VendorAdapter = {
  chat: (request, ctx) => createOpenAIAnswer(openaiApi.paths.chat, buildOpenAIBody(request, ctx, 'chat'), ctx),
  streamChat: (request, ctx) =>
    streamOpenAIEvents(openaiApi.paths.chat, buildOpenAIStreamBody(request, ctx, 'chat'), ctx),
  complete: (request, ctx) =>
    createOpenAIAnswer(openaiApi.paths.completions, buildOpenAIBody(request, ctx, 'completions'), ctx),
  streamCompletion: (request, ctx) =>
    streamOpenAIEvents(openaiApi.paths.completions, buildOpenAIStreamBody(request, ctx, 'completions'), ctx),
  embed: (request, ctx) => createOpenAIEmbeddings(buildOpenAIEmbeddingBody(request, ctx), ctx),
  generateImages: generateOpenAIImages,
  editImages: editOpenAIImages,
  varyImages: varyOpenAIImages,
  transcribe: transcribeWithOpenAI,
  translate: translateWithOpenAI,
  generateVideo: generateVideoWithOpenAI,
  speak: speakWithOpenAI,
  moderate: moderateWithOpenAI,
  openRealtime: (ctx, events) => openOpenAIRealtime(ctx, events),
};
