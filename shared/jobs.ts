import type { Endpoint, EndpointPayloads } from './endpoints.js';
import type { QueueName } from './queues.js';
import type { VideoInput } from './schemas/media-inputs.js';

/** The job contract between the api and the workers: what a BullMQ job carries, what it returns, and where an async job is found. */

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
  /**
   * The request's trace context (W3C `traceparent`, `tracestate`), so the
   * worker's spans join the api's trace; absent when tracing is off.
   */
  trace?: Record<string, string>;
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
