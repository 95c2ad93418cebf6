import type { Middleware } from 'koa';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { KeyAccess } from '../../shared/accounts.js';
import { endpoints, type Endpoint, type EndpointRequest } from '../../shared/endpoints.js';
import { invalidApiKey, invalidRequest } from '../../shared/errors.js';
import { accessRefusalMessage, mayUseModel, modelNotAllowed, type CurrentAccess } from '../../shared/access/index.js';
import { worstCase } from '../../shared/money/charge.js';
import type { PriceList } from '../../shared/money/pricing.js';
import { grantRequestTier, isContended, laneOf } from '../../shared/scheduling/index.js';
import { speaksAnthropic } from '../../shared/messages.js';
import { activeMetrics } from '../../shared/metrics.js';
import { streamForm } from '../../shared/cache/index.js';
import {
  claimRounds,
  missStatus,
  type FollowedCall,
  type FollowerOptions,
  type ResponseCache,
} from '../cache/response-cache.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { KeyedContext, KeyedState } from './request-context.js';
import { noteModel } from '../http/metrics.js';
import { readMultipart, refusingDeletesUploads, type MultipartForm } from '../http/multipart.js';
import { largeBodyBytes, parseBody, readJsonBody, yieldToLoop } from '../http/request-body.js';
import { jobTraceCarrier, traceQueued } from '../http/request-tracing.js';
import { enqueue, queueFor, type EnqueueDeps } from './enqueue.js';
import { reserveSpend } from '../accounts/spend.js';
import { releaseReservation } from '../../shared/money/billing.js';
import type { EventLogs } from '../relay/event-log.js';
import type { HeldReplyDeps } from '../relay/held-reply.js';
import { holdForReply } from '../relay/hold-for-reply.js';
import type { AnswerMode } from './enqueue.js';
import type { StreamDialect } from '../relay/stream-dialects.js';
import type { GeminiPathFields } from '../gemini/accept.js';
import { buildJob, type JobOrigin } from './build-job.js';
import { queuedEndpoint } from './endpoint-paths.js';
import { handlers, type Accepted, type EndpointHandler, type HandlerInput } from './endpoint-handlers.js';
import type { ModelResolver } from './model-resolver.js';
import {
  noteEnqueued,
  noteError,
  noteFirstChunk,
  noteLoggedModel,
  watchRequest,
  type RequestShape,
} from './request-log.js';

export interface EndpointRouteDeps extends EnqueueDeps, HeldReplyDeps {
  models: ModelResolver;
  /** The response cache's api half. */
  cache: ResponseCache;
  blobs: BlobStore;
  prices: PriceList;
  logs: EventLogs;
  /** What keys may do now: a request that waited on another's call is checked again before it is answered. */
  access: CurrentAccess;
  /** The MCP servers a request's tool loop may name (a Responses `mcp` tool, a Messages `mcp_servers` entry). */
  mcpServers?: McpRegistry;
}

/** A key limited to some models may use only those: a 403 naming the model otherwise. */
export function checkModelAllowed(access: Pick<KeyAccess, 'models'>, modelId: string): void {
  if (!mayUseModel(access, modelId)) throw modelNotAllowed(modelId);
}

/** `Prefer: respond-async` (RFC 7240) asks for a 202 and a job to poll. */
export function prefersAsync(prefer: string | undefined): boolean {
  return !!prefer && prefer.split(/[,;]/).some((token) => token.trim().toLowerCase() === 'respond-async');
}

/** `Prefer: respond-async` on any POST; a stream has nothing to hand over later, so the two do not mix. */
export function asyncMode(ctx: { get(name: string): string }, stream: boolean): boolean {
  const wanted = prefersAsync(ctx.get('prefer'));
  if (wanted && stream)
    throw invalidRequest(
      'A streamed request cannot also be answered asynchronously (Prefer: respond-async).',
      'stream',
    );
  return wanted;
}

const resumeGraceHeader = 'x-stream-resume-grace-ms';

