import { speechContentTypes, speechFacts, type SpeechJob } from '../../../shared/schemas/speech.js';
import { discardBody, malformedResponse, mapTransportError, postVendor, vendorRequest } from '../http.js';
import { postSse, rejectJsonStreamAnswer, streamEndedEarly, type InlineErrorReader } from '../sse-body.js';
import type { SseEvent } from '../sse-parser.js';
import type { CallContext, SpeechEvent } from '../types.js';
import { openaiApi } from './api.js';
import { mapOpenAIError, mapOpenAIInlineError, readVendorError } from './map-openai-error.js';

/*
 * OpenAI's speech (`POST /audio/speech`), the audio relayed as it arrives. tts-1 and tts-1-hd answer with the
 * audio's bytes, chunked: each read is handed on as it comes. A model that streams events (gpt-4o-mini-tts, the
 * catalog's `sse` option) is always asked for them (`stream_format: "sse"`), whatever form the client reads: its
 * `speech.audio.delta` events carry the same audio, and its `speech.audio.done` carries the usage it is billed by,
 * which the plain audio answer does not say. The request carries the spec's fields the client set and no other.
 */

const base64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The body OpenAI is sent: the job's fields as the spec names them, and the stream form the gateway reads. */
export function buildOpenAISpeechBody(input: SpeechJob, ctx: CallContext, events: boolean): string {
  return JSON.stringify({
    model: ctx.upstreamModel,
    input: input.input,
    voice: input.voice,
    ...(input.instructions !== undefined ? { instructions: input.instructions } : {}),
    response_format: input.response_format,
    ...(input.speed !== undefined ? { speed: input.speed } : {}),
    ...(events ? { stream_format: 'sse' } : {}),
  });
}

export async function* speakWithOpenAI(input: SpeechJob, ctx: CallContext): AsyncGenerator<SpeechEvent[]> {
  const events = speechFacts(ctx.model).options.has('sse');
  const request = vendorRequest(openaiApi, ctx, openaiApi.paths.speech, buildOpenAISpeechBody(input, ctx, events));
  if (events) {
    yield* readSpeechEvents(request, ctx);
    return;
  }
  const accept = speechContentTypes[input.response_format] as `audio/${string}`;
  const response = await postVendor(ctx, request, mapOpenAIError, accept);
  await rejectJsonStreamAnswer(response, ctx, readInlineError);
  const reader = (response.body as AsyncIterable<Buffer>)[Symbol.asyncIterator]();
  let ended = false;
  try {
    for (;;) {
      let read: IteratorResult<Buffer>;
      try {
        read = await reader.next();
      } catch (error) {
        throw mapTransportError(error, ctx);
      }
      if (read.done) {
        ended = true;
        return;
      }
      if (read.value.length > 0) yield [{ type: 'audio', bytes: read.value }];
    }
  } finally {
    if (!ended) discardBody(response);
  }
}

/**
 * OpenAI's error envelope in a 2xx answer (a JSON body where audio was asked, an event of the stream); null when it is
 * not one.
 */
const readInlineError: InlineErrorReader = (payload, secrets) =>
  readVendorError(payload) !== null ? mapOpenAIInlineError(payload, secrets) : null;

/**
 * The events of a speech stream: audio deltas decoded, the done event's usage; anything else is ignored, an error
 * thrown.
 */
async function* readSpeechEvents(
  request: ReturnType<typeof vendorRequest>,
  ctx: CallContext,
): AsyncGenerator<SpeechEvent[]> {
  const secrets = [ctx.channel.apiKey];
  const sse = await postSse(ctx, request, mapOpenAIError, readInlineError);
  const done = yield* sse.translate<SpeechEvent>((event, out) => readSpeechEvent(event, out, secrets));
  if (!done) throw streamEndedEarly();
}

function readSpeechEvent(event: SseEvent, out: SpeechEvent[], secrets: readonly string[]): boolean {
  if (event.data === '' || event.data === '[DONE]') return false;
  let payload: unknown;
  try {
    payload = JSON.parse(event.data);
  } catch (error) {
    throw malformedResponse(error);
  }
  if (event.event === 'error' || readVendorError(payload) !== null) throw mapOpenAIInlineError(payload, secrets);
  const fields = payload as {
    type?: unknown;
    audio?: unknown;
    usage?: { input_tokens?: unknown; output_tokens?: unknown };
  };
  if (fields.type === 'speech.audio.delta') {
    if (typeof fields.audio !== 'string' || !base64.test(fields.audio)) throw malformedResponse();
    out.push({ type: 'audio', bytes: Buffer.from(fields.audio, 'base64') });
    return false;
  }
  if (fields.type === 'speech.audio.done') {
    const { input_tokens: input, output_tokens: output } = fields.usage ?? {};
    if (
      Number.isSafeInteger(input) &&
      Number.isSafeInteger(output) &&
      (input as number) >= 0 &&
      (output as number) >= 0
    ) {
      out.push({ type: 'usage', inputTokens: input as number, outputTokens: output as number });
    }
    return true;
  }
  return false;
}
