import type { z } from 'zod';
import type { Capability } from './catalog.js';
import type { Config } from './config.js';
import type { QueueName } from './queues.js';
import { chatCompletionRequestSchema, type ChatCompletionRequest } from './schemas/chat.js';
import { completionRequestSchema, type CompletionRequest } from './schemas/completions.js';
import { embeddingRequestSchema, type EmbeddingRequest } from './schemas/embeddings.js';
import {
  imageEditFieldsSchema,
  imageGenerationRequestSchema,
  imageVariationFieldsSchema,
  type ImageGenerationRequest,
} from './schemas/images.js';
import {
  transcriptionFieldsSchema,
  translationFieldsSchema,
  videoRequestSchema,
  type ImageEditInput,
  type ImageVariationInput,
  type TranscriptionInput,
  type TranslationInput,
  type VideoInput,
} from './schemas/media-inputs.js';
import { responsesRequestSchema } from './schemas/responses.js';
import { speechRequestSchema, type SpeechJob } from './schemas/speech.js';
import { moderationRequestSchema, type ModerationRequest } from './schemas/moderations.js';
import { countTokensRequestSchema, messagesRequestSchema } from './schemas/messages.js';
import type { ResponsesJob } from './responses.js';
import type { MessagesJob } from './messages.js';
import type { GeminiEmbedJob, GeminiJob } from './gemini.js';
import {
  geminiBatchEmbedContentsRequestSchema,
  geminiCountTokensRequestSchema,
  geminiEmbedContentRequestSchema,
  geminiGenerateRequestSchema,
} from './schemas/gemini.js';

/**
 * How long a finished job stays in its queue. A waiting client got its answer
 * over pub/sub, so a completed job is kept only briefly (to inspect), a failed
 * one longer (to investigate). An async job is read later: it is kept
 * `ASYNC_RESULT_TTL_S` (results past 256 KiB in the blob store as long).
 */
export interface ResultKeeping {
  completedSeconds: number;
  failedSeconds: number;
  /** The most finished jobs of each kind a queue keeps, whatever their age. */
  completedCount: number;
  failedCount: number;
}

export const heldAnswer: ResultKeeping = {
  completedSeconds: 60,
  failedSeconds: 3600,
  completedCount: 1000,
  failedCount: 5000,
};

/** Every queue's deadline: how long a request may wait and run (`REQUEST_DEADLINE_MS_<QUEUE>`). */
const queueDeadline = (queue: QueueName) => (config: Pick<Config, 'deadlineMs'>) => config.deadlineMs[queue];

/** What the gateway needs to know about one API endpoint, in one place. */
export interface EndpointRow {
  method: 'POST';
  path: string;
  /** The capability's queue: its workers scale alone. */
  queue: QueueName;
  /** Catalog capabilities a model needs to be served here. */
  capabilities: readonly Capability[];
  /** What the client sends: a JSON body, multipart fields with files, or either. */
  body: 'json' | 'multipart' | 'json-or-multipart';
  /** Validates the JSON body, or the multipart text fields (files arrive apart). */
  schema: z.ZodType;
  /** Answers with SSE when the client sets `stream`. */
  streams: boolean;
  /**
   * Takes files: they go to the blob store, the job carries references, and the worker deletes them when the job ends.
   */
  uploads: false | { maxBytes: 'maxImageBytes' | 'maxAudioBytes' };
  /** Always answered as a resource to read later (a 200 with the queued resource), never held open. */
  asyncOnly: boolean;
  /**
   * Which worker pipeline runs it: text (chat adapters, answered as chunks or one body), responses (chat
   * adapters, always streamed, answered as the Responses API's events or object) or media (image, audio,
   * video adapters), messages (Anthropic's Messages API: Anthropic's own events relayed, or chat adapters' answers
   * written as them), gemini (Google's Gemini API: Gemini's own chunks relayed, or chat adapters' answers written as
   * them; its token counts and embeddings).
   */
  pipeline: 'text' | 'responses' | 'messages' | 'gemini' | 'media';
  /** How long a request may wait and run, in ms. */
  deadlineMs: (config: Pick<Config, 'deadlineMs'>) => number;
  /** How long its finished job is kept when a client waited for it. */
  keep: ResultKeeping;
}

