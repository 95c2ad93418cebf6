import { chatToolName } from './messages-tools.js';
import type { ChatCompletionRequest } from './schemas/chat.js';
import type { EmbeddingRequest } from './schemas/embeddings.js';

/**
 * Google's Gemini API (`/v1beta/models/{model}:{method}`, and the `/v1/models/{model}:{method}` spelling of the
 * current GenAI SDKs) over the chat and embeddings queues. The api validates the request and translates it to
 * chat (or embeddings) once; the worker sends a model served by Gemini the request as the client wrote it
 * (thought signatures, `thinkingConfig`, `cachedContent`, `safetySettings`, tools Gemini runs) and relays Gemini's
 * own chunks, and runs every other vendor's chat adapter on the translation, its answer events written as
 * Gemini's `GenerateContentResponse` chunks.
 */

/** The methods a model answers under `models/{model}:{method}`. */
export const geminiMethods = [
  'generateContent',
  'streamGenerateContent',
  'countTokens',
  'embedContent',
  'batchEmbedContents',
] as const;
export type GeminiMethod = (typeof geminiMethods)[number];

/**
 * How a streamed answer is written: `sse` (`?alt=sse`: one `data:` event per chunk, as Gemini CLI and the SDKs ask)
 * or `array` (Google's default: one JSON array whose elements are the chunks, sent as they come).
 */
export type GeminiStreamForm = 'sse' | 'array';

/** A `generateContent` body as the client sent it (validated; fields the gateway does not read kept as written). */
export type GeminiRequest = Record<string, unknown> & { contents: Array<Record<string, unknown>> };

/** `:generateContent`, `:streamGenerateContent` and `:countTokens`: what the job carries. */
export interface GeminiJob {
  /** The request as the client sent it, for a model Gemini serves (the model named by the path, not the body). */
  gemini: GeminiRequest;
  /** The same request in chat form, for vendors that speak chat. */
  chat: ChatCompletionRequest;
  /** The model name the answer says (`modelVersion`): the one the client asked for (an alias as written). */
  model: string;
  /** A streamed request's form; absent when the client gets one body. */
  form?: GeminiStreamForm;
  /** The prompt's tokens as counted at the api (`usageMetadata.promptTokenCount` when a vendor does not say it). */
  inputTokens: number;
}

/** `:embedContent` (one content) and `:batchEmbedContents` (several): what the job carries. */
export interface GeminiEmbedJob {
  /** The request as the client sent it, for a model Gemini serves. */
  gemini: Record<string, unknown>;
  /** The same texts as an embeddings request, for vendors that speak OpenAI's embeddings. */
  embedding: EmbeddingRequest;
  /** `batchEmbedContents` (answered `{embeddings: [...]}`) or `embedContent` (answered `{embedding}`). */
  batch: boolean;
}

/** Google's canonical error status names, by the HTTP status they come with. */
export type GoogleErrorStatus =
  | 'INVALID_ARGUMENT'
  | 'FAILED_PRECONDITION'
  | 'UNAUTHENTICATED'
  | 'PERMISSION_DENIED'
  | 'NOT_FOUND'
  | 'RESOURCE_EXHAUSTED'
  | 'CANCELLED'
  | 'INTERNAL'
  | 'UNAVAILABLE'
  | 'DEADLINE_EXCEEDED';

/** Google's status name for an HTTP status. */
export function googleErrorStatus(status: number): GoogleErrorStatus {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return 'INVALID_ARGUMENT';
    case 401:
      return 'UNAUTHENTICATED';
    case 402:
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'NOT_FOUND';
    case 409:
      return 'FAILED_PRECONDITION';
    case 429:
      return 'RESOURCE_EXHAUSTED';
    case 499:
      return 'CANCELLED';
    case 503:
    case 529:
      return 'UNAVAILABLE';
    case 504:
      return 'DEADLINE_EXCEEDED';
    default:
      return status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT';
  }
}

/**
 * `{"error":{"code","message","status","details"}}`: Google's error body. A refusal to retry later says when in a
 * `google.rpc.RetryInfo` detail (`retryDelay`, as `"12s"`), where an OpenAI client reads `Retry-After`.
 */
export function geminiErrorBody(
  status: number,
  message: string,
  retryAfterSeconds?: number,
): { error: Record<string, unknown> } {
  const details =
    retryAfterSeconds !== undefined
      ? [
          {
            '@type': 'type.googleapis.com/google.rpc.RetryInfo',
            retryDelay: `${Math.max(0, Math.ceil(retryAfterSeconds))}s`,
          },
        ]
      : undefined;
  return { error: { code: status, message, status: googleErrorStatus(status), ...(details ? { details } : {}) } };
}

/**
 * `/v1beta/...`, or `/v1/models/{model}:{method}` (a canonical path; the colon may come as `%3A`, a trailing slash
 * is the same path, and an empty model or method is still a method call the client hears of in Google's shape):
 * the paths that speak Google's dialect.
 */
export function speaksGoogle(path: string): boolean {
  return path === '/v1beta' || path.startsWith('/v1beta/') || /^\/v1\/models\/[^/]*(?::|%3A)[A-Za-z]*\/?$/.test(path);
}

/**
 * Each chat name of the request's function declarations that differs from the client's, mapped back to it. Gemini
 * takes names of up to 64 characters of letters, digits, `_`, `.`, `:` and `-`; chat's function names take no `.`
 * or `:`: such a function travels to a chat vendor under `chatToolName` of its name (the api's translation), and a
 * call the vendor makes under that name is answered under the declaration's own (the worker's encoder). Both
 * derive the names from the request's tools, so nothing else travels with the job.
 */
export function geminiToolNamesBack(request: Readonly<Record<string, unknown>>): Map<string, string> {
  const names = new Map<string, string>();
  const tools = Array.isArray(request.tools) ? (request.tools as unknown[]) : [];
  for (const tool of tools) {
    const declarations =
      typeof tool === 'object' && tool !== null
        ? (tool as { functionDeclarations?: unknown }).functionDeclarations
        : undefined;
    if (!Array.isArray(declarations)) continue;
    for (const declaration of declarations) {
      const name =
        typeof declaration === 'object' && declaration !== null ? (declaration as { name?: unknown }).name : undefined;
      if (typeof name !== 'string') continue;
      const chat = chatToolName(name);
      if (chat !== name) names.set(chat, name);
    }
  }
  return names;
}
