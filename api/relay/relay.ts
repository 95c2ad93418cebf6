import type { Context } from 'koa';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import type { Config } from '../../shared/config.js';
import { endpoints, type Endpoint, type EndpointPayloads } from '../../shared/endpoints.js';
import type { VideoInput } from '../../shared/schemas/media-inputs.js';
import { GatewayError } from '../../shared/errors.js';
import { asyncJobKey, payloadKey } from '../../shared/keys.js';
import { type AsyncJobRecord, type GatewayJobData } from '../../shared/jobs.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { Backpressure } from './backpressure.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { uploadKeys } from '../../storage/upload-keys.js';
import type { ReplyHub } from './reply-hub.js';
import type { KeyAccess } from '../../shared/accounts.js';
import { releaseReservation } from '../../shared/billing.js';
import { isCluster } from '../../shared/redis.js';
import { reserveSpend, type SpendEstimate } from '../accounts/spend.js';
import { noteEnqueued } from '../requests/request-log.js';
import { PlainExchange } from './plain-exchange.js';
import { StreamExchange } from './stream-exchange.js';
import { jobTraceCarrier, traceQueued, traceRelay, type RequestTrace } from '../http/request-tracing.js';

export interface RelayDeps {
  config: Config;
  redis: Redis;
  queues: QueueShards;
  hub: ReplyHub;
  backpressure: Backpressure;
  /** Where uploads live: a request's uploads are deleted here when its job never runs. */
  blobs?: BlobStore;
}

export interface RelayRequest<E extends Endpoint = Endpoint> {
  endpoint: E;
  model: string;
  keyId: string;
  /** The validated request: what the job carries to the worker as its payload. */
  body: EndpointPayloads[E];
  stream: boolean;
  /** A stream's resume grace as the request asked for it (capped); undefined: STREAM_RESUME_GRACE_MS. */
  resumeGraceMs?: number;
  /** Answer 202 at once; the result is read from `GET /v1/jobs/{id}`. */
  async?: boolean;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /** Job id when it is not the request id (videos). */
  jobId?: string;
  /** Who pays, and the most the request may cost: reserved before it is queued. */
  spend?: { access: KeyAccess; estimate: SpendEstimate };
  /** Runs just before the job is queued (after the reservation). */
  prepare?: () => Promise<void>;
  /** A background response: queued and left to run; the caller answers the client. */
  detached?: boolean;
}

/** `Prefer: respond-async` (RFC 7240) asks for a 202 and a job to poll. */
export function prefersAsync(prefer: string | undefined): boolean {
  return !!prefer && prefer.split(/[,;]/).some((token) => token.trim().toLowerCase() === 'respond-async');
}

/**
 * Enqueues a validated request and answers the client from the reply channel:
 * the final body for a plain request, the chunks as SSE for a stream.
 */
