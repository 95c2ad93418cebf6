import type { Middleware } from 'koa';
import type { KeyAccess } from '../../shared/accounts.js';
import { endpoints, type Endpoint, type EndpointRequest } from '../../shared/endpoints.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { worstCase } from '../../shared/money/charge.js';
import type { PriceList } from '../../shared/money/pricing.js';
import { grantedTier, laneOf } from '../../shared/scheduling/index.js';
import { servingTier } from '../../shared/scheduling/service-tier.js';
import { speaksAnthropic } from '../../shared/messages.js';
import { activeMetrics } from '../../shared/metrics.js';
import { streamForm } from '../../shared/cache/index.js';
import { claimRounds, missStatus, type FollowedCall, type ResponseCache } from '../cache/response-cache.js';
import type { BlobStore } from '../../storage/blob-store.js';
import type { KeyedContext, KeyedState } from './request-context.js';
import { noteModel } from '../http/metrics.js';
import { readMultipart, refusingDeletesUploads, type MultipartForm } from '../http/multipart.js';
import { largeBodyBytes, parseBody, readJsonBody, yieldToLoop } from '../http/request-body.js';
import { jobTraceCarrier, traceQueued } from '../http/request-tracing.js';
import { enqueue, queueFor, type EnqueueDeps } from '../relay/enqueue.js';
import { reserveSpend } from '../accounts/spend.js';
import { releaseReservation } from '../../shared/money/billing.js';
import type { EventLogs } from '../relay/event-log.js';
import type { HeldReplyDeps } from '../relay/held-reply.js';
import { hold } from '../relay/hold.js';
import type { AnswerMode } from '../relay/enqueue.js';
import type { StreamDialect } from '../relay/stream-dialects.js';
import type { GeminiPathFields } from '../gemini/accept.js';
import { buildJob, type JobOrigin } from './build-job.js';
import { queuedEndpoint } from './endpoint-paths.js';
import { handlers, type Accepted, type EndpointHandler, type HandlerInput } from './endpoint-handlers.js';
import type { ModelResolver } from './model-resolver.js';
import { noteEnqueued, noteError, noteFirstChunk, noteLoggedModel, watchRequest, type RequestShape } from './request-log.js';

export interface EndpointRouteDeps extends EnqueueDeps, HeldReplyDeps {
  models: ModelResolver;
  /** The response cache's api half. */
  cache: ResponseCache;
  blobs: BlobStore;
  prices: PriceList;
  logs: EventLogs;
}

/** A key limited to some models may use only those: a 403 naming the model otherwise. */
export function checkModelAllowed(access: Pick<KeyAccess, 'models'>, modelId: string): void {
  if (access.models && !access.models.includes(modelId)) {
    throw new GatewayError(403, `This API key may not use the model \`${modelId}\`.`, { type: 'invalid_request_error', code: 'model_not_allowed', param: 'model' });
  }
}

/** `Prefer: respond-async` (RFC 7240) asks for a 202 and a job to poll. */
export function prefersAsync(prefer: string | undefined): boolean {
  return !!prefer && prefer.split(/[,;]/).some((token) => token.trim().toLowerCase() === 'respond-async');
}

/** `Prefer: respond-async` on any POST; a stream has nothing to hand over later, so the two do not mix. */
export function asyncMode(ctx: { get(name: string): string }, stream: boolean): boolean {
  const wanted = prefersAsync(ctx.get('prefer'));
  if (wanted && stream) throw invalidRequest('A streamed request cannot also be answered asynchronously (Prefer: respond-async).', 'stream');
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
  if (!/^\d{1,10}$/.test(asked.trim())) throw invalidRequest(`The ${resumeGraceHeader} header must be a whole number of milliseconds.`, resumeGraceHeader);
  return Math.min(Number(asked.trim()), maxMs);
}

/** Multipart text fields as the schemas read them: `name[]` (or a repeated name ending so) is a list, any other name its last value. */
function formFields(form: MultipartForm): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(form.fields)) fields[name] = name.endsWith('[]') ? [value].flat() : Array.isArray(value) ? value.at(-1) : value;
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
 * The one route every row of the endpoint table gets: read the body the row
 * says (JSON, multipart, or either), validate it with the row's schema,
 * resolve the model for the row's capabilities, let the endpoint's handler
 * check and shape the payload, build the job once, then queue it and answer
 * (held open, streamed, async or in the background). A refused multipart
 * request's stored files are deleted at once.
 */