/**
 * How long a stream keeps running for a resume after its client leaves, as
 * the request asks (`x-stream-resume-grace-ms`, cut to
 * STREAM_RESUME_GRACE_MAX_MS); undefined when it does not ask. Without it a
 * closed stream is cancelled, and stops spending, within a second.
 */
export function resumeGrace(ctx: { get(name: string): string }, maxMs: number): number | undefined {
  const asked = ctx.get(resumeGraceHeader);
  if (asked === '') return undefined;
  if (!/^\d{1,10}$/.test(asked.trim()))
    throw invalidRequest(`The ${resumeGraceHeader} header must be a whole number of milliseconds.`, resumeGraceHeader);
  return Math.min(Number(asked.trim()), maxMs);
}

/**
 * Multipart text fields as the schemas read them: `name[]` (or a repeated name ending so) is a list, any other name its
 * last value.
 */
function formFields(form: MultipartForm): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(form.fields))
    fields[name] = name.endsWith('[]') ? [value].flat() : Array.isArray(value) ? value.at(-1) : value;
  return fields;
}

/**
 * What a request's path carries that its body does not (Google's `models/{model}:{method}`: the model, whether it
 * streams and in which form), and the dialect its stream speaks.
 */
export interface PathFields extends GeminiPathFields {
  dialect: StreamDialect;
}

/**
 * The one route every row of the endpoint table gets, as a list of named steps (`ServedRequest`): read the body the
 * row says (JSON, multipart, or either), validate it and let the endpoint's handler shape it, plan its job, answer it
 * from the response cache, check its lane's waiting room, follow an identical request's call in flight, then reserve,
 * queue and answer it (held open, streamed, async or in the background). A step that answers the request ends it.
 */
export async function serve<E extends Endpoint>(
  name: E,
  ctx: KeyedContext,
  deps: EndpointRouteDeps,
  path?: PathFields,
): Promise<void> {
  const request = new ServedRequest(name, ctx, deps, path);
  const body = await request.readBody();
  const checked = await request.validate(body);
  const plan = request.planJob(body, checked);
  if (await request.answerFromCache(plan)) return;
  const admitted = request.admitToLane(plan, checked);
  if (await request.followIdenticalCall(plan, admitted)) return;
  await request.enqueueAndAnswer(plan, admitted, checked);
  await request.respond(checked);
}

/**
 * A request's body as read: its multipart form (files stored as they came) or its JSON, and the bytes of its fields.
 */
export interface ReadBody {
  form: MultipartForm | undefined;
  raw: Record<string, unknown>;
  bodyBytes: number;
}

/** A request validated and accepted by its endpoint's handler, for the model it resolved to. */
export interface CheckedRequest<E extends Endpoint> {
  model: ReturnType<ModelResolver['resolve']>;
  accepted: Accepted<E>;
}

/** How a request is to be served: its job built once, how it is answered, and what the cache may do with it. */
export interface ServePlan {
  job: ReturnType<typeof buildJob>;
  request: EndpointRequest;
  /** Its multipart form, whose stored files go when the request is answered without a job. */
  form: MultipartForm | undefined;
  stream: boolean;
  graceMs: number | undefined;
  mode: AnswerMode;
  /** Set when the request opted into the response cache (held requests only). */
  cache: ReturnType<ResponseCache['plan']>;
  dialect: StreamDialect;
  /** Who a stored or followed answer is for, and what it echoes of the request it serves (api/cache/answer-echo.ts). */
  served: Omit<FollowerOptions, 'deadline' | 'keepAliveMs'> & { contentType?: string };
}

/** A request past its lane's waiting room: the queue it goes to, the worst case it may cost, and its fair claim. */
export interface AdmittedRequest {
  queue: ReturnType<typeof queueFor>;
  estimate: ReturnType<typeof worstCase>;
  weight: number;
  /** Its request was counted against the key's rate already (it waited to share a call, then runs its own). */
  requestsCounted: boolean;
}

