/**
 * OpenAI's media endpoints for the fake upstream: `/v1/audio/transcriptions`,
 * `/v1/audio/translations` (whisper-1 alone, the fields of the spec's
 * `CreateTranslationRequest` and no other) and `/v1/videos` (create,
 * retrieve, content). Plug it in with
 * `fake.setDefault(media.handler)`; other paths fall through to the fake's
 * built-in answers.
 *
 * Videos move `queued` → `in_progress` (progress rising with each poll) →
 * `completed` on the `pollsToComplete`-th poll, or `failed` when a failure was
 * scripted with `failNextVideo`.
 *
 * Two limits of the fake server this works around or inherits:
 * - It records request bodies as UTF-8 strings, so uploaded bytes survive
 *   only when they are valid UTF-8; tests upload such bytes.
 * - Its scripted answers are strings, except `sseFile`, which is sent byte
 *   for byte with the headers given; binary downloads go out that way, from
 *   files this module writes to a temporary directory.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FakeHandler, FakeResponse, RecordedRequest } from './fake-openai.js';

export const FAKE_TRANSCRIPT_TEXT = 'Hello from the fake transcription upstream.';
export const FAKE_TRANSCRIPTION_MODELS = ['whisper-1', 'gpt-4o-transcribe', 'gpt-4o-mini-transcribe'];
const VIDEO_SIZES = ['720x1280', '1280x720', '1024x1792', '1792x1024'];
const VIDEO_SECONDS = ['4', '8', '12'];

export const FAKE_SRT =
  '1\n00:00:00,000 --> 00:00:02,500\nHello from the fake\n\n2\n00:00:02,500 --> 00:00:04,000\ntranscription ' +
  'upstream.\n\n';
export const FAKE_VTT =
  'WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello from the fake\n\n00:00:02.500 --> 00:00:04.000\ntranscription ' +
  'upstream.\n\n';

export const FAKE_TRANSLATION_TEXT = 'Hello from the fake translation upstream.';
/** The one model OpenAI translates with. */
export const FAKE_TRANSLATION_MODELS = ['whisper-1'];
export const FAKE_TRANSLATION_SRT =
  '1\n00:00:00,000 --> 00:00:02,500\nHello from the fake\n\n2\n00:00:02,500 --> 00:00:04,000\ntranslation ' +
  'upstream.\n\n';
export const FAKE_TRANSLATION_VTT =
  'WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello from the fake\n\n00:00:02.500 --> 00:00:04.000\ntranslation ' +
  'upstream.\n\n';
/** The fields a translation request may carry (`CreateTranslationRequest` allows no others). */
const TRANSLATION_FIELDS = ['file', 'model', 'prompt', 'response_format', 'temperature'];
const AUDIO_TEXT_FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'];

/** One part of a received multipart body, in the order it came. */
export type FakeFormPart =
  { name: string; value: string } | { name: string; filename: string; type: string; bytes: Buffer };

export interface FakeVideo {
  id: string;
  model: string;
  prompt: string;
  seconds: string;
  size: string;
  status: 'queued' | 'in_progress' | 'completed' | 'failed';
  progress: number;
  polls: number;
  createdAt: number;
  /** The create request's parts when it was multipart (with `input_reference`). */
  parts?: FakeFormPart[];
  failure?: { code: string; message: string };
}

export interface FakeOpenAIMediaOptions {
  /** Polls after which a video is done (default 3). */
  pollsToComplete?: number;
}

export interface FakeOpenAIMedia {
  handler: FakeHandler;
  /** Videos created so far: a resumed job must not add one. */
  readonly created: number;
  /** `GET /videos/{id}` answered so far. */
  readonly polls: number;
  videos: Map<string, FakeVideo>;
  /** The parts of each transcription request, in arrival order. */
  transcriptions: FakeFormPart[][];
  /** The parts of each translation request, in arrival order. */
  translations: FakeFormPart[][];
  /** The next created video fails with this error once its polls are done. */
  failNextVideo(failure: { code: string; message: string }): void;
  reset(): void;
  /** Removes the temporary files of downloads. */
  close(): Promise<void>;
}

/** Bytes served as a video's content: every byte value occurs, so any text decoding on the way shows. */
export function fakeVideoBytes(id: string, variant: 'video' | 'thumbnail' = 'video'): Buffer {
  const pattern = Buffer.alloc(512);
  for (let index = 0; index < pattern.length; index += 1) pattern[index] = (index * 7) % 256;
  return Buffer.concat([Buffer.from(`fake-${variant}:${id}:`, 'latin1'), pattern]);
}

