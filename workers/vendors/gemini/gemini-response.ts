import { randomBytes } from 'node:crypto';
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import type { AnswerChoice, ToolCall } from '../../answers/events.js';
import type { CallContext } from '../types.js';
import type { Answer } from '../../answers/events.js';
import { geminiApi } from './api.js';
import { buildGeminiRequest } from './build-gemini-request.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { mapGeminiFinishReason } from './map-gemini-finish-reason.js';
import { mapGeminiError, mapGeminiInlineError } from './map-gemini-error.js';
import { createToolCallId } from './thought-signature.js';

/** The fields of a `GenerateContentResponse` candidate this adapter reads; everything else is ignored. */
export interface GeminiCandidate {
  index: number;
  parts: readonly unknown[];
  finishReason: string | null;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export const createChatCompletionId = () => `chatcmpl-${randomBytes(12).toString('hex')}`;
export const nowInSeconds = () => Math.floor(Date.now() / 1000);

/** Candidates in index order, read leniently: Gemini adds fields often and omits empty ones. */
export function readCandidates(payload: Record<string, unknown>): GeminiCandidate[] {
  if (!Array.isArray(payload.candidates)) return [];
  const candidates: GeminiCandidate[] = [];
  payload.candidates.forEach((value: unknown, position) => {
    if (!isObject(value)) return;
    const content = isObject(value.content) ? value.content : undefined;
    candidates.push({
      index: typeof value.index === 'number' ? value.index : position,
      parts: Array.isArray(content?.parts) ? content.parts : [],
      finishReason: typeof value.finishReason === 'string' ? value.finishReason : null,
    });
  });
  return candidates.sort((a, b) => a.index - b.index);
}

/** Set only when Gemini refused the prompt itself (then there are no candidates). */
export function readBlockReason(payload: Record<string, unknown>): string | undefined {
  const feedback = payload.promptFeedback;
  return isObject(feedback) && typeof feedback.blockReason === 'string' ? feedback.blockReason : undefined;
}

/** A thought summary's text (a part Gemini marks `thought`, sent when thoughts are asked for), or undefined. */
export function readThought(part: unknown): string | undefined {
  return isObject(part) && part.thought === true && typeof part.text === 'string' && part.text !== ''
    ? part.text
    : undefined;
}

/** Answer text, or undefined for a part that is not visible text (thoughts are the model's scratchpad). */
export function readText(part: unknown): string | undefined {
  if (!isObject(part) || typeof part.text !== 'string' || part.thought === true) return undefined;
  return part.text;
}

/** A `functionCall` part as one complete tool call, its signature carried in the id. */
export function readToolCall(part: unknown): ToolCall | undefined {
  if (!isObject(part) || !isObject(part.functionCall) || typeof part.functionCall.name !== 'string') return undefined;
  const signature = typeof part.thoughtSignature === 'string' ? part.thoughtSignature : undefined;
  return {
    id: createToolCallId(signature),
    name: part.functionCall.name,
    arguments: JSON.stringify(part.functionCall.args ?? {}),
  };
}

function convertCandidate(candidate: GeminiCandidate): AnswerChoice {
  let text: string | null = null;
  const toolCalls: ToolCall[] = [];
  for (const part of candidate.parts) {
    const piece = readText(part);
    if (piece !== undefined) text = (text ?? '') + piece;
    const call = readToolCall(part);
    if (call !== undefined) toolCalls.push(call);
  }
  return {
    index: candidate.index,
    text,
    toolCalls,
    finishReason: mapGeminiFinishReason(candidate.finishReason, toolCalls.length > 0),
  };
}

/**
 * `GenerateContentResponse` → `Answer`. A prompt Gemini blocked
 * (`promptFeedback.blockReason`, no candidates) is answered like OpenAI
 * answers filtered output: a 200 with `finish_reason: "content_filter"` and
 * null content, billed for the prompt Google counted. A 400 would tell the
 * client its request was malformed, which it was not.
 *
 * `model` is the catalog entry that served the call: under a fallback that is
 * not the id the client asked for, and clients have always been told which
 * model answered.
 */
export function convertGeminiResponse(payload: Record<string, unknown>, ctx: CallContext): Answer {
  const candidates = readCandidates(payload);
  let choices: AnswerChoice[];
  if (candidates.length > 0) {
    choices = candidates.map(convertCandidate);
  } else {
    const blockReason = readBlockReason(payload);
    if (blockReason === undefined) throw malformedResponse();
    ctx.log.info({ reqId: ctx.requestId, blockReason }, 'Gemini blocked the prompt');
    choices = [{ index: 0, text: null, toolCalls: [], finishReason: 'content_filter' }];
  }
  const usage = convertGeminiUsage(payload.usageMetadata);
  const answer: Answer = { id: createChatCompletionId(), created: nowInSeconds(), model: ctx.model.id, choices };
  if (usage !== undefined) answer.usage = usage;
  return answer;
}

export async function createGeminiChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<Answer> {
  const body = JSON.stringify(buildGeminiRequest(request, ctx));
  const { json: payload } = await postJson(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.generate(ctx.upstreamModel), body),
    mapGeminiError,
  );
  if (payload.error != null && payload.candidates === undefined)
    throw mapGeminiInlineError(payload, [ctx.channel.apiKey]);
  return convertGeminiResponse(payload, ctx);
}
