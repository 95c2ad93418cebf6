import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Catalog } from '../shared/catalog.js';
import type { Config } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import { GatewayError, serverError, timeoutError } from '../shared/errors.js';
import { payloadKey, replayStreamKey, type GatewayJobData, type GatewayJobResult } from '../shared/queues.js';
import type { ChatCompletionRequest } from '../shared/schemas/chat.js';
import type { CompletionRequest } from '../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../shared/schemas/embeddings.js';
import { ClientGoneError, type CancelRegistry } from './cancel-registry.js';
import { ReplyPublisher } from './reply-publisher.js';
import { endpoints } from '../shared/endpoints.js';
import { streamTrailer } from '../shared/reply.js';
import type { ChannelRouter, ResolvedRoute } from './channel-router.js';
import { chatAdapter } from './vendors/registry.js';
import { publishJobEvent, runMedia, type MediaDeps } from './media-processor.js';
import type { VendorLimiter } from './vendor-limiter.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from './vendors/types.js';

export interface ProcessorDeps {
  config: Config;
  redis: Redis;
  catalog: Catalog;
  router: ChannelRouter;
  limiter: VendorLimiter;
  cancels: CancelRegistry;
  log: Logger;
  /** Requests this worker already answered with an error, so the `failed` listener does not answer twice. */
  answered: Set<string>;
  media: MediaDeps;
}

/** Async results past this size are kept in the blob store for their whole lifetime, not in Redis. */
const inlineAsyncResultBytes = 256 * 1024;


