import slotOf from 'cluster-key-slot';
import type { Endpoint, EndpointPayloads } from './endpoints.js';
import type { VideoInput } from './schemas/media-inputs.js';

/** One BullMQ queue per capability; a capability's workers scale alone. */
export const queueNames = ['chat', 'embeddings', 'image', 'audio', 'video'] as const;
export type QueueName = (typeof queueNames)[number];

/**
 * Key prefix of every Redis key the gateway owns (BullMQ keys live under `bull:`).
 * A request's own keys (payload, result, replay log, stored response) hash by
 * their whole name, so on a Redis Cluster they spread over every shard.
 */
export const keyPrefix = 'sy:';
/**
 * Accounts, keys, limits, reservations and usage share one hash tag: a
 * reservation and its settlement each stay one script over one slot, so
 * money stays exact on a Cluster as on one server.
 */
export const accountsPrefix = `${keyPrefix}{acct}:`;

const clusterSlots = 16_384;

/**
 * The BullMQ queue of one shard of a capability. Its name is a hash tag, so
 * every key of the queue (`bull:{chat}:wait`, `bull:{chat}:<job id>`, …) shares
 * one slot: BullMQ's scripts run on one Cluster shard, and each capability (and
 * each of its shards) can live on another. Shard 0 is `{chat}`; shard i of n
 * is the first `{chat-k}` (k ≥ i) whose slot lies in the i-th n-th of the 16384
 * slots after the n-th that holds `{chat}`'s (wrapping round), one shard per n-th: on a
 * Cluster whose primaries own even ranges (as `redis-cli --cluster create`
 * deals them) n shards land on n primaries when there are that many.
 */
export function shardQueueName(queue: QueueName, shard: number, shards = 1): string {
  if (shard === 0) return `{${queue}}`;
  const width = clusterSlots / shards;
  const window = (Math.floor(slotOf(queue) / width) + shard) % shards;
  for (let k = shard; ; k++) {
    const tag = `${queue}-${k}`;
    if (Math.floor(slotOf(tag) / width) === window) return `{${tag}}`;
  }
}

/** The shard of a capability a job id belongs to (FNV-1a of the id): the api and every lookup agree without asking Redis. */
export function shardOfJob(jobId: string, shards: number): number {
  if (shards <= 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < jobId.length; i++) hash = Math.imul(hash ^ jobId.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % shards;
}
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
