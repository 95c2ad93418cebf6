import { isIP } from 'node:net';
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
  /** Believe X-Forwarded-Proto/Host/For: only behind a proxy that sets them (a client could forge them otherwise). */
  trustProxy: boolean;
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
  /**
   * FETCH_ALLOW_HOSTS: hosts a worker may fetch vendor-supplied URLs from even
   * when they are not public (comma-separated: `images.internal`, `*.corp.example`,
   * `10.1.2.3`, `10.1.0.0/16`). Default: none. The channel's own base URL never needs listing.
   */
  fetchAllowHosts: string[];
  /** FETCH_ALLOW_PRIVATE=on: vendor-supplied URLs may point at any address (development only). Default: off. */
  fetchAllowPrivate: boolean;
}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${raw}"`);
  return value;
}

function flag(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === '') return fallback;
  if (['on', 'true', '1', 'yes'].includes(raw)) return true;
  if (['off', 'false', '0', 'no'].includes(raw)) return false;
  throw new Error(`${name} must be on or off, got "${env[name]}"`);
}

function baseUrl(env: Env, name: string): string | undefined {
  const raw = env[name];
  if (!raw) return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`${name} must be an absolute http(s) URL, got "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`${name} must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

/** Host names, `*.` wildcards, IP addresses and CIDR ranges; a range that cannot be a range fails at startup. */
function hostList(env: Env, name: string): string[] {
  const entries = (env[name] ?? '')
    .split(',')
    .map((entry) => entry.trim().toLowerCase())
    .filter(Boolean);
  for (const entry of entries) {
    const [network = '', bits, extra] = entry.replace(/^\[(.*?)\]/, '$1').split('/');
    const family = isIP(network);
    const max = family === 6 ? 128 : 32;
    const validName = family !== 0 || /^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(network);
    if (!validName || extra !== undefined || (bits !== undefined && (family === 0 || !/^\d+$/.test(bits) || Number(bits) > max))) {
      throw new Error(`${name} holds "${entry}", which is neither a host name (no port), an IP address nor a CIDR range`);
    }
  }
  return entries;
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
    publicBaseUrl: baseUrl(env, 'PUBLIC_BASE_URL'),
    trustProxy: flag(env, 'TRUST_PROXY', false),
    blobUrlSecret: env.BLOB_URL_SECRET || undefined,
    blobUrlTtlSeconds: int(env, 'BLOB_URL_TTL_S', 3600, 1),
    maxAudioBytes: int(env, 'MAX_AUDIO_BYTES', 25 * 1024 * 1024, 1),
    maxImageBytes: int(env, 'MAX_IMAGE_BYTES', 50 * 1024 * 1024, 1),
    asyncResultTtlSeconds: int(env, 'ASYNC_RESULT_TTL_S', 86_400, 60),
    blobSweepIntervalSeconds: int(env, 'BLOB_SWEEP_INTERVAL_S', 600, 0),
    fetchAllowHosts: hostList(env, 'FETCH_ALLOW_HOSTS'),
    fetchAllowPrivate: flag(env, 'FETCH_ALLOW_PRIVATE', false),
  };
}
