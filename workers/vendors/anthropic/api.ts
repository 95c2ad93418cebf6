import type { VendorApi } from '../http.js';

/**
 * The API version the Anthropic SDKs pin by default; the answer shapes this adapter reads are those of this version.
 */
export const ANTHROPIC_VERSION = '2023-06-01';

/** The Messages API. The channel's base URL has no `/v1` (as the Anthropic SDK's `baseURL`). */
export const anthropicApi = {
  headers: (apiKey: string): Record<string, string> => ({
    'x-api-key': apiKey,
    'anthropic-version': ANTHROPIC_VERSION,
  }),
  paths: { messages: '/v1/messages' },
} satisfies VendorApi;
