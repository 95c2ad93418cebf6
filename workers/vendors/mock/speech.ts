/**
 * The mock's speech: real audio, offline. Each word of the text is a tone (its pitch from the word, the voice and
 * the instructions; its length from its characters and the speed asked) followed by a short silence, 24 kHz mono,
 * written as pcm, wav or mp3 by the gateway's own writers (`workers/audio/encode.ts`) and streamed in several
 * chunks paced as the mock's other streams (MOCK_STREAM_DELAY_MS). Any other format is a 400 naming those. The same
 * request always gives the same bytes. It reports what OpenAI's token-billed speech reports: the text's tokens in,
 * and 20 audio tokens a second out (the catalog's `speech_audio_tokens_per_second` for the mock's model).
 *
 * Markers in the input or the instructions:
 *   [mock:error:<status>]  fail with that status before any audio.
 *   [mock:slow:<ms>]       wait <ms> between chunks instead of MOCK_STREAM_DELAY_MS.
 */
import { createHash } from 'node:crypto';
import { countTextTokens } from '../../../shared/tokens.js';
import { speechCharacters, type SpeechJob } from '../../../shared/schemas/speech.js';
import { PcmFormatter } from '../../audio/encode.js';
import type { CallContext, SpeechEvent } from '../types.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { resolveChunkDelayMs } from './pacing.js';
import { sleep } from '../sleep.js';

export const MOCK_SPEECH_SAMPLE_RATE = 24_000;
/** Seconds a character is spoken for at speed 1 (about 16 characters a second, a brisk reader). */
export const MOCK_SECONDS_PER_CHARACTER = 0.06;
/** Audio tokens a second of the mock's speech reports. */
export const MOCK_AUDIO_TOKENS_PER_SECOND = 20;
/** A stream of at least this many chunks (more for long texts: no chunk holds more than `maxChunkSeconds`). */
const minChunks = 4;
const maxChunkSeconds = 2;
const amplitude = 0.3 * 32767;
/** Fade in and out of each tone, so its edges do not click. */
const fadeSeconds = 0.005;

/** One word's tone: from sample `start` for `length` samples (its last fifth silent), at `hertz`. */
interface Tone {
  start: number;
  length: number;
  hertz: number;
}

/** The samples the text is spoken in, and its tones laid end to end. */
export interface MockSpeechPlan {
  samples: number;
  tones: Tone[];
}

/** How the mock speaks a text: the same request always gives the same plan. */
export function planMockSpeech(input: SpeechJob): MockSpeechPlan {
  const speed = input.speed ?? 1;
  const words = input.input.split(/\s+/).filter((word) => word !== '');
  const characters = speechCharacters(input.input);
  const samples = Math.max(
    Math.round(MOCK_SPEECH_SAMPLE_RATE / 4),
    Math.round((characters * MOCK_SECONDS_PER_CHARACTER * MOCK_SPEECH_SAMPLE_RATE) / speed),
  );
  const voice = typeof input.voice === 'string' ? input.voice : input.voice.id;
  const weights = words.map((word) => speechCharacters(word) + 1);
  const total = weights.reduce((sum, weight) => sum + weight, 0) || 1;
  const tones: Tone[] = [];
  let start = 0;
  for (const [index, word] of words.entries()) {
    const length = index === words.length - 1 ? samples - start : Math.floor((samples * weights[index]!) / total);
    const digest = createHash('sha256')
      .update(`${voice}\u0000${input.instructions ?? ''}\u0000${word}`)
      .digest();
    tones.push({ start, length, hertz: 180 + (digest.readUInt16BE(0) % 360) });
    start += length;
  }
  return { samples, tones };
}

/** The PCM of samples [from, to) of a plan: 16-bit little-endian mono. */
export function renderMockSpeech(plan: MockSpeechPlan, from: number, to: number): Buffer {
  const pcm = Buffer.alloc((to - from) * 2);
  const fade = Math.round(fadeSeconds * MOCK_SPEECH_SAMPLE_RATE);
  for (const tone of plan.tones) {
    const voiced = Math.floor(tone.length * 0.8);
    const first = Math.max(from, tone.start);
    const last = Math.min(to, tone.start + voiced);
    for (let n = first; n < last; n++) {
      const t = n - tone.start;
      const envelope = Math.min(1, t / fade, (voiced - t) / fade);
      const value = Math.round(
        amplitude * envelope * Math.sin((2 * Math.PI * tone.hertz * t) / MOCK_SPEECH_SAMPLE_RATE),
      );
      pcm.writeInt16LE(value, (n - from) * 2);
    }
  }
  return pcm;
}

export async function* speakMock(input: SpeechJob, ctx: CallContext): AsyncGenerator<SpeechEvent[]> {
  ctx.signal.throwIfAborted();
  const markers = readMockMarkers([input.input, input.instructions ?? '']);
  throwIfErrorMarker(markers);
  const plan = planMockSpeech(input);
  // A format the mock cannot write is refused here, before any audio (the writer's 400 names those it can).
  const formatter = new PcmFormatter(input.response_format, MOCK_SPEECH_SAMPLE_RATE, plan.samples * 2);
  const delayMs = resolveChunkDelayMs(markers.slowMs, ctx);
  const chunkSamples = Math.min(Math.ceil(plan.samples / minChunks), maxChunkSeconds * MOCK_SPEECH_SAMPLE_RATE);
  for (let from = 0; from < plan.samples; from += chunkSamples) {
    if (from > 0) await sleep(delayMs, ctx.signal);
    const pcm = renderMockSpeech(plan, from, Math.min(plan.samples, from + chunkSamples));
    const batch: SpeechEvent[] = [];
    for await (const bytes of formatter.write(pcm)) batch.push({ type: 'audio', bytes });
    if (batch.length > 0) yield batch;
  }
  const seconds = plan.samples / MOCK_SPEECH_SAMPLE_RATE;
  const inputTokens =
    countTextTokens(input.input) + (input.instructions === undefined ? 0 : countTextTokens(input.instructions));
  const tail = formatter.end();
  yield [
    ...(tail.length > 0 ? [{ type: 'audio' as const, bytes: tail }] : []),
    { type: 'duration', seconds },
    { type: 'usage', inputTokens, outputTokens: Math.ceil(seconds * MOCK_AUDIO_TOKENS_PER_SECOND) },
  ];
}
