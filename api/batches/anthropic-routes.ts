import { Readable } from 'node:stream';
import type Router from '@koa/router';
import {
  batchView,
  deleteBatch,
  listBatches,
  openBatchCount,
  readBatch,
  readBatchResults,
  type BatchRecord,
} from '../../shared/batches/index.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import { createRouter } from '../http/canonical-path.js';
import { readJsonText } from '../http/request-body.js';
import type { EndpointRouteDeps } from '../requests/endpoint-route.js';
import type { KeyedContext, KeyedState } from '../requests/request-context.js';
import type { RecordDb } from '../../storage/record/database.js';
import { keyScope, seesBatchAs } from '../files/key-scope.js';
import { intakeBatch } from './anthropic-intake.js';
import { cancelMessageBatch } from './cancel.js';

/**
 * Anthropic's Message Batches API (`/v1/messages/batches`), on every chat model of every vendor: a batch is its
 * account's, not its key's (as Anthropic's is its Workspace's and OpenAI's its Project's: a team rotates its keys
 * while a batch runs and reads its results weeks later), seen by the keys api/files/key-scope.ts says: a key a team's
 * member made sees the batches that member's keys made, a key limited to models only the batches whose every model it
 * may use, any key those it made itself. Answers in Anthropic's dialect (errors included: the path is under
 * `/v1/messages`). See anthropic-intake.ts for how a batch comes in, shared/batches/ for its record,
 * workers/batch-run.ts for how its requests run, sweep.ts for how a cancel and an expiry end it.
 */

const resultsPage = 500;
const batchIdPattern = /^msgbatch_[A-Za-z0-9]{1,64}$/;

const notFound = (id: string) =>
  new GatewayError(404, `No message batch with id '${id.slice(0, 80)}'.`, {
    type: 'not_found_error',
    code: 'not_found',
  });

/** What the routes read beside the engine: who made each key, and their role in its team now (key-scope.ts). */
export interface BatchRouteDeps extends EndpointRouteDeps {
  record: RecordDb;
}

/**
 * The caller's account's batch, or a 404 (another account's included: its existence is not told; one the caller's
 * key may not see too, for the same reason: another member's, one using a model it may not use).
 */
async function ownedBatch(ctx: KeyedContext, deps: BatchRouteDeps, id: string): Promise<BatchRecord> {
  if (!batchIdPattern.test(id)) throw notFound(id);
  const batch = await readBatch(deps.redis, id);
  if (!batch || batch.accountId !== ctx.state.access.accountId) throw notFound(id);
  if (!seesBatchAs(await keyScope(deps.record, ctx.state.access), batch)) throw notFound(id);
  return batch;
}

function view(ctx: KeyedContext, batch: BatchRecord) {
  return batchView(batch, `${ctx.protocol}://${ctx.host}/v1/messages/batches/${batch.id}/results`);
}

/** Anthropic's page cursor or limit as the query says it. */
function pageQuery(query: Record<string, unknown>): { limit: number; afterId?: string; beforeId?: string } {
  const text = (name: string) => (typeof query[name] === 'string' ? (query[name] as string) : undefined);
  const limit = text('limit') === undefined ? 20 : Number(text('limit'));
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw invalidRequest('limit must be a whole number from 1 to 1000.', 'limit');
  const afterId = text('after_id');
  const beforeId = text('before_id');
  if (afterId !== undefined && beforeId !== undefined)
    throw invalidRequest('Give after_id or before_id, not both.', 'before_id');
  return { limit, ...(afterId !== undefined ? { afterId } : {}), ...(beforeId !== undefined ? { beforeId } : {}) };
}

export function batchRoutes(deps: BatchRouteDeps, log: Logger): Router<KeyedState> {
  const router = createRouter<KeyedState>('/v1/messages/batches');
  const sweepDeps = { redis: deps.redis, queues: deps.queues, config: deps.config, log };

  router.post('/', async (ctx) => {
    const { text } = await readJsonText(ctx.req, deps.config.batches.maxBytes);
    const made = await intakeBatch(ctx, deps, text, () =>
      openBatchCount(deps.redis, ctx.state.access.accountId, Date.now() - deps.config.batches.deadlineMs),
    );
    activeMetrics()?.batches.get('created', 'anthropic').inc();
    ctx.state.log.info({ batch: made.id, requests: made.total }, 'message batch created');
    const batch = await readBatch(deps.redis, made.id);
    ctx.body = view(ctx, batch!);
  });

  router.get('/', async (ctx) => {
    const page = pageQuery(ctx.query);
    const scope = await keyScope(deps.record, ctx.state.access);
    const { batches, hasMore } = await listBatches(
      deps.redis,
      ctx.state.access.accountId,
      { ...page, dialect: 'anthropic' },
      (batch) => seesBatchAs(scope, batch),
    );
    const data = batches.map((batch) => view(ctx, batch));
    ctx.body = { data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
  });

  router.get('/:id', async (ctx) => {
    ctx.body = view(ctx, await ownedBatch(ctx, deps, ctx.params.id!));
  });

  router.post('/:id/cancel', async (ctx) => {
    const batch = await ownedBatch(ctx, deps, ctx.params.id!);
    ctx.body = view(ctx, await cancelMessageBatch(sweepDeps, batch, ctx.state.log));
  });

  router.delete('/:id', async (ctx) => {
    const batch = await ownedBatch(ctx, deps, ctx.params.id!);
    if (batch.status !== 'ended')
      throw invalidRequest(
        `The batch ${batch.id} is still ${batch.status}: cancel it, and delete it once it has ended.`,
        'id',
      );
    await deleteBatch(deps.redis, batch.id, batch.accountId);
    ctx.body = { id: batch.id, type: 'message_batch_deleted' };
  });

  router.get('/:id/results', async (ctx) => {
    const batch = await ownedBatch(ctx, deps, ctx.params.id!);
    if (batch.status !== 'ended')
      throw invalidRequest(
        `The batch ${batch.id} is still ${batch.status}: its results can be read once it has ended.`,
        'id',
      );
    const { redis } = deps;
    // Page by page from Redis as the client reads: a batch of any size streams in constant memory.
    async function* lines() {
      let after = '0';
      for (;;) {
        const page = await readBatchResults(redis, batch.id, after, resultsPage);
        if (page.lines.length > 0) yield `${page.lines.join('\n')}\n`;
        if (page.lines.length < resultsPage || !page.last) return;
        after = page.last;
      }
    }
    ctx.type = 'application/x-jsonl';
    ctx.body = Readable.from(lines());
  });

  return router;
}
