import { geminiToolNamesBack, type GeminiEmbedJob, type GeminiJob } from '../shared/gemini.js';
import { countChatPromptTokensAsync } from '../shared/tokens.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { geminiEmbeddingsOf } from './answers/gemini-embeddings.js';
import { GeminiChunkFold, GeminiFramer, GeminiStreamEncoder } from './answers/gemini-encoder.js';
import type { Meter } from './settlement.js';
import { malformedResponse } from './vendors/http.js';
import { adapterMethod, adapters } from './vendors/registry.js';
import type { CallContext, NativeGeminiChunk } from './vendors/types.js';
import { answerJob, RelayEncoder, relayedAnswer, type StreamedJob } from './answers/stream-run.js';

/**
 * One job of Google's Gemini API. A vendor that speaks it itself (Gemini) gets
 * the client's request as written and its chunks are relayed as they come;
 * every other vendor's chat adapter runs on the request's chat form, and its
 * answer events are written as Gemini's chunks. Either way a streaming client
 * gets the chunks in the form it asked for (`?alt=sse`'s events, or the
 * default JSON array) as they come, and any other gets the one body they fold
 * to, through the one stream runner (`workers/answers/stream-run.ts`). What
 * the answer used goes to `produced`, for billing exactly as a chat
 * completion's. Token counts and embeddings are here too: Gemini's own where
 * the vendor is Gemini, the gateway's or the vendor's chat-side ones written
 * in Gemini's shape elsewhere.
 */

/**
 * A `:generateContent` or `:streamGenerateContent` job: the answer's body for a plain client, undefined once a stream
 * ended.
 */
export async function runGemini(run: StreamedJob<GeminiJob>): Promise<string | undefined> {
  const { protocol, job, ctx, clientStreams, keep = false } = run;
  const form = clientStreams ? (job.form ?? 'sse') : undefined;
  const native = adapters[protocol].nativeGemini;
  if (native) {
    const framer = form === undefined ? undefined : new GeminiFramer(form);
    const relay = relayGemini(framer, keep);
    return answerJob(run, {
      source: native.call(adapters[protocol], job, ctx),
      trailer: framer?.trailer,
      ...relayedAnswer(relay),
    });
  }
  const encoder = new GeminiStreamEncoder({
    model: job.model,
    inputTokens: job.inputTokens,
    ...(form ? { form } : {}),
    toolNames: geminiToolNamesBack(job.gemini),
    keep,
    log: ctx.log,
  });
  let body: string | undefined;
  return answerJob(run, {
    source: adapterMethod(protocol, 'streamChat')(job.chat, ctx),
    encoder,
    trailer: encoder.trailer,
    settle: (meter) => {
      // The request log names the answer by the response id the client got.
      if (encoder.responseId !== '') meter.answerId = encoder.responseId;
    },
    // The answer is whole once the encoder ended: folded once, for the client and the cache alike.
    body: () => (body ??= JSON.stringify(encoder.fold())),
    events: () => encoder.chunks().map((chunk) => ({ d: chunk })),
  });
}

/**
 * Gemini's own chunks, relayed as they came: each framed in the client's form for a client that streams (`framer`),
 * folded into the plain answer for one that does not (and for the cache), and kept as it was for the cache's
 * replay. Its usage is Gemini's running totals, the last chunk's (a stream cut short is billed by Google's own
 * count of what it produced); Gemini ends its stream by closing it, after the chunk with its finish reason.
 */
function relayGemini(framer: GeminiFramer | undefined, keep: boolean): RelayEncoder<NativeGeminiChunk> {
  const fold = framer !== undefined && !keep ? undefined : new GeminiChunkFold();
  return new RelayEncoder<NativeGeminiChunk>({
    frame: framer && ((chunk) => framer.frame(chunk.data)),
    fold: fold && ((chunk) => fold.add(chunk.payload)),
    body: fold && (() => JSON.stringify(fold.response())),
    keep: keep ? (chunk) => ({ d: chunk.data }) : undefined,
  });
}

/**
 * `:countTokens`: the vendor's own count where it has one (Gemini, its answer as sent), else the gateway's
 * tokenizer on the chat form, said as Gemini says it. Nothing is metered: a count is billed nothing.
 */
export async function countGeminiTokens(protocol: Protocol, job: GeminiJob, ctx: CallContext): Promise<string> {
  const count = adapters[protocol].countGeminiTokens;
  if (count) return count.call(adapters[protocol], job, ctx);
  return JSON.stringify({ totalTokens: await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null) });
}

/**
 * `:embedContent` and `:batchEmbedContents`: Gemini's own answer where the vendor is Gemini, else the vendor's
 * embeddings of the request's OpenAI form, written as Gemini's. Billed by the usage the call says (the gateway's
 * count of the texts where the vendor says none).
 */
export async function embedGemini(
  protocol: Protocol,
  job: GeminiEmbedJob,
  ctx: CallContext,
  produced: Meter,
  keep = false,
): Promise<string> {
  const native = adapters[protocol].embedGemini;
  let body: string;
  if (native) {
    const answer = await native.call(adapters[protocol], job, ctx);
    produced.usage = answer.usage;
    body = answer.body;
  } else {
    const answer = await adapterMethod(protocol, 'embed')(job.embedding, ctx);
    produced.usage = answer.usage;
    const written = geminiEmbeddingsOf(answer.body, job.batch);
    if (written === undefined) throw malformedResponse();
    body = written;
  }
  if (keep) produced.cacheable = { body };
  return body;
}
