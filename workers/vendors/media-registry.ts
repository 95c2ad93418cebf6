import { GatewayError } from '../../shared/errors.js';
import { bflImages } from './bfl/index.js';
import { geminiImages } from './gemini/images.js';
import { mockImages } from './mock/images.js';
import { mockTranscriptions } from './mock/transcriptions.js';
import { mockVideos } from './mock/videos.js';
import { openaiImages } from './openai/images.js';
import { openaiTranscriptions } from './openai/transcriptions.js';
import { openaiVideos } from './openai/videos.js';
import type { MediaAdapter } from './media-types.js';
import type { Protocol } from '../../shared/vendors.js';

/** Media capabilities of each protocol. */
export const mediaAdapters: Partial<Record<Protocol, MediaAdapter>> = {
  openai: { ...openaiImages, ...openaiTranscriptions, ...openaiVideos },
  gemini: geminiImages,
  bfl: bflImages,
  mock: { ...mockImages, ...mockTranscriptions, ...mockVideos },
};

/** The protocol's implementation of one media method, or a clear 400. */
export function mediaMethod<K extends keyof MediaAdapter>(protocol: Protocol, method: K): NonNullable<MediaAdapter[K]> {
  const adapter = mediaAdapters[protocol];
  const implementation = adapter?.[method];
  if (!implementation) {
    throw new GatewayError(400, `This model's vendor (${protocol} protocol) does not support ${method}.`, { code: 'unsupported_endpoint' });
  }
  return implementation.bind(adapter) as NonNullable<MediaAdapter[K]>;
}
