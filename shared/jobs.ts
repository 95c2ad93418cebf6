import type { BatchJob } from './batches/types.js';
import type { Endpoint, EndpointPayloads } from './endpoints.js';
import type { QueueName } from './queues.js';
import type { VideoInput } from './schemas/media-inputs.js';
import type { FairClaim } from './scheduling/fair-queue.js';
import type { ServiceTier } from './scheduling/vocabulary.js';
import type { JobCachePlan } from './cache/index.js';

/**
 * The job contract between the api and the workers: what a BullMQ job carries, what it returns, and where an async job
 * is found.
 */

/**
 * What a job carries. Kept small: large request bodies are stored apart under `payloadKey`.
 *
 * A job has two ids, named apart. `requestId` is the request's (the `x-request-id` its client got): it keys
 * the money (the reservation, the settlement and its settled mark) and the request log's row, whose two
 * halves, the api's and the worker's, meet under it. `jobId` is the queue's: BullMQ's job id, and what the
 * reply channel, the stream's replay log, a stored payload or result, a cancel and an async job's events
 * are found by. They are one id for most requests; a Responses request's job is its response's id
 * (`resp_…`), a video's the video's (`video_…`).
 */
export interface GatewayJobData {
  /** The request's id: money and the request log. */
  requestId: string;
  /**
   * The queue's id (absent in jobs queued before the two were named apart, whose `requestId` is both): read it with
   * `jobIdOf`.
   */
  jobId?: string;
  /** Pub/sub channel of the api instance holding the client connection. */
  replyTo: string;
  keyId: string;
  /** The account that pays (jobs queued before accounts existed: the default account). */
  accountId?: string;
  endpoint: Endpoint;
  /** Catalog model id the client asked for. */
  model: string;
  /** Validated request body, or absent when stored under `payloadKey(jobId)`. */
  payload?: EndpointPayloads[Endpoint];
  stream: boolean;
  /** Epoch ms after which nobody is waiting for the answer. */
  deadline: number;
  /**
   * The band it is served in (chat and Responses requests; absent: `default`): the tier it asked for where its
   * account may use it (`shared/scheduling/tiers.ts`). What it is billed at and echoed as is the tier it was
   * served in (`shared/scheduling/served-tier.ts`): the vendor's word where the vendor sells tiers, else what the queue
   * gave it.
   */
  serviceTier?: ServiceTier;
  /** A request of a Message Batch (shared/batches/): its result is recorded in its batch, not sent to a client. */
  batch?: BatchJob;
  /** Placed where other work of its band waited (`placeJob`): what a priority request's premium buys. */
  contended?: boolean;
  /**
   * Its place's claim (account, weight, tokens, tier), kept so a worker can place it again at the same fair place in
   * another vendor's lane when its model falls back there (`shared/scheduling/lane-move.ts`); absent in jobs of older
   * apis.
   */
  claim?: FairClaim;
  /** Times it was moved to another vendor's lane (at most once). */
  laneMoves?: number;
  /** Epoch ms of its first wait on a vendor rate limit (RATE_LIMIT_WAIT_MS bounds them all). */
  rateLimitedSince?: number;
  /**
   * The request opted into the response cache (shared/cache/): its hash, how long its answer is kept, whether its job
   * leads.
   */
  cache?: JobCachePlan;
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

/**
 * The queue's id of a job; a job queued by an api before the ids were named apart carries only `requestId`, then its
 * job id too.
 */
export function jobIdOf(data: Pick<GatewayJobData, 'requestId' | 'jobId'>): string {
  return data.jobId ?? data.requestId;
}

/** Whether a run of a job is its first: not a retry after a failure, not a run again after a stall. */
export function isFirstRun(job: { attemptsStarted?: number; attemptsMade: number }): boolean {
  return (job.attemptsStarted ?? 1) <= 1 && job.attemptsMade === 0;
}

export interface GatewayJobResult {
  /** The response body, or a pointer to it under `resultKey` when large. */
  body?: string;
  bodyRef?: string;
  /** The run moved the job to this queue (another vendor's lane): this is a stub, removed once recorded. */
  movedTo?: string;
}

/**
 * Whether a job's result is the stub a move to another vendor's lane left behind (`shared/scheduling/lane-move.ts`).
 */
export function movedStub(
  result: GatewayJobResult | null | undefined,
): result is GatewayJobResult & { movedTo: string } {
  return typeof result?.movedTo === 'string';
}

/** Where an async job can be found, and whose it is: kept under `asyncJobKey(id)` for ASYNC_RESULT_TTL_S. */
export interface AsyncJobRecord {
  queue: QueueName;
  /** The capped vendor's lane it waits in (`shared/scheduling`); absent: the capability's shared lane. */
  lane?: string;
  keyId: string;
  endpoint: Endpoint;
  model: string;
  created: number;
  contentType?: string;
  /** The request, for resources that echo it (videos). */
  request?: Partial<VideoInput>;
}

/**
 * Whether a job's answer is kept in the response cache: its request opted in and a client is held for it (an async
 * job's answer is kept in its own store for its reader, not in the cache).
 */
export function keepsAnswer(data: Pick<GatewayJobData, 'cache' | 'async'>): boolean {
  return data.cache !== undefined && !data.async;
}