export async function serve<E extends Endpoint>(name: E, ctx: KeyedContext, deps: EndpointRouteDeps, path?: PathFields): Promise<void> {
  const row = endpoints[name];
  const { access, keyId, requestId, log } = ctx.state;
  // Every keyed request gets its log record, whatever becomes of it (a body too large or malformed included).
  const shape: RequestShape = { stream: false, resumable: false };
  if (deps.config.requestLog) watchRequest(ctx, name, shape, access, { redis: deps.redis, bufferRecords: deps.config.usageBufferRecords, log });
  const multipart = row.body === 'multipart' || (row.body === 'json-or-multipart' && /^multipart\/form-data/i.test(ctx.get('content-type')));
  const form = multipart && row.uploads ? await readMultipart(ctx.req, deps.blobs, requestId, deps.config[row.uploads.maxBytes]) : undefined;
  const read = form ? undefined : await readJsonBody(ctx.req, deps.config.maxBodyBytes);
  const raw = form ? formFields(form) : read!.body;
  // What was read decides, however it arrived (a chunked body has no Content-Length; a client may misstate one).
  const bodyBytes = read ? read.bytes : Object.values(form!.fields).reduce((sum, value) => sum + [value].flat().reduce((n, v) => n + Buffer.byteLength(v), 0), 0);
  const asked = path ? path.model : raw.model;
  if (typeof asked === 'string') noteLoggedModel(ctx, asked);
  if (path ? path.stream : raw.stream === true) shape.stream = true;
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
    // A tier the account may not use is served as `default` (or refused, as configured) before anything reads it.
    const tier = (fields as { service_tier?: string | null }).service_tier;
    if (typeof tier === 'string' && grantedTier(servingTier(tier), access, deps.config.scheduling) !== servingTier(tier)) {
      (fields as { service_tier?: string | null }).service_tier = 'default';
    }
    const accepted: Accepted<E> = await handler.accept({ fields, model, files: form?.files ?? [], scope: { redis: deps.redis, blobs: deps.blobs, keyId, config: deps.config, models: deps.models }, header: (header) => ctx.get(header), ...(path ? { path } : {}) });
    return { model, accepted };
  };
  const { model, accepted } = form ? await refusingDeletesUploads(form, deps.blobs, check) : await check();
  const stream = accepted.stream ?? false;
  const graceMs = stream ? resumeGrace(ctx, deps.config.streamResumeGraceMaxMs) : undefined;
  shape.stream = stream;
  shape.resumable = (graceMs ?? 0) > 0;
  if (accepted.serviceTier !== undefined) shape.serviceTier = accepted.serviceTier;
  const mode: AnswerMode = row.asyncOnly || asyncMode(ctx, stream) ? 'async' : accepted.detached ? 'background' : 'held';
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
  const cache = mode === 'held' ? deps.cache.plan(ctx, request, model.id, access, { async: false, bodyBytes }) : undefined;
  // Served from the cache, the request's uploads are read by no job.
  const dropUploads = () => (form ? void Promise.allSettled(form.files.map((file) => deps.blobs.delete(file.ref.key))) : undefined);
  // What a stored answer echoes of the request it serves is this request's (api/cache/answer-echo.ts).
  // The dialect of its stream: the path's (Google's two forms), else the row's.
  const dialect: StreamDialect = accepted.dialect ?? path?.dialect ?? (speaksAnthropic(row.path) ? 'anthropic' : 'openai');
  const served = { access, keyId, modelId: model.id, dialect, ...(accepted.contentType ? { contentType: accepted.contentType } : {}), echo: { job, model, config: deps.config } };
  if (cache) {
    cache.job.hash = cache.hash;
    const hit = await deps.cache.read(cache);
    if (hit) {
      dropUploads();
      await deps.cache.answer(ctx, hit, request, { stream, result: 'hit', ...served });
      return;
    }
  }
  // The worst case this request may cost, reserved as it is queued; settled by the worker with the actual cost.
  const estimate = worstCase(deps.config, deps.prices, request, model.id, model.routes[0]?.vendor, accepted.promptTokens ?? 0);
  // Its lane's waiting room first: an account past its share is refused here, before anything is reserved.
  const weight = access.weight ?? 1;
  const queue = queueFor(deps, job, { accountId: access.accountId, weight });
  // Counted once: a request that first waited to share another's call and then runs its own is not counted again.
  let requestsCounted = false;
  if (cache) {
    // It may share an identical request's call in flight, or become the one the next ones share. Sharing, it is
    // admitted first as any request is (its key's rate of requests, and its price held: CACHE_HIT_PRICE of its own
    // worst case), the reservation settled at the price of the answer it gets, or given back when it gets none.
    let sharing = false;
    const admitShared = async () => {
      // Once: a request contending again after a followed call never started holds its reservation still.
      if (sharing) return;
      ctx.set(await reserveSpend(deps.redis, deps.config, access, requestId, deps.cache.followerEstimate(estimate), job.deadline, undefined, { requests: true, tokens: false }));
      sharing = true;
    };
    const giveBack = () => releaseReservation(deps.redis, access.accountId, requestId).catch((error: unknown) => log.warn({ err: error }, 'could not release the reservation of a request that shared another’s call'));
    for (let round = 1; ; round++) {
      const shared = await deps.cache.claimLeadOrFollow(cache, { jobId: job.id, form: streamForm(request, stream), keyId }, job.deadline, admitShared);
      if (!shared) break;
      if ('entry' in shared) {
        dropUploads();
        await deps.cache.answer(ctx, shared.entry, request, { stream, result: 'coalesced', ...served });
        return;
      }
      let followed: FollowedCall = 'unbilled';
      try {
        followed = await deps.cache.followLeaderStream(ctx, deps.logs, shared.follow, cache, request, { ...served, deadline: job.deadline, keepAliveMs: deps.config.sseKeepAliveMs });
      } finally {
        if (followed === 'unbilled') await giveBack();
      }
      if (followed !== 'unstarted') return;
      // The call it followed never started (refused, or taken out of its queue), and nothing was written: it contends
      // for the lead again (admitted already), and after a few rounds runs its own.
      if (round >= claimRounds || Date.now() >= job.deadline) break;
    }
    if (sharing) {
      // The call it waited on ended without an answer to share: it runs its own, reserved as any call is.
      await giveBack();
      requestsCounted = true;
    }
    job.data.cache = cache.job;
    ctx.set('cache-status', missStatus(cache));
    activeMetrics()?.cacheRequests.get(model.id, 'miss').inc();
  }
  // Its place in the queue: its tier's band, and its account's fair share within it, counted in its reserved tokens.
  // A capped vendor's lane is where jobs wait; the shared lane, only once its workers are all busy (jobs were
  // waiting at the last count, every 200 ms).
  const contended = job.lane !== undefined || deps.backpressure.waiting(job.queue) > 0;
  const tier = job.data.serviceTier ?? 'default';
  const fair = { accountId: access.accountId, weight, tokens: estimate.tokens, tier, contended, leadTokens: deps.config.scheduling.priorityLeadTokens };
  // A held request's reply is expected before its job is queued: what the job publishes from its first moment is kept.
  const reply = mode === 'held' ? deps.hub.expect(job.id, stream) : undefined;
  try {
    const enqueued = await enqueue(deps, queue, job, { spend: { access, estimate, requestsCounted }, fair, ...(accepted.beforeAdd ? { beforeAdd: accepted.beforeAdd } : {}) }, log).catch(async (error: unknown) => {
      // Refused (or Redis away): the requests waiting on this one's call run their own.
      if (cache) await deps.cache.releaseLead(cache, job.id);
      throw error;
    });
    ctx.set(enqueued.headers);
    noteEnqueued(ctx);
    if (ctx.state.trace) traceQueued(ctx.state.trace, job.data, job.queue);
    if (reply) {
      await hold(ctx, deps, reply, queue, {
        stream,
        deadline: job.deadline,
        ...(accepted.contentType ? { contentType: accepted.contentType } : {}),
        ...(graceMs !== undefined ? { resumeGraceMs: graceMs } : {}),
        // Identical requests may follow this stream: its client leaving does not end it while one does.
        ...(cache?.job.flight && stream ? { followed: true } : {}),
        notes: { firstChunk: () => noteFirstChunk(ctx), failed: (code) => noteError(ctx, code) },
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
  await handler.respond?.(ctx, accepted, deps);
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
