import { anthropicAdapter } from './anthropic/index.js';
import { bflAdapter } from './bfl/index.js';
import { geminiAdapter } from './gemini/index.js';
import { mockAdapter } from './mock/index.js';
import { openaiAdapter } from './openai/index.js';
import { GatewayError } from '../../shared/errors.js';
import type { VendorAdapter } from './types.js';
import type { Protocol } from '../../shared/vendor-definitions.js';

/** The adapter of each wire protocol: one per vendor folder. */
export const adapters: Record<Protocol, VendorAdapter> = {
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  gemini: geminiAdapter,
  bfl: bflAdapter,
  mock: mockAdapter,
};

/** What each adapter method is, in the words of a client's error. */
const capabilityNames: Record<keyof VendorAdapter, string> = {
  chat: 'chat completions',
  streamChat: 'streamed chat completions',
  nativeMessages: 'the Messages API',
  countMessageTokens: 'token counting',
  nativeGemini: 'the Gemini API',
  countGeminiTokens: 'token counting',
  embedGemini: 'embeddings',
  complete: 'legacy completions',
  streamCompletion: 'streamed legacy completions',
  embed: 'embeddings',
  generateImages: 'image generation',
  editImages: 'image edits',
  varyImages: 'image variations',
  transcribe: 'audio transcription',
  translate: 'audio translation',
  generateVideo: 'video generation',
  speak: 'speech',
  moderate: 'moderation',
  openRealtime: 'Realtime sessions',
};

/**
 * The protocol's implementation of one capability, or a clear 400: the
 * catalog never routes a model to a vendor that lacks the capability, but a
 * channel file can point a model at the wrong protocol.
 */
export function adapterMethod<K extends keyof VendorAdapter>(
  protocol: Protocol,
  method: K,
): NonNullable<VendorAdapter[K]> {
  const adapter = adapters[protocol];
  const implementation = adapter[method];
  if (!implementation) {
    throw new GatewayError(
      400,
      `This model's vendor (${protocol} protocol) does not serve ${capabilityNames[method]}.`,
      {
        code: 'unsupported_endpoint',
        param: 'model',
      },
    );
  }
  return implementation.bind(adapter) as NonNullable<VendorAdapter[K]>;
}
