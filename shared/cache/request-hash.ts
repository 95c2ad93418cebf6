import { createHash } from 'node:crypto';
import type { Endpoint, EndpointRequest } from '../endpoints.js';

/**
 * The key a request's answer is stored and found by: a hash of what shapes the answer (the endpoint, the catalog model
 * the request resolved to, its payload in canonical form without the fields that change nothing). Within an account:
 * the account is in the key's name (shared/redis-keys.ts), never in the hash.
 */

/**
 * Google's Gemini API: its request as the client wrote it is what shapes the answer (the path's model is the
 * catalog model the hash names; whether it streams, and in which form, is the path's too), so it is hashed alone:
 * `streamGenerateContent` in either form and `generateContent` of one body share one entry.
 */
const geminiEndpoints: ReadonlySet<Endpoint> = new Set(['gemini.generate', 'gemini.embed', 'gemini.batch_embed']);

/**
 * The endpoints whose requests carry uploads: an upload is in a request's hash by its bytes' digest, not its stored
 * name.
 */
const uploadEndpoints: ReadonlySet<Endpoint> = new Set([
  'images.edits',
  'images.variations',
  'audio.transcriptions',
  'audio.translations',
]);

/** Fields that do not change an answer: left out of a request's hash, so requests that differ only there share one. */
const answerNeutral: Readonly<Record<string, ReadonlySet<string>>> = {
  'chat.completions': new Set([
    'stream',
    'stream_options',
    'user',
    'service_tier',
    'metadata',
    'store',
    'safety_identifier',
    'prompt_cache_key',
  ]),
  completions: new Set(['stream', 'stream_options', 'user', 'service_tier']),
  embeddings: new Set(['user']),
  messages: new Set(['stream', 'metadata', 'service_tier']),
  // A Responses job's chat form (always streamed to the vendor) beside its shell: the shell's id and time are the
  // response's own, `store` and `background` are never cached, `user` changes nothing.
  responses: new Set(['id', 'created_at', 'store', 'background', 'user', 'service_tier', 'stream', 'stream_options']),
  'images.generations': new Set(['user']),
  'images.edits': new Set(['user']),
  'images.variations': new Set(['user']),
  'audio.transcriptions': new Set(['user']),
};

/** An upload as a request's hash knows it: its bytes' digest, size and type (its stored name is the request's own). */
function uploadContent(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(uploadContent);
  if (value === null || typeof value !== 'object' || !('key' in value) || !('size' in value)) return value;
  const { sha256, size, contentType } = value as unknown as { sha256?: string; size: number; contentType: string };
  if (typeof sha256 !== 'string') throw new Error('an upload without its digest cannot be cached');
  return { sha256, size, contentType };
}

/** Whether a request can be cached at all: every upload it carries was digested as it arrived. */
export function hashable(request: EndpointRequest): boolean {
  if (!uploadEndpoints.has(request.endpoint)) return true;
  try {
    for (const value of Object.values(request.payload as Record<string, unknown>)) uploadContent(value);
    return true;
  } catch {
    return false;
  }
}

/**
 * JSON with every object's keys in order: two requests that differ only in key order or spacing write the same text.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value))
    return `[${value.map((item) => canonicalJson(item === undefined ? null : item)).join(',')}]`;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`;
}

/**
 * The hash a request is stored and found by: its endpoint, the catalog model it resolved to, and its payload in
 * canonical form without the fields that do not change the answer. The account is in the key's name, never here:
 * entries are never shared across accounts.
 */
export function requestHash(request: EndpointRequest, modelId: string): string {
  const neutral = answerNeutral[request.endpoint] ?? new Set<string>();
  const kept = (payload: Record<string, unknown>) => {
    const out: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(payload)) if (!neutral.has(key) && key !== 'model') out[key] = value;
    return out;
  };
  const form =
    request.endpoint === 'messages'
      ? {
          ...kept(request.payload.anthropic as unknown as Record<string, unknown>),
          [betasField]: betaSet(request.payload.betas),
        }
      : request.endpoint === 'responses'
        ? {
            chat: kept(request.payload.chat as unknown as Record<string, unknown>),
            shell: kept(request.payload.shell as unknown as Record<string, unknown>),
          }
        : geminiEndpoints.has(request.endpoint)
          ? kept((request.payload as { gemini: Record<string, unknown> }).gemini)
          : uploadEndpoints.has(request.endpoint)
            ? Object.fromEntries(
                Object.entries(kept(request.payload as Record<string, unknown>)).map(([key, value]) => [
                  key,
                  uploadContent(value),
                ]),
              )
            : kept(request.payload as Record<string, unknown>);
  return createHash('sha256')
    .update(`${request.endpoint}\n${modelId}\n${canonicalJson(form)}`)
    .digest('hex');
}

/**
 * Where a Messages request's `anthropic-beta` flags stand in its hashed form: a header, but one that changes the
 * answer (longer output, interleaved thinking…). A name no body field can have, so it never meets one.
 */
const betasField = ' anthropic-beta';

/** The flags as a set: their order and spacing in the header change nothing; their spelling is kept as sent. */
function betaSet(header: string | undefined): string[] | undefined {
  const flags = [
    ...new Set(
      (header ?? '')
        .split(',')
        .map((flag) => flag.trim())
        .filter((flag) => flag !== ''),
    ),
  ].sort();
  return flags.length > 0 ? flags : undefined;
}
