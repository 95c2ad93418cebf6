import type { GatewayError } from '../../../shared/errors.js';
import type { CallContext, VendorResult } from '../types.js';
import { postOpenAI } from './api.js';
import { parseJsonObject, readBodyText, readCappedText, type VendorResponse } from '../http.js';
import { mapOpenAIError, mapOpenAIInlineError } from './map-openai-error.js';
import { readOpenAIUsage } from './read-openai-usage.js';

/** Reads a non-2xx answer and turns it into the mapped GatewayError (to be thrown by the caller). */
export async function readOpenAIError(response: VendorResponse, ctx: CallContext): Promise<GatewayError> {
  const bodyText = await readCappedText(response, ctx);
  const error = mapOpenAIError({ status: response.status, headers: response.headers, bodyText }, [ctx.channel.apiKey]);
  ctx.log.debug({ upstreamStatus: response.status, err: error }, 'upstream vendor refused the request');
  return error;
}

/**
 * A non-stream call. The body is handed on exactly as the vendor sent it:
 * it already is the OpenAI shape, and re-serializing it would cost time on
 * every request. It is still parsed once, to check it and to read usage.
 */
export async function createOpenAIResult(path: string, body: string, ctx: CallContext): Promise<VendorResult> {
  const response = await postOpenAI(path, body, ctx, 'application/json');
  if (response.status < 200 || response.status >= 300) throw await readOpenAIError(response, ctx);

  const text = await readBodyText(response, ctx);
  const fields = parseJsonObject(text);
  // Some compatible vendors (proxies, routers) report failures as a 200 with an error body.
  if (fields.error != null && fields.choices === undefined && fields.data === undefined) {
    throw mapOpenAIInlineError(fields, [ctx.channel.apiKey]);
  }
  const usage = readOpenAIUsage(fields.usage);
  return usage === undefined ? { body: text } : { body: text, usage };
}
