import type Router from '@koa/router';
import { z } from 'zod';
import { listBatches, newOpenAIBatchId, openBatchCount, readBatch, seesBatch, type BatchRecord } from '../../shared/batches/index.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { activeMetrics } from '../../shared/metrics.js';
import { createRouter } from '../http/canonical-path.js';
import { parseBody, readJsonObject } from '../http/request-body.js';
import type { KeyedContext, KeyedState } from '../requests/request-context.js';
import { cancelOpenAIBatch } from './cancel.js';
import { startValidation, type OpenAIBatchDeps } from './openai-intake.js';
import { batchEndpoints, createValidatingBatch, openAIBatchView, type BatchEndpointPath } from './openai-record.js';

/**
 * OpenAI's Batch API (`/v1/batches`) on the batch engine that runs Anthropic's Message Batches: `POST` makes a
 * batch of the account's `purpose: batch` file (answered `validating`; the file is read after the answer,
 * openai-intake.ts), `GET /{id}` and `GET` (paged with `after` and `limit`, newest first) read it as OpenAI's
 * `Batch` object (openai-record.ts), `POST /{id}/cancel` cancels it. Its output and error files are the account's
 * files, read with `/v1/files/{id}/content` once it has ended (openai-finalize.ts). A batch is its account's, as a
 * Message Batch is: a key limited to models sees only the batches whose every model it may use, and any other is a
 * 404, as another account's. Errors are OpenAI's.
 */

const batchIdPattern = /^batch_[A-Za-z0-9]{1,64}$/;
const notFound = (id: string) => new GatewayError(404, `No batch found with id '${id.slice(0, 80)}'.`, { type: 'invalid_request_error', code: 'not_found' });

const maxMetadataKeys = 16;
/** OpenAI's metadata: at most 16 pairs, keys of 64 characters at most, values of 512. */
const metadataSchema = z
  .record(z.string(), z.unknown())
  .refine((value) => Object.keys(value).length <= maxMetadataKeys, { message: `at most ${maxMetadataKeys} keys are allowed` })
  .pipe(z.record(z.string().max(64), z.string().max(512)));

const createSchema = z.strictObject({
  input_file_id: z.string().min(1).max(256),
  endpoint: z.string(),
  completion_window: z.string(),
  metadata: metadataSchema.nullish(),
  output_expires_after: z.strictObject({ anchor: z.literal('created_at'), seconds: z.number().int().min(3600).max(2_592_000) }).nullish(),
});

/** A batch's create body is small: the file holds its requests. */
const maxCreateBytes = 64 * 1024;

/** The caller's account's batch of this dialect, or a 404 (another account's, or one using a model the key may not use). */
async function ownedBatch(ctx: KeyedContext, deps: OpenAIBatchDeps, id: string): Promise<BatchRecord> {
  if (!batchIdPattern.test(id)) throw notFound(id);
  const batch = await readBatch(deps.redis, id);
  const { access } = ctx.state;
  if (!batch || batch.dialect !== 'openai' || batch.accountId !== access.accountId || !seesBatch(access.models, batch)) throw notFound(id);
  return batch;
}

/** OpenAI's `after` cursor and `limit` (1 to 100, 20 by default). */
function pageQuery(query: Record<string, unknown>): { limit: number; afterId?: string } {
  const text = (name: string) => (typeof query[name] === 'string' ? (query[name] as string) : undefined);
  const limit = text('limit') === undefined ? 20 : Number(text('limit'));
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalidRequest('limit must be a whole number from 1 to 100.', 'limit');
  const after = text('after');
  return { limit, ...(after !== undefined ? { afterId: after } : {}) };
}

export function openAIBatchRoutes(deps: OpenAIBatchDeps): Router<KeyedState> {
  const router = createRouter<KeyedState>('/v1/batches');

  router.post('/', async (ctx) => {
    const body = parseBody(createSchema, await readJsonObject(ctx.req, maxCreateBytes));
    if (!(body.endpoint in batchEndpoints)) {
      throw invalidRequest(`Invalid 'endpoint': '${body.endpoint.slice(0, 64)}'. A batch here runs ${Object.keys(batchEndpoints).join(', ')}.`, 'endpoint', 'invalid_value');
    }
    if (body.completion_window !== '24h') throw invalidRequest(`Invalid 'completion_window': '${body.completion_window.slice(0, 16)}'. Only '24h' is supported.`, 'completion_window', 'invalid_value');
    const { access, keyId } = ctx.state;
    const limits = deps.config.batches;
    if ((await openBatchCount(deps.redis, access.accountId, Date.now() - limits.deadlineMs)) >= limits.maxOpen) {
      throw new GatewayError(429, `This account has ${limits.maxOpen} batches in progress, the most it may have (BATCH_MAX_OPEN). Retry when one has ended.`, { code: 'rate_limit_exceeded' });
    }
    const id = newOpenAIBatchId();
    const created = Date.now();
    await createValidatingBatch(
      deps.redis,
      {
        id,
        accountId: access.accountId,
        keyId,
        created,
        expires: created + limits.deadlineMs,
        endpoint: body.endpoint as BatchEndpointPath,
        inputFileId: body.input_file_id,
        metadata: body.metadata ?? null,
        outputExpiresAfter: body.output_expires_after ?? null,
        access: { ...(access.models ? { models: access.models } : {}), ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}), ...(access.weight !== undefined ? { weight: access.weight } : {}), ...(access.budgets ? { budgets: access.budgets } : {}) },
      },
      limits.resultsKeepMs,
    );
    activeMetrics()?.batches.get('created', 'openai').inc();
    ctx.state.log.info({ batch: id, file: body.input_file_id, endpoint: body.endpoint }, 'OpenAI batch created');
    const batch = await readBatch(deps.redis, id);
    ctx.body = openAIBatchView(batch!);
    // Its file is read once the answer is on its way.
    startValidation(deps, id);
  });

  router.get('/', async (ctx) => {
    const page = pageQuery(ctx.query);
    const { batches, hasMore } = await listBatches(deps.redis, ctx.state.access.accountId, { ...page, dialect: 'openai' }, ctx.state.access.models);
    const data = batches.map(openAIBatchView);
    ctx.body = { object: 'list', data, first_id: (data[0]?.id as string | undefined) ?? null, last_id: (data.at(-1)?.id as string | undefined) ?? null, has_more: hasMore };
  });

  router.get('/:id', async (ctx) => {
    ctx.body = openAIBatchView(await ownedBatch(ctx, deps, ctx.params.id!));
  });

  router.post('/:id/cancel', async (ctx) => {
    const batch = await ownedBatch(ctx, deps, ctx.params.id!);
    ctx.body = openAIBatchView(await cancelOpenAIBatch(deps, batch, ctx.state.log));
  });

  return router;
}