/**
 * Every queued endpoint. Routes, the relay, the model resolver, worker
 * dispatch and the blob janitor read their facts from here; adding an
 * endpoint is one row, one handler (`api/requests/endpoint-handlers.ts`) and, in the
 * worker, one case of its pipeline (`workers/pipelines.ts`).
 */
export const endpoints = {
  'chat.completions': {
    method: 'POST',
    path: '/v1/chat/completions',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: chatCompletionRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'text',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  completions: {
    method: 'POST',
    path: '/v1/completions',
    queue: 'chat',
    capabilities: ['completion'],
    body: 'json',
    schema: completionRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'text',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  responses: {
    method: 'POST',
    path: '/v1/responses',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: responsesRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'responses',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  messages: {
    method: 'POST',
    path: '/v1/messages',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: messagesRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'messages',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  /**
   * Counted by Anthropic for its models, by the gateway's tokenizer for the others: through the queue, billed nothing.
   */
  'messages.count_tokens': {
    method: 'POST',
    path: '/v1/messages/count_tokens',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: countTokensRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'messages',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  /**
   * Google's Gemini API: `models/{model}:generateContent` and `:streamGenerateContent` (one row: the method says
   * whether it streams). Its path is a template: `api/gemini/` finds the row from the URL (`/v1beta/…` or the
   * GenAI SDKs' `/v1/…`), the model from the path.
   */
  'gemini.generate': {
    method: 'POST',
    path: '/v1beta/models/{model}:generateContent',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: geminiGenerateRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'gemini',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  /** Counted by Gemini for its models, by the gateway's tokenizer for the others: through the queue, billed nothing. */
  'gemini.count_tokens': {
    method: 'POST',
    path: '/v1beta/models/{model}:countTokens',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    body: 'json',
    schema: geminiCountTokensRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'gemini',
    deadlineMs: queueDeadline('chat'),
    keep: heldAnswer,
  },
  'gemini.embed': {
    method: 'POST',
    path: '/v1beta/models/{model}:embedContent',
    queue: 'embeddings',
    capabilities: ['embedding'],
    body: 'json',
    schema: geminiEmbedContentRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'gemini',
    deadlineMs: queueDeadline('embeddings'),
    keep: heldAnswer,
  },
  'gemini.batch_embed': {
    method: 'POST',
    path: '/v1beta/models/{model}:batchEmbedContents',
    queue: 'embeddings',
    capabilities: ['embedding'],
    body: 'json',
    schema: geminiBatchEmbedContentsRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'gemini',
    deadlineMs: queueDeadline('embeddings'),
    keep: heldAnswer,
  },
  embeddings: {
    method: 'POST',
    path: '/v1/embeddings',
    queue: 'embeddings',
    capabilities: ['embedding'],
    body: 'json',
    schema: embeddingRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'text',
    deadlineMs: queueDeadline('embeddings'),
    keep: heldAnswer,
  },
  /**
   * Text and images judged against OpenAI's harm categories: a short JSON call like an embedding, on its queue (the
   * same short deadline and CPU-light workers; a queue of its own would be a lane, a concurrency and a deadline more
   * to configure for calls that cost nothing).
   */
  moderations: {
    method: 'POST',
    path: '/v1/moderations',
    queue: 'embeddings',
    capabilities: ['moderation'],
    body: 'json',
    schema: moderationRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'text',
    deadlineMs: queueDeadline('embeddings'),
    keep: heldAnswer,
  },
  'images.generations': {
    method: 'POST',
    path: '/v1/images/generations',
    queue: 'image',
    capabilities: ['image'],
    body: 'json',
    schema: imageGenerationRequestSchema,
    streams: false,
    uploads: false,
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('image'),
    keep: heldAnswer,
  },
  'images.edits': {
    method: 'POST',
    path: '/v1/images/edits',
    queue: 'image',
    capabilities: ['image'],
    body: 'multipart',
    schema: imageEditFieldsSchema,
    streams: false,
    uploads: { maxBytes: 'maxImageBytes' },
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('image'),
    keep: heldAnswer,
  },
  'images.variations': {
    method: 'POST',
    path: '/v1/images/variations',
    queue: 'image',
    capabilities: ['image'],
    body: 'multipart',
    schema: imageVariationFieldsSchema,
    streams: false,
    uploads: { maxBytes: 'maxImageBytes' },
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('image'),
    keep: heldAnswer,
  },
  'audio.transcriptions': {
    method: 'POST',
    path: '/v1/audio/transcriptions',
    queue: 'audio',
    capabilities: ['transcription'],
    body: 'multipart',
    schema: transcriptionFieldsSchema,
    streams: false,
    uploads: { maxBytes: 'maxAudioBytes' },
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('audio'),
    keep: heldAnswer,
  },
  /**
   * Speech in any language written in English: a transcription's models (those the catalog says translate), forms and
   * limits.
   */
  'audio.translations': {
    method: 'POST',
    path: '/v1/audio/translations',
    queue: 'audio',
    capabilities: ['transcription'],
    body: 'multipart',
    schema: translationFieldsSchema,
    streams: false,
    uploads: { maxBytes: 'maxAudioBytes' },
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('audio'),
    keep: heldAnswer,
  },
  /**
   * Text spoken, on the audio queue: its bytes relayed as the vendor sends them (the audio itself, or OpenAI's
   * `speech.audio.*` events); kept in the blob store for an async job.
   */
  'audio.speech': {
    method: 'POST',
    path: '/v1/audio/speech',
    queue: 'audio',
    capabilities: ['speech'],
    body: 'json',
    schema: speechRequestSchema,
    streams: true,
    uploads: false,
    asyncOnly: false,
    pipeline: 'media',
    deadlineMs: queueDeadline('audio'),
    keep: heldAnswer,
  },
  videos: {
    method: 'POST',
    path: '/v1/videos',
    queue: 'video',
    capabilities: ['video'],
    body: 'json-or-multipart',
    schema: videoRequestSchema,
    streams: false,
    uploads: { maxBytes: 'maxImageBytes' },
    asyncOnly: true,
    pipeline: 'media',
    deadlineMs: queueDeadline('video'),
    keep: heldAnswer,
  },
} as const satisfies Record<string, EndpointRow>;

export type Endpoint = keyof typeof endpoints;

export const endpointNames = Object.keys(endpoints) as Endpoint[];

/** Every capability some endpoint serves: a model of another capability is not listed. */
export const servedCapabilities: ReadonlySet<Capability> = new Set(
  endpointNames.flatMap((name) => endpoints[name].capabilities),
);

/** What each endpoint's job carries: the validated request (with uploads as blob references). */
export interface EndpointPayloads {
  'chat.completions': ChatCompletionRequest;
  completions: CompletionRequest;
  /** The chat request the adapters run, and the response object's echo fields. */
  responses: ResponsesJob;
  /** The request as the client wrote it (for Anthropic), its chat form (for the others), and what the answer echoes. */
  messages: MessagesJob;
  'messages.count_tokens': MessagesJob;
  /**
   * Google's Gemini API: the request as the client wrote it (for Gemini), its chat form (for the others), and how a
   * stream is written.
   */
  'gemini.generate': GeminiJob;
  'gemini.count_tokens': GeminiJob;
  'gemini.embed': GeminiEmbedJob;
  'gemini.batch_embed': GeminiEmbedJob;
  embeddings: EmbeddingRequest;
  /** The request with the spec's fields alone, `model` the client's or the default. */
  moderations: ModerationRequest;
  'images.generations': ImageGenerationRequest;
  'images.edits': ImageEditInput;
  'images.variations': ImageVariationInput;
  'audio.transcriptions': TranscriptionInput;
  'audio.translations': TranslationInput;
  'audio.speech': SpeechJob;
  videos: VideoInput;
}

/** One request as the worker runs it: the endpoint says the payload's type, so a `switch` on it needs no cast. */
export type EndpointRequest = { [E in Endpoint]: { endpoint: E; payload: EndpointPayloads[E] } }[Endpoint];
