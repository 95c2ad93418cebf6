import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import { malformedResponse } from '../http.js';
import { rejectJsonStreamAnswer, SseBody, streamEndedEarly } from '../sse-body.js';
import type { CallContext, StreamEvent } from '../types.js';
import { postGemini } from './api.js';
import { buildGeminiRequest } from './build-gemini-request.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { createChatCompletionId, nowInSeconds, readBlockReason, readCandidates, readText, readToolCall } from './gemini-response.js';
import { mapGeminiFinishReason } from './map-gemini-finish-reason.js';
import { mapGeminiInlineError, readGeminiError, readGeminiErrorResponse } from './map-gemini-error.js';

interface CandidateState {
  toolCalls: number;
  finished: boolean;
}

const ROLE_DELTA = '{"role":"assistant","content":""}';

/**
 * Turns Gemini stream payloads into `chat.completion.chunk` events. Every
 * Gemini chunk is a whole `GenerateContentResponse` holding only new parts,
 * so each maps on its own: a role chunk when a candidate first appears, one
 * content chunk per run of text parts, one complete tool-call chunk per
 * function call (Gemini never splits arguments unless asked to), a finish
 * chunk, and after the upstream closed the usage chunk from the last
 * `usageMetadata` (Gemini repeats running totals on every chunk).
 *
 * Chunks are written by string concatenation around one precomputed
 * envelope: each is serialized exactly once, and only the text or the call
 * goes through JSON.stringify.
 */
export class GeminiStreamConverter {
  private readonly prefix: string;
  private readonly candidates = new Map<number, CandidateState>();
  /** The raw running totals: converted once, at the end, not on every chunk. */
  private usageMetadata: unknown;
  private blocked = false;

  constructor(model: string, id: string = createChatCompletionId(), created: number = nowInSeconds()) {
    this.prefix = `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[`;
  }

  /** Appends the events of one upstream payload to `out`. */
  convert(payload: Record<string, unknown>, out: StreamEvent[]): void {
    if (payload.usageMetadata != null) this.usageMetadata = payload.usageMetadata;
    const candidates = readCandidates(payload);
    if (candidates.length === 0 && readBlockReason(payload) !== undefined && !this.blocked) {
      // A blocked prompt is one chunk with promptFeedback and no candidates: the answer ends there, filtered.
      this.blocked = true;
      this.state(0, out).finished = true;
      out.push(this.chunk(0, '{}', 'content_filter'));
      return;
    }
    for (const candidate of candidates) {
      const state = this.state(candidate.index, out);
      let text = '';
      for (const part of candidate.parts) {
        const piece = readText(part);
        if (piece !== undefined) {
          text += piece;
          continue;
        }
        const call = readToolCall(part);
        if (call === undefined) continue;
        if (text.length > 0) out.push(this.chunk(candidate.index, `{"content":${JSON.stringify(text)}}`, null));
        text = '';
        const delta = { index: state.toolCalls, ...call };
        state.toolCalls += 1;
        out.push(this.chunk(candidate.index, `{"tool_calls":[${JSON.stringify(delta)}]}`, null));
      }
      if (text.length > 0) out.push(this.chunk(candidate.index, `{"content":${JSON.stringify(text)}}`, null));
      if (candidate.finishReason !== null && !state.finished) {
        state.finished = true;
        out.push(this.chunk(candidate.index, '{}', mapGeminiFinishReason(candidate.finishReason, state.toolCalls > 0)));
      }
    }
  }

  /**
   * Called once the upstream closed. Gemini sends no terminator, so a stream
   * is complete only if every candidate it started got a finish reason.
   */
  finish(): StreamEvent[] {
    const states = [...this.candidates.values()];
    if (states.length === 0 || states.some((state) => !state.finished)) throw streamEndedEarly();
    const usage = convertGeminiUsage(this.usageMetadata);
    if (usage === undefined) return [];
    return [{ data: `${this.prefix}],"usage":${JSON.stringify(usage)}}`, usage, usageOnly: true }];
  }

  private state(index: number, out: StreamEvent[]): CandidateState {
    let state = this.candidates.get(index);
    if (state === undefined) {
      state = { toolCalls: 0, finished: false };
      this.candidates.set(index, state);
      out.push(this.chunk(index, ROLE_DELTA, null));
    }
    return state;
  }

  private chunk(index: number, delta: string, finishReason: string | null): StreamEvent {
    const reason = finishReason === null ? 'null' : `"${finishReason}"`;
    return { data: `${this.prefix}{"index":${index},"delta":${delta},"logprobs":null,"finish_reason":${reason}}]}` };
  }
}

function parsePayload(data: string, secrets: readonly string[]): Record<string, unknown> | undefined {
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
 * Streams a chat completion from `streamGenerateContent?alt=sse`. The request
 * is built, sent and its status checked on the first `next()`, so a refusal throws
 * before anything is yielded; an error payload or a cut connection later
 * throws after the chunks already delivered.
 */
export async function* streamGeminiChatCompletion(request: ChatCompletionRequest, ctx: CallContext): AsyncGenerator<StreamEvent> {
  // Built here, not by the caller: a request the mapping refuses throws from the first next(), like a vendor 400.
  const body = JSON.stringify(buildGeminiRequest(request, ctx));
  const response = await postGemini('streamGenerateContent', body, ctx);
  if (response.status < 200 || response.status >= 300) throw await readGeminiErrorResponse(response, ctx);
  await rejectJsonStreamAnswer(response, ctx, (payload, secrets) => (readGeminiError(payload) !== null ? mapGeminiInlineError(payload, secrets) : null));

  const secrets = [ctx.channel.apiKey];
  const converter = new GeminiStreamConverter(ctx.model.id);
  const sse = new SseBody(response, ctx);
  const out: StreamEvent[] = [];
  try {
    // Gemini ends a stream by closing it: the whole body is read.
    for await (const events of sse.batches()) {
      for (const event of events) {
        const payload = parsePayload(event.data, secrets);
        if (payload === undefined) continue;
        converter.convert(payload, out);
        for (const streamEvent of out) yield streamEvent;
        out.length = 0;
      }
    }
    yield* converter.finish();
  } finally {
    sse.close();
  }
}
