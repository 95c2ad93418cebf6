import type { CallContext } from '../types.js';
import { joinUrl, postVendor, type VendorResponse } from '../http.js';

/** POSTs a JSON body to an OpenAI-compatible base URL (which includes `/v1`). */
export function postOpenAI(
  path: string,
  body: string,
  ctx: CallContext,
  accept: 'application/json' | 'text/event-stream',
): Promise<VendorResponse> {
  return postVendor(
    joinUrl(ctx.channel.baseUrl, path),
    {
      // Local OpenAI-compatible servers (vLLM, Ollama) often run without a key.
      ...(ctx.channel.apiKey ? { authorization: `Bearer ${ctx.channel.apiKey}` } : {}),
      'content-type': 'application/json',
      accept,
    },
    body,
    ctx,
  );
}
