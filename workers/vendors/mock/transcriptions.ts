/**
 * The mock's transcriptions and translations: a sentence made from the
 * upload's name and size, in every response format OpenAI offers, with
 * timings spread over a length guessed from the size. The same upload always
 * gives the same bytes. A translation is that sentence in English, written as
 * OpenAI writes one: `task: "translate"`, no word timings, no usage.
 *
 * Markers in the file name or the prompt:
 *   [mock:error:<status>]  fail with that status before any work.
 *   [mock:slow:<ms>]       take <ms> before answering; ends at once on abort.
 */
import { encodeText } from '../../../shared/tokens.js';
import type { MediaContext, TranscriptionResult } from '../types.js';
import type { TranscriptionInput, TranslationInput } from '../../../shared/schemas/media-inputs.js';
import { readMockMarkers, throwIfErrorMarker } from './markers.js';
import { sleep } from '../sleep.js';

/** 128 kbit/s, the bitrate of a typical voice mp3: the mock's stand-in for decoding the audio. */
const BYTES_PER_SECOND = 16_000;
const WORDS_PER_SEGMENT = 4;

const LANGUAGE_NAMES: Record<string, string> = {
  en: 'english',
  fr: 'french',
  de: 'german',
  es: 'spanish',
  it: 'italian',
  pt: 'portuguese',
  nl: 'dutch',
  ru: 'russian',
  ja: 'japanese',
  zh: 'chinese',
  ko: 'korean',
  pl: 'polish',
};

interface TimedWord {
  word: string;
  start: number;
  end: number;
}

interface Segment {
  id: number;
  start: number;
  end: number;
  text: string;
}

export interface MockTranscript {
  text: string;
  /** Seconds, with millisecond precision. */
  duration: number;
  words: TimedWord[];
  segments: Segment[];
}

const roundMs = (seconds: number) => Math.round(seconds * 1000) / 1000;

/** The transcript of an upload: its text, and word and segment timings spread evenly over the guessed length. */
export function planMockTranscript(filename: string, size: number): MockTranscript {
  return planMockSpeech(`Mock transcription of ${filename} (${size} bytes).`, size);
}

/** The English translation of an upload: what a transcript of it says, in English, with the same timings. */
export function planMockTranslation(filename: string, size: number): MockTranscript {
  return planMockSpeech(`Mock translation into English of ${filename} (${size} bytes).`, size);
}

/** A text heard over the length an upload of `size` bytes plays for, its words and segments timed evenly. */
function planMockSpeech(text: string, size: number): MockTranscript {
  const duration = roundMs(Math.max(1, size / BYTES_PER_SECOND));
  const tokens = text.split(' ');
  const slot = duration / tokens.length;
  const words = tokens.map((token, index) => ({
    // Whisper's word list carries no punctuation.
    word: token.replace(/^[^\p{L}\p{N}]+|[^\p{L}\p{N}]+$/gu, '') || token,
    start: roundMs(index * slot),
    end: roundMs((index + 1) * slot),
  }));
  const segments: Segment[] = [];
  for (let first = 0; first < tokens.length; first += WORDS_PER_SEGMENT) {
    const last = Math.min(tokens.length, first + WORDS_PER_SEGMENT) - 1;
    segments.push({
      id: segments.length,
      start: words[first]!.start,
      end: words[last]!.end,
      text: tokens.slice(first, last + 1).join(' '),
    });
  }
  return { text, duration, words, segments };
}

/** `HH:MM:SS,mmm` for SubRip, `HH:MM:SS.mmm` for WebVTT. */
export function formatTimestamp(seconds: number, separator: ',' | '.'): string {
  const totalMs = Math.round(seconds * 1000);
  const pad = (value: number, width = 2) => String(value).padStart(width, '0');
  const hours = Math.floor(totalMs / 3_600_000);
  const minutes = Math.floor(totalMs / 60_000) % 60;
  const secs = Math.floor(totalMs / 1000) % 60;
  return `${pad(hours)}:${pad(minutes)}:${pad(secs)}${separator}${pad(totalMs % 1000, 3)}`;
}

