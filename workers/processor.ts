import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Catalog } from '../shared/catalog.js';
import type { Config } from '../shared/config.js';
import { lazyChild, type Logger } from '../shared/logger.js';
import { GatewayError, timeoutError } from '../shared/errors.js';
import { apiAliveKey, payloadKey, replayStreamKey } from '../shared/keys.js';
import { type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import { ClientGoneError, type CancelRegistry } from './cancel-registry.js';
import { ReplyPublisher } from './reply-publisher.js';
import { endpoints, type EndpointRequest } from '../shared/endpoints.js';
import type { ChannelRouter, ResolvedRoute } from './channel-router.js';
import { publishJobEvent, runMedia, type MediaDeps } from './media-processor.js';
import type { VendorLimiter } from './vendor-limiter.js';
import type { CallContext, VendorHttp } from './vendors/types.js';
import { decideFailure, toGatewayError } from './failure-policy.js';
import { callText, runTextStream } from './text-pipeline.js';
import { Meter, settleJob, type SettlementDeps } from './settlement.js';
import { ResponsesRun } from './responses-run.js';
import { startVendorAttempt, type VendorAttempt } from './job-tracing.js';
import { startVendorCall, type VendorCall } from './metrics.js';

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
  settlement: SettlementDeps;
  /** The vendor calls' connections, shared by the pool. */
  vendorHttp: VendorHttp;
}

/** Async results past this size are kept in the blob store for their whole lifetime, not in Redis. */
const inlineAsyncResultBytes = 256 * 1024;