export async function relay<E extends Endpoint>(ctx: Context, deps: RelayDeps, request: RelayRequest<E>): Promise<void> {
  const { config, queues, hub, backpressure } = deps;
  const requestId: string = ctx.state.requestId;
  const log: Logger = ctx.state.log;
  const row = endpoints[request.endpoint];
  const queueName = row.queue;
  const queue = queues.forJob(queueName, request.jobId ?? requestId);
  if (!queue) throw new GatewayError(503, `The ${queueName} capability is not served here.`, { code: 'overloaded' });
  backpressure.admit(queueName);

  const deadlineMs = row.deadlineMs(config);
  const deadline = Date.now() + deadlineMs;
  const jobId = request.jobId ?? requestId;
  const spend = request.spend;
  // A request held open for its answer reserves in the same round trip as its enqueue (see `enqueue`);
  // the others write more beside the job (a record, a stored response), so they reserve first. On a Redis
  // Cluster the job's key and the account's are in different slots, which one script may not span: reserve first.
  const gate = spend && !request.async && !request.detached && !request.prepare && !isCluster(deps.redis) ? queue.toKey(jobId) : undefined;
  if (spend && !gate) await reserveSpend(ctx, deps.redis, config, spend.access, jobId, spend.estimate, deadline);
  const data: GatewayJobData = {
    requestId: jobId,
    replyTo: hub.channel,
    keyId: request.keyId,
    endpoint: request.endpoint,
    model: request.model,
    stream: request.stream,
    deadline,
    ...(spend ? { accountId: spend.access.accountId } : {}),
  };
  if (request.endpoint.startsWith('images.')) {
    // X-Forwarded-Proto/Host count only with TRUST_PROXY; PUBLIC_BASE_URL overrides both.
    data.baseUrl = config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`;
  }
  // Tracing on: the job carries the request's trace context, so the worker's spans join its trace.
  const traced: RequestTrace | undefined = ctx.state.trace;
  if (traced) data.trace = jobTraceCarrier(traced);
  const serialized = JSON.stringify(request.body);
  if (serialized.length > config.inlinePayloadBytes) {
    await deps.redis.set(payloadKey(jobId), serialized, 'PX', deadlineMs + 60_000);
  } else {
    data.payload = request.body;
  }

  // A job that will never run (it was not enqueued, or removed while waiting) gives back its reservation,
  // and the uploads it never read are deleted at once;
  // once a worker holds the job, the worker deletes them when the job ends.
  const abandon = () => {
    if (spend) {
      void releaseReservation(deps.redis, spend.access.accountId, jobId).catch((error: unknown) => log.warn({ err: error }, 'could not release the reservation of a job that never ran'));
    }
    const keys = deps.blobs ? uploadKeys(request.body) : [];
    if (keys.length === 0) return;
    void Promise.allSettled(keys.map((key) => deps.blobs!.delete(key))).then((results) => {
      const failed = results.filter((r) => r.status === 'rejected').length;
      if (failed > 0) log.warn({ failed }, 'could not delete the uploads of a job that never ran');
    });
  };
  /**
   * Queues the job with what goes beside it, all on the one api connection in
   * the order written, so one round trip carries them. A prepared record is
   * written as it is called (the add only after BullMQ's own awaits), so a
   * worker always finds it. A gated reservation runs first too: a refusal
   * leaves a placeholder under the job's key that makes the add a no-op (no
   * job is queued under an id that exists); the refusal is then answered and
   * the placeholder removed.
   */
  const enqueue = async (options: Parameters<Queue['add']>[2]) => {
    const [prepared, reserved, added] = await Promise.allSettled([
      request.prepare?.(),
      gate && spend ? reserveSpend(ctx, deps.redis, config, spend.access, jobId, spend.estimate, deadline, gate) : undefined,
      queue.add(request.endpoint, data, options),
    ]);
    if (reserved.status === 'rejected') {
      // Refused (or the reservation failed): take out whatever stands under the job's id, placeholder or job.
      // A worker can hold it only if the two were not run in order (a script reloaded after SCRIPT FLUSH): it is then billed as it runs.
      await queue.remove(jobId).catch((error: unknown) => log.warn({ err: error }, 'could not remove the job of a refused request'));
      throw reserved.reason;
    }
    if (added.status === 'rejected') {
      abandon();
      throw added.reason;
    }
    noteEnqueued(ctx);
    // The job is queued and will be answered; only what was prepared beside it (a stored record) is missing.
    if (prepared.status === 'rejected') log.warn({ err: prepared.reason }, 'could not write the record prepared for this job');
    if (traced) traceQueued(traced, data, queueName);
  };

  if (request.async) {
    data.async = true;
    const record: AsyncJobRecord = {
      queue: queueName,
      keyId: request.keyId,
      endpoint: request.endpoint,
      model: request.model,
      created: Math.floor(Date.now() / 1000),
      ...(request.contentType ? { contentType: request.contentType } : {}),
      ...(request.endpoint === 'videos' ? { request: request.body as VideoInput } : {}),
    };
    const ttl = config.asyncResultTtlSeconds;
    await deps.redis.set(asyncJobKey(jobId), JSON.stringify(record), 'EX', ttl);
    await enqueue({
      jobId,
      attempts: config.jobAttempts,
      backoff: { type: 'gateway' },
      removeOnComplete: { age: ttl },
      removeOnFail: { age: ttl },
    });
    ctx.status = 202;
    ctx.set('location', `/v1/jobs/${jobId}`);
    ctx.body = { id: jobId, object: 'job', status: 'queued', created: record.created };
    return;
  }

  // A job answered through pub/sub (or run in the background): kept briefly once finished, as its endpoint says.
  const answeredJob = {
    jobId,
    attempts: config.jobAttempts,
    backoff: { type: 'gateway' },
    removeOnComplete: { age: row.keep.completedSeconds, count: row.keep.completedCount },
    removeOnFail: { age: row.keep.failedSeconds, count: row.keep.failedCount },
  };
  if (request.detached) {
    data.background = true;
    await enqueue(answeredJob);
    return;
  }

  const exchange = request.stream
    ? new StreamExchange(ctx, deps, jobId, queue, log)
    : new PlainExchange(ctx, deps, jobId, queue, log, request.contentType);
  exchange.resumeGraceMs = request.resumeGraceMs;
  hub.register(jobId, exchange);
  try {
    await enqueue(answeredJob);
    exchange.jobKey = queue.toKey(jobId);
    if (traced) traceRelay(traced, exchange);
    await exchange.run(deadline);
  } finally {
    hub.unregister(jobId);
    if (exchange.cancelled) void exchange.cancelled.then((removed) => removed && abandon());
  }
}
