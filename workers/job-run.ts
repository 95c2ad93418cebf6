import { DelayedError, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import { AsyncJobFailure } from '../shared/async-job-failure.js';
import type { Catalog, CatalogModel } from '../shared/catalog.js';
import type { Config } from '../shared/config.js';
import { loggedMessageChars, loggedText } from '../shared/request-log.js';
import { endpoints, type EndpointRequest } from '../shared/endpoints.js';
import { GatewayError, timeoutError } from '../shared/errors.js';
import { jobIdOf, type GatewayJobData, type GatewayJobResult } from '../shared/jobs.js';
import { apiAliveKey, payloadKey, replayStreamKey } from '../shared/redis-keys.js';
import type { CurrentAccess } from '../shared/access/index.js';
import {
  backToBandHead,
  tierFacts,
  tierRule,
  type TierRule,
  MovedToLane,
  type LaneMoves,
  type Lease,
  type VendorSlots,
} from '../shared/scheduling/index.js';
import { lazyChild, type Logger } from '../shared/logger.js';
import type { ResponsesJob } from '../shared/responses.js';
import { AnsweredFailure } from './answered-failure.js';
import { CallObserver } from './call-observer.js';
import type { CancelRegistry } from './cancel-registry.js';
import type { ChannelRouter, ResolvedRoute } from './channel-router.js';
import { ClientGoneError } from './client-gone-error.js';
import { decideFailure, queueSignal, toGatewayError } from './failure-policy.js';
import type { MediaDeps } from './media-processor.js';
import { pipelines, type PipelineOutcome } from './pipelines.js';
import { ReplyPublisher } from './reply-publisher.js';
import { ResponsesRun } from './responses-run.js';
import { reportLeadOutcome, storeAnswer, type CachedJobEndDeps } from './cached-job-end.js';
import { Meter, settleJob, type SettlementDeps } from './settlement.js';
import { batchGate, isBatchJob, recordErrored, recordSucceeded, type BatchRunDeps } from './batch-run.js';
import type { CallContext, VendorHttp } from './vendors/types.js';
import type { ToolLoopDeps } from './mcp/tool-loop.js';
import { affinityKey } from '../shared/prompt-affinity.js';
import { isMockChannel } from '../shared/vendors.js';
import type { PrefixWriter, PromptWarming } from './prompt-warming.js';

export interface ProcessorDeps {
  config: Config;
  /** Also the connection replies are published on (ReplyPublisher). */
  redis: Redis;
  catalog: Catalog;
  router: ChannelRouter;
  limiter: VendorSlots;
  cancels: CancelRegistry;
  log: Logger;
  media: MediaDeps;
  settlement: SettlementDeps;
  /** The vendor calls' connections, shared by the pool. */
  vendorHttp: VendorHttp;
  /** Moves a job routed to another capped vendor into that vendor's lane (none: it runs where it is). */
  laneMoves?: LaneMoves;
  /** What keys may do now (a batch's request is admitted by it, not by what its key could when the batch was made). */
  access: CurrentAccess;
  /** Warming a channel's prompt cache for requests that share a prefix (none: every request goes at once). */
  warming?: PromptWarming;
  /** The gateway's tool loop, for a request that names MCP servers (workers/mcp/tool-loop.ts). */
  tools?: ToolLoopDeps;
}

/** Runs one gateway job: calls the vendor and publishes the answer to the api that holds the client. */
export function createProcessor(deps: ProcessorDeps) {
  return (job: Job<GatewayJobData, GatewayJobResult>, token?: string): Promise<GatewayJobResult> =>
    new JobRun(deps, job, token).run();
}

/**
 * One run of a job, in steps: `preflight` (may it run at all), `acquire` (a
 * channel and its vendor slot), `execute` (the endpoint's pipeline), `finish`
 * (bill and answer), and on an error `fail` (the client left, or the failure
 * policy's answer: fail now, wait, or retry). Every final outcome is billed
 * once.
 */
class JobRun {
  private readonly data: GatewayJobData;
  /**
   * The queue's id (reply channel, replay log, stored payload, cancel); money and the request log go by
   * `data.requestId`.
   */
  private readonly jobId: string;
  private readonly log: Logger;
  private readonly orphan: { afterMs: number; onOrphaned: () => void } | undefined;
  private readonly publisher: ReplyPublisher;
  private readonly produced = new Meter();
  private readonly call = new CallObserver();
  private request: EndpointRequest | undefined;
  private model: CatalogModel | undefined;
  private route: ResolvedRoute | undefined;
  /** How the tier that serves it is decided, once its channel is known (`shared/scheduling/served-tier.ts`). */
  private tier: TierRule | undefined;
  private vendor = 'none';
  private responses: ResponsesRun | undefined;
  /** One signal for the vendor call: aborted by a cancel (client gone) or, with a timeout reason, at the deadline. */
  private controller: AbortController | undefined;
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  private timedOut = false;
  private lease: Lease | undefined;
  /** This request writes its prefix to the channel's cache: others with it wait for its first output. */
  private writer: PrefixWriter | undefined;
  /** When a vendor slot was asked for and got (for the debug log's timings). */
  private timings: { asked: number; leased: number } | undefined;
  /** A streamed answer's bill, begun once the vendor is done. */
  private billed: Promise<void> | undefined;
  /** The answer's keeping in the response cache, once begun. */
  private kept: Promise<void> | undefined;
  /**
   * When this run gives up: the job's deadline, or for a batch's request (whose job's deadline is its batch's) its
   * endpoint's time from its start.
   */
  private readonly runDeadline: number;

  constructor(
    private readonly deps: ProcessorDeps,
    private readonly job: Job<GatewayJobData, GatewayJobResult>,
    private readonly token: string | undefined,
  ) {
    const data = (this.data = job.data);
    const jobId = (this.jobId = jobIdOf(data));
    this.log = lazyChild(deps.log, () => ({
      reqId: data.requestId,
      ...(jobId !== data.requestId ? { jobId } : {}),
      queue: job.queueName,
      attempt: job.attemptsMade + 1,
    }));
    // An async or background job's answer is kept for later readers; any other job's answer is for its api alone.
    const detached = data.async === true || data.background === true || data.batch !== undefined;
    // A batch's request that starts before its batch's deadline runs to its end (only one not started by then expires).
    this.runDeadline = data.batch ? Date.now() + endpoints[data.endpoint].deadlineMs(deps.config) : data.deadline;
    this.orphan = detached
      ? undefined
      : { afterMs: deps.config.orphanAfterMs, onOrphaned: () => deps.cancels.cancel(jobId) };
    this.publisher = new ReplyPublisher(deps.redis, data.replyTo, jobId, {
      ...(this.orphan ? { orphan: this.orphan } : {}),
      replayTtlSeconds: deps.config.streamReplayTtlSeconds,
      owner: data.keyId,
      stream: this.streamed,
      // A background response has no held client: its readers follow the log itself, live.
      logEveryBatch: data.background === true,
    });
  }

  private get streamed(): boolean {
    return this.data.stream || this.data.background === true;
  }

  /**
   * The steps in order. The vendor slot is freed before an error is handled, so a failed or cancelled call bills after
   * its slot is back.
   */
  async run(): Promise<GatewayJobResult> {
    // A batch's request canceled, expired, recorded before or refused by its account's money ends here, recorded.
    if (isBatchJob(this.data) && (await batchGate(this.batchDeps, this.data, this.runDeadline))) return {};
    const remaining = await this.preflight();
    this.startClock(remaining);
    try {
      try {
        await this.acquire();
        return await this.finish(await this.execute());
      } finally {
        await this.freeSlot();
      }
    } catch (caught) {
      if (caught instanceof MovedToLane) {
        this.log.info(
          { lane: caught.queue, vendor: this.vendor },
          'routed to another capped vendor: moved to its lane',
        );
        return { movedTo: caught.queue };
      }
      return await this.fail(caught);
    } finally {
      clearTimeout(this.deadlineTimer);
      this.call.end(this.produced.billed);
      this.deps.cancels.finish(this.jobId);
    }
  }

  /** Whether the job may run at all, and what it runs on: resolves to the time left before its deadline. */
  private async preflight(): Promise<number> {
    const { data, job, orphan, deps } = this;
    const remaining = this.runDeadline - Date.now();
    if (remaining <= 0) return this.answerFailure(timeoutError('The request waited in the queue past its deadline.'));
    if (
      orphan &&
      Date.now() - job.timestamp > orphan.afterMs &&
      (await deps.redis.exists(apiAliveKey(data.replyTo))) === 0
    ) {
      // It waited long, and the api that took it is gone: nobody would read the answer, so the vendor is not called.
      this.log.info('the api holding this request is gone; job dropped');
      await reportLeadOutcome(this.cacheDeps, data, 'gone');
      await this.bill('cancelled');
      throw new ClientGoneError();
    }
    if (this.streamed && (job.attemptsStarted ?? 0) > 1 && (await deps.redis.exists(replayStreamKey(this.jobId)))) {
      // A worker died after this stream's first bytes reached the client: replaying would duplicate output.
      return this.answerFailure(
        new GatewayError(502, 'The worker serving this stream was lost mid-response.', { code: 'worker_lost' }),
      );
    }
    this.model = deps.catalog.get(data.model);
    if (!this.model)
      return this.answerFailure(
        new GatewayError(404, `The model \`${data.model}\` is no longer in the catalog.`, { code: 'model_not_found' }),
      );
    const payload = data.payload ?? (await loadPayload(deps.redis, this.jobId));
    if (!payload)
      return this.answerFailure(
        new GatewayError(410, 'The request body expired before a worker picked it up.', { code: 'payload_expired' }),
      );
    // The one place the payload's type is taken on trust: the api validated it against this endpoint's schema.
    this.request = { endpoint: data.endpoint, payload } as EndpointRequest;
    return remaining;
  }

  /** The vendor call's signal: a cancel aborts it (client gone), and so does the deadline, with a timeout reason. */
  private startClock(remaining: number): void {
    const controller = (this.controller = this.deps.cancels.start(this.jobId));
    this.deadlineTimer = setTimeout(() => {
      this.timedOut = true;
      controller.abort(timeoutError());
    }, remaining);
  }

  /**
   * A channel for the model, and a slot under its vendor's limits (waited for, up to the deadline); the call starts.
   */
  private async acquire(): Promise<void> {
    const { deps, data } = this;
    const signal = this.controller!.signal;
    // Where the vendor holds the prompt's cached prefix, when it has more than one channel (shared/prompt-affinity.ts).
    const affinity = affinityKey(this.request!);
    const route = (this.route = deps.router.route(this.model!, affinity));
    this.vendor = route.channel.vendor;
    // Routed to another capped vendor than its lane's (a fallback): it waits in that vendor's lane, not in this one's
    // slot.
    if (deps.laneMoves?.wanted(this.job, route.channel.vendor))
      throw new MovedToLane(await deps.laneMoves.move(this.job, route.channel.vendor));
    // The channel that answers decides how the tier is: a retry on another channel decides it again.
    this.tier = tierRule(tierFacts(this.job, route.channel, deps.config.scheduling));
    this.produced.servedTier = this.tier.before;
    // Ranked by its queue priority: of this process's jobs waiting for a slot, the one the queue would serve first goes
    // first. A priority request is not held back by the vendor's pace (the spreading of its calls' starts).
    // Others with its prefix at the vendor before it, the prefix not yet in the channel's cache: it waits (bounded) for
    // the first to start answering, and reads the prefix the first wrote (workers/prompt-warming.ts).
    if (
      affinity !== undefined &&
      deps.warming &&
      !isMockChannel(route.channel) &&
      !deps.config.promptAffinityOff.includes(route.channel.vendor)
    ) {
      const writer = await deps.warming.before(
        route.channel.id,
        affinity,
        this.jobId,
        signal,
        data.serviceTier === 'priority',
      );
      if (writer) {
        this.writer = writer;
        this.produced.onFirstOutput = () => writer.written();
      }
    }
    const asked = Date.now();
    this.lease = await deps.limiter.acquire(
      route.channel.vendor,
      this.runDeadline,
      signal,
      this.job.opts.priority ?? 0,
      data.serviceTier === 'priority',
    );
    this.timings = { asked, leased: Date.now() };
    this.call.started(this.job, route, signal);
  }

  /** The endpoint's pipeline calls the vendor. */
  private execute(): Promise<PipelineOutcome> {
    const route = this.route!;
    return pipelines[endpoints[this.data.endpoint].pipeline]({
      job: this.job,
      request: this.request!,
      protocol: route.protocol,
      ctx: this.callContext(route),
      publisher: this.publisher,
      produced: this.produced,
      tier: this.tier!,
      media: this.deps.media,
      vendorDone: () => this.freeSlot(),
      vendorDoneBilling: () => {
        this.billed = this.bill('completed');
        // Awaited by `finish`; if ending the stream fails first, the failure path settles (once) instead.
        this.billed.catch(() => undefined);
        return this.freeSlot();
      },
      startResponses: (job: ResponsesJob) => this.startResponses(job),
      keepAnswer: () => this.keepInCache(),
      tools: this.deps.tools,
    });
  }

  /** What the vendor is called with. */
  private callContext(route: ResolvedRoute): CallContext {
    const { data } = this;
    return {
      requestId: data.requestId,
      signal: this.controller!.signal,
      channel: route.channel,
      upstreamModel: route.upstreamModel,
      model: route.model,
      log: this.log,
      http: this.deps.vendorHttp,
      answered: (headers) => this.deps.router.observeLimits(route, headers),
      ...(this.tier?.sent !== undefined ? { serviceTier: this.tier.sent } : {}),
    };
  }

  /**
   * The answer is billed and delivered: side by side, so the settlement adds no round trip to it, and the job ends only
   * once both are done.
   */
  private async finish(outcome: PipelineOutcome): Promise<GatewayJobResult> {
    switch (outcome.answer) {
      case 'publish': {
        if (isBatchJob(this.data)) {
          // No client: the answer is recorded in its batch with what it was billed.
          await Promise.all([this.freeSlot(), this.bill('completed')]);
          await recordSucceeded(this.batchDeps, this.data, outcome.body, this.produced.billed);
          return {};
        }
        if (this.data.cache) {
          // A request that opted into the cache: billed (the entry keeps its price) and stored before the answer goes,
          // so the client's next identical request finds it.
          await this.freeSlot();
          this.billed = this.bill('completed');
          await this.keepInCache();
          return this.publisher.done(outcome.body);
        }
        // The vendor has answered: its slot is for the next call while this one is billed and delivered.
        const [, , kept] = await Promise.all([
          this.freeSlot(),
          this.bill('completed'),
          this.publisher.done(outcome.body),
        ]);
        return kept;
      }
      case 'keep':
        await Promise.all([this.freeSlot(), this.bill('completed')]);
        // Its watchers hear of the end from the worker, once BullMQ has recorded it.
        return outcome.result;
      case 'sent':
        // Begun when the vendor was done, beside the stream's end.
        await this.billed;
        if (isBatchJob(this.data)) {
          // A batch's Responses request: its final object is its result.
          await recordSucceeded(this.batchDeps, this.data, outcome.result.body ?? 'null', this.produced.billed);
          return {};
        }
        await this.keepInCache();
        return outcome.result;
    }
  }

  /** The run met an error: the client left, or the failure policy says what follows (fail now, wait, or retry). */
  private async fail(caught: unknown): Promise<never> {
    const { deps, data, job, route, log } = this;
    // It was to write its prompt's prefix and did not start answering: the next request with it writes it.
    this.writer?.failed();
    if (this.controller!.signal.aborted && !this.timedOut) return this.drop();
    // A job put back to wait, or failed for good already, goes to BullMQ as it is.
    if (queueSignal(caught)) throw caught;
    const error = this.timedOut ? timeoutError() : toGatewayError(caught, log);
    this.call.failed(error);
    // Neither resting channels nor a Redis outage says anything about the vendor.
    if (route && error.code !== 'channels_cooling_down' && error.code !== 'queue_unavailable')
      deps.router.reportFailure(route, error);
    const decision = decideFailure(deps.config, {
      error,
      // A tool the loop called is not called again by a retry: tools are not idempotent.
      outputStarted: this.publisher.started || this.produced.toolsCalled > 0,
      canSwitchChannel: () => deps.router.canRoute(this.model!),
      attemptsMade: job.attemptsMade,
      attempts: job.opts.attempts ?? 1,
      deadline: data.deadline,
      canWait: this.token !== undefined,
      rateLimitedSince: data.rateLimitedSince,
    });
    switch (decision.action) {
      case 'fail':
        return this.answerFailure(decision.answer ?? error);
      case 'wait':
        log.info({ delay: decision.delay }, 'vendor rate limited; rescheduling');
        // The first wait is remembered with the job: RATE_LIMIT_WAIT_MS bounds them all, whichever worker runs it next.
        if (data.rateLimitedSince === undefined) await job.updateData({ ...data, rateLimitedSince: Date.now() });
        await backToBandHead(job);
        await job.moveToDelayed(Date.now() + decision.delay, this.token!);
        throw new DelayedError();
      case 'retry':
        log.warn({ status: error.status, delay: decision.delay }, 'vendor call failed; will retry');
        await backToBandHead(job);
        throw error;
    }
  }

  /** The client left (or cancelled) while the job ran: the vendor call was aborted, and what it produced is billed. */
  private async drop(): Promise<never> {
    this.log.info('client left or cancelled; vendor call aborted');
    await reportLeadOutcome(this.cacheDeps, this.data, 'failed');
    await this.responses
      ?.cancel()
      .catch((e: unknown) => this.log.warn({ err: e }, 'could not end the cancelled response'));
    await this.bill('cancelled');
    throw new ClientGoneError();
  }

  /**
   * The job fails for good with this error: billed, then answered, and failed with an error that says it was answered.
   */
  private async answerFailure(error: GatewayError): Promise<never> {
    const { data, request, log } = this;
    await this.bill('failed', error.code ?? error.type, error.message);
    if (isBatchJob(data)) {
      // Its retries spent: the failure is the request's result in its batch (nothing is published: no client waits).
      await recordErrored(this.batchDeps, data, error, this.produced.billed);
      throw new AnsweredFailure(error.toWire());
    }
    await reportLeadOutcome(this.cacheDeps, data, 'failed');
    // The failure is the job's result: GET /v1/jobs/{id} reads it from the failed job's reason (and the
    // worker tells the job's watchers once BullMQ has recorded it).
    if (data.async) throw new AsyncJobFailure(error.toWire());
    // A Responses stream under way (or in the background) ends with its own failure events instead.
    const responses =
      this.responses ?? (request?.endpoint === 'responses' ? this.startResponses(request.payload) : undefined);
    const answered = responses
      ? await responses.fail(error).catch((e: unknown) => (log.warn({ err: e }, 'could not end the response'), false))
      : false;
    if (!answered)
      await this.publisher.error(error.toWire()).catch((e) => log.warn({ err: e }, 'could not publish error'));
    throw new AnsweredFailure(error.toWire());
  }

  /** Keeps the answer once its settlement has said its price; once per run. */
  private keepInCache(): Promise<void> {
    this.kept ??= (async () => {
      await this.billed;
      await storeAnswer(this.cacheDeps, this.data, this.produced);
    })();
    return this.kept;
  }

  private get batchDeps(): BatchRunDeps {
    return { redis: this.deps.redis, config: this.deps.config, log: this.log, access: this.deps.access };
  }

  private get cacheDeps(): CachedJobEndDeps {
    return { redis: this.deps.redis, config: this.deps.config, log: this.log };
  }

  private startResponses(job: ResponsesJob): ResponsesRun {
    this.responses = new ResponsesRun(
      this.deps.redis,
      job,
      this.publisher,
      this.data.stream,
      this.deps.config.responseTtlSeconds,
      this.tier,
    );
    return this.responses;
  }

  /**
   * The vendor's part is over. A slot that cannot be released now expires with its lease; the answer must not wait on
   * it.
   */
  private async freeSlot(): Promise<void> {
    this.call.vendorDone();
    // An answer that ended without output has still had its prompt read.
    this.writer?.written();
    if (this.timings && this.log.isLevelEnabled('debug')) {
      const { asked, leased } = this.timings;
      this.timings = undefined;
      const taken = this.job.processedOn ?? asked;
      this.log.debug(
        {
          key: this.data.keyId,
          queue_ms: taken - this.job.timestamp,
          before_slot_ms: asked - taken,
          slot_ms: leased - asked,
          call_ms: Date.now() - leased,
          vendor: this.vendor,
        },
        'vendor call timings',
      );
    }
    await this.lease?.release().catch((e) => this.log.warn({ err: e }, 'could not release vendor slot'));
  }

  /**
   * Every final outcome is billed once: what was produced (nothing, for a request that never reached a vendor),
   * with what the request log wants to know of the run.
   */
  private bill(status: 'completed' | 'failed' | 'cancelled', errorCode?: string, errorMessage?: string): Promise<void> {
    const { data, job, route } = this;
    return settleJob(
      this.deps.settlement,
      data,
      this.request,
      this.vendor,
      this.produced,
      status,
      {
        endpoint: data.endpoint,
        attempts: job.attemptsMade + 1,
        queue_ms: Math.max(0, (job.processedOn ?? Date.now()) - job.timestamp),
        channel: route?.channel.id,
        fallback: route && route.model.id !== data.model ? route.model.id : undefined,
        error_code: errorCode,
        // The api's, when it answered the client, is the one the log keeps.
        error_message: errorMessage === undefined ? undefined : loggedText(errorMessage, loggedMessageChars),
      },
      route?.channel,
    ).finally(() => this.produced.settled());
  }
}

async function loadPayload(redis: Redis, jobId: string): Promise<unknown> {
  const text = await redis.get(payloadKey(jobId));
  return text === null ? undefined : JSON.parse(text);
}
