import type { JobsOptions, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { KeyAccess } from '../../shared/accounts.js';
import { releaseReservation } from '../../shared/money/billing.js';
import type { Config } from '../../shared/config.js';
import { GatewayError } from '../../shared/errors.js';
import { asyncJobKey, payloadKey } from '../../shared/redis-keys.js';
import type { AsyncJobRecord, GatewayJobData } from '../../shared/jobs.js';
import type { Logger } from '../../shared/logger.js';
import type { QueueName } from '../../shared/queues.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import { isCluster } from '../../shared/redis.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { uploadKeys } from '../../storage/upload-keys.js';
import { admitted, reservationOf, reserveSpend, type SpendEstimate } from '../accounts/spend.js';
import {
  type Backpressure,
  admitJob,
  leaveBacklog,
  placeJob,
  plainJobOptions,
  type FairClaim,
} from '../../shared/scheduling/index.js';

/**
 * How the client is answered: held open for the job's answer, at once with a job to poll (async), or at once while the
 * job runs on (background).
 */
export type AnswerMode = 'held' | 'async' | 'background';

/** What `enqueue` needs of any job it queues: an endpoint's (`JobPlan`) or a tool call's (api/mcp/). */
export interface QueuedJob {
  /** The job's id in its queue: the request's id, unless the handler named the job (a response's, a video's id). */
  id: string;
  mode: AnswerMode;
  /** The request's id (money and the log), the name the job is added under, and its fair place once placed. */
  data: { requestId: string; endpoint: string; claim?: FairClaim; contended?: boolean };
  /** The validated payload, whether it rides in the job or is kept apart (its uploads are deleted if it never runs). */
  payload: object;
  options: JobsOptions;
  /** Epoch ms after which nobody waits for the answer (also in `data`). */
  deadline: number;
  /** The payload's JSON, when it is too large to ride in the job and is kept apart under `payloadKey`. */
  storedPayload?: string;
  /** Where an async job is found, and whose it is (`GET /v1/jobs/{id}`). */
  asyncRecord?: AsyncJobRecord;
}

/** A request's job as it will be queued, built once from its endpoint row and what the handler accepted. */
export interface JobPlan extends QueuedJob {
  queue: QueueName;
  /** The capped vendor's lane, when it waits in one. */
  lane?: string;
  data: GatewayJobData;
}

export interface EnqueueDeps {
  config: Config;
  redis: Redis;
  queues: QueueShards;
  backpressure: Backpressure;
  /** Where uploads live: a request's uploads are deleted here when its job never runs. */
  blobs?: BlobStore;
}

/**
 * What goes into Redis with a job: who pays and the most it may cost, and a record written just before the add (a
 * stored response's).
 */
export interface Beside {
  /**
   * `requestsCounted`: the key's rate of requests counted this request already (it first waited to share another's
   * call).
   */
  spend?: { access: KeyAccess; estimate: SpendEstimate; requestsCounted?: boolean };
  /** Its place in the queue: its band, and, when its queue may be contended, its fair tag. */
  fair: FairClaim;
  beforeAdd?: () => Promise<void>;
}

export interface Enqueued {
  /** The key's rate-limit headers, from its reservation. */
  headers: Record<string, string>;
  /** For a job that will never run (removed while waiting): gives back its reservation and deletes its uploads. */
  abandon(): void;
}

/** The queue shard (or vendor lane) a job goes to: a 503 when this api serves no queue of its capability. */
export function jobQueue(queues: QueueShards, job: Pick<JobPlan, 'id' | 'queue' | 'lane'>): Queue {
  const queue = queues.forJob(job.queue, job.id, job.lane);
  if (!queue) throw new GatewayError(503, `The ${job.queue} capability is not served here.`, { code: 'overloaded' });
  return queue;
}

/** The queue a job goes to, once its account has room in its lane's waiting room (a 429 to the account when not). */
export function queueFor(
  deps: Pick<EnqueueDeps, 'queues' | 'backpressure'>,
  job: Pick<JobPlan, 'id' | 'queue' | 'lane'>,
  payer: { accountId: string; weight: number },
): Queue {
  const queue = jobQueue(deps.queues, job);
  deps.backpressure.admit(job.queue, job.lane, payer.accountId, payer.weight);
  return queue;
}

/**
 * Queues a request's job with what goes beside it: the reservation of its
 * worst-case cost, a payload kept apart, an async job's record, then the add. A job held for its answer, with nothing
 * written beside it, reserves in the same round trip as its add (the gate): the two
 * go out on the one api connection in order; a refusal leaves a placeholder
 * under the job's key that makes the add a no-op, and is then answered and
 * the placeholder removed. Any other job reserves first (on a Redis Cluster
 * always: the job's key and the account's are in different slots, which one
 * script may not span).
 */
export async function enqueue(
  deps: Pick<EnqueueDeps, 'config' | 'redis' | 'blobs'>,
  queue: Queue,
  job: QueuedJob,
  beside: Beside,
  log: Logger,
): Promise<Enqueued> {
  const { config, redis } = deps;
  const { spend } = beside;
  // It travels with the job: a worker routing it to another capped vendor places it again there
  // (shared/scheduling/lane-move.ts).
  job.data.claim = beside.fair;
  // A job with nothing written beside it, on a Redis where one script reaches the account and the queue: reserved,
  // placed and added in one round trip.
  const storedOptions =
    !beside.beforeAdd && job.storedPayload === undefined && !job.asyncRecord && !isCluster(redis)
      ? plainJobOptions(job.id, job.options)
      : undefined;
  if (storedOptions !== undefined) return admitInOneStep(deps, queue, job, beside, storedOptions, log);
  const gate = spend && job.mode === 'held' && !beside.beforeAdd && !isCluster(redis) ? queue.toKey(job.id) : undefined;
  // Money is the request's: reserved, released and settled under its request id, whatever its job's id.
  const counted = { requests: spend?.requestsCounted !== true, tokens: true };
  const reserve = (gateKey?: string) =>
    reserveSpend(redis, config, spend!.access, job.data.requestId, spend!.estimate, job.deadline, gateKey, counted);
  // The job's priority, from its band and, where jobs may wait, its fair tag; it is counted in its lane's backlog
  // (read in the same round trip as a reservation made first). Where nothing waits, the order within the band is moot
  // and the job goes to its band's head untagged.
  const { fair: claim } = beside;
  const [reservedFirst, placed] = await Promise.allSettled([
    spend && !gate ? reserve() : undefined,
    placeJob(redis, queue, job.id, claim),
  ]);
  // A job that never runs leaves the backlog again, and its account gets its tag's cost back.
  const leave = leaving(redis, queue, job, log);
  if (placed.status === 'rejected') {
    if (spend && reservedFirst.status === 'fulfilled' && reservedFirst.value) {
      await releaseReservation(redis, spend.access.accountId, job.data.requestId).catch((error: unknown) =>
        log.warn({ err: error }, 'could not release the reservation of a job that was not queued'),
      );
    }
    throw placed.reason;
  }
  if (reservedFirst.status === 'rejected') {
    leave();
    throw reservedFirst.reason;
  }
  const { priority, behindOthers } = placed.value;
  // Placed where other work of its band waited: what a priority request's premium buys
  // (shared/scheduling/served-tier.ts).
  if (behindOthers) job.data.contended = true;
  let headers: Record<string, string> = reservedFirst.value ?? {};
  if (job.storedPayload !== undefined)
    await redis.set(payloadKey(job.id), job.storedPayload, 'PX', job.deadline - Date.now() + 60_000);
  if (job.asyncRecord)
    await redis.set(asyncJobKey(job.id), JSON.stringify(job.asyncRecord), 'EX', config.asyncResultTtlSeconds);

  const abandon = abandonment(deps, job, spend, leave, log);
  // A prepared record is written as it is called (the add only after BullMQ's own awaits), so a worker always finds it.
  const [prepared, reserved, added] = await Promise.allSettled([
    beside.beforeAdd?.(),
    gate ? reserve(gate) : undefined,
    queue.add(job.data.endpoint, job.data, { ...job.options, priority }),
  ]);
  if (reserved.status === 'rejected') {
    // Refused (or the reservation failed): take out whatever stands under the job's id, placeholder or job.
    // A worker can hold it only if the two were not run in order (a script reloaded after SCRIPT FLUSH): it is then
    // billed as it runs.
    await queue
      .remove(job.id)
      .catch((error: unknown) => log.warn({ err: error }, 'could not remove the job of a refused request'));
    leave();
    throw reserved.reason;
  }
  if (reserved.value) headers = reserved.value;
  if (added.status === 'rejected') {
    abandon();
    throw added.reason;
  }
  // The job is queued and will be answered; only what was prepared beside it (a stored record) is missing.
  if (prepared.status === 'rejected')
    log.warn({ err: prepared.reason }, 'could not write the record prepared for this job');
  return { headers, abandon };
}

/**
 * What uncounts a job that was not queued, or will never run, from its queue's backlog (its account gets its tag's cost
 * back).
 */
function leaving(redis: Redis, queue: Queue, job: QueuedJob, log: Logger): () => void {
  return () =>
    void leaveBacklog(redis, queue.name, job.id).catch((error: unknown) =>
      log.warn({ err: error }, 'could not uncount a job that was not queued (the recount will)'),
    );
}

/**
 * What gives back a job that will never run (removed while waiting): its backlog place, its reservation, its uploads.
 */
function abandonment(
  deps: Pick<EnqueueDeps, 'redis' | 'blobs'>,
  job: QueuedJob,
  spend: Beside['spend'],
  leave: () => void,
  log: Logger,
): () => void {
  return () => {
    leave();
    if (spend) {
      void releaseReservation(deps.redis, spend.access.accountId, job.data.requestId).catch((error: unknown) =>
        log.warn({ err: error }, 'could not release the reservation of a job that never ran'),
      );
    }
    const keys = deps.blobs ? uploadKeys(job.payload) : [];
    if (keys.length === 0) return;
    void Promise.allSettled(keys.map((key) => deps.blobs!.delete(key))).then((results) => {
      const failed = results.filter((r) => r.status === 'rejected').length;
      if (failed > 0) log.warn({ failed }, 'could not delete the uploads of a job that never ran');
    });
  };
}

/**
 * The request's reservation, place and add in one script (shared/scheduling/admit-job.ts): a refusal throws the
 * client's 429 (or 401) with nothing placed or added, so nothing is undone.
 */
async function admitInOneStep(
  deps: Pick<EnqueueDeps, 'config' | 'redis' | 'blobs'>,
  queue: Queue,
  job: QueuedJob,
  beside: Beside,
  storedOptions: string,
  log: Logger,
): Promise<Enqueued> {
  const { spend, fair: claim } = beside;
  const counted = { requests: spend?.requestsCounted !== true, tokens: true };
  const money = spend
    ? reservationOf(deps.config, spend.access, job.data.requestId, spend.estimate, job.deadline, counted)
    : undefined;
  const admission = await admitJob(
    deps.redis,
    queue,
    { id: job.id, name: job.data.endpoint, data: job.data, storedOptions },
    claim,
    money,
  );
  // Refused: the 429's headers and message, thrown; admitted: the key's rate-limit headers.
  const headers = admission.outcome ? admitted(admission.outcome, spend!.access) : {};
  if (admission.placed?.behindOthers && claim.tier === 'priority') job.data.contended = true;
  return { headers, abandon: abandonment(deps, job, spend, leaving(deps.redis, queue, job, log), log) };
}
