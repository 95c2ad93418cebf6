import type { VendorApi } from '../http.js';

/** The Gemini API version every route uses. The channel's base URL stops before it (as in Google's SDKs). */
export const GEMINI_API_VERSION = 'v1beta';

/**
 * `models/<id>` unless the id already names its collection (`tunedModels/…`,
 * `models/…`), as the Vercel SDK does: an operator may route to a tuned model.
 */
export function geminiModelPath(upstreamModel: string): string {
  return upstreamModel.includes('/') ? upstreamModel : `models/${upstreamModel}`;
}

const modelRoute = (upstreamModel: string, method: string) =>
  `/${GEMINI_API_VERSION}/${geminiModelPath(upstreamModel)}:${method}`;

/** The Generative Language API: every route is a method of the upstream model. */
export const geminiApi = {
  // The key travels in a header, never in `?key=`: URLs end up in logs and error texts, headers do not.
  headers: (apiKey: string): Record<string, string> => ({ 'x-goog-api-key': apiKey }),
  paths: {
    generate: (upstreamModel: string) => modelRoute(upstreamModel, 'generateContent'),
    // Without `alt=sse` the stream is one JSON array sent in pieces, which no SSE parser can read.
    stream: (upstreamModel: string) => `${modelRoute(upstreamModel, 'streamGenerateContent')}?alt=sse`,
    embed: (upstreamModel: string) => modelRoute(upstreamModel, 'batchEmbedContents'),
    // The routes a Gemini client's own requests go to (`native-gemini.ts`), sent as the client wrote them.
    embedOne: (upstreamModel: string) => modelRoute(upstreamModel, 'embedContent'),
    countTokens: (upstreamModel: string) => modelRoute(upstreamModel, 'countTokens'),
  },
} satisfies VendorApi;
