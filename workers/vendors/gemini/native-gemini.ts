import type { GeminiJob, GeminiRequest } from '../../../shared/gemini.js';
import type { AnswerEvent } from '../../answers/events.js';
import { malformedResponse, postJson, vendorRequest } from '../http.js';
import { postSse } from '../sse-body.js';
import type { CallContext, NativeGeminiChunk } from '../types.js';
import { geminiApi, geminiModelPath } from './api.js';
import { convertGeminiUsage } from './convert-gemini-usage.js';
import { GeminiStreamConverter, parsePayload } from './gemini-stream.js';
import { mapGeminiError, mapGeminiInlineError, readGeminiError } from './map-gemini-error.js';
import { SKIP_THOUGHT_SIGNATURE } from './thought-signature.js';

/**
 * Google's Gemini API spoken natively, for a client that speaks it too: the
 * request goes as the client wrote it (thought signatures, `thinkingConfig`,
 * `cachedContent`, `safetySettings`, the tools Gemini runs itself, fields this
 * gateway does not know), only the model named the vendor's way, in the URL;
 * the vendor's chunks come back untouched (grounding metadata, safety ratings,
 * signatures). Each chunk is also read as the gateway's answer events, for
 * billing and the request log. The call is always streamed: a client that
 * asked for one body gets the chunks folded (`workers/gemini-run.ts`).
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * The conversation with every model turn's function calls signed: a client
 * that switched to a Gemini model replays calls another vendor made (written
 * by the gateway with no `thoughtSignature`), and Gemini 3 refuses a step
 * whose first call is unsigned. Such a step gets Google's documented stand-in
 * on its first call, as the chat translation does; Gemini's own signed calls
 * stay exactly as they are, and the array is copied only when something changes.
 */
export function withSignedCalls(contents: GeminiRequest['contents']): GeminiRequest['contents'] {
  const unsigned = (content: Json) => {
    if (content.role !== 'model' || !Array.isArray(content.parts)) return false;
    const calls = content.parts.filter((part) => isObject(part) && part.functionCall !== undefined) as Json[];
    return calls.length > 0 && calls.every((part) => part.thoughtSignature === undefined);
  };
  if (!contents.some(unsigned)) return contents;
  return contents.map((content) => {
    if (!unsigned(content)) return content;
    const parts = content.parts as unknown[];
    const first = parts.findIndex((part) => isObject(part) && part.functionCall !== undefined);
    return {
      ...content,
      parts: parts.map((part, index) =>
        index === first ? { ...(part as Json), thoughtSignature: SKIP_THOUGHT_SIGNATURE } : part,
      ),
    };
  });
}

/** The body a Gemini model is sent: the client's, without a `model` of its own (the URL names the upstream model). */
export function nativeGenerateBody(job: GeminiJob): string {
  const { model: _model, ...request } = job.gemini;
  return JSON.stringify({ ...request, contents: withSignedCalls(job.gemini.contents) });
}

/**
 * The vendor's stream, one array per network read. The request is sent (and
 * a refusal thrown) on the first `next()`. Gemini repeats its running token
 * totals on every chunk, so each chunk that has them also says them as a
 * `usage` event: the last one is the answer's, and a stream cut short is
 * billed by Google's own count of what it produced. Gemini ends a stream by
 * closing it: one that closed with a candidate unfinished ended early.
 */
export async function* streamNativeGemini(job: GeminiJob, ctx: CallContext): AsyncGenerator<NativeGeminiChunk[]> {
  const body = nativeGenerateBody(job);
  const sse = await postSse(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.stream(ctx.upstreamModel), body),
    mapGeminiError,
    (payload, secrets) => (readGeminiError(payload) !== null ? mapGeminiInlineError(payload, secrets) : null),
  );
  const secrets = [ctx.channel.apiKey];
  let converter: GeminiStreamConverter | undefined;
  yield* sse.translate<NativeGeminiChunk>((event, out) => {
    const payload = parsePayload(event.data, secrets);
    if (payload === undefined) return false;
    // The answer's id is Gemini's own: the one the client reads, and the request log keeps.
    converter ??= new GeminiStreamConverter(
      ctx.model.id,
      typeof payload.responseId === 'string' ? payload.responseId : undefined,
    );
    const answers: AnswerEvent[] = [];
    converter.convert(payload, answers);
    const usage = payload.usageMetadata === undefined ? undefined : convertGeminiUsage(payload.usageMetadata);
    if (usage !== undefined) answers.push({ type: 'usage', usage });
    // An event whose JSON spans lines (one `data:` line cannot carry it) is written again; Gemini writes one line.
    out.push({ data: event.data.includes('\n') ? JSON.stringify(payload) : event.data, payload, answers });
    return false;
  });
  if (converter === undefined) throw malformedResponse();
  // Throws when a candidate never finished; its usage is the last chunk's, already said.
  converter.finish();
}

/**
 * `:countTokens` at Gemini: the client's body as written, its answer
 * (`{"totalTokens": N, …}`) as Gemini's JSON text. A `generateContentRequest`
 * must name its model, and it names the upstream one.
 */
export async function countNativeGeminiTokens(job: GeminiJob, ctx: CallContext): Promise<string> {
  const { model: _model, ...request } = job.gemini;
  const inner = request.generateContentRequest;
  const body = isObject(inner)
    ? { ...request, generateContentRequest: { ...inner, model: geminiModelPath(ctx.upstreamModel) } }
    : request;
  const { text, json } = await postJson(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.countTokens(ctx.upstreamModel), JSON.stringify(body)),
    mapGeminiError,
  );
  // No count at all is a count of 0: Google leaves zeros out of its JSON.
  if (json.error != null) throw mapGeminiInlineError(json, [ctx.channel.apiKey]);
  return text;
}