function error(status: number, message: string, param: string | null = null, code: string | null = null): FakeResponse {
  const type = status === 401 ? 'invalid_request_error' : status >= 500 ? 'server_error' : 'invalid_request_error';
  return { status, json: { error: { message, type, param, code } } };
}

function header(request: RecordedRequest, name: string): string {
  const value = request.headers[name];
  return (Array.isArray(value) ? value[0] : value) ?? '';
}

async function readParts(request: RecordedRequest): Promise<FakeFormPart[]> {
  const form = await new Response(request.rawBody, {
    headers: { 'content-type': header(request, 'content-type') },
  }).formData();
  const parts: FakeFormPart[] = [];
  for (const [name, value] of form.entries()) {
    if (typeof value === 'string') parts.push({ name, value });
    else parts.push({ name, filename: value.name, type: value.type, bytes: Buffer.from(await value.arrayBuffer()) });
  }
  return parts;
}

const field = (parts: FakeFormPart[], name: string) => {
  const part = parts.find((candidate) => candidate.name === name);
  return part && 'value' in part ? part.value : undefined;
};

/** Pretty-printed like OpenAI's own JSON, so a test can tell passthrough from re-serialization. */
const prettyJson = (value: unknown): FakeResponse => ({
  status: 200,
  headers: { 'content-type': 'application/json' },
  text: JSON.stringify(value, null, 2),
});

const FAKE_SEGMENT = {
  id: 0,
  seek: 0,
  start: 0,
  end: 4,
  text: ` ${FAKE_TRANSCRIPT_TEXT}`,
  tokens: [1, 2],
  temperature: 0,
  avg_logprob: -0.2,
  compression_ratio: 1,
  no_speech_prob: 0,
};

function transcriptionAnswer(model: string, format: string, granularities: string[]): FakeResponse {
  const usage =
    model === 'whisper-1'
      ? { type: 'duration', seconds: 4 }
      : {
          type: 'tokens',
          input_tokens: 40,
          input_token_details: { text_tokens: 0, audio_tokens: 40 },
          output_tokens: 9,
          total_tokens: 49,
        };
  switch (format) {
    case 'json':
      return prettyJson({ text: FAKE_TRANSCRIPT_TEXT, usage });
    case 'text':
      return {
        status: 200,
        headers: { 'content-type': 'text/plain; charset=utf-8' },
        text: `${FAKE_TRANSCRIPT_TEXT}\n`,
      };
    case 'srt':
      return { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, text: FAKE_SRT };
    case 'vtt':
      return { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, text: FAKE_VTT };
    default: {
      const wanted = granularities.length > 0 ? granularities : ['segment'];
      return prettyJson({
        task: 'transcribe',
        language: 'english',
        duration: 4,
        text: FAKE_TRANSCRIPT_TEXT,
        ...(wanted.includes('word') ? { words: [{ word: 'Hello', start: 0, end: 0.5 }] } : {}),
        ...(wanted.includes('segment') ? { segments: [FAKE_SEGMENT] } : {}),
        usage: { type: 'duration', seconds: 4 },
      });
    }
  }
}

/** A translation as whisper-1 writes it: no usage in any form, and a verbose form with segments only. */
function translationAnswer(format: string): FakeResponse {
  const plain = (text: string): FakeResponse => ({
    status: 200,
    headers: { 'content-type': 'text/plain; charset=utf-8' },
    text,
  });
  switch (format) {
    case 'json':
      return prettyJson({ text: FAKE_TRANSLATION_TEXT });
    case 'text':
      return plain(`${FAKE_TRANSLATION_TEXT}\n`);
    case 'srt':
      return plain(FAKE_TRANSLATION_SRT);
    case 'vtt':
      return plain(FAKE_TRANSLATION_VTT);
    default:
      return prettyJson({
        task: 'translate',
        language: 'english',
        duration: 4,
        text: FAKE_TRANSLATION_TEXT,
        segments: [{ ...FAKE_SEGMENT, text: ` ${FAKE_TRANSLATION_TEXT}` }],
      });
  }
}

function videoObject(video: FakeVideo) {
  return {
    id: video.id,
    object: 'video',
    model: video.model,
    status: video.status,
    progress: video.progress,
    created_at: video.createdAt,
    completed_at: video.status === 'completed' ? video.createdAt + 60 : null,
    expires_at: video.status === 'completed' ? video.createdAt + 3600 : null,
    prompt: video.prompt,
    size: video.size,
    seconds: video.seconds,
    remixed_from_video_id: null,
    error: video.status === 'failed' ? (video.failure ?? null) : null,
  };
}

