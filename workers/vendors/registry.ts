import { anthropicAdapter } from './anthropic/index.js';
import { geminiAdapter } from './gemini/index.js';
import { mockAdapter } from './mock/index.js';
import { openaiAdapter } from './openai/index.js';
import { GatewayError } from '../../shared/errors.js';
import type { VendorAdapter } from './types.js';
import type { Protocol } from '../../shared/vendors.js';

/** The adapter of each wire protocol. */
export const adapters: Partial<Record<Protocol, VendorAdapter>> = {
  openai: openaiAdapter,
  anthropic: anthropicAdapter,
  gemini: geminiAdapter,
  mock: mockAdapter,
};

/** The adapter of a protocol, or a 503 when this build has none for it. */
export function chatAdapter(protocol: Protocol): VendorAdapter {
  const adapter = adapters[protocol];
  if (!adapter) throw new GatewayError(503, `The ${protocol} protocol does not serve this endpoint.`, { type: 'server_error', code: 'no_route' });
  return adapter;
}
