import type { SseEvent } from '../sse-parser.js';
import { rejectJsonStreamAnswer, SseBody, streamEndedEarly } from '../sse-body.js';
import type { AnswerEvent, CallContext } from '../types.js';
import { postOpenAI } from './api.js';
import { malformedResponse } from '../http.js';
import { readOpenAIError } from './create-openai-result.js';
import { mapOpenAIInlineError, readVendorError } from './map-openai-error.js';
import { readOpenAIChoice, readOpenAIUsage } from './read-openai-answer.js';

interface StreamProgress {
  started: boolean;
  done: boolean;
  sawFinish: boolean;
  sawUsage: boolean;
}

interface Chunk {
  id?: unknown;
  created?: unknown;
  model?: unknown;
  system_fingerprint?: unknown;
  error?: unknown;
  choices?: unknown;
  usage?: unknown;
}

/**
 * Appends the answer events of one upstream chunk to `out`. The chunk already
 * is the client's chat wire form, so the first event after `start` carries it
 * (`wire`) and the chat encoder sends it as it came; the events say what it
 * means, for other encoders and for billing.
 */
function appendEvents(event: SseEvent, progress: StreamProgress, secrets: readonly string[], out: AnswerEvent[]): void {
  const data = event.data;
  if (data === '[DONE]') {
    progress.done = true;
    return;
  }
  if (data.length === 0) return;

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
}

/**
 * Streams an OpenAI-compatible SSE answer, one array of events per network
 * read. The request is sent, and its status checked, on the first `next()`,
 * so a refused request throws before anything is yielded.
 */
export async function* streamOpenAIEvents(path: string, body: string, ctx: CallContext): AsyncGenerator<AnswerEvent[]> {
  const response = await postOpenAI(path, body, ctx, 'text/event-stream');
  if (response.status < 200 || response.status >= 300) throw await readOpenAIError(response, ctx);
  await rejectJsonStreamAnswer(response, ctx, (payload, secrets) => (readVendorError(payload) !== null ? mapOpenAIInlineError(payload, secrets) : null));

  const secrets = [ctx.channel.apiKey];
  const progress: StreamProgress = { started: false, done: false, sawFinish: false, sawUsage: false };
  const sse = new SseBody(response, ctx);
  try {
    for await (const events of sse.batches()) {
      const batch: AnswerEvent[] = [];
      let failure: unknown;
      try {
        for (const event of events) {
          appendEvents(event, progress, secrets, batch);
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