/** One request through `serve`, step by step; each step is a method a test or a profile can name. */
export class ServedRequest<E extends Endpoint> {
  private readonly row: (typeof endpoints)[E];
  private readonly shape: RequestShape = { stream: false, resumable: false };

  constructor(
    private readonly name: E,
    private readonly ctx: KeyedContext,
    private readonly deps: EndpointRouteDeps,
    private readonly path?: PathFields,
  ) {
    this.row = endpoints[name];
    const { access, log } = ctx.state;
    // Every keyed request gets its log record, whatever becomes of it (a body too large or malformed included).
    if (deps.config.requestLog)
      watchRequest(ctx, name, this.shape, access, {
        redis: deps.redis,
        bufferRecords: deps.config.usageBufferRecords,
        log,
      });
  }

  /** Reads the body the row says (JSON, multipart, or either) within its limits; notes the model and stream asked. */
  async readBody(): Promise<ReadBody> {
    const { row, ctx, deps, path } = this;
    const multipart =
      row.body === 'multipart' ||
      (row.body === 'json-or-multipart' && /^multipart\/form-data/i.test(ctx.get('content-type')));
    const form =
      multipart && row.uploads
        ? await readMultipart(ctx.req, deps.blobs, ctx.state.requestId, deps.config[row.uploads.maxBytes])
        : undefined;
    const read = form ? undefined : await readJsonBody(ctx.req, deps.config.maxBodyBytes);
    const raw = form ? formFields(form) : read!.body;
    // What was read decides, however it arrived (a chunked body has no Content-Length; a client may misstate one).
    const bodyBytes = read
      ? read.bytes
      : Object.values(form!.fields).reduce(
          (sum, value) => sum + [value].flat().reduce((n, v) => n + Buffer.byteLength(v), 0),
          0,
        );
    const asked = path ? path.model : raw.model;
    if (typeof asked === 'string') noteLoggedModel(ctx, asked);
    if (path ? path.stream : raw.stream === true) this.shape.stream = true;
    return { form, raw, bodyBytes };
  }

  /**
   * Validates the body with the row's schema, resolves the model, checks the key may use it, serves a tier the
   * account may not use as `default`, and lets the endpoint's handler check and shape the payload. A refused
   * multipart request's stored files are deleted at once.
   */
  async validate({ form, raw, bodyBytes }: ReadBody): Promise<CheckedRequest<E>> {
    const { row, ctx, deps, path, name } = this;
    const { access, keyId } = ctx.state;
    const handler: EndpointHandler<E> = handlers[name];
    const check = async () => {
      // Parsing ended the previous turn of the loop; validating a large body is a turn of its own.
      if (!form && bodyBytes > largeBodyBytes) await yieldToLoop();
      // TypeScript cannot follow a generic row to its schema's output: this is where the two are tied, once.
      const fields = parseBody(row.schema, raw) as HandlerInput<E>['fields'];
      const model = deps.models.resolve(path ? path.model : (fields as { model: string }).model, name);
      noteModel(ctx, model.id);
      noteLoggedModel(ctx, model.id);
      checkModelAllowed(access, model.id);
      // The tier, granted once (shared/scheduling/tiers.ts): one the account may not use is served as `default` (or
      // refused, as configured) before anything reads it.
      const tier = grantRequestTier(fields as { service_tier?: string | null }, access, deps.config.scheduling);
      const accepted: Accepted<E> = await handler.accept({
        fields,
        model,
        tier,
        files: form?.files ?? [],
        scope: {
          redis: deps.redis,
          blobs: deps.blobs,
          keyId,
          config: deps.config,
          models: deps.models,
          access,
          mcpServers: deps.mcpServers,
        },
        header: (header) => ctx.get(header),
        ...(path ? { path } : {}),
      });
      return { model, accepted };
    };
    return form ? await refusingDeletesUploads(form, deps.blobs, check) : await check();
  }

