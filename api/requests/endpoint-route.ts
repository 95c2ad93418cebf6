import type Router from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import type { Context } from 'koa';
import { endpointNames, endpoints, type Endpoint, type EndpointRequest } from '../../shared/endpoints.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { KeyAccess } from '../../shared/accounts.js';
import type { PriceList } from '../../shared/pricing.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { handlers, type Admitted, type EndpointHandler, type HandlerInput } from './endpoint-handlers.js';
import { largeBodyBytes, parseBody, readJsonObject, yieldToLoop } from '../http/request-body.js';
import type { ModelResolver } from './model-resolver.js';
import { readMultipart, refusingDeletesUploads, type MultipartForm } from '../http/multipart.js';
import { prefersAsync, relay, type RelayDeps } from '../relay/relay.js';
import type { AuthState } from '../accounts/auth.js';
import type { RequestIdState } from '../http/envelope.js';
import type { EventLogs } from '../relay/event-log.js';
import { noteModel } from '../http/metrics.js';
import { noteLoggedModel, watchRequest } from './request-log.js';

type State = AuthState & RequestIdState;

export interface EndpointRouteDeps extends RelayDeps {
  models: ModelResolver;
  blobs: BlobStore;
  prices: PriceList;
  logs: EventLogs;
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
 * The one route every row of the endpoint table gets: read the body the row
 * says (JSON, multipart, or either), validate it with the row's schema,
 * resolve the model for the row's capabilities, let the endpoint's handler
 * check and shape the payload, then queue it and answer (held open, streamed,
 * or async). A refused multipart request's stored files are deleted at once.
 */
export async function serve<E extends Endpoint>(name: E, ctx: Context, deps: EndpointRouteDeps): Promise<void> {
  const row = endpoints[name];
  const access: KeyAccess | undefined = ctx.state.access;
  // Every keyed request gets its log record, whatever becomes of it (a body too large or malformed included).
  const shape = { stream: false, resumable: false };
  if (access && deps.config.requestLog) watchRequest(ctx, name, shape, access, { redis: deps.redis, bufferRecords: deps.config.usageBufferRecords, log: ctx.state.log });
  const multipart = row.body === 'multipart' || (row.body === 'json-or-multipart' && /^multipart\/form-data/i.test(ctx.get('content-type')));
  const form = multipart && row.uploads ? await readMultipart(ctx.req, deps.blobs, ctx.state.requestId, deps.config[row.uploads.maxBytes]) : undefined;
  const raw = form ? formFields(form) : await readJsonObject(ctx.req, deps.config.maxBodyBytes);
  if (typeof raw.model === 'string') noteLoggedModel(ctx, raw.model);
  if (raw.stream === true) shape.stream = true;
  const handler: EndpointHandler<E> = handlers[name];
  const admit = async () => {
    // Parsing ended the previous turn of the loop; validating a large body is a turn of its own.
    if (!form && !(Number(ctx.get('content-length')) <= largeBodyBytes)) await yieldToLoop();
    // TypeScript cannot follow a generic row to its schema's output: this is where the two are tied, once.
    const fields = parseBody(row.schema, raw) as HandlerInput<E>['fields'];
    const model = deps.models.resolve((fields as { model: string }).model, name);
    noteModel(ctx, model.id);
    noteLoggedModel(ctx, model.id);
    if (access?.models && !access.models.includes(model.id)) {
      throw new GatewayError(403, `This API key may not use the model \`${model.id}\`.`, { type: 'invalid_request_error', code: 'model_not_allowed', param: 'model' });
    }
    const admitted: Admitted<E> = await handler.admit({ fields, model, files: form?.files ?? [], scope: { redis: deps.redis, blobs: deps.blobs, keyId: ctx.state.keyId, config: deps.config } });
    return { model, admitted };
  };
  const { model, admitted } = form ? await refusingDeletesUploads(form, deps.blobs, admit) : await admit();
  const stream = admitted.stream ?? false;
  const graceMs = stream ? resumeGrace(ctx, deps.config.streamResumeGraceMaxMs) : undefined;
  shape.stream = stream;
  shape.resumable = (graceMs ?? 0) > 0;
  // The worst case this request may cost, reserved before it is queued; settled by the worker with the actual cost.
  // A model an operator's catalog added without a price is served free (the start-up log names such models).
  const estimate = !access
    ? undefined
    : deps.prices.has(model.id)
      ? deps.prices.worstCaseMicros(model.id, { endpoint: name, payload: admitted.payload } as EndpointRequest, admitted.promptTokens ?? 0)
      : { micros: 0, tokens: admitted.promptTokens ?? 0 };
  await relay(ctx, deps, {
    endpoint: name,
    model: model.id,
    keyId: ctx.state.keyId,
    body: admitted.payload,
    stream,
    ...(graceMs !== undefined ? { resumeGraceMs: graceMs } : {}),
    async: row.asyncOnly || asyncMode(ctx, stream),
    ...(admitted.contentType ? { contentType: admitted.contentType } : {}),
    ...(admitted.jobId ? { jobId: admitted.jobId } : {}),
    ...(admitted.prepare ? { prepare: admitted.prepare } : {}),
    ...(admitted.detached ? { detached: true } : {}),
    ...(access && estimate ? { spend: { access, estimate } } : {}),
  });
  await handler.answer?.(ctx, admitted, deps);
}

/** One POST route per row of the endpoint table. */
export function endpointRoutes(deps: EndpointRouteDeps): Router<State> {
  const router = createRouter<State>();
  for (const name of endpointNames) router.post(endpoints[name].path, (ctx) => serve(name, ctx, deps));
  return router;
}
