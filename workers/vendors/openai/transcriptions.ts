import { Blob } from 'node:buffer';
import { FormData } from 'undici';
import { invalidRequest } from '../../../shared/errors.js';
import type { BlobRef, MediaContext, TranscriptionResult } from '../types.js';
import type { AudioTextFormat, TranscriptionInput, TranslationInput } from '../../../shared/schemas/media-inputs.js';
import { parseJsonObject, postVendor, readBodyText, vendorRequest, type VendorResponse } from '../http.js';
import { openaiApi } from './api.js';
import { mapOpenAIError } from './map-openai-error.js';

const ALL_FORMATS: readonly AudioTextFormat[] = ['json', 'text', 'srt', 'verbose_json', 'vtt'];
// OpenAI documents `json` only for the gpt-4o transcribe family, but it answers `text` too
// (its own speech-to-text guide uses it); subtitles and verbose_json it refuses.
const GPT_TRANSCRIBE_FORMATS: readonly AudioTextFormat[] = ['json', 'text'];

/** The response formats an upstream transcription model accepts. */
export function allowedTranscriptionFormats(upstreamModel: string): readonly AudioTextFormat[] {
  return /^gpt-.*transcribe/.test(upstreamModel) ? GPT_TRANSCRIBE_FORMATS : ALL_FORMATS;
}

const FALLBACK_CONTENT_TYPES: Record<AudioTextFormat, string> = {
  json: 'application/json',
  verbose_json: 'application/json',
  text: 'text/plain; charset=utf-8',
  srt: 'text/plain; charset=utf-8',
  vtt: 'text/plain; charset=utf-8',
};

// OpenAI infers a file's format from its name's extension, so a nameless upload needs one.
const EXTENSIONS: Record<string, string> = {
  'audio/mpeg': 'mp3',
  'audio/mp3': 'mp3',
  'audio/wav': 'wav',
  'audio/x-wav': 'wav',
  'audio/wave': 'wav',
  'audio/flac': 'flac',
  'audio/x-flac': 'flac',
  'audio/ogg': 'ogg',
  'audio/webm': 'webm',
  'audio/mp4': 'm4a',
  'audio/m4a': 'm4a',
  'audio/x-m4a': 'm4a',
  'video/mp4': 'mp4',
  'video/webm': 'webm',
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
};

/** The upload's own name, else one whose extension matches its content type. */
export function uploadFilename(file: BlobRef, stem: string): string {
  if (file.filename) return file.filename;
  const extension = EXTENSIONS[file.contentType.split(';')[0]!.trim().toLowerCase()];
  return extension === undefined ? stem : `${stem}.${extension}`;
}

/** A file part built from a stored upload, with its name and content type kept. */
export async function readUploadPart(file: BlobRef, ctx: MediaContext): Promise<Blob> {
  const bytes = await ctx.blobs.get(file.key);
  return new Blob([bytes], { type: file.contentType });
}

/** The multipart body of a transcription or a translation (which has no language and no timings: none is sent). */
function buildAudioTextForm(input: TranscriptionInput, audio: Blob, ctx: MediaContext): FormData {
  const form = new FormData();
  form.append('file', audio, uploadFilename(input.file, 'audio'));
  form.append('model', ctx.upstreamModel);
  if (input.language !== undefined) form.append('language', input.language);
  if (input.prompt !== undefined) form.append('prompt', input.prompt);
  form.append('response_format', input.response_format);
  if (input.temperature !== undefined) form.append('temperature', String(input.temperature));
  for (const granularity of input.timestamp_granularities ?? []) form.append('timestamp_granularities[]', granularity);
  return form;
}

function header(response: VendorResponse, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * `POST /audio/transcriptions`. The answer is handed on byte for byte: JSON
 * for json/verbose_json, plain text for text/srt/vtt, each with the content
 * type the vendor gave it.
 */
export async function transcribeWithOpenAI(input: TranscriptionInput, ctx: MediaContext): Promise<TranscriptionResult> {
  const allowed = allowedTranscriptionFormats(ctx.upstreamModel);
  if (!allowed.includes(input.response_format)) {
    // Refused here rather than upstream: the upload is not sent for nothing, and the client learns what works.
    throw invalidRequest(
      `response_format '${input.response_format}' is not supported by ${ctx.model.id}; use ${allowed.join(' or ')}` +
        ` (srt, vtt and verbose_json need whisper-1).`,
      'response_format',
      'unsupported_value',
    );
  }

  return sendAudioText(openaiApi.paths.transcriptions, input, ctx);
}

/**
 * `POST /audio/translations`: the audio written in English, handed on as a transcript is. Which models translate is
 * the catalog's to say (`supports_translation`, checked before the job is queued); each takes every format.
 */
export function translateWithOpenAI(input: TranslationInput, ctx: MediaContext): Promise<TranscriptionResult> {
  return sendAudioText(openaiApi.paths.translations, input, ctx);
}

/** Sends the upload and its fields to a speech-to-text path; its answer is handed on with the vendor's content type. */
async function sendAudioText(path: string, input: TranscriptionInput, ctx: MediaContext): Promise<TranscriptionResult> {
  const form = buildAudioTextForm(input, await readUploadPart(input.file, ctx), ctx);
  const response = await postVendor(ctx, vendorRequest(openaiApi, ctx, path, form), mapOpenAIError);

  const body = await readBodyText(response, ctx);
  // Checked, not rewritten: a proxy's HTML page behind a 200 must not reach the client as its transcript.
  if (input.response_format.endsWith('json')) parseJsonObject(body);
  return { body, contentType: header(response, 'content-type') ?? FALLBACK_CONTENT_TYPES[input.response_format] };
}
