import { GatewayError, invalidRequest } from '../../../shared/errors.js';
import type { SpeechJob } from '../../../shared/schemas/speech.js';
import { PcmFormatter } from '../../audio/encode.js';
import { malformedResponse, vendorRequest } from '../http.js';
import { postSse } from '../sse-body.js';
import type { CallContext, SpeechEvent } from '../types.js';
import { geminiApi } from './api.js';
import { readBlockReason } from './gemini-response.js';
import { parsePayload } from './gemini-stream.js';
import { mapGeminiError, mapGeminiInlineError, readGeminiError } from './map-gemini-error.js';

/*
 * Gemini's speech models (`gemini-2.5-flash-preview-tts` and its peers) through `streamGenerateContent?alt=sse`
 * with `responseModalities: ["AUDIO"]` and a prebuilt voice: each chunk's `inlineData` is 16-bit mono PCM
 * (`audio/L16;codec=pcm;rate=24000`), written as the asked format as it comes (`workers/audio/encode.ts`: pcm,
 * wav, mp3; the catalog gives these models no other). `instructions` lead the text, as Google's guide steers the
 * voice ("Say cheerfully: …"); Gemini has no speed, and the api refuses one other than 1. The usage is Gemini's
 * `usageMetadata`: the text's tokens in, the audio's tokens out.
 *
 * Voices: Gemini's own 30 names, and OpenAI's names mapped to the Gemini voice nearest in character, so an OpenAI
 * client's `alloy` is heard on Gemini too: alloy → Kore (firm), ash → Orus (firm), ballad → Sulafat (warm),
 * coral → Aoede (breezy), echo → Charon (informative), fable → Sadaltager (knowledgeable), onyx → Algenib
 * (gravelly), nova → Leda (youthful), sage → Vindemiatrix (gentle), shimmer → Zephyr (bright), verse → Puck
 * (upbeat), marin → Achernar (soft), cedar → Iapetus (clear).
 */

export const openAIVoicesOnGemini: Readonly<Record<string, string>> = {
  alloy: 'Kore',
  ash: 'Orus',
  ballad: 'Sulafat',
  coral: 'Aoede',
  echo: 'Charon',
  fable: 'Sadaltager',
  onyx: 'Algenib',
  nova: 'Leda',
  sage: 'Vindemiatrix',
  shimmer: 'Zephyr',
  verse: 'Puck',
  marin: 'Achernar',
  cedar: 'Iapetus',
};

/** The `generateContent` body of a speech request. */
export function buildGeminiSpeechRequest(input: SpeechJob): Record<string, unknown> {
  if (typeof input.voice !== 'string')
    throw invalidRequest(
      "Gemini's speech models have no custom voices: name one of their voices.",
      'voice',
      'unsupported_value',
    );
  const voiceName = openAIVoicesOnGemini[input.voice] ?? input.voice;
  const text = input.instructions === undefined ? input.input : `${input.instructions.trim()}: ${input.input}`;
  return {
    contents: [{ role: 'user', parts: [{ text }] }],
    generationConfig: {
      responseModalities: ['AUDIO'],
      speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName } } },
    },
  };
}

/** One piece of audio a chunk carried: its PCM bytes and their sample rate. */
interface PcmPiece {
  pcm: Buffer;
  rate: number;
}

const base64 = /^[A-Za-z0-9+/\-_]*={0,2}$/;

/** The PCM of an `inlineData` part, or a malformed answer when it is not Gemini's 16-bit PCM. */
function readPcm(part: unknown): PcmPiece | undefined {
  if (typeof part !== 'object' || part === null) return undefined;
  const inline = (part as { inlineData?: { mimeType?: unknown; data?: unknown } }).inlineData;
  if (inline === undefined) return undefined;
  const mime = typeof inline.mimeType === 'string' ? inline.mimeType.toLowerCase() : '';
  const rate = Number(/rate=(\d{4,6})/.exec(mime)?.[1]);
  if (!/^audio\/(l16|pcm)\b/.test(mime) || !Number.isInteger(rate) || rate < 8000 || rate > 96_000)
    throw malformedResponse();
  if (typeof inline.data !== 'string' || !base64.test(inline.data)) throw malformedResponse();
  return { pcm: Buffer.from(inline.data, 'base64'), rate };
}

export async function* speakWithGemini(input: SpeechJob, ctx: CallContext): AsyncGenerator<SpeechEvent[]> {
  // Built before the call: a request Gemini cannot be given throws from the first next(), as a vendor 400 would.
  const body = JSON.stringify(buildGeminiSpeechRequest(input));
  if (input.speed !== undefined && input.speed !== 1)
    throw invalidRequest("Gemini's speech models speak at one speed: speed must be 1.", 'speed', 'unsupported_value');
  const secrets = [ctx.channel.apiKey];
  const sse = await postSse(
    ctx,
    vendorRequest(geminiApi, ctx, geminiApi.paths.stream(ctx.upstreamModel), body),
    mapGeminiError,
    (payload, known) => (readGeminiError(payload) !== null ? mapGeminiInlineError(payload, known) : null),
  );
  let usage: { inputTokens: number; outputTokens: number } | undefined;
  let blocked: string | undefined;
  let formatter: PcmFormatter | undefined;
  // Gemini ends a stream by closing it: the whole body is read.
  const pieces = sse.translate<PcmPiece>((event, out) => {
    const payload = parsePayload(event.data, secrets);
    if (payload === undefined) return false;
    blocked ??= readBlockReason(payload);
    const meta = payload.usageMetadata as { promptTokenCount?: unknown; candidatesTokenCount?: unknown } | undefined;
    if (meta && Number.isSafeInteger(meta.promptTokenCount)) {
      usage = {
        inputTokens: meta.promptTokenCount as number,
        outputTokens: Number.isSafeInteger(meta.candidatesTokenCount) ? (meta.candidatesTokenCount as number) : 0,
      };
    }
    const candidates = Array.isArray(payload.candidates) ? payload.candidates : [];
    const parts = (candidates[0] as { content?: { parts?: unknown } } | undefined)?.content?.parts;
    for (const part of Array.isArray(parts) ? parts : []) {
      const piece = readPcm(part);
      if (piece && piece.pcm.length > 0) out.push(piece);
    }
    return false;
  });
  for await (const batch of pieces) {
    const audio: SpeechEvent[] = [];
    for (const piece of batch) {
      formatter ??= new PcmFormatter(input.response_format, piece.rate);
      // One stream speaks at one rate: a change midway cannot be written into one file.
      if (piece.rate !== formatter.sampleRate) throw malformedResponse();
      for await (const bytes of formatter.write(piece.pcm)) audio.push({ type: 'audio', bytes });
    }
    if (audio.length > 0) yield audio;
  }
  if (!formatter) {
    if (blocked !== undefined)
      throw new GatewayError(400, `Gemini declined to speak this text (${blocked}).`, {
        code: 'content_filter',
        param: 'input',
      });
    throw malformedResponse();
  }
  const tail = formatter.end();
  yield [
    ...(tail.length > 0 ? [{ type: 'audio' as const, bytes: tail }] : []),
    { type: 'duration', seconds: formatter.seconds },
    ...(usage ? [{ type: 'usage' as const, ...usage }] : []),
  ];
}
