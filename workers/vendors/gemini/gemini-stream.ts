import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import { malformedResponse, vendorRequest } from '../http.js';
import { postSse, streamEndedEarly } from '../sse-body.js';
import type { StartEvent } from '../../answers/events.js';
import type { CallContext } from '../types.js';
import type { AnswerEvent } from '../../answers/events.js';
import { geminiApi } from './api.js';
import { buildGeminiRequest } from './build-gemini-request.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import {
  createChatCompletionId,
  nowInSeconds,
  readBlockReason,
  readCandidates,
  readText,
  readThought,
  readToolCall,
} from './gemini-response.js';
import { mapGeminiFinishReason } from './map-gemini-finish-reason.js';
import { mapGeminiError, mapGeminiInlineError, readGeminiError } from './map-gemini-error.js';

interface CandidateState {
  toolCalls: number;
  finished: boolean;
}

/**
 * Turns Gemini stream payloads into answer events. Every Gemini chunk is a
 * whole `GenerateContentResponse` holding only new parts, so each maps on its
 * own: `start` before anything else, `role` when a candidate first appears,
 * one `text` per run of text parts, one complete `tool-call` per function
 * call (Gemini never splits arguments unless asked to), `finish`, and after
 * the upstream closed the `usage` from the last `usageMetadata` (Gemini
 * repeats running totals on every chunk).
 */
export class GeminiStreamConverter {
  private readonly candidates = new Map<number, CandidateState>();
  /** The raw running totals: converted once, at the end, not on every chunk. */
  private usageMetadata: unknown;
  private blocked = false;

  /**
   * `model`: the catalog entry that served the call. Under a fallback it is not
   * the id the client asked for, and Gemini chunks have always named it.
   */
  constructor(
    private readonly model?: string,
    private readonly id: string = createChatCompletionId(),
    private readonly created: number = nowInSeconds(),
  ) {}

  /** Appends the events of one upstream payload to `out`. */
  convert(payload: Record<string, unknown>, out: AnswerEvent[]): void {
    if (payload.usageMetadata != null) this.usageMetadata = payload.usageMetadata;
    const candidates = readCandidates(payload);
    if (candidates.length === 0 && readBlockReason(payload) !== undefined && !this.blocked) {
      // A blocked prompt is one chunk with promptFeedback and no candidates: the answer ends there, filtered.
      this.blocked = true;
      this.state(0, out).finished = true;
      out.push({ type: 'finish', choice: 0, reason: 'content_filter' });
      return;
    }
    for (const candidate of candidates) {
      const choice = candidate.index;
      const state = this.state(choice, out);
      let text = '';
      for (const part of candidate.parts) {
        const piece = readText(part);
        if (piece !== undefined) {
          text += piece;
          continue;
        }
        const thought = readThought(part);
        if (thought !== undefined) {
          if (text.length > 0) out.push({ type: 'text', choice, text });
          text = '';
          out.push({ type: 'reasoning', choice, text: thought });
          continue;
        }
        const call = readToolCall(part);
        if (call === undefined) continue;
        if (text.length > 0) out.push({ type: 'text', choice, text });
        text = '';
        out.push({
          type: 'tool-call',
          choice,
          index: state.toolCalls,
          id: call.id,
          name: call.name,
          arguments: call.arguments,
        });
        state.toolCalls += 1;
      }
      if (text.length > 0) out.push({ type: 'text', choice, text });
      if (candidate.finishReason !== null && !state.finished) {
        state.finished = true;
        out.push({
          type: 'finish',
          choice,
          reason: mapGeminiFinishReason(candidate.finishReason, state.toolCalls > 0),
        });
      }
    }
  }

  /**
   * Called once the upstream closed. Gemini sends no terminator, so a stream
   * is complete only if every candidate it started got a finish reason.
   */
  finish(): AnswerEvent[] {
    const states = [...this.candidates.values()];
    if (states.length === 0 || states.some((state) => !state.finished)) throw streamEndedEarly();
    const usage = convertGeminiUsage(this.usageMetadata);
    return usage === undefined ? [] : [{ type: 'usage', usage }];
  }

  /** A candidate's state; its first sight starts the choice (and, for the first candidate, the answer). */
  private state(choice: number, out: AnswerEvent[]): CandidateState {
    let state = this.candidates.get(choice);
    if (state === undefined) {
      // Every event follows some candidate's first sight, so `start` here comes before all of them, once.
      if (this.candidates.size === 0) out.push(this.startEvent());
      state = { toolCalls: 0, finished: false };
      this.candidates.set(choice, state);
      out.push({ type: 'role', choice });
    }
    return state;
  }

  private startEvent(): StartEvent {
    const start: StartEvent = { type: 'start', id: this.id, created: this.created };
    if (this.model !== undefined) start.model = this.model;
    return start;
  }
}

/**
 * One SSE event's JSON, or undefined for an empty one; Google's error envelope mid-stream is thrown as the vendor's
 * error.
 */
export function parsePayload(data: string, secrets: readonly string[]): Record<string, unknown> | undefined {
  if (data.length === 0) return undefined;
  let payload: unknown;
  try {
    payload = JSON.parse(data);
  } catch (error) {
    throw malformedResponse(error);
  }
  if (readGeminiError(payload) !== null) throw mapGeminiInlineError(payload, secrets);
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw malformedResponse();
  return payload as Record<string, unknown>;
}

/**
 * Streams a chat completion from `streamGenerateContent?alt=sse`, one array
 * of events per upstream read. The request is built, sent and its status
 * checked on the first `next()`, so a refusal throws before anything is
 * yielded; an error payload or a cut connection later throws after the
 * events already delivered.
 */
export async function* streamGeminiChatCompletion(
  request: ChatCompletionRequest,
  ctx: CallContext,
): AsyncGenerator<AnswerEvent[]> {
  // Built here, not by the caller: a request the mapping refuses throws from the first next(), like a vendor 400.
  const body = JSON.stringify(buildGeminiRequest(request, ctx));
  const sse = await postSse(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.stream(ctx.upstreamModel), body),
    mapGeminiError,
    (payload, secrets) => (readGeminiError(payload) !== null ? mapGeminiInlineError(payload, secrets) : null),
  );
  const secrets = [ctx.channel.apiKey];
  const converter = new GeminiStreamConverter(ctx.model.id);
  // Gemini ends a stream by closing it: the whole body is read.
  yield* sse.translate<AnswerEvent>((event, out) => {
    const payload = parsePayload(event.data, secrets);
    if (payload !== undefined) converter.convert(payload, out);
    return false;
  });
  const usage = converter.finish();
  if (usage.length > 0) yield usage;
}
