import type { Capability } from './catalog.js';
import type { QueueName } from './queues.js';
import type { ChatCompletionRequest } from './schemas/chat.js';
import type { CompletionRequest } from './schemas/completions.js';
import type { EmbeddingRequest } from './schemas/embeddings.js';
import type { ImageGenerationRequest } from './schemas/images.js';
import type { ImageEditInput, TranscriptionInput, VideoInput } from './schemas/media-inputs.js';

/** What the gateway needs to know about one API endpoint, in one place. */
export interface EndpointRow {
  method: 'POST';
  path: string;
  /** The capability's queue: its workers scale alone. */
  queue: QueueName;
  /** Catalog capabilities a model needs to be served here. */
  capabilities: readonly Capability[];
  /** Answers with SSE when the client sets `stream`. */
  streams: boolean;
  /** Takes multipart files: they go to the blob store, the job carries references, and the worker deletes them when the job ends. */
  uploads: boolean;
  /** Which worker pipeline runs it: text (chat adapters) or media (image, audio, video adapters). */
  pipeline: 'text' | 'media';
}

/**
 * Every queued endpoint. Routes, the relay, the model resolver, worker
 * dispatch and the blob janitor read their facts from here; adding an
 * endpoint is one row, one thin route and one handler.
 */
export const endpoints = {
  'chat.completions': {
    method: 'POST',
    path: '/v1/chat/completions',
    queue: 'chat',
    capabilities: ['chat', 'reasoning'],
    streams: true,
    uploads: false,
    pipeline: 'text',
  },
  completions: { method: 'POST', path: '/v1/completions', queue: 'chat', capabilities: ['completion'], streams: true, uploads: false, pipeline: 'text' },
  embeddings: { method: 'POST', path: '/v1/embeddings', queue: 'embeddings', capabilities: ['embedding'], streams: false, uploads: false, pipeline: 'text' },
  'images.generations': {
    method: 'POST',
    path: '/v1/images/generations',
    queue: 'image',
    capabilities: ['image'],
    streams: false,
    uploads: false,
    pipeline: 'media',
  },
  'images.edits': { method: 'POST', path: '/v1/images/edits', queue: 'image', capabilities: ['image'], streams: false, uploads: true, pipeline: 'media' },
  'audio.transcriptions': {
    method: 'POST',
    path: '/v1/audio/transcriptions',
    queue: 'audio',
    capabilities: ['transcription'],
    streams: false,
    uploads: true,
    pipeline: 'media',
  },
  videos: { method: 'POST', path: '/v1/videos', queue: 'video', capabilities: ['video'], streams: false, uploads: true, pipeline: 'media' },
} as const satisfies Record<string, EndpointRow>;

export type Endpoint = keyof typeof endpoints;

export const endpointNames = Object.keys(endpoints) as Endpoint[];

/** Every capability some endpoint serves: a model of another capability is not listed. */
export const servedCapabilities: ReadonlySet<Capability> = new Set(endpointNames.flatMap((name) => endpoints[name].capabilities));

/** What each endpoint's job carries: the validated request (with uploads as blob references). */
export interface EndpointPayloads {
  'chat.completions': ChatCompletionRequest;
  completions: CompletionRequest;
  embeddings: EmbeddingRequest;
  'images.generations': ImageGenerationRequest;
  'images.edits': ImageEditInput;
  'audio.transcriptions': TranscriptionInput;
  videos: VideoInput;
}

/** One request as the worker runs it: the endpoint says the payload's type, so a `switch` on it needs no cast. */
export type EndpointRequest = { [E in Endpoint]: { endpoint: E; payload: EndpointPayloads[E] } }[Endpoint];
