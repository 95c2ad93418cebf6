import type Router from '@koa/router';
import { z } from 'zod';
import {
  listBatches,
  newOpenAIBatchId,
  openBatchCount,
  readBatch,
  type BatchRecord,
} from '../../shared/batches/index.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { activeMetrics } from '../../shared/metrics.js';
import { createRouter } from '../http/canonical-path.js';
import { parseBody, readJsonObject } from '../http/request-body.js';
import type { KeyedContext, KeyedState } from '../requests/request-context.js';
import type { RecordDb } from '../../storage/record/database.js';
import { keyScope, seenFile, seesBatchAs } from '../files/key-scope.js';
import { cancelOpenAIBatch } from './cancel.js';
import { startValidation, type OpenAIBatchDeps } from './openai-intake.js';
import {
  batchEndpoints,
  createValidatingBatch,
  failValidation,
  openAIBatchView,
  type BatchEndpointPath,
} from './openai-record.js';

/**
 * OpenAI's Batch API (`/v1/batches`) on the batch engine that runs Anthropic's Message Batches: `POST` makes a
 * batch of the account's `purpose: batch` file (answered `validating`; the file is read after the answer,
 * openai-intake.ts), `GET /{id}` and `GET` (paged with `after` and `limit`, newest first) read it as OpenAI's
 * `Batch` object (openai-record.ts), `POST /{id}/cancel` cancels it. Its output and error files are the account's
 * files, read with `/v1/files/{id}/content` once it has ended (openai-finalize.ts). A batch is its account's, as a
 * Message Batch is, seen by the keys api/files/key-scope.ts says (a member's key: its maker's batches; a key limited to
 * models: the batches whose every model it may use; any key: its own, in every status); any other is a 404, as
 * another account's. A batch of a file the key does not see fails as one of a file that does not exist. Errors are
 * OpenAI's.
 */

/** What the routes read beside the engine: who made each key, and their role in its team now (key-scope.ts). */
export interface OpenAIBatchRouteDeps extends OpenAIBatchDeps {
  record: RecordDb;
}

const batchIdPattern = /^batch_[A-Za-z0-9]{1,64}$/;
const notFound = (id: string) =>
  new GatewayError(404, `No batch found with id '${id.slice(0, 80)}'.`, {
    type: 'invalid_request_error',
    code: 'not_found',
  });

const maxMetadataKeys = 16;
/** OpenAI's metadata: at most 16 pairs, keys of 64 characters at most, values of 512. */
const metadataSchema = z
  .record(z.string(), z.unknown())
  .refine((value) => Object.keys(value).length <= maxMetadataKeys, {
    message: `at most ${maxMetadataKeys} keys are allowed`,
  })
  .pipe(z.record(z.string().max(64), z.string().max(512)));

const createSchema = z.strictObject({
  input_file_id: z.string().min(1).max(256),
  endpoint: z.string(),
  completion_window: z.string(),
  metadata: metadataSchema.nullish(),
  output_expires_after: z
    .strictObject({ anchor: z.literal('created_at'), seconds: z.number().int().min(3600).max(2_592_000) })
    .nullish(),
});

/** A batch's create body is small: the file holds its requests. */
const maxCreateBytes = 64 * 1024;

/**
 * The caller's account's batch of this dialect, or a 404 (another account's, or one using a model the key may not use).
 */
async function ownedBatch(ctx: KeyedContext, deps: OpenAIBatchRouteDeps, id: string): Promise<BatchRecord> {
  if (!batchIdPattern.test(id)) throw notFound(id);
  const batch = await readBatch(deps.redis, id);
  if (!batch || batch.dialect !== 'openai' || batch.accountId !== ctx.state.access.accountId) throw notFound(id);
  if (!seesBatchAs(await keyScope(deps.record, ctx.state.access), batch)) throw notFound(id);
  return batch;
}

/** Fails a batch whose file the key may not see, with the error a file that does not exist gets (openai-intake.ts). */
async function failUnseen(deps: OpenAIBatchRouteDeps, batchId: string, fileId: string): Promise<void> {
  const error = {
    code: 'file_not_found',
    message: `No file with id '${fileId}' was found for this account.`,
    param: 'input_file_id',
    line: null,
  };
  if (await failValidation(deps.redis, batchId, [error], deps.config.batches.resultsKeepMs)) {
    activeMetrics()?.batches.get('failed', 'openai').inc();
    deps.log.info(
      { batch: batchId, errors: [{ code: error.code, line: null }] },
      'an OpenAI batch failed its validation',
    );
  }
}