function renderSrt(transcript: MockTranscript): string {
  return transcript.segments
    .map((segment, index) => {
      const range = `${formatTimestamp(segment.start, ',')} --> ${formatTimestamp(segment.end, ',')}`;
      return `${index + 1}\n${range}\n${segment.text}\n\n`;
    })
    .join('');
}

function renderVtt(transcript: MockTranscript): string {
  const cues = transcript.segments.map(
    (segment) => `${formatTimestamp(segment.start, '.')} --> ${formatTimestamp(segment.end, '.')}\n${segment.text}\n\n`,
  );
  return `WEBVTT\n\n${cues.join('')}`;
}

/** What OpenAI does with the audio: writes what was said, or writes it in English (no language, no words, no usage). */
type Task = 'transcribe' | 'translate';

function renderVerboseJson(transcript: MockTranscript, input: TranscriptionInput, task: Task): string {
  const granularities = input.timestamp_granularities?.length ? input.timestamp_granularities : ['segment'];
  const language = input.language ? (LANGUAGE_NAMES[input.language.toLowerCase()] ?? input.language) : 'english';
  return JSON.stringify({
    task,
    language,
    duration: transcript.duration,
    text: transcript.text,
    ...(granularities.includes('word') ? { words: transcript.words } : {}),
    ...(granularities.includes('segment')
      ? {
          segments: transcript.segments.map((segment) => ({
            id: segment.id,
            seek: 0,
            start: segment.start,
            end: segment.end,
            // Whisper's segment text starts with the space that separated it from the one before.
            text: ` ${segment.text}`,
            tokens: encodeText(` ${segment.text}`),
            temperature: input.temperature ?? 0,
            avg_logprob: -0.25,
            compression_ratio: 1,
            no_speech_prob: 0.01,
          })),
        }
      : {}),
    ...(task === 'transcribe' ? { usage: { type: 'duration', seconds: Math.ceil(transcript.duration) } } : {}),
  });
}

const PLAIN_TEXT = 'text/plain; charset=utf-8';

/** Renders the transcript in the format asked for, as OpenAI's transcription (or translation) endpoint would. */
export function renderMockTranscript(
  transcript: MockTranscript,
  input: TranscriptionInput,
  task: Task = 'transcribe',
): TranscriptionResult {
  switch (input.response_format) {
    case 'json':
      return {
        body: JSON.stringify({
          text: transcript.text,
          ...(task === 'transcribe' ? { usage: { type: 'duration', seconds: Math.ceil(transcript.duration) } } : {}),
        }),
        contentType: 'application/json',
      };
    case 'verbose_json':
      return { body: renderVerboseJson(transcript, input, task), contentType: 'application/json' };
    case 'text':
      return { body: `${transcript.text}\n`, contentType: PLAIN_TEXT };
    case 'srt':
      return { body: renderSrt(transcript), contentType: PLAIN_TEXT };
    case 'vtt':
      return { body: renderVtt(transcript), contentType: PLAIN_TEXT };
  }
}

export async function transcribeMock(input: TranscriptionInput, ctx: MediaContext): Promise<TranscriptionResult> {
  const filename = await heedMarkers(input, ctx);
  return renderMockTranscript(planMockTranscript(filename, input.file.size), input);
}

export async function translateMock(input: TranslationInput, ctx: MediaContext): Promise<TranscriptionResult> {
  const filename = await heedMarkers(input, ctx);
  return renderMockTranscript(planMockTranslation(filename, input.file.size), input, 'translate');
}

/** The upload's name, once the markers in it and in the prompt were obeyed (a failure, a delay). */
async function heedMarkers(input: TranslationInput, ctx: MediaContext): Promise<string> {
  ctx.signal.throwIfAborted();
  const filename = input.file.filename ?? 'audio';
  const markers = readMockMarkers([filename, input.prompt ?? '']);
  throwIfErrorMarker(markers);
  if (markers.slowMs !== undefined) await sleep(markers.slowMs, ctx.signal);
  return filename;
}
