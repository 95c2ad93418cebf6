import type { FormData } from 'undici';
import { joinUrl, postVendor, type VendorResponse } from '../http.js';
import type { CallContext } from '../types.js';

/** POSTs a multipart body (uploads) to an OpenAI-compatible base URL; undici sets the boundary. */
export function postOpenAIForm(path: string, form: FormData, ctx: CallContext): Promise<VendorResponse> {
  return postVendor(
    joinUrl(ctx.channel.baseUrl, path),
    { ...(ctx.channel.apiKey ? { authorization: `Bearer ${ctx.channel.apiKey}` } : {}), accept: 'application/json' },
    form,
    ctx,
  );
}
