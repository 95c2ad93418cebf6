import { z } from 'zod';
import { formNumber, modelSchema } from './common.js';
import type { BlobRef } from '../blobs.js';
import type { ImageEditFields, ImageVariationFields } from './images.js';

/**
 * What the api puts in a media job after it stored the uploads: the
 * validated text fields, and references to the files in the blob store.
 */
export interface ImageEditInput extends ImageEditFields {
  /** The uploaded images, in order (`image` or `image[]` parts). */
  images: BlobRef[];
  mask?: BlobRef;
}

/** A variation job: the validated fields and the one uploaded image. */
export interface ImageVariationInput extends ImageVariationFields {
  image: BlobRef;
}

/** The forms a transcript or a translation is written in: JSON (plain or with timings), plain text, or subtitles. */
export type AudioTextFormat = 'json' | 'text' | 'srt' | 'verbose_json' | 'vtt';

/** A translation job (to English): the uploaded audio and the fields that shape its text. */
export interface TranslationInput {
  file: BlobRef;
  prompt?: string;
  response_format: AudioTextFormat;
  temperature?: number;
}

/** A transcription job: a translation's fields, and the spoken language and timing detail a transcript may be asked. */
export interface TranscriptionInput extends TranslationInput {
  language?: string;
  timestamp_granularities?: Array<'word' | 'segment'>;
}

export interface VideoInput {
  prompt: string;
  seconds: string;
  size: string;
  input_reference?: BlobRef;
}

/** The text fields of `POST /v1/audio/translations` (multipart); the file arrives apart. */
export const translationFieldsSchema = z.looseObject({
  model: modelSchema,
  prompt: z.string().optional(),
  response_format: z.enum(['json', 'text', 'srt', 'verbose_json', 'vtt']).default('json'),
  temperature: formNumber().pipe(z.number().min(0).max(1)).optional(),
});

/**
 * The text fields of `POST /v1/audio/transcriptions` (multipart): a translation's, with the language and the timings.
 */
export const transcriptionFieldsSchema = translationFieldsSchema.extend({
  language: z.string().min(2).max(16).optional(),
  'timestamp_granularities[]': z.array(z.enum(['word', 'segment'])).optional(),
});

/** `POST /v1/videos`, as JSON or as multipart fields (with an optional `input_reference` file). */
export const videoRequestSchema = z.looseObject({
  model: modelSchema.default('sora-2'),
  prompt: z.string().min(1).max(32_000),
  seconds: z
    .union([z.string(), z.number()])
    .transform(String)
    .pipe(z.enum(['4', '8', '12']))
    .default('4'),
  size: z.string().optional(),
});
