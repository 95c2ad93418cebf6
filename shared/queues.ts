import type { Endpoint, EndpointPayloads } from './endpoints.js';
import type { VideoInput } from './schemas/media-inputs.js';

/** One BullMQ queue per capability; a capability's workers scale alone. */
export const queueNames = ['chat', 'embeddings', 'image', 'audio', 'video'] as const;
export type QueueName = (typeof queueNames)[number];

/** Key prefix of every Redis key the gateway owns (BullMQ keys live under `bull:`). */
export const keyPrefix = 'sy:';
export const replyChannel = (apiInstanceId: string) => `${keyPrefix}reply:${apiInstanceId}`;
/** Set (with a TTL) by a live api for its reply channel: a worker whose answers reach nobody checks it before giving up. */
export const apiAliveKey = (replyTo: string) => `${keyPrefix}alive:${replyTo}`;
export const cancelChannel = `${keyPrefix}cancel`;
export const replayStreamKey = (requestId: string) => `${keyPrefix}replay:${requestId}`;
export const payloadKey = (requestId: string) => `${keyPrefix}payload:${requestId}`;
export const resultKey = (requestId: string) => `${keyPrefix}result:${requestId}`;
/** Job lifecycle events (queued, progress, completed, failed) of async jobs, for WebSocket watchers. */
export const jobEventsChannel = `${keyPrefix}job-events`;
/** Where an async job lives and whose it is (an AsyncJobRecord). */
export const asyncJobKey = (id: string) => `${keyPrefix}async:${id}`;
/** A key's videos, newest last (sorted set scored by creation time). */
export const videosOfKey = (keyId: string) => `${keyPrefix}videos:${keyId}`;

/** What a job carries. Kept small: large request bodies are stored apart under `payloadKey`. */
export interface GatewayJobData {
  requestId: string;
  /** Pub/sub channel of the api instance holding the client connection. */
  replyTo: string;
  keyId: string;
  /** The account that pays (jobs queued before accounts existed: the default account). */
  accountId?: string;
  endpoint: Endpoint;
  /** Catalog model id the client asked for. */
  model: string;
  /** Validated request body, or absent when stored under `payloadKey(requestId)`. */
  payload?: EndpointPayloads[Endpoint];
  stream: boolean;
  /** Epoch ms after which nobody is waiting for the answer. */
  deadline: number;
  /** How the client reached the gateway (for links to stored files). */
  baseUrl?: string;
  /** Answered through `GET /v1/jobs/{id}` (and job events) rather than a held connection. */
  async?: boolean;
  /** A background response: it runs to its end whoever listens, its events are logged for readers. */
  background?: boolean;
  /** Vendor-side state a restarted worker resumes from (e.g. the vendor's task id). */
  checkpoint?: Record<string, unknown>;
}

export interface GatewayJobResult {
  /** The response body, or a pointer to it under `resultKey` when large. */
  body?: string;
  bodyRef?: string;
}

/** Where an async job can be found, and whose it is: kept under `asyncJobKey(id)` for ASYNC_RESULT_TTL_S. */
export interface AsyncJobRecord {
  queue: QueueName;
  keyId: string;
  endpoint: Endpoint;
  model: string;
  created: number;
  contentType?: string;
  /** The request, for resources that echo it (videos). */
  request?: Partial<VideoInput>;
}