export function createFakeOpenAIMedia(options: FakeOpenAIMediaOptions = {}): FakeOpenAIMedia {
  const pollsToComplete = Math.max(1, options.pollsToComplete ?? 3);
  const videos = new Map<string, FakeVideo>();
  const transcriptions: FakeFormPart[][] = [];
  const translations: FakeFormPart[][] = [];
  let created = 0;
  let polls = 0;
  let nextFailure: FakeVideo['failure'];
  let directory: Promise<string> | undefined;

  async function binary(name: string, bytes: Buffer, contentType: string): Promise<FakeResponse> {
    directory ??= mkdtemp(join(tmpdir(), 'fake-openai-media-'));
    const path = join(await directory, name);
    await writeFile(path, bytes);
    return { sseFile: path, headers: { 'content-type': contentType, 'content-length': String(bytes.length) } };
  }

  async function transcribe(request: RecordedRequest): Promise<FakeResponse> {
    if (!header(request, 'content-type').startsWith('multipart/form-data')) {
      return error(400, 'Expected a multipart/form-data body.', null, 'invalid_content_type');
    }
    const parts = await readParts(request);
    transcriptions.push(parts);
    const file = parts.find((part) => part.name === 'file');
    if (file === undefined || !('bytes' in file) || file.bytes.length === 0) {
      return error(400, "Missing required parameter: 'file'.", 'file', 'missing_required_parameter');
    }
    const model = field(parts, 'model');
    if (model === undefined)
      return error(400, "Missing required parameter: 'model'.", 'model', 'missing_required_parameter');
    if (!FAKE_TRANSCRIPTION_MODELS.includes(model))
      return error(400, `Invalid model ${model}.`, 'model', 'model_not_found');
    const format = field(parts, 'response_format') ?? 'json';
    if (!['json', 'text', 'srt', 'verbose_json', 'vtt'].includes(format)) {
      return error(400, `Invalid response_format '${format}'.`, 'response_format', 'invalid_value');
    }
    if (model !== 'whisper-1' && format !== 'json' && format !== 'text') {
      return error(
        400,
        `response_format '${format}' is not compatible with model '${model}'.`,
        'response_format',
        'unsupported_value',
      );
    }
    const granularities = parts.flatMap((part) =>
      part.name === 'timestamp_granularities[]' && 'value' in part ? [part.value] : [],
    );
    return transcriptionAnswer(model, format, granularities);
  }

  async function translate(request: RecordedRequest): Promise<FakeResponse> {
    if (!header(request, 'content-type').startsWith('multipart/form-data')) {
      return error(400, 'Expected a multipart/form-data body.', null, 'invalid_content_type');
    }
    const parts = await readParts(request);
    translations.push(parts);
    const unknown = parts.find((part) => !TRANSLATION_FIELDS.includes(part.name));
    if (unknown !== undefined)
      return error(400, `Unrecognized request argument supplied: ${unknown.name}`, unknown.name, 'unknown_parameter');
    const file = parts.find((part) => part.name === 'file');
    if (file === undefined || !('bytes' in file) || file.bytes.length === 0) {
      return error(400, "Missing required parameter: 'file'.", 'file', 'missing_required_parameter');
    }
    const model = field(parts, 'model');
    if (model === undefined)
      return error(400, "Missing required parameter: 'model'.", 'model', 'missing_required_parameter');
    if (!FAKE_TRANSLATION_MODELS.includes(model)) {
      return error(
        400,
        `Invalid model ${model}: translations are served by ${FAKE_TRANSLATION_MODELS.join(', ')} only.`,
        'model',
        'model_not_found',
      );
    }
    const format = field(parts, 'response_format') ?? 'json';
    if (!AUDIO_TEXT_FORMATS.includes(format))
      return error(400, `Invalid response_format '${format}'.`, 'response_format', 'invalid_value');
    const temperature = field(parts, 'temperature');
    if (temperature !== undefined && !(Number(temperature) >= 0 && Number(temperature) <= 1)) {
      return error(400, `Invalid temperature '${temperature}': a number from 0 to 1.`, 'temperature', 'invalid_value');
    }
    return translationAnswer(format);
  }

  async function createVideo(request: RecordedRequest): Promise<FakeResponse> {
    let fields: Record<string, unknown>;
    let parts: FakeFormPart[] | undefined;
    if (header(request, 'content-type').startsWith('multipart/form-data')) {
      parts = await readParts(request);
      fields = Object.fromEntries(parts.flatMap((part) => ('value' in part ? [[part.name, part.value]] : [])));
    } else if (typeof request.body === 'object' && request.body !== null) {
      fields = request.body as Record<string, unknown>;
    } else {
      return error(400, 'Expected a JSON or multipart body.');
    }
    const { prompt, model = 'sora-2', seconds = '4', size = '720x1280' } = fields;
    if (typeof prompt !== 'string' || prompt === '')
      return error(400, "Missing required parameter: 'prompt'.", 'prompt', 'missing_required_parameter');
    if (model !== 'sora-2' && model !== 'sora-2-pro')
      return error(400, `Invalid model ${String(model)}.`, 'model', 'invalid_value');
    if (typeof seconds !== 'string' || !VIDEO_SECONDS.includes(seconds))
      return error(400, `Invalid seconds ${String(seconds)}.`, 'seconds', 'invalid_value');
    if (typeof size !== 'string' || !VIDEO_SIZES.includes(size))
      return error(400, `Invalid size ${String(size)}.`, 'size', 'invalid_value');

    created += 1;
    const video: FakeVideo = {
      id: `video_fake${String(created).padStart(4, '0')}`,
      model,
      prompt,
      seconds,
      size,
      status: 'queued',
      progress: 0,
      polls: 0,
      createdAt: 1_760_000_000 + created,
      ...(parts ? { parts } : {}),
      ...(nextFailure ? { failure: nextFailure } : {}),
    };
    nextFailure = undefined;
    videos.set(video.id, video);
    return { json: videoObject(video) };
  }

  function retrieveVideo(video: FakeVideo): FakeResponse {
    polls += 1;
    if (video.status === 'queued' || video.status === 'in_progress') {
      video.polls += 1;
      if (video.polls >= pollsToComplete) {
        video.status = video.failure ? 'failed' : 'completed';
        video.progress = video.failure ? video.progress : 100;
      } else {
        video.status = 'in_progress';
        video.progress = Math.floor((video.polls * 100) / pollsToComplete);
      }
    }
    return { json: videoObject(video) };
  }

  async function videoContent(video: FakeVideo, variant: string): Promise<FakeResponse> {
    if (video.status !== 'completed')
      return error(400, `Video ${video.id} is not ready: its status is ${video.status}.`, null, 'video_not_ready');
    if (variant === 'video') return binary(`${video.id}.mp4`, fakeVideoBytes(video.id), 'video/mp4');
    if (variant === 'thumbnail') return binary(`${video.id}.webp`, fakeVideoBytes(video.id, 'thumbnail'), 'image/webp');
    return error(400, `Invalid variant ${variant}.`, 'variant', 'invalid_value');
  }

  const handler: FakeHandler = async (request) => {
    const url = new URL(request.path, 'http://fake.invalid');
    const isMedia =
      url.pathname === '/v1/audio/transcriptions' ||
      url.pathname === '/v1/audio/translations' ||
      url.pathname.startsWith('/v1/videos');
    if (!isMedia) return undefined;
    if (!/^Bearer \S+/.test(header(request, 'authorization')))
      return error(401, 'You must provide an API key.', null, 'invalid_api_key');

    if (url.pathname === '/v1/audio/transcriptions' && request.method === 'POST') return transcribe(request);
    if (url.pathname === '/v1/audio/translations' && request.method === 'POST') return translate(request);
    if (url.pathname === '/v1/videos' && request.method === 'POST') return createVideo(request);
    const match = /^\/v1\/videos\/([^/]+)(\/content)?$/.exec(url.pathname);
    if (match && request.method === 'GET') {
      const video = videos.get(decodeURIComponent(match[1]!));
      if (video === undefined) return error(404, `Video ${match[1]} not found.`, null, 'video_not_found');
      return match[2] ? videoContent(video, url.searchParams.get('variant') ?? 'video') : retrieveVideo(video);
    }
    return error(404, `Unknown route ${request.method} ${url.pathname}.`);
  };

  return {
    handler,
    get created() {
      return created;
    },
    get polls() {
      return polls;
    },
    videos,
    transcriptions,
    translations,
    failNextVideo(failure) {
      nextFailure = failure;
    },
    reset() {
      videos.clear();
      transcriptions.length = 0;
      translations.length = 0;
      created = 0;
      polls = 0;
      nextFailure = undefined;
    },
    async close() {
      if (directory !== undefined) await rm(await directory, { recursive: true, force: true });
      directory = undefined;
    },
  };
}
