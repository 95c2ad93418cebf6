import type { ServerResponse } from 'node:http';
import { setTimeout as pause } from 'node:timers/promises';
import type { Context } from 'koa';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../shared/logger.js';
import type { Config } from '../shared/config.js';
import type { Endpoint } from '../shared/catalog.js';
import { GatewayError, timeoutError, type WireError } from '../shared/errors.js';
import {
  cancelChannel,
  asyncJobKey,
  payloadKey,
  queueForEndpoint,
  resultKey,
  type GatewayJobData,
  type GatewayJobResult,
  type QueueName,
} from '../shared/queues.js';
import type { ReplyMessage } from '../shared/reply.js';
import type { Backpressure } from './backpressure.js';
import type { BlobStore } from '../storage/blob-store.js';
import { uploadKeys } from '../storage/upload-keys.js';
import type { PendingReply, ReplyHub } from './reply-hub.js';

export interface RelayDeps {
  config: Config;
  redis: Redis;
  queues: Map<QueueName, Queue>;
  hub: ReplyHub;
  backpressure: Backpressure;
  /** Where uploads live: a request's uploads are deleted here when its job never runs. */
  blobs?: BlobStore;
}

export interface RelayRequest {
  endpoint: Endpoint;
  model: string;
  keyId: string;
  body: Record<string, unknown>;
  stream: boolean;
  /** Answer 202 at once; the result is read from `GET /v1/jobs/{id}`. */
  async?: boolean;
  /** Content type of the final body (JSON unless said). */
  contentType?: string;
  /** Job id when it is not the request id (videos). */
  jobId?: string;
}

/** Where an async job can be found, and whose it is. */
export interface AsyncJobRecord {
  queue: QueueName;
  keyId: string;
  endpoint: Endpoint;
  model: string;
  created: number;
  contentType?: string;
  /** The request, for resources that echo it (videos). */
  request?: Record<string, unknown>;
}


/** `Prefer: respond-async` (RFC 7240) asks for a 202 and a job to poll. */
export function prefersAsync(prefer: string | undefined): boolean {
  return !!prefer && prefer.split(/[,;]/).some((token) => token.trim().toLowerCase() === 'respond-async');
}

/**
 * A job that finished is removed from Redis moments after its reply was
 * published: a job found missing gets this long for that reply to arrive
 * before it is declared lost.
 */
const lostGraceMs = 1000;
/** How long a forced shutdown waits for each aborted request's answer to be written. */
const abortFlushMs = 2000;
const streamTrailer = 'data: [DONE]\n\n';

/** The job is gone from Redis (e.g. Redis restarted without persistence): nothing will ever answer it. */
export const jobLostError = () =>
  new GatewayError(503, 'The request was lost by the gateway (its queue lost the job, e.g. a Redis restart); retry the request.', {
    type: 'server_error',
    code: 'job_lost',
    headers: { 'retry-after': '1' },
  });

const sseHeaders = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};

/**
 * Enqueues a validated request and answers the client from the reply channel:
 * the final body for a plain request, the chunks as SSE for a stream.
 */
