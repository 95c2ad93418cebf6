import { z } from 'zod';
import type { CatalogModel } from '../catalog.js';
import { modelSchema } from './common.js';

/*
 * `POST /v1/audio/speech` as the OpenAI spec writes it (`CreateSpeechRequest`), the job it becomes, and what the
 * catalog says of a speech model: the formats it can be given, the voices it knows, the options it takes, and how
 * many audio tokens a second of its speech is. The bound on how long a text can be spoken for (`mostSpeechSeconds`)
 * is here too: the reservation prices it, and the mock keeps within it.
 */

export const speechFormats = ['mp3', 'opus', 'aac', 'flac', 'wav', 'pcm'] as const;
export type SpeechFormat = (typeof speechFormats)[number];

/** The content type each format is answered with: what OpenAI sends. */
export const speechContentTypes: Readonly<Record<SpeechFormat, string>> = {
  mp3: 'audio/mpeg',
  opus: 'audio/opus',
  aac: 'audio/aac',
  flac: 'audio/flac',
  wav: 'audio/wav',
  pcm: 'audio/pcm',
};

/**
 * The most characters `input` (and `instructions`) may have: counted in code points, as JSON Schema's maxLength counts.
 */
export const maxSpeechCharacters = 4096;

/** Characters as OpenAI counts them for its limit and its bill: code points, not UTF-16 units. */
export function speechCharacters(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/**
 * Whether a text is within `most` code points, without walking a huge one: a code point is one or two UTF-16 units,
 * so a text of at most `most` units is within, and one of more than twice `most` is not (a 30 MB `input` would
 * otherwise hold the api's loop for a quarter of a second); between the two the count stops once it passes.
 */
export function withinCharacters(text: string, most: number): boolean {
  if (text.length <= most) return true;
  if (text.length > most * 2) return false;
  let count = 0;
  for (const _ of text) if (++count > most) return false;
  return true;
}

const speechText = (what: string, min = 0) =>
  z
    .string()
    .min(min)
    .refine(
      (text) => withinCharacters(text, maxSpeechCharacters),
      `${what} must be at most ${maxSpeechCharacters} characters`,
    );

/** A built-in voice by name, or a custom voice by its id (`{"id": "voice_1234"}`). */
export const speechVoiceSchema = z.union([
  z.string().min(1).max(64),
  z.strictObject({ id: z.string().min(1).max(128) }),
]);
export type SpeechVoice = z.infer<typeof speechVoiceSchema>;

/** `CreateSpeechRequest`: fields the spec does not name are left out of the job (and of the vendor's request). */
export const speechRequestSchema = z.looseObject({
  model: modelSchema,
  input: speechText('input', 1),
  voice: speechVoiceSchema,
  instructions: speechText('instructions').optional(),
  response_format: z.enum(speechFormats).default('mp3'),
  speed: z.number().min(0.25).max(4).optional(),
  stream_format: z.enum(['audio', 'sse']).default('audio'),
});
export type SpeechRequest = z.output<typeof speechRequestSchema>;

/** What a speech job carries: the request's fields that shape the audio (the model is the job's). */
export interface SpeechJob {
  input: string;
  voice: SpeechVoice;
  instructions?: string;
  response_format: SpeechFormat;
  speed?: number;
  stream_format: 'audio' | 'sse';
}

/** Options a speech model may take beyond the text and a voice name (the catalog's `speech_options`). */
export type SpeechOption = 'instructions' | 'speed' | 'sse' | 'custom_voice';

/**
 * What the catalog says of a speech model; its fields are optional extras of the entry (the catalog's schema is loose).
 */
const speechFactsSchema = z.looseObject({
  /** The formats the model can be given (all six when absent). */
  speech_formats: z.array(z.enum(speechFormats)).min(1).optional(),
  /** The voice names it knows; absent: any name goes to the vendor, which judges it. */
  speech_voices: z.array(z.string().min(1)).min(1).optional(),
  speech_options: z.array(z.enum(['instructions', 'speed', 'sse', 'custom_voice'])).optional(),
  /** Audio tokens in a second of its speech, for models billed by the audio token (the reservation's bound). */
  speech_audio_tokens_per_second: z.number().positive().optional(),
});

export interface SpeechFacts {
  formats: readonly SpeechFormat[];
  voices: readonly string[] | undefined;
  options: ReadonlySet<SpeechOption>;
  audioTokensPerSecond: number;
}

const factsCache = new WeakMap<CatalogModel, SpeechFacts>();

/** A speech model's facts, read once per catalog entry. */
export function speechFacts(model: CatalogModel): SpeechFacts {
  let facts = factsCache.get(model);
  if (facts) return facts;
  const parsed = speechFactsSchema.safeParse(model);
  const read = parsed.success ? parsed.data : {};
  facts = {
    formats: read.speech_formats ?? speechFormats,
    voices: read.speech_voices,
    options: new Set(read.speech_options ?? []),
    audioTokensPerSecond: read.speech_audio_tokens_per_second ?? 0,
  };
  factsCache.set(model, facts);
  return facts;
}

/**
 * The longest a text can be spoken for, in seconds: what the reservation of a model billed by the audio token
 * prices. Speech at `speed` 1 runs at 14 to 16 characters a second in every voice measured; the bound takes 10 (a
 * slow, pausing reader), divides by the speed asked, and adds two seconds of leading and trailing silence. It is a
 * bound of speech as vendors make it, not a law: a vendor that pauses longer (told to by `instructions`) can pass it,
 * and the settlement then bills what it reported, past the reservation (an overrun, reported as every one is).
 */
export function mostSpeechSeconds(characters: number, speed = 1): number {
  return Math.ceil(characters / (10 * speed)) + 2;
}
