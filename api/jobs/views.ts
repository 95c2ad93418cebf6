import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { GatewayError, type ErrorBody } from '../../shared/errors.js';
import { decodeAsyncJobFailure } from '../../shared/async-job-failure.js';
import { asyncJobKey } from '../../shared/redis-keys.js';
import { type AsyncJobRecord, type GatewayJobResult } from '../../shared/jobs.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { BlobRef } from '../../shared/blobs.js';
import type { BlobStore } from '../../storage/blob-store.js';

export type JobStatus = 'queued' | 'in_progress' | 'completed' | 'failed';

export interface OwnedJob {
  id: string;
  record: AsyncJobRecord;
  job: Job | undefined;
  status: JobStatus;
  progress: number;
}

const notFound = (id: string, what = 'job') =>
  new GatewayError(404, `No ${what} found with id '${id}'.`, { code: 'not_found', param: 'id' });

/** An async job of the caller's key; another key's job is a 404, as if it did not exist. */
export async function loadOwnedJob(
  redis: Redis,
  queues: QueueShards,
  id: string,
  keyId: string,
  what = 'job',
): Promise<OwnedJob> {
  const raw = /^[A-Za-z0-9_-]{1,100}$/.test(id) ? await redis.get(asyncJobKey(id)) : null;
  if (!raw) throw notFound(id, what);
  const record = JSON.parse(raw) as AsyncJobRecord;
  if (record.keyId !== keyId) throw notFound(id, what);
  // State first, then the job: read the other way round, a job that fails in between reads as
  // failed with the reason it did not have yet when fetched.
  const queue = queues.forJob(record.queue, id, record.lane);
  const state = queue ? await queue.getJobState(id) : 'unknown';
  const job = queue && state !== 'unknown' ? await queue.getJob(id) : undefined;
  const status: JobStatus =
    state === 'completed'
      ? 'completed'
      : state === 'failed' || state === 'unknown'
        ? 'failed'
        : state === 'active'
          ? 'in_progress'
          : 'queued';
  const progress = status === 'completed' ? 100 : typeof job?.progress === 'number' ? job.progress : 0;
  return { id, record, job, status, progress };
}

/** The error a failed job ended with, in the OpenAI shape. */
export function jobError(owned: OwnedJob): ErrorBody['error'] | null {
  if (owned.status !== 'failed') return null;
  // A reason that is not one of ours (e.g. BullMQ's stalled-job reason) is reported generically below.
  const wire = decodeAsyncJobFailure(owned.job?.failedReason);
  if (wire) return wire.error;
  return {
    message: owned.job ? 'The job failed: its worker was lost. Retry the request.' : 'The job expired.',
    type: 'server_error',
    param: null,
    code: owned.job ? 'worker_lost' : 'expired',
  };
}

/** The exact body the synchronous call would have returned (parsed when it is JSON). */
export async function jobResultBody(owned: OwnedJob, blobs: BlobStore): Promise<string | undefined> {
  if (owned.status !== 'completed') return undefined;
  const result = owned.job?.returnvalue as GatewayJobResult | undefined;
  if (result?.body !== undefined) return result.body;
  if (result?.bodyRef) return (await blobs.get(result.bodyRef)).toString('utf8');
  return undefined;
}

export async function renderJob(owned: OwnedJob, blobs: BlobStore) {
  const body = await jobResultBody(owned, blobs);
  let result: unknown = null;
  if (body !== undefined) {
    const json = !owned.record.contentType || owned.record.contentType.startsWith('application/json');
    result = json ? JSON.parse(body) : body;
  }
  return {
    id: owned.id,
    object: 'job' as const,
    status: owned.status,
    progress: owned.progress,
    created: owned.record.created,
    endpoint: owned.record.endpoint,
    model: owned.record.model,
    result,
    error: jobError(owned),
  };
}

/** OpenAI's VideoResource for a video job. */
export function renderVideo(owned: OwnedJob, expiresAfterSeconds: number) {
  const request = owned.record.request ?? {};
  const finishedOn = owned.job?.finishedOn ? Math.floor(owned.job.finishedOn / 1000) : null;
  const error = jobError(owned);
  return {
    id: owned.id,
    object: 'video' as const,
    model: owned.record.model,
    status: owned.status,
    progress: owned.progress,
    created_at: owned.record.created,
    completed_at: owned.status === 'completed' ? finishedOn : null,
    expires_at: owned.status === 'completed' && finishedOn ? finishedOn + expiresAfterSeconds : null,
    prompt: request.prompt ?? null,
    size: request.size ?? null,
    seconds: request.seconds ?? null,
    remixed_from_video_id: null,
    error: error ? { code: error.code ?? 'failed', message: error.message } : null,
  };
}

export async function videoFiles(
  owned: OwnedJob,
  blobs: BlobStore,
): Promise<{ video: BlobRef; thumbnail: BlobRef | null }> {
  const body = await jobResultBody(owned, blobs);
  if (!body)
    throw new GatewayError(404, `Video '${owned.id}' is not ready: its status is ${owned.status}.`, {
      code: 'video_not_ready',
    });
  return JSON.parse(body) as { video: BlobRef; thumbnail: BlobRef | null };
}
