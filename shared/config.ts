import type { QueueName } from './queues.js';
import { queueNames } from './queues.js';

/**
 * Every setting of the gateway, read from the environment in one place.
 * Called by the entry points; nothing reads process.env at import time.
 */
export interface Config {
  port: number;
  host: string;
  redisUrl: string;
  adminToken: string | undefined;
  logLevel: string;
  catalogFile: string | undefined;
  /** Queues this worker process serves. */
  workerQueues: QueueName[];
  concurrency: Record<QueueName, number>;
  /** Waiting jobs per queue past which the api answers 503. */
  maxWaiting: Record<QueueName, number>;
  /** How long a request may wait and run, per queue. */
  deadlineMs: Record<QueueName, number>;
  /** Vendor attempts per job (first call included). */
  jobAttempts: number;
  retryBaseMs: number;
  /** BullMQ lock; a worker silent this long is presumed dead and its job handed on. */
  workerLockMs: number;
  sseKeepAliveMs: number;
  maxBodyBytes: number;
  /** Bodies larger than this travel beside the job (Redis key), not inside it. */
  inlinePayloadBytes: number;
  shutdownGraceMs: number;
  keyCacheTtlMs: number;
  /** Where uploads and generated files are kept. */
  blobDir: string;
  /** How clients reach this gateway; signed file URLs start with it. Unset: the request's own scheme and host. */
  publicBaseUrl: string | undefined;
  blobUrlSecret: string | undefined;
  blobUrlTtlSeconds: number;
  /** Largest audio upload (OpenAI's limit is 25 MB). */
  maxAudioBytes: number;
  /** Largest image upload per file. */
  maxImageBytes: number;
  /** How long async job results (and videos) stay retrievable. */
  asyncResultTtlSeconds: number;
  /** Seconds between sweeps of expired blobs (one process sweeps per interval); 0: never. */
  blobSweepIntervalSeconds: number;
}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}

function perQueue(env: Env, prefix: string, defaults: Record<QueueName, number>, min = 0): Record<QueueName, number> {
  const out = { ...defaults };
  for (const name of queueNames) out[name] = int(env, `${prefix}_${name.toUpperCase()}`, int(env, prefix, defaults[name], min), min);
  return out;
}

export function loadConfig(env: Env = process.env): Config {
  const workerQueues = (env.WORKER_QUEUES ?? queueNames.join(','))
    .split(',')
    .map((q) => q.trim())
    .filter(Boolean);
  for (const q of workerQueues) {
    if (!(queueNames as readonly string[]).includes(q)) {
      throw new Error(`WORKER_QUEUES names an unknown queue "${q}"; known: ${queueNames.join(', ')}`);
    }
  }
  return {
    port: int(env, 'PORT', 8080),
    host: env.HOST ?? '0.0.0.0',
    redisUrl: env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    adminToken: env.ADMIN_TOKEN || undefined,
    logLevel: env.LOG_LEVEL ?? 'info',
    catalogFile: env.CATALOG_FILE || undefined,
    workerQueues: workerQueues as QueueName[],
    concurrency: perQueue(env, 'WORKER_CONCURRENCY', { chat: 256, embeddings: 32, image: 64, audio: 16, video: 64 }, 1),
    maxWaiting: perQueue(env, 'QUEUE_MAX_WAITING', { chat: 10_000, embeddings: 10_000, image: 5_000, audio: 1_000, video: 5_000 }, 1),
    deadlineMs: perQueue(env, 'REQUEST_DEADLINE_MS', { chat: 600_000, embeddings: 120_000, image: 600_000, audio: 600_000, video: 3_600_000 }, 1),
    jobAttempts: int(env, 'JOB_ATTEMPTS', 4, 1),
    retryBaseMs: int(env, 'RETRY_BASE_MS', 250, 1),
    workerLockMs: int(env, 'WORKER_LOCK_MS', 10_000, 1000),
    sseKeepAliveMs: int(env, 'SSE_KEEPALIVE_MS', 15_000, 100),
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', 50 * 1024 * 1024, 1024),
    inlinePayloadBytes: int(env, 'INLINE_PAYLOAD_BYTES', 64 * 1024, 0),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 30_000, 0),
    keyCacheTtlMs: int(env, 'KEY_CACHE_TTL_MS', 60_000, 0),
    blobDir: env.BLOB_DIR ?? '.data/blobs',
    publicBaseUrl: env.PUBLIC_BASE_URL ? env.PUBLIC_BASE_URL.replace(/\/+$/, '') : undefined,
    blobUrlSecret: env.BLOB_URL_SECRET || undefined,
    blobUrlTtlSeconds: int(env, 'BLOB_URL_TTL_S', 3600, 1),
    maxAudioBytes: int(env, 'MAX_AUDIO_BYTES', 25 * 1024 * 1024, 1),
    maxImageBytes: int(env, 'MAX_IMAGE_BYTES', 50 * 1024 * 1024, 1),
    asyncResultTtlSeconds: int(env, 'ASYNC_RESULT_TTL_S', 86_400, 60),
    blobSweepIntervalSeconds: int(env, 'BLOB_SWEEP_INTERVAL_S', 600, 0),
  };
}