/** Runs one gateway job: calls the vendor and publishes the answer to the api that holds the client. */
export function createProcessor(deps: ProcessorDeps) {
  return async (job: Job<GatewayJobData, GatewayJobResult>, token?: string): Promise<GatewayJobResult> => {
    const data = job.data;
    const log = deps.log.child({ reqId: data.requestId, queue: job.queueName, attempt: job.attemptsMade + 1 });
    const publisher = new ReplyPublisher(deps.redis, data.replyTo, data.requestId);
    const fail = async (error: GatewayError): Promise<never> => {
      deps.answered.add(data.requestId);
      if (data.async) {
        // The failure is the job's result: GET /v1/jobs/{id} reads it from the failed job's reason.
        await publishJobEvent(deps.redis, data.requestId, { type: 'failed', status: 'failed', error: error.toBody().error }).catch(() => undefined);
        throw new UnrecoverableError(JSON.stringify(error.toWire()));
      }
      await publisher.error(error.toWire()).catch((e) => log.warn({ err: e }, 'could not publish error'));
      throw new UnrecoverableError(error.message);
    };

    const remaining = data.deadline - Date.now();
    if (remaining <= 0) return fail(timeoutError('The request waited in the queue past its deadline.'));
    if (data.stream && (job.attemptsStarted ?? 0) > 1 && (await deps.redis.exists(replayStreamKey(data.requestId)))) {
      // A worker died after this stream's first bytes reached the client: replaying would duplicate output.
      return fail(new GatewayError(502, 'The worker serving this stream was lost mid-response.', { code: 'worker_lost' }));
    }
    const model = deps.catalog.get(data.model);
    if (!model) return fail(new GatewayError(404, `The model \`${data.model}\` is no longer in the catalog.`, { code: 'model_not_found' }));
    const payload = data.payload ?? (await loadPayload(deps.redis, data.requestId));
    if (!payload) return fail(new GatewayError(410, 'The request body expired before a worker picked it up.', { code: 'payload_expired' }));

    const controller = deps.cancels.start(data.requestId);
    const deadlineSignal = AbortSignal.timeout(remaining);
    const signal = AbortSignal.any([controller.signal, deadlineSignal]);
    let route: ResolvedRoute | undefined;
    try {
      route = deps.router.route(model);
      const ctx: CallContext = {
        requestId: data.requestId,
        signal,
        channel: route.channel,
        upstreamModel: route.upstreamModel,
        model: route.model,
        log,
      };
      const lease = await deps.limiter.acquire(route.channel.vendor, data.deadline, signal);
      // A slot that cannot be released now expires with its lease; the answer must not wait on it.
      const freeSlot = () => lease.release().catch((e) => log.warn({ err: e }, 'could not release vendor slot'));
      try {
        if (endpoints[data.endpoint].pipeline === 'media') {
          if (data.async) await publishJobEvent(deps.redis, data.requestId, { type: 'progress', status: 'in_progress', progress: 0 });
          const { body } = await runMedia(job, route.protocol, payload, ctx, deps.media, freeSlot);
          if (!data.async) return await publisher.done(body);
          const result: GatewayJobResult =
            body.length > inlineAsyncResultBytes
              ? { bodyRef: (await deps.media.blobs.put(`results/${data.requestId}.json`, Buffer.from(body), 'application/json')).key }
              : { body };
          await publishJobEvent(deps.redis, data.requestId, { type: 'completed', status: 'completed' });
          return result;
        }
        if (data.stream) {
          const events = streamFor(chatAdapter(route.protocol), data.endpoint, payload, ctx);
          const includeUsage = (payload.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
          for await (const event of events) {
            if (event.usageOnly && !includeUsage) continue;
            publisher.chunk(`data: ${event.data}\n\n`);
          }
          // The vendor is done: free its slot before the client hears the end, so a
          // client that sends its next request at once finds the slot free.
          await freeSlot();
          await publisher.endStream(streamTrailer);
          return {};
        }
        const result = await callFor(chatAdapter(route.protocol), data.endpoint, payload, ctx);
        await freeSlot();
        return await publisher.done(result.body);
      } finally {
        await freeSlot();
      }
    } catch (caught) {
      if (controller.signal.aborted) {
        log.info('client left; vendor call aborted');
        throw new UnrecoverableError(new ClientGoneError().message);
      }
      if (caught instanceof DelayedError || caught instanceof UnrecoverableError) throw caught;
      const error = deadlineSignal.aborted ? timeoutError() : toGatewayError(caught, log);
      if (route && error.code !== 'channels_cooling_down') deps.router.reportFailure(route, error);
      // A bad credential is final for its channel only: with another channel (or fallback) ready, try that.
      const switchable = isChannelFault(error) && deps.router.canRoute(model);
      if (publisher.started || !(error.retryable || switchable)) return fail(error);
      const attemptsLeft = job.attemptsMade + 1 < (job.opts.attempts ?? 1);
      const delay = retryDelay(deps.config, job.attemptsMade, error);
      if (Date.now() + delay >= data.deadline) return fail(error);
      if ((error.status === 429 || error.code === 'channels_cooling_down') && token) {
        // A rate limit (or every channel resting) is a reason to wait, not a failed attempt.
        log.info({ delay }, 'vendor rate limited; rescheduling');
        await job.moveToDelayed(Date.now() + delay, token);
        throw new DelayedError();
      }
      if (!attemptsLeft) return fail(error);
      log.warn({ status: error.status, delay }, 'vendor call failed; will retry');
      throw error;
    } finally {
      deps.cancels.finish(data.requestId);
    }
  };
}

async function loadPayload(redis: Redis, requestId: string): Promise<Record<string, unknown> | undefined> {
  const text = await redis.get(payloadKey(requestId));
  return text === null ? undefined : (JSON.parse(text) as Record<string, unknown>);
}

function streamFor(
  adapter: VendorAdapter,
  endpoint: GatewayJobData['endpoint'],
  payload: Record<string, unknown>,
  ctx: CallContext,
): AsyncIterable<StreamEvent> {
  if (endpoint === 'chat.completions') return adapter.streamChatCompletion(payload as ChatCompletionRequest, ctx);
  if (endpoint === 'completions') return adapter.streamCompletion(payload as CompletionRequest, ctx);
  throw new GatewayError(400, `Streaming is not available for ${endpoint}.`, { param: 'stream' });
}

function callFor(
  adapter: VendorAdapter,
  endpoint: GatewayJobData['endpoint'],
  payload: Record<string, unknown>,
  ctx: CallContext,
): Promise<VendorResult> {
  switch (endpoint) {
    case 'chat.completions':
      return adapter.createChatCompletion(payload as ChatCompletionRequest, ctx);
    case 'completions':
      return adapter.createCompletion(payload as CompletionRequest, ctx);
    case 'embeddings':
      return adapter.createEmbeddings(payload as EmbeddingRequest, ctx);
    default:
      throw new GatewayError(400, `${endpoint} is not a chat endpoint.`);
  }
}

function isChannelFault(error: GatewayError): boolean {
  return error.code === 'vendor_auth_failed' || error.code === 'vendor_quota_exhausted';
}

function toGatewayError(caught: unknown, log: Logger): GatewayError {
  if (caught instanceof GatewayError) return caught;
  log.error({ err: caught }, 'unexpected error in worker');
  return serverError(undefined, caught);
}

/** Exponential backoff with full jitter, or the vendor's `retry-after` when it gave one. */
export function retryDelay(config: Config, attemptsMade: number, error: GatewayError): number {
  if (error.retryAfterMs !== undefined) return error.retryAfterMs;
  const ceiling = config.retryBaseMs * 2 ** attemptsMade;
  return Math.round(ceiling / 2 + Math.random() * (ceiling / 2));
}
