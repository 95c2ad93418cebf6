import { joinUrl, postVendor, type VendorResponse } from '../http.js';
import type { CallContext } from '../types.js';

/** The API version the Anthropic SDKs pin by default; the answer shapes this adapter reads are those of this version. */
export const ANTHROPIC_VERSION = '2023-06-01';

/** POSTs a Messages API body. The channel's base URL has no `/v1` (as the Anthropic SDK's `baseURL`). */
export function postAnthropicMessages(
  body: string,
  ctx: CallContext,
  accept: 'application/json' | 'text/event-stream',
): Promise<VendorResponse> {
  return postVendor(
    joinUrl(ctx.channel.baseUrl, '/v1/messages'),
    {
      'x-api-key': ctx.channel.apiKey,
      'anthropic-version': ANTHROPIC_VERSION,
      'content-type': 'application/json',
      accept,
    },
    body,
    ctx,
  );
}