/** OpenAI's `after` cursor and `limit` (1 to 100, 20 by default). */
function pageQuery(query: Record<string, unknown>): { limit: number; afterId?: string } {
  const text = (name: string) => (typeof query[name] === 'string' ? (query[name] as string) : undefined);
  const limit = text('limit') === undefined ? 20 : Number(text('limit'));
  if (!Number.isInteger(limit) || limit < 1 || limit > 100)
    throw invalidRequest('limit must be a whole number from 1 to 100.', 'limit');
  const after = text('after');
  return { limit, ...(after !== undefined ? { afterId: after } : {}) };
}

export function openAIBatchRoutes(deps: OpenAIBatchRouteDeps): Router<KeyedState> {
  const router = createRouter<KeyedState>('/v1/batches');

  router.post('/', async (ctx) => {
    const body = parseBody(createSchema, await readJsonObject(ctx.req, maxCreateBytes));
    if (!(body.endpoint in batchEndpoints)) {
      throw invalidRequest(
        `Invalid 'endpoint': '${body.endpoint.slice(0, 64)}'. A batch here runs ${Object.keys(batchEndpoints).join(', ')}.`,
        'endpoint',
        'invalid_value',
      );
    }
    if (body.completion_window !== '24h')
      throw invalidRequest(
        `Invalid 'completion_window': '${body.completion_window.slice(0, 16)}'. Only '24h' is supported.`,
        'completion_window',
        'invalid_value',
      );
    const { access, keyId } = ctx.state;
    const limits = deps.config.batches;
    if ((await openBatchCount(deps.redis, access.accountId, Date.now() - limits.deadlineMs)) >= limits.maxOpen) {
      throw new GatewayError(
        429,
        `This account has ${limits.maxOpen} batches in progress, the most it may have (BATCH_MAX_OPEN). Retry ` +
          `when one has ended.`,
        { code: 'rate_limit_exceeded' },
      );
    }
    const id = newOpenAIBatchId();
    const created = Date.now();
    // The file as this key sees it; the batch is tied to it before it exists, so no key that may not see the batch
    // sees its file meanwhile (key-scope.ts).
    const input = await seenFile(
      await keyScope(deps.record, access),
      deps.redis,
      await deps.files.entry(access.accountId, body.input_file_id),
    );
    if (input) await deps.files.tieBatch(access.accountId, input.file.id, id);
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
        access: {
          ...(access.models ? { models: access.models } : {}),
          ...(access.limitMicros !== undefined ? { limitMicros: access.limitMicros } : {}),
          ...(access.weight !== undefined ? { weight: access.weight } : {}),
          ...(access.budgets ? { budgets: access.budgets } : {}),
        },
      },
      limits.resultsKeepMs,
    );
    activeMetrics()?.batches.get('created', 'openai').inc();
    ctx.state.log.info({ batch: id, file: body.input_file_id, endpoint: body.endpoint }, 'OpenAI batch created');
    const batch = await readBatch(deps.redis, id);
    ctx.body = openAIBatchView(batch!);
    // Its file is read once the answer is on its way; one this key may not see fails as one that does not exist
    // would (now, answered as validating all the same: the sweep must never validate it with that file).
    if (input) startValidation(deps, id);
    else await failUnseen(deps, id, body.input_file_id);
  });

  router.get('/', async (ctx) => {
    const page = pageQuery(ctx.query);
    const scope = await keyScope(deps.record, ctx.state.access);
    const { batches, hasMore } = await listBatches(
      deps.redis,
      ctx.state.access.accountId,
      { ...page, dialect: 'openai' },
      (batch) => seesBatchAs(scope, batch),
    );
    const data = batches.map(openAIBatchView);
    ctx.body = {
      object: 'list',
      data,
      first_id: (data[0]?.id as string | undefined) ?? null,
      last_id: (data.at(-1)?.id as string | undefined) ?? null,
      has_more: hasMore,
    };
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