  /** Decides how the request is answered and builds its job once: its mode, its lane, its cache plan, its dialect. */
  planJob({ form, bodyBytes }: ReadBody, { model, accepted }: CheckedRequest<E>): ServePlan {
    const { row, ctx, deps, path, name, shape } = this;
    const { access, keyId, requestId } = ctx.state;
    const stream = accepted.stream ?? false;
    const graceMs = stream ? resumeGrace(ctx, deps.config.streamResumeGraceMaxMs) : undefined;
    shape.stream = stream;
    shape.resumable = (graceMs ?? 0) > 0;
    if (accepted.serviceTier !== undefined) shape.serviceTier = accepted.serviceTier;
    const mode: AnswerMode =
      row.asyncOnly || asyncMode(ctx, stream) ? 'async' : accepted.detached ? 'background' : 'held';
    const origin: JobOrigin = {
      requestId,
      replyTo: deps.hub.channel,
      keyId,
      accountId: access.accountId,
      model: model.id,
      baseUrl: `${ctx.protocol}://${ctx.host}`,
      ...(ctx.state.trace ? { trace: jobTraceCarrier(ctx.state.trace) } : {}),
    };
    // A capped vendor's requests wait in its lane: its backlog holds no worker slot another vendor's request needs.
    const lane = laneOf(deps.queues.laneNames, model);
    if (lane !== undefined) origin.lane = lane;
    const job = buildJob(name, accepted, origin, mode, deps.config);
    const request = { endpoint: name, payload: accepted.payload } as EndpointRequest;
    // A request that opted into the response cache: answered from it when a fresh answer is there (never queued), or
    // from an identical request's call in flight; else its job keeps its answer (shared/cache/).
    // A multipart request's uploads were digested as they came: only its text fields (bodyBytes) are hashed here.
    // An answer whose tool loop called tools is not kept (a hit would call none).
    const callsTools = (accepted.payload as { mcp?: unknown }).mcp !== undefined;
    const cache =
      mode === 'held' && !callsTools
        ? deps.cache.plan(ctx, request, model.id, access, { async: false, bodyBytes })
        : undefined;
    // What a stored answer echoes of the request it serves is this request's (api/cache/answer-echo.ts).
    // The dialect of its stream: the path's (Google's two forms), else the row's.
    const dialect: StreamDialect =
      accepted.dialect ?? path?.dialect ?? (speaksAnthropic(row.path) ? 'anthropic' : 'openai');
    const served: ServePlan['served'] = {
      access,
      keyId,
      modelId: model.id,
      dialect,
      ...(accepted.contentType ? { contentType: accepted.contentType } : {}),
      echo: { job, model, config: deps.config },
    };
    return { job, request, stream, graceMs, mode, cache, dialect, served, form };
  }

  /** Served from the cache, the request's uploads are read by no job. */
  private dropUploads(form: MultipartForm | undefined): void {
    if (form) void Promise.allSettled(form.files.map((file) => this.deps.blobs.delete(file.ref.key)));
  }

  /** A fresh stored answer, when the request opted in and one is there: answered at once, never queued. */
  async answerFromCache(plan: ServePlan): Promise<boolean> {
    const { cache } = plan;
    if (!cache) return false;
    cache.job.hash = cache.hash;
    const hit = await this.deps.cache.read(cache);
    if (!hit) return false;
    this.dropUploads(plan.form);
    await this.deps.cache.answer(this.ctx, hit, plan.request, { stream: plan.stream, result: 'hit', ...plan.served });
    return true;
  }

  /**
   * The worst case the request may cost (reserved as it is queued; settled by the worker with the actual cost), and
   * its lane's waiting room: an account past its share is refused here, before anything is reserved.
   */
  admitToLane({ job, request }: ServePlan, { model, accepted }: CheckedRequest<E>): AdmittedRequest {
    const { deps } = this;
    const { access } = this.ctx.state;
    const estimate = worstCase(
      deps.config,
      deps.prices,
      request,
      model.id,
      model.routes[0]?.vendor,
      accepted.promptTokens ?? 0,
    );
    const weight = access.weight ?? 1;
    const queue = queueFor(deps, job, { accountId: access.accountId, weight });
    return { queue, estimate, weight, requestsCounted: false };
  }

