import type { GatewayError } from '../../../shared/errors.js';
import type { Answer, AnswerChoice, CallContext, EmbeddingsAnswer } from '../types.js';
import { postOpenAI } from './api.js';
import { parseJsonObject, readBodyText, readCappedText, type VendorResponse } from '../http.js';
import { mapOpenAIError, mapOpenAIInlineError } from './map-openai-error.js';
import { readOpenAIAnswerChoice, readOpenAIUsage } from './read-openai-answer.js';

/** Reads a non-2xx answer and turns it into the mapped GatewayError (to be thrown by the caller). */
export async function readOpenAIError(response: VendorResponse, ctx: CallContext): Promise<GatewayError> {
  const bodyText = await readCappedText(response, ctx);
  const error = mapOpenAIError({ status: response.status, headers: response.headers, bodyText }, [ctx.channel.apiKey]);
  ctx.log.debug({ upstreamStatus: response.status, err: error }, 'upstream vendor refused the request');
  return error;
}

/** Posts a non-stream call and reads its JSON answer; a 200 that carries an error is that error. */
async function callOpenAI(path: string, body: string, ctx: CallContext): Promise<{ text: string; fields: Record<string, unknown> }> {
  const response = await postOpenAI(path, body, ctx, 'application/json');
  if (response.status < 200 || response.status >= 300) throw await readOpenAIError(response, ctx);

  const text = await readBodyText(response, ctx);
  const fields = parseJsonObject(text);
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
  if (usage !== undefined) answer.usage = usage;
  return answer;
}

/** Embeddings: the vectors pass through as the vendor sent them. */
export async function createOpenAIEmbeddings(body: string, ctx: CallContext): Promise<EmbeddingsAnswer> {
  const { text, fields } = await callOpenAI('/embeddings', body, ctx);
  const usage = readOpenAIUsage(fields.usage);
  return usage === undefined ? { body: text } : { body: text, usage };
}
