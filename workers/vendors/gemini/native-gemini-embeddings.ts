import type { GeminiEmbedJob } from '../../../shared/gemini.js';
import type { EmbeddingRequest } from '../../../shared/schemas/embeddings.js';
import { countTextTokensAsync } from '../../../shared/tokens.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { CallContext } from '../types.js';
import type { EmbeddingsAnswer } from '../../answers/events.js';
import { geminiApi, geminiModelPath } from './api.js';
import { mapGeminiError, mapGeminiInlineError } from './map-gemini-error.js';

/**
 * Gemini's `:embedContent` and `:batchEmbedContents` spoken natively, for a
 * client that speaks them too: the body as the client wrote it (`taskType`,
 * `title`, `outputDimensionality`, parts Gemini reads), each request's model
 * named the vendor's way, and Gemini's answer as it sent it. Gemini says no
 * token counts here, so the texts are counted with the gateway's tokenizer,
 * as the chat form's embeddings are (`gemini-embeddings.ts`): close enough for
 * quota, not Google's bill.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The tokens of an embeddings input, as the gateway counts them: texts by the tokenizer, token arrays by their length.
 */
export async function countEmbeddingInput(input: EmbeddingRequest['input']): Promise<number> {
  if (typeof input === 'string') return countTextTokensAsync(input);
  let total = 0;
  for (const item of input as Array<string | number | number[]>)
    total += typeof item === 'string' ? await countTextTokensAsync(item) : Array.isArray(item) ? item.length : 1;
  return total;
}

/**
 * The body Gemini is sent: `batchEmbedContents` requires every request to
 * name the model of its URL, so each names the upstream one; `embedContent`'s
 * own `model` is optional and renamed only where the client wrote one.
 */
export function nativeEmbedBody(job: GeminiEmbedJob, upstreamModel: string): string {
  const model = geminiModelPath(upstreamModel);
  if (!job.batch) return JSON.stringify(job.gemini.model === undefined ? job.gemini : { ...job.gemini, model });
  const requests = Array.isArray(job.gemini.requests) ? job.gemini.requests : [];
  return JSON.stringify({
    ...job.gemini,
    requests: requests.map((request) => (isObject(request) ? { ...request, model } : request)),
  });
}

/**
 * `:embedContent` (`{"embedding": …}`) or `:batchEmbedContents` (`{"embeddings": […]}`) at Gemini: its answer as sent.
 */
export async function embedNativeGemini(job: GeminiEmbedJob, ctx: CallContext): Promise<EmbeddingsAnswer> {
  const path = job.batch ? geminiApi.paths.embed(ctx.upstreamModel) : geminiApi.paths.embedOne(ctx.upstreamModel);
  const { text, json } = await postJson(
    ctx,
    vendorRequest(geminiApi, ctx, path, nativeEmbedBody(job, ctx.upstreamModel)),
    mapGeminiError,
  );
  if (json.error != null) throw mapGeminiInlineError(json, [ctx.channel.apiKey]);
  if (job.batch ? !Array.isArray(json.embeddings) : !isObject(json.embedding)) throw malformedResponse();
  const promptTokens = await countEmbeddingInput(job.embedding.input);
  return { body: text, usage: { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens } };
}
