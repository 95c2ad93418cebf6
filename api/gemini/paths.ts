import type { Endpoint } from '../../shared/endpoints.js';
import { geminiMethods, type GeminiMethod, type GeminiStreamForm } from '../../shared/gemini.js';

/*
 * Google's paths as the api reads them. A model's methods are `POST /v1beta/models/{model}:{method}` and, as the
 * current GenAI SDKs spell them, `/v1/models/{model}:{method}` inside the `/v1` namespace the OpenAI paths use:
 * the `:method` suffix tells them apart from every OpenAI path (none has a colon). The model is the rest of the
 * path after `models/` (under `/v1beta` a catalog id may hold a `/`; under `/v1` it is one segment),
 * percent-decoded; a client that already wrote `models/` into its model name (`models/models/x`) is read the
 * same. The colon may come percent-encoded (`%3A`, as some HTTP libraries escape it; Google reads it as the colon).
 * A path with a colon after `models/` is a method call even when its model or method is empty or malformed, so the
 * client hears that (Google's 404) rather than that POST is not allowed on a model. Tuned models (`tunedModels/…`)
 * are no part of the gateway.
 */

/** Each method's endpoint row; both generate methods are one row (the method says whether it streams). */
const methodEndpoints: Readonly<Record<GeminiMethod, Endpoint>> = {
  generateContent: 'gemini.generate',
  streamGenerateContent: 'gemini.generate',
  countTokens: 'gemini.count_tokens',
  embedContent: 'gemini.embed',
  batchEmbedContents: 'gemini.batch_embed',
};

/** A request to one of a model's methods, as its path names it. */
export interface GeminiCall {
  /** The API version the path names (`v1beta`, or `v1` for the GenAI SDKs' spelling). */
  version: 'v1beta' | 'v1';
  /** The model as the client named it (decoded, without `models/`). */
  model: string;
  /** The method as written: one of `geminiMethods`, or one the gateway does not serve. */
  method: string;
  /** Its endpoint row, when the method is one the gateway serves. */
  endpoint?: Endpoint;
}

/** The model is everything up to the last colon (`:` or `%3A`); the method is what follows, whatever it is. */
const methodPath = /^\/(v1beta|v1)\/models\/(.*)(?::|%3A)([^/:%]*)$/;

/** The model and method a path names, or undefined when it names none (any other path). */
export function readGeminiPath(path: string): GeminiCall | undefined {
  // A trailing slash is the same path, as for every other route.
  const match = methodPath.exec(path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path);
  if (!match) return undefined;
  const [, version, encoded, method] = match as unknown as [string, 'v1beta' | 'v1', string, string];
  // Under /v1 a model is one segment and a method a word, as `speaksGoogle` (which picks the errors' shape) reads the
  // path: OpenAI's fine-tuned model ids hold colons (`ft:gpt-4o-mini:org::id`), and /v1 is OpenAI's namespace too.
  if (version === 'v1' && (encoded.includes('/') || !/^[A-Za-z]*$/.test(method))) return undefined;
  const model = modelNameOf(encoded);
  const endpoint = (geminiMethods as readonly string[]).includes(method)
    ? methodEndpoints[method as GeminiMethod]
    : undefined;
  return { version, model, method, ...(endpoint ? { endpoint } : {}) };
}

/**
 * A model as a path names it: percent-decoded (as written when it does not decode), without Google's `models/`, however
 * often written.
 */
export function modelNameOf(encoded: string): string {
  let model: string;
  try {
    model = decodeURIComponent(encoded);
  } catch {
    model = encoded;
  }
  while (model.startsWith('models/')) model = model.slice('models/'.length);
  return model;
}

/** How a streamed answer is written: `?alt=sse` as server-sent events, else Google's streamed JSON array. */
export function streamFormOf(alt: unknown): GeminiStreamForm {
  const value = Array.isArray(alt) ? alt.at(-1) : alt;
  return typeof value === 'string' && value.toLowerCase() === 'sse' ? 'sse' : 'array';
}

/** The queued endpoint a request's method and path name when they are one of Google's (a POST to a served method). */
export function geminiEndpoint(method: string, path: string): Endpoint | undefined {
  if (method !== 'POST') return undefined;
  return readGeminiPath(path)?.endpoint;
}
