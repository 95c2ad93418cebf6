import { moderationResultCount, type ModerationRequest } from '../../../shared/schemas/moderations.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { CallContext, ModerationAnswer } from '../types.js';
import { openaiApi } from './api.js';
import { mapOpenAIError, mapOpenAIInlineError } from './map-openai-error.js';

/*
 * OpenAI's moderations (`POST /moderations`): the request's spec fields sent with the upstream model, the answer
 * passed on as the vendor wrote it once it reads as one (an id, and one result per input with its flag and its
 * category objects). OpenAI reports no usage for a moderation: the worker counts the texts for the log.
 */

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The body OpenAI is sent: the model it knows, and the input as the job holds it (the spec's fields alone). */
export function buildOpenAIModerationBody(request: ModerationRequest, ctx: CallContext): string {
  return JSON.stringify({ model: ctx.upstreamModel, input: request.input });
}

export async function moderateWithOpenAI(request: ModerationRequest, ctx: CallContext): Promise<ModerationAnswer> {
  const { text, json } = await postJson(
    ctx,
    vendorRequest(openaiApi, ctx, openaiApi.paths.moderations, buildOpenAIModerationBody(request, ctx)),
    mapOpenAIError,
  );
  // Some compatible vendors (proxies, routers) report failures as a 200 with an error body.
  if (json.error != null && json.results === undefined) throw mapOpenAIInlineError(json, [ctx.channel.apiKey]);
  const { id, results } = json;
  const wellFormed =
    typeof id === 'string' &&
    Array.isArray(results) &&
    results.length === moderationResultCount(request.input) &&
    results.every(
      (result) =>
        isRecord(result) &&
        typeof result.flagged === 'boolean' &&
        isRecord(result.categories) &&
        isRecord(result.category_scores),
    );
  if (!wellFormed) throw malformedResponse();
  return { body: text, id };
}
