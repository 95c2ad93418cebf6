import type { CallContext } from '../types.js';
import type { Answer, AnswerChoice, EmbeddingsAnswer } from '../../answers/events.js';
import { postJson, vendorRequest } from '../http.js';
import { openaiApi } from './api.js';
import { mapOpenAIError, mapOpenAIInlineError } from './map-openai-error.js';
import { readOpenAIAnswerChoice, readOpenAIUsage } from './read-openai-answer.js';

/** Posts a non-stream call and reads its JSON answer; a 200 that carries an error is that error. */
async function callOpenAI(
  path: string,
  body: string,
  ctx: CallContext,
): Promise<{ text: string; fields: Record<string, unknown> }> {
  const { text, json: fields } = await postJson(ctx, vendorRequest(openaiApi, ctx, path, body), mapOpenAIError);
  // Some compatible vendors (proxies, routers) report failures as a 200 with an error body.
  if (fields.error != null && fields.choices === undefined && fields.data === undefined) {
    throw mapOpenAIInlineError(fields, [ctx.channel.apiKey]);
  }
  return { text, fields };
}

/**
 * A chat or legacy completion. The body is handed on exactly as the vendor
 * sent it (`wire`): it already is the OpenAI shape, and re-serializing it
 * would cost time on every request. It is still parsed once, to check it and
 * to read what it says.
 */
export async function createOpenAIAnswer(path: string, body: string, ctx: CallContext): Promise<Answer> {
  const { text, fields } = await callOpenAI(path, body, ctx);
  const usage = readOpenAIUsage(fields.usage);
  let choices: AnswerChoice[] | undefined;
  const answer: Answer = {
    id: typeof fields.id === 'string' ? fields.id : '',
    created: typeof fields.created === 'number' ? fields.created : Math.floor(Date.now() / 1000),
    // Read only when an encoder other than the chat one asks: the chat encoder sends `wire` as it is.
    get choices() {
      choices ??= Array.isArray(fields.choices) ? fields.choices.map(readOpenAIAnswerChoice) : [];
      return choices;
    },
    wire: text,
  };
  if (typeof fields.model === 'string') answer.model = fields.model;
  if (typeof fields.system_fingerprint === 'string') answer.systemFingerprint = fields.system_fingerprint;
  // The tier the vendor says it served (OpenAI may serve a priority or flex request as `default`).
  if (typeof fields.service_tier === 'string') answer.serviceTier = fields.service_tier;
  if (usage !== undefined) answer.usage = usage;
  return answer;
}

/** Embeddings: the vectors pass through as the vendor sent them. */
export async function createOpenAIEmbeddings(body: string, ctx: CallContext): Promise<EmbeddingsAnswer> {
  const { text, fields } = await callOpenAI(openaiApi.paths.embeddings, body, ctx);
  const usage = readOpenAIUsage(fields.usage);
  return usage === undefined ? { body: text } : { body: text, usage };
}