/** Runs one gateway job: calls the vendor and publishes the answer to the api that holds the client. */
export function createProcessor(deps: ProcessorDeps) {
  return async (job: Job<GatewayJobData, GatewayJobResult>, token?: string): Promise<GatewayJobResult> => {
    const data = job.data;
    const log = lazyChild(deps.log, () => ({ reqId: data.requestId, queue: job.queueName, attempt: job.attemptsMade + 1 }));
    // An async or background job's answer is kept for later readers; any other job's answer is for its api alone.
    const detached = data.async === true || data.background === true;
    const orphan = detached ? undefined : { afterMs: deps.config.orphanAfterMs, onOrphaned: () => deps.cancels.cancel(data.requestId) };
    const streamed = data.stream || data.background === true;
    const publisher = new ReplyPublisher(deps.redis, data.replyTo, data.requestId, {
      ...(orphan ? { orphan } : {}),
      replayTtlSeconds: deps.config.streamReplayTtlSeconds,
      owner: data.keyId,
      stream: streamed,
    });
    const produced = new Meter();
    let request: EndpointRequest | undefined;
    let responses: ResponsesRun | undefined;
    let vendor = 'none';
    let route: ResolvedRoute | undefined;
    // Every final outcome is billed once: what was produced (nothing, for a request that never reached a vendor),
    // with what the request log wants to know of the run.
    const bill = (status: 'completed' | 'failed' | 'cancelled', errorCode?: string) =>
      settleJob(deps.settlement, data, request, vendor, produced, status, {
        endpoint: data.endpoint,
        attempts: job.attemptsMade + 1,
        queueMs: Math.max(0, (job.processedOn ?? Date.now()) - job.timestamp),
        ...(route ? { channel: route.channel.id } : {}),
        ...(route && route.model.id !== data.model ? { fallback: route.model.id } : {}),
        ...(errorCode ? { errorCode } : {}),
      });
    const fail = async (error: GatewayError): Promise<never> => {
      await bill('failed', error.code ?? error.type);
      deps.answered.add(data.requestId);
      if (data.async) {
        // The failure is the job's result: GET /v1/jobs/{id} reads it from the failed job's reason (and the
        // worker tells the job's watchers once BullMQ has recorded it).
        throw new UnrecoverableError(JSON.stringify(error.toWire()));
      }
      // A Responses stream under way (or in the background) ends with its own failure events instead.
      if (!responses && request?.endpoint === 'responses') {
        responses = new ResponsesRun(deps.redis, request.payload, publisher, data.stream, deps.config.responseTtlSeconds);
      }
      const answered = responses ? await responses.fail(error).catch((e: unknown) => (log.warn({ err: e }, 'could not end the response'), false)) : false;
      if (!answered) await publisher.error(error.toWire()).catch((e) => log.warn({ err: e }, 'could not publish error'));
      throw new UnrecoverableError(error.message);
    };

    const remaining = data.deadline - Date.now();
    if (remaining <= 0) return fail(timeoutError('The request waited in the queue past its deadline.'));
    if (orphan && Date.now() - job.timestamp > orphan.afterMs && (await deps.redis.exists(apiAliveKey(data.replyTo))) === 0) {
      // It waited long, and the api that took it is gone: nobody would read the answer, so the vendor is not called.
      log.info('the api holding this request is gone; job dropped');
      await bill('cancelled');
      throw new UnrecoverableError(new ClientGoneError().message);
    }
    if (streamed && (job.attemptsStarted ?? 0) > 1 && (await deps.redis.exists(replayStreamKey(data.requestId)))) {
      // A worker died after this stream's first bytes reached the client: replaying would duplicate output.
      return fail(new GatewayError(502, 'The worker serving this stream was lost mid-response.', { code: 'worker_lost' }));
    }
    const model = deps.catalog.get(data.model);
    if (!model) return fail(new GatewayError(404, `The model \`${data.model}\` is no longer in the catalog.`, { code: 'model_not_found' }));
    const payload = data.payload ?? (await loadPayload(deps.redis, data.requestId));
    if (!payload) return fail(new GatewayError(410, 'The request body expired before a worker picked it up.', { code: 'payload_expired' }));
    // The one place the payload's type is taken on trust: the api validated it against this endpoint's schema.
    request = { endpoint: data.endpoint, payload } as EndpointRequest;

    // One signal for the vendor call: aborted by a cancel (client gone) or, with a timeout reason, at the deadline.
    const controller = deps.cancels.start(data.requestId);
    let timedOut = false;
    const deadlineTimer = setTimeout(() => {
      timedOut = true;
      controller.abort(timeoutError());
    }, remaining);
    const signal = controller.signal;
    // Tracing on: the span of this call to the vendor (undefined when off).
    let attempt: VendorAttempt | undefined;
    // Metrics on: this call's outcome, error kind and time by vendor and channel.
    let call: VendorCall | undefined;
    try {
      route = deps.router.route(model);
      vendor = route.channel.vendor;
      const ctx: CallContext = {
        requestId: data.requestId,
        signal,
        channel: route.channel,
        upstreamModel: route.upstreamModel,
        model: route.model,
        log,
        http: deps.vendorHttp,
      };
      const lease = await deps.limiter.acquire(route.channel.vendor, data.deadline, signal);
      attempt = startVendorAttempt(job, route, signal);
      call = startVendorCall(route.channel, signal);
      // A slot that cannot be released now expires with its lease; the answer must not wait on it.
      const freeSlot = () => {
        attempt?.vendorDone();
        call?.vendorDone();
        return lease.release().catch((e) => log.warn({ err: e }, 'could not release vendor slot'));
      };
      try {
        if (endpoints[data.endpoint].pipeline === 'media') {
          if (data.async) await publishJobEvent(deps.redis, data.requestId, { type: 'progress', status: 'in_progress', progress: 0 });
          const { body } = await runMedia(job, route.protocol, request, ctx, deps.media, freeSlot, produced);
          if (!data.async) {
            // Sent side by side: the settlement adds no round trip to the answer, and the job ends only once both are done.
            const [, kept] = await Promise.all([bill('completed'), publisher.done(body)]);
            return kept;
          }
          const result: GatewayJobResult =
            body.length > inlineAsyncResultBytes
              ? { bodyRef: (await deps.media.blobs.put(`results/${data.requestId}.json`, Buffer.from(body), 'application/json')).key }
              : { body };
          await bill('completed');
          // Its watchers hear of the end from the worker, once BullMQ has recorded it.
          return result;
        }
        // A streamed answer (and every Responses answer: the vendor is always streamed for it) is billed once
        // the vendor is done, side by side with the end of the stream (no round trip added to it).
        let billed: Promise<void> | undefined;
        const startBilling = () => {
          billed = bill('completed');
          // Awaited below; if ending the stream fails first, the failure path settles (once) instead.
          billed.catch(() => undefined);
          return freeSlot();
        };
        if (request.endpoint === 'responses') {
          responses = new ResponsesRun(deps.redis, request.payload, publisher, data.stream, deps.config.responseTtlSeconds);
          const body = await responses.run(route.protocol, ctx, produced, startBilling);
          await billed;
          return body === undefined ? {} : { body };
        }
        if (data.stream) {
          await runTextStream(route.protocol, request, ctx, publisher, startBilling, produced);
          await billed;
          return {};
        }
        const body = await callText(route.protocol, request, ctx, produced);
        await freeSlot();
        const [, kept] = await Promise.all([bill('completed'), publisher.done(body)]);
        return kept;
      } finally {
        await freeSlot();
      }
    } catch (caught) {
      if (controller.signal.aborted && !timedOut) {
        log.info('client left or cancelled; vendor call aborted');
        await responses?.cancel().catch((e: unknown) => log.warn({ err: e }, 'could not end the cancelled response'));
        await bill('cancelled');
        throw new UnrecoverableError(new ClientGoneError().message);
      }
      if (caught instanceof DelayedError || caught instanceof UnrecoverableError) throw caught;
      const error = timedOut ? timeoutError() : toGatewayError(caught, log);
      attempt?.failed(error);
      call?.failed(error);
      // Neither resting channels nor a Redis outage says anything about the vendor.
      if (route && error.code !== 'channels_cooling_down' && error.code !== 'queue_unavailable') deps.router.reportFailure(route, error);
      const decision = decideFailure(deps.config, {
        error,
        outputStarted: publisher.started,
        canSwitchChannel: () => deps.router.canRoute(model),
        attemptsMade: job.attemptsMade,
        attempts: job.opts.attempts ?? 1,
        deadline: data.deadline,
        canWait: token !== undefined,
      });
      if (decision.action === 'fail') return fail(error);
      if (decision.action === 'wait') {
        log.info({ delay: decision.delay }, 'vendor rate limited; rescheduling');
        await job.moveToDelayed(Date.now() + decision.delay, token!);
        throw new DelayedError();
      }
      log.warn({ status: error.status, delay: decision.delay }, 'vendor call failed; will retry');
      throw error;
    } finally {
      clearTimeout(deadlineTimer);
      attempt?.end();
      call?.end();
      deps.cancels.finish(data.requestId);
    }
  };
}

async function loadPayload(redis: Redis, requestId: string): Promise<unknown> {
  const text = await redis.get(payloadKey(requestId));
  return text === null ? undefined : JSON.parse(text);
}
