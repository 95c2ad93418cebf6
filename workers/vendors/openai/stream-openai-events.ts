import type { SseEvent } from '../sse-parser.js';
import { rejectJsonStreamAnswer, SseBody, streamEndedEarly } from '../sse-body.js';
import type { CallContext, StreamEvent } from '../types.js';
import { postOpenAI } from './api.js';
import { malformedResponse } from '../http.js';
import { readOpenAIError } from './create-openai-result.js';
import { mapOpenAIInlineError, readVendorError } from './map-openai-error.js';
import { readOpenAIUsage } from './read-openai-usage.js';


interface StreamProgress {
  done: boolean;
  sawFinish: boolean;
  sawUsage: boolean;
}

function hasFinishReason(choices: unknown[]): boolean {
  for (const choice of choices) {
    if (typeof choice === 'object' && choice !== null && (choice as { finish_reason?: unknown }).finish_reason != null) {
      return true;
    }
  }
  return false;
}

function toStreamEvent(event: SseEvent, progress: StreamProgress, secrets: readonly string[]): StreamEvent | null {
  const data = event.data;
  if (data === '[DONE]') {
    progress.done = true;
    return null;
  }
  if (data.length === 0) return null;

  let payload: unknown;
  try {
    payload = JSON.parse(data);
  } catch (error) {
    if (event.event === 'error') throw mapOpenAIInlineError({ error: { message: data } }, secrets);
    throw malformedResponse(error);
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw malformedResponse();
  const chunk = payload as { error?: unknown; choices?: unknown; usage?: unknown };
  if (chunk.error != null || event.event === 'error') throw mapOpenAIInlineError(chunk, secrets);

  const usage = chunk.usage == null ? undefined : readOpenAIUsage(chunk.usage);
  if (usage !== undefined) progress.sawUsage = true;
  if (Array.isArray(chunk.choices)) {
    if (chunk.choices.length === 0 && usage !== undefined) return { data, usage, usageOnly: true };
    if (!progress.sawFinish && hasFinishReason(chunk.choices)) progress.sawFinish = true;
  }
  return usage === undefined ? { data } : { data, usage };
}



/**
 * Streams an OpenAI-compatible SSE answer, one array of events per network
 * read. The request is sent, and its status checked, on the first `next()`,
 * so a refused request throws before anything is yielded.
 */
export async function* streamOpenAIBatches(path: string, body: string, ctx: CallContext): AsyncGenerator<StreamEvent[]> {
  const response = await postOpenAI(path, body, ctx, 'text/event-stream');
  if (response.status < 200 || response.status >= 300) throw await readOpenAIError(response, ctx);
  await rejectJsonStreamAnswer(response, ctx, (payload, secrets) => (readVendorError(payload) !== null ? mapOpenAIInlineError(payload, secrets) : null));

  const secrets = [ctx.channel.apiKey];
  const progress: StreamProgress = { done: false, sawFinish: false, sawUsage: false };
  const sse = new SseBody(response, ctx);
  try {
    for await (const events of sse.batches()) {
      const batch: StreamEvent[] = [];
      let failure: unknown;
      try {
        for (const event of events) {
          const streamEvent = toStreamEvent(event, progress, secrets);
          if (streamEvent !== null) batch.push(streamEvent);
          if (progress.done) break;
        }
      } catch (error) {
        // Events that came before the failure in the same read are real output: deliver them first.
        if (batch.length === 0) throw error;
        failure = error;
      }
      if (batch.length > 0) yield batch;
      if (failure !== undefined) throw failure;
      if (progress.done) break;
    }
    if (progress.done) {
      sse.finish();
      return;
    }
    if (!progress.sawFinish && !progress.sawUsage) throw streamEndedEarly();
  } finally {
    sse.close();
  }
}

/** The per-event form the VendorAdapter interface asks for, on top of the batches. */
export async function* flattenBatches(batches: AsyncIterable<StreamEvent[]>): AsyncGenerator<StreamEvent> {
  for await (const batch of batches) yield* batch;
}