  /**
   * A request that opted into the cache may follow an identical request's call in flight, or become the one the next
   * ones follow (the lead). Following, it is admitted first as any request is (its key's rate of requests, and its
   * price held: CACHE_HIT_PRICE of its own worst case), the reservation settled at the price of the answer it gets,
   * or given back when it gets none. True when it was answered so; false when it runs its own call.
   */
  async followIdenticalCall(plan: ServePlan, admitted: AdmittedRequest): Promise<boolean> {
    const { cache, job, request, stream, served } = plan;
    if (!cache) return false;
    const { ctx, deps } = this;
    const { access, keyId, requestId, log } = ctx.state;
    let following = false;
    const admitFollower = async () => {
      // Once: a request contending again after a followed call never started holds its reservation still.
      if (following) return;
      ctx.set(
        await reserveSpend(
          deps.redis,
          deps.config,
          access,
          requestId,
          deps.cache.followerEstimate(admitted.estimate),
          job.deadline,
          undefined,
          { requests: true, tokens: false },
        ),
      );
      following = true;
    };
    const giveBack = () =>
      releaseReservation(deps.redis, access.accountId, requestId).catch((error: unknown) =>
        log.warn({ err: error }, 'could not release the reservation of a request that followed another’s call'),
      );
    // Heard from before the lead mark is first read until it is answered: a leader's end is never missed in between.
    const watch = deps.cache.watch(cache);
    try {
      for (let round = 1; ; round++) {
        const outcome = await deps.cache.claimLeadOrFollow(
          cache,
          { jobId: job.id, form: streamForm(request, stream), keyId },
          job.deadline,
          admitFollower,
          watch,
        );
        if (!outcome) break;
        // It waited: what its key may do now decides whether it is answered (a key revoked meanwhile is not).
        await this.stillAllowed(plan.served.modelId, giveBack);
        if ('entry' in outcome) {
          this.dropUploads(plan.form);
          await deps.cache.answer(ctx, outcome.entry, request, { stream, result: 'coalesced', ...served });
          return true;
        }
        let followed: FollowedCall = 'unbilled';
        try {
          followed = await deps.cache.followLeaderStream(
            ctx,
            deps.logs,
            outcome.follow,
            cache,
            request,
            { ...served, deadline: job.deadline, keepAliveMs: deps.config.sseKeepAliveMs },
            watch,
          );
        } finally {
          if (followed === 'unbilled') await giveBack();
        }
        if (followed !== 'unstarted') return true;
        // The call it followed never started (refused, or taken out of its queue), and nothing was written: it contends
        // for the lead again (admitted already), and after a few rounds runs its own.
        if (round >= claimRounds || Date.now() >= job.deadline) break;
      }
    } finally {
      watch.stop();
    }
    if (following) {
      // The call it waited on ended without an answer to share: it runs its own, reserved as any call is.
      await giveBack();
      admitted.requestsCounted = true;
    }
    job.data.cache = cache.job;
    ctx.set('cache-status', missStatus(cache));
    activeMetrics()?.cacheRequests.get(plan.served.modelId, 'miss').inc();
    return false;
  }

  /**
   * A request admitted a while ago, about to be answered: refused (its reservation given back) as its key would be at
   * the door now when the key was revoked or expired, its account disabled, or the model taken off its list meanwhile.
   */
  private async stillAllowed(modelId: string, giveBack: () => Promise<unknown>): Promise<void> {
    const now = await this.deps.access.of(this.ctx.state.keyId);
    if ('access' in now && mayUseModel(now.access, modelId)) return;
    await giveBack();
    throw 'refused' in now ? invalidApiKey(accessRefusalMessage(now.refused)) : modelNotAllowed(modelId);
  }

