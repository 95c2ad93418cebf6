import type { CallContext } from '../types.js';
import { joinUrl, postVendor, type VendorResponse } from '../http.js';

/** The Gemini API version every route uses. The channel's base URL stops before it (as in Google's SDKs). */
export const GEMINI_API_VERSION = 'v1beta';

export type GeminiMethod = 'generateContent' | 'streamGenerateContent' | 'batchEmbedContents';

/**
 * `models/<id>` unless the id already names its collection (`tunedModels/…`,
 * `models/…`), as the Vercel SDK does: an operator may route to a tuned model.
 */
export function geminiModelPath(upstreamModel: string): string {
  return upstreamModel.includes('/') ? upstreamModel : `models/${upstreamModel}`;
}

export function geminiUrl(baseUrl: string, upstreamModel: string, method: GeminiMethod): string {
  // Without `alt=sse` the stream is one JSON array sent in pieces, which no SSE parser can read.
  const query = method === 'streamGenerateContent' ? '?alt=sse' : '';
  return joinUrl(baseUrl, `/${GEMINI_API_VERSION}/${geminiModelPath(upstreamModel)}:${method}${query}`);
}

/**
 * POSTs a JSON body to a Gemini route. The key travels in a header, never in
 * `?key=`: URLs end up in logs and error texts, headers do not.
 */
export function postGemini(method: GeminiMethod, body: string, ctx: CallContext): Promise<VendorResponse> {
  return postVendor(
    geminiUrl(ctx.channel.baseUrl, ctx.upstreamModel, method),
    {
      'x-goog-api-key': ctx.channel.apiKey,
      'content-type': 'application/json',
      accept: method === 'streamGenerateContent' ? 'text/event-stream' : 'application/json',
    },
    body,
    ctx,
  );
}
