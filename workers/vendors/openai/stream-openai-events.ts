import type { SseEvent } from '../sse-parser.js';
import { postSse, streamEndedEarly } from '../sse-body.js';
import type { CallContext } from '../types.js';
import type { AnswerEvent } from '../../answers/events.js';
import { openaiApi } from './api.js';
import { malformedResponse, vendorRequest } from '../http.js';
import { mapOpenAIError, mapOpenAIInlineError, readVendorError } from './map-openai-error.js';
import { readOpenAIChoice, readOpenAIUsage } from './read-openai-answer.js';

interface StreamProgress {
  started: boolean;
  sawFinish: boolean;
  sawUsage: boolean;
}

interface Chunk {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  system_fingerprint?: unknown;
  service_tier?: unknown;
  error?: unknown;
  choices?: unknown;
  usage?: unknown;
}

/**
 * Appends the answer events of one upstream chunk to `out`, and says whether
 * it was `[DONE]`. The chunk already is the client's chat wire form, so the
 * first event after `start` carries it (`wire`) and the chat encoder sends it
 * as it came; the events say what it means, for other encoders and for billing.
 */
function appendEvents(
  event: SseEvent,
  progress: StreamProgress,
  secrets: readonly string[],
  out: AnswerEvent[],
): boolean {
  const data = event.data;
  if (data === '[DONE]') return true;
  if (data.length === 0) return false;

  let payload: unknown;
  try {
    payload = JSON.parse(data);
  } catch (error) {
    if (event.event === 'error') throw mapOpenAIInlineError({ error: { message: data } }, secrets);
    throw malformedResponse(error);
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw malformedResponse();
  const chunk = payload as Chunk;
  if (chunk.error != null || event.event === 'error') throw mapOpenAIInlineError(chunk, secrets);

  if (!progress.started) {
    progress.started = true;
    out.push({
      type: 'start',
      id: typeof chunk.id === 'string' ? chunk.id : '',
      created: typeof chunk.created === 'number' ? chunk.created : Math.floor(Date.now() / 1000),
      ...(typeof chunk.model === 'string' ? { model: chunk.model } : {}),
      ...(typeof chunk.system_fingerprint === 'string' ? { systemFingerprint: chunk.system_fingerprint } : {}),
      // The first chunk's word on the tier that serves the stream is the one that counts.
      ...(typeof chunk.service_tier === 'string' ? { serviceTier: chunk.service_tier } : {}),
    });
  }
  const first = out.length;
  if (Array.isArray(chunk.choices)) {
    for (const choice of chunk.choices) {
      if (readOpenAIChoice(choice, out)) progress.sawFinish = true;
    }
  }
  const usage = chunk.usage == null ? undefined : readOpenAIUsage(chunk.usage);
  if (usage !== undefined) {
    progress.sawUsage = true;
    out.push({ type: 'usage', usage });
  }
  // A chunk that says nothing the model names (logprobs alone, say) still goes to a chat client.
  if (out.length === first) out.push({ type: 'text', choice: 0, text: '' });
  out[first]!.wire = data;
  for (let i = first + 1; i < out.length; i++) out[i]!.wire = '';
  return false;
}

/**
 * Streams an OpenAI-compatible SSE answer, one array of events per network
 * read. The request is sent, and its status checked, on the first `next()`,
 * so a refused request throws before anything is yielded.
 */
export async function* streamOpenAIEvents(path: string, body: string, ctx: CallContext): AsyncGenerator<AnswerEvent[]> {
  const sse = await postSse(ctx, vendorRequest(openaiApi, ctx, path, body), mapOpenAIError, (payload, secrets) =>
    readVendorError(payload) !== null ? mapOpenAIInlineError(payload, secrets) : null,
  );
  const secrets = [ctx.channel.apiKey];
  const progress: StreamProgress = { started: false, sawFinish: false, sawUsage: false };
  const done = yield* sse.translate<AnswerEvent>((event, out) => appendEvents(event, progress, secrets, out));
  // A body that closed without `[DONE]` is whole when it finished a choice or reported usage.
  if (!done && !progress.sawFinish && !progress.sawUsage) throw streamEndedEarly();
}