  /**
   * Places the job (its tier's band, its account's fair share within it, counted in its reserved tokens), reserves
   * its worst case and queues it in one round trip, then answers: held open until its reply (or streamed), or a 202
   * with the job to poll.
   */
  async enqueueAndAnswer(plan: ServePlan, admitted: AdmittedRequest, { accepted }: CheckedRequest<E>): Promise<void> {
    const { ctx, deps } = this;
    const { access, log } = ctx.state;
    const { job, cache, stream, graceMs, mode, dialect } = plan;
    // Fair places only where jobs wait (shared/scheduling/fair-queue.ts `isContended`).
    const contended = isContended(job.lane, deps.backpressure.waiting(job.queue));
    const tier = job.data.serviceTier ?? 'default';
    const fair = {
      accountId: access.accountId,
      weight: admitted.weight,
      tokens: admitted.estimate.tokens,
      tier,
      contended,
      leadTokens: deps.config.scheduling.priorityLeadTokens,
    };
    // A held request's reply is expected before its job is queued: what the job publishes from its first moment is
    // kept.
    const reply = mode === 'held' ? deps.hub.expect(job.id, stream) : undefined;
    try {
      const enqueued = await enqueue(
        deps,
        admitted.queue,
        job,
        {
          spend: { access, estimate: admitted.estimate, requestsCounted: admitted.requestsCounted },
          fair,
          ...(accepted.beforeAdd ? { beforeAdd: accepted.beforeAdd } : {}),
        },
        log,
      ).catch(async (error: unknown) => {
        // Refused (or Redis away): the requests waiting on this one's call run their own.
        if (cache) await deps.cache.releaseLead(cache, job.id);
        throw error;
      });
      ctx.set(enqueued.headers);
      noteEnqueued(ctx);
      if (ctx.state.trace) traceQueued(ctx.state.trace, job.data, job.queue);
      if (reply) {
        await holdForReply(ctx, deps, reply, admitted.queue, {
          stream,
          deadline: job.deadline,
          ...(accepted.contentType ? { contentType: accepted.contentType } : {}),
          ...(graceMs !== undefined ? { resumeGraceMs: graceMs } : {}),
          // Identical requests may follow this stream: its client leaving does not end it while one does.
          ...(cache?.job.flight && stream ? { followed: true } : {}),
          notes: { firstChunk: () => noteFirstChunk(ctx), failed: (code, message) => noteError(ctx, code, message) },
          // A job taken out before it ran (its client left, its deadline passed) gives back what it took, and the lead
          // it held goes with it: its followers run their own calls at once.
          abandon: cache?.job.flight
            ? () => {
                enqueued.abandon();
                void deps.cache.releaseLead(cache, job.id);
              }
            : enqueued.abandon,
          dialect,
        });
      } else if (job.asyncRecord) {
        ctx.status = 202;
        ctx.set('location', `/v1/jobs/${job.id}`);
        ctx.body = { id: job.id, object: 'job', status: 'queued', created: job.asyncRecord.created };
      }
    } finally {
      reply?.release();
    }
  }

  /** The endpoint's own last word, when it has one (e.g. a file's upload answered after its job). */
  async respond({ accepted }: CheckedRequest<E>): Promise<void> {
    await handlers[this.name].respond?.(this.ctx, accepted, this.deps);
  }
}

/**
 * The keyed /v1 requests that name an endpoint row go to its route; every other one goes on to the routers
 * (Google's model methods among them: their path carries fields the route is given, `api/gemini/routes.ts`).
 */
export function endpointDispatch(deps: EndpointRouteDeps): Middleware<KeyedState> {
  return (ctx, next) => {
    const name = queuedEndpoint(ctx.method, ctx.path);
    if (!name || endpoints[name].pipeline === 'gemini') return next();
    ctx.state.route = endpoints[name].path;
    return serve(name, ctx, deps);
  };
}