export async function relay(ctx: Context, deps: RelayDeps, request: RelayRequest): Promise<void> {
  const { config, queues, hub, backpressure } = deps;
  const requestId: string = ctx.state.requestId;
  const log: Logger = ctx.state.log;
  const queueName = queueForEndpoint[request.endpoint];
  const queue = queues.get(queueName);
  if (!queue) throw new GatewayError(503, `The ${queueName} capability is not served here.`, { code: 'overloaded' });
  backpressure.admit(queueName);

  const deadline = Date.now() + config.deadlineMs[queueName];
  const jobId = request.jobId ?? requestId;
  const data: GatewayJobData = {
    requestId: jobId,
    replyTo: hub.channel,
    keyId: request.keyId,
    endpoint: request.endpoint,
    model: request.model,
    stream: request.stream,
    deadline,
  };
  if (request.endpoint.startsWith('images.')) {
    // X-Forwarded-Proto/Host count only with TRUST_PROXY; PUBLIC_BASE_URL overrides both.
    data.baseUrl = config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`;
  }
  const serialized = JSON.stringify(request.body);
  if (serialized.length > config.inlinePayloadBytes) {
    await deps.redis.set(payloadKey(jobId), serialized, 'PX', config.deadlineMs[queueName] + 60_000);
  } else {
    data.payload = request.body;
  }

  // Uploads a job never read (it was not enqueued, or removed while waiting) are deleted at once;
  // once a worker holds the job, the worker deletes them when the job ends.
  const dropUploads = () => {
    const keys = deps.blobs ? uploadKeys(request.body) : [];
    if (keys.length === 0) return;
    void Promise.allSettled(keys.map((key) => deps.blobs!.delete(key))).then((results) => {
      const failed = results.filter((r) => r.status === 'rejected').length;
      if (failed > 0) log.warn({ failed }, 'could not delete the uploads of a job that never ran');
    });
  };
  const enqueue = async (options: Parameters<Queue['add']>[2]) => {
    try {
      await queue.add(request.endpoint, data, options);
    } catch (error) {
      dropUploads();
      throw error;
    }
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
      ...(request.endpoint === 'videos' ? { request: request.body } : {}),
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

  const exchange = request.stream
    ? new StreamExchange(ctx, deps, jobId, queue, log)
    : new PlainExchange(ctx, deps, jobId, queue, log, request.contentType);
  hub.register(jobId, exchange);
  try {
    await enqueue({
      jobId,
      attempts: config.jobAttempts,
      backoff: { type: 'gateway' },
      removeOnComplete: { age: 60, count: 1000 },
      removeOnFail: { age: 3600, count: 5000 },
    });
    exchange.jobKey = queue.toKey(jobId);
    await exchange.run(deadline);
  } finally {
    hub.unregister(jobId);
    if (exchange.cancelled) void exchange.cancelled.then((removed) => removed && dropUploads());
  }
}

abstract class Exchange implements PendingReply {
  lastSeq = 0;
  jobKey: string | undefined;
  protected settled = false;
  private reconciling = false;
  private finish!: () => void;
  private fail!: (error: unknown) => void;
  protected readonly finished = new Promise<void>((resolve, reject) => {
    this.finish = resolve;
    this.fail = reject;
  });
  protected readonly res: ServerResponse;

  constructor(
    protected readonly ctx: Context,
    protected readonly deps: RelayDeps,
    protected readonly requestId: string,
    protected readonly queue: Queue,
    protected readonly log: Logger,
  ) {
    this.res = ctx.res;
  }

  abstract readonly stream: boolean;
  abstract deliver(message: ReplyMessage): void;

  async run(deadline: number): Promise<void> {
    const onClose = () => {
      if (!this.settled && !this.res.writableFinished) void this.cancel();
    };
    this.res.once('close', onClose);
    const timer = setTimeout(() => this.timeout(), Math.max(0, deadline - Date.now()) + 1000);
    try {
      await this.finished;
    } finally {
      clearTimeout(timer);
      this.res.off('close', onClose);
    }
  }

  protected settle(error?: unknown): void {
    if (this.settled) return;
    this.settled = true;
    if (error === undefined) this.finish();
    else this.fail(error);
  }

  protected timeout(): void {
    this.log.warn('request deadline passed without an answer');
    this.failWith(timeoutError());
    void this.cancel();
  }

  protected abstract failWith(error: GatewayError): void;

  /** Set once the request is cancelled: true when the job was removed before any worker took it. */
  cancelled: Promise<boolean> | undefined;

  /** Nobody waits any more: drop the job if nobody took it yet, else tell the worker holding it to stop. */
  private cancel(reason = 'client left', lost = false): Promise<boolean> {
    this.settle();
    this.cancelled ??= (async () => {
      try {
        const removed = await this.queue.remove(this.requestId);
        // Removing a job that no longer exists "succeeds", yet a worker may still be running it.
        if (removed !== 1 || lost) await this.deps.redis.publish(cancelChannel, this.requestId);
        this.log.info({ removed: removed === 1 }, `${reason}; request cancelled`);
        return removed === 1;
      } catch (error) {
        this.log.warn({ err: error }, 'could not cancel request');
        return false;
      }
    })();
    return this.cancelled;
  }

  /** Forced shutdown: the client gets `error` now, and the job is cancelled so no worker runs it for nobody. */
  async abort(error: GatewayError): Promise<void> {
    if (this.settled) return;
    const answered =
      this.res.writableFinished || this.res.destroyed
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            this.res.once('finish', resolve);
            this.res.once('close', resolve);
          });
    this.failWith(error);
    const cancelled = this.cancel('server shutting down');
    await Promise.race([Promise.all([answered, cancelled]), pause(abortFlushMs)]);
  }

  /**
   * After a subscriber reconnect, or when the liveness sweep saw the job gone
   * or finished: answers from the job what pub/sub may have lost. A failed
   * read concludes nothing (the next sweep tries again); only a job Redis
   * says does not exist is declared lost.
   */
  reconcile(): void {
    if (this.settled || this.jobKey === undefined || this.reconciling) return;
    this.reconciling = true;
    this.check()
      .catch((error) => this.log.warn({ err: error }, 'reconcile failed; the liveness sweep retries'))
      .finally(() => {
        this.reconciling = false;
      });
  }

  private async check(): Promise<void> {
    const job = await this.queue.getJob(this.requestId);
    if (this.settled) return;
    if (job) {
      const state = await job.getState();
      // Read after the state: every chunk of a finished stream is in its log by now.
      if (this.stream) await this.deps.hub.replay(this.requestId, this);
      if (state === 'completed') this.finishFrom(job.returnvalue as GatewayJobResult | undefined);
      else if (state === 'failed') {
        // The worker published its own error before failing the job; it says more, so it gets to arrive first.
        await pause(lostGraceMs);
        this.failWith(new GatewayError(502, 'The request failed while the gateway was reconnecting.', { code: 'server_error' }));
      }
      return;
    }
    await pause(lostGraceMs);
    if (this.settled || (await this.deps.redis.exists(this.jobKey!)) === 1) return;
    if (this.stream) {
      // A log from the first chunk on without a gap outlives only a job that finished (and was removed):
      // data lost with Redis takes the log too, and chunks written after that start past 1.
      const replayed = await this.deps.hub.replay(this.requestId, this);
      if (replayed && replayed.first === 1 && replayed.count === replayed.last) return this.finishFrom(undefined);
    } else if ((await this.deps.redis.exists(resultKey(this.requestId))) === 1) {
      return this.finishFrom({ bodyRef: resultKey(this.requestId) });
    }
    if (this.settled) return;
    this.log.warn('the job is gone from Redis; answering 503 job_lost');
    this.failWith(jobLostError());
    void this.cancel('job lost', true);
  }

  /** Answers as the job's `done` would have. */
  private finishFrom(result: GatewayJobResult | undefined): void {
    const reply = { requestId: this.requestId, seq: 0 };
    if (this.stream) this.deliver({ kind: 'done', ...reply, payload: streamTrailer });
    else if (result?.body !== undefined) this.deliver({ kind: 'done', ...reply, payload: result.body });
    else if (result?.bodyRef) this.deliver({ kind: 'done-ref', ...reply, payload: result.bodyRef });
    else this.failWith(new GatewayError(502, 'The request finished without a result.', { code: 'server_error' }));
  }
}

class PlainExchange extends Exchange {
  readonly stream = false;

  constructor(ctx: Context, deps: RelayDeps, requestId: string, queue: Queue, log: Logger, private readonly contentType = 'application/json') {
    super(ctx, deps, requestId, queue, log);
  }

  deliver(message: ReplyMessage): void {
    if (this.settled) return;
    if (message.kind === 'done') this.respond(message.payload);
    else if (message.kind === 'done-ref') {
      this.deps.redis.getdel(message.payload).then(
        (body) => (body === null ? this.failWith(new GatewayError(502, 'The result expired before it was read.')) : this.respond(body)),
        (error) => this.settle(error),
      );
    } else if (message.kind === 'error') this.failWith(GatewayError.fromWire(JSON.parse(message.payload) as WireError));
  }

  private respond(body: string): void {
    if (this.settled) return;
    this.ctx.type = this.contentType;
    this.ctx.body = body;
    this.settle();
  }

  protected failWith(error: GatewayError): void {
    this.settle(error);
  }
}

class StreamExchange extends Exchange {
  readonly stream = true;
  private headersSent = false;
  private keepAlive: NodeJS.Timeout | undefined;

  override async run(deadline: number): Promise<void> {
    // Headers wait for the first chunk so that an error before any output is a
    // plain HTTP error; a long wait in the queue sends them early with keep-alives.
    this.keepAlive = setInterval(() => {
      this.sendHeaders();
      this.res.write(': keep-alive\n\n');
    }, this.deps.config.sseKeepAliveMs);
    try {
      await super.run(deadline);
    } finally {
      clearInterval(this.keepAlive);
    }
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.ctx.respond = false;
    this.res.writeHead(200, { ...sseHeaders, 'x-request-id': this.requestId });
  }

  deliver(message: ReplyMessage): void {
    if (this.settled) return;
    switch (message.kind) {
      case 'chunk':
        this.sendHeaders();
        this.res.write(message.payload);
        break;
      case 'done':
        this.sendHeaders();
        this.res.end(message.payload);
        this.settle();
        break;
      case 'error':
        this.failWith(GatewayError.fromWire(JSON.parse(message.payload) as WireError));
        break;
      default:
        break;
    }
  }

  protected failWith(error: GatewayError): void {
    if (this.settled) return;
    if (!this.headersSent) {
      this.settle(error);
      return;
    }
    // Output already started: the stream ends with an error event, as OpenAI's do.
    this.res.end(`data: ${JSON.stringify(error.toBody())}\n\n`);
    this.settle();
  }
}
