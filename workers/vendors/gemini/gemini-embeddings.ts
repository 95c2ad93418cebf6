import { invalidRequest } from '../../../shared/errors.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import { countTextTokensAsync } from '../../../shared/tokens.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { CallContext } from '../types.js';
import type { EmbeddingsAnswer } from '../../answers/events.js';
import { geminiApi, geminiModelPath } from './api.js';
import { mapGeminiError } from './map-gemini-error.js';

/** `batchEmbedContents` refuses more ("at most 100 requests can be in one batch"); OpenAI allows 2048 inputs. */
export const MAX_GEMINI_BATCH = 100;

/** Gemini embeds text only: OpenAI token-id inputs have no meaning for Google's tokenizer. */
function readTexts(input: EmbeddingRequest['input']): string[] {
  if (typeof input === 'string') return [input];
  if (input.every((item): item is string => typeof item === 'string')) return input;
  throw invalidRequest('Gemini embedding models take text only; token-id arrays are not supported.', 'input');
}

/** The raw float32 bytes, little-endian, as base64: what OpenAI sends for `encoding_format: "base64"`. */
export function encodeFloat32Base64(values: readonly number[]): string {
  const bytes = Buffer.allocUnsafe(values.length * 4);
  for (let index = 0; index < values.length; index += 1) bytes.writeFloatLE(values[index]!, index * 4);
  return bytes.toString('base64');
}

function readVectors(payload: Record<string, unknown>, expected: number): number[][] {
  const embeddings = payload.embeddings;
  if (!Array.isArray(embeddings) || embeddings.length !== expected) throw malformedResponse();
  return embeddings.map((embedding: unknown) => {
    const values = (embedding as { values?: unknown } | null)?.values;
    if (!Array.isArray(values) || !values.every((value) => typeof value === 'number')) throw malformedResponse();
    return values as number[];
  });
}

async function embedBatch(
  texts: readonly string[],
  dimensions: number | null | undefined,
  ctx: CallContext,
): Promise<number[][]> {
  const model = geminiModelPath(ctx.upstreamModel);
  const requests = texts.map((text) => ({
    model,
    content: { parts: [{ text }] },
    ...(dimensions != null ? { outputDimensionality: dimensions } : {}),
  }));
  const path = geminiApi.paths.embed(ctx.upstreamModel);
  const { json } = await postJson(
    ctx,
    vendorRequest(geminiApi, ctx, path, JSON.stringify({ requests })),
    mapGeminiError,
  );
  return readVectors(json, texts.length);
}

/**
 * OpenAI `/embeddings` through `batchEmbedContents`, in batches of 100, one
 * after another (the channel's concurrency cap counts this job once).
 * Gemini reports no token counts here, so usage is estimated with the
 * gateway's o200k tokenizer: close enough for quota, not Google's bill.
 */
export async function createGeminiEmbeddings(request: EmbeddingRequest, ctx: CallContext): Promise<EmbeddingsAnswer> {
  const texts = readTexts(request.input);
  const vectors: number[][] = [];
  for (let start = 0; start < texts.length; start += MAX_GEMINI_BATCH) {
    vectors.push(...(await embedBatch(texts.slice(start, start + MAX_GEMINI_BATCH), request.dimensions, ctx)));
  }
  const base64 = request.encoding_format === 'base64';
  const data = vectors.map((values, index) => ({
    object: 'embedding',
    index,
    embedding: base64 ? encodeFloat32Base64(values) : values,
  }));
  let promptTokens = 0;
  for (const text of texts) promptTokens += await countTextTokensAsync(text);
  const body = {
    object: 'list',
    data,
    model: ctx.model.id,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  };
  return {
    body: JSON.stringify(body),
    usage: { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens },
  };
}
