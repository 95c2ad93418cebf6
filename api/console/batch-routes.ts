import type Router from '@koa/router';
import { z } from 'zod';
import {
  cursorText,
  deleteBatch,
  listBatches,
  listEveryBatch,
  parseCursor,
  readBatch,
  type BatchRecord,
} from '../../shared/batches/index.js';
import type { Account } from '../../shared/accounts.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import type { BatchPage, ConsoleBatch, ConsoleBatchDeleted } from '../../shared/console-api.js';
import { microsToUsd } from '../accounts/account-store.js';
import { parseStrict } from '../accounts/account-requests.js';
import { cancelMessageBatch, cancelOpenAIBatch } from '../batches/cancel.js';
import { openAIFields, openAIStatus } from '../batches/openai-record.js';
import { AccountFileStore } from '../../storage/account-files.js';
import {
  requireTeam,
  withoutTeam,
  type ConsoleContext,
  type ConsoleDeps,
  type TeamNeed,
  type TeamScope,
} from './console-session.js';
import { may } from '../accounts/team-roles.js';

/*
 * The console's batches (both dialects: Message Batches and OpenAI's Batch API), session-authenticated, in the
 * request's team (`requireTeam`): an owner's are the team's, a team member's those made with the keys they made (a
 * batch remembers its key), a viewer's none (403). In a person's own account, as before teams: an admin's every
 * account's (or the one `account_id` names). One batch read, canceled or deleted by
 * its id: a member's own only (another's is a 404, as an unknown id: ids are not a way to probe), an admin's any.
 * Cancel and delete are the /v1 APIs' own (api/batches/cancel.ts, shared/batches/delete.ts), and like every console
 * POST and DELETE they need the session's CSRF token (routes.ts checks it before any route).
 */

/**
 * The batches page's query: a page size, the cursor of the page before (or Anthropic's `after_id`), and (an admin's
 * only) the account it reads.
 */
const batchListQuerySchema = z.strictObject({
  limit: z
    .string()
    .regex(/^\d{1,4}$/, 'expected a whole number')
    .transform(Number)
    .pipe(z.number().int().min(1).max(100))
    .optional(),
  after_id: storableText().min(1).max(256).optional(),
  // `next_cursor` of the page before.
  cursor: storableText().min(1).max(300).optional(),
  // An admin reads the account this names (every account's when it names none); a member always their own, whatever it
  // names.
  account_id: storableText().min(1).max(256).optional(),
});

const batchIdPattern = /^(msgbatch_|batch_)[A-Za-z0-9]{1,64}$/;
const notFound = (id: string) =>
  new GatewayError(404, `No batch with id '${id.slice(0, 80)}'.`, {
    type: 'invalid_request_error',
    code: 'batch_not_found',
  });

/**
 * A batch as the console's batches page shows it, of either dialect: times in unix seconds, its cost so far, the models
 * its requests name, where its results are read (once ended); an OpenAI batch's own status and its files too.
 */
export function consoleBatchView(batch: BatchRecord): ConsoleBatch {
  const seconds = (ms: number) => Math.floor(ms / 1000);
  const secondsOrNull = (ms: number | undefined) => (ms === undefined ? null : seconds(ms));
  const openai = batch.dialect === 'openai' ? openAIFields(batch) : undefined;
  const file = (named: { id: string; name: string | null } | null) =>
    named ? { id: named.id, filename: named.name } : null;
  return {
    id: batch.id,
    account_id: batch.accountId,
    dialect: batch.dialect,
    endpoint: openai ? openai.endpoint : '/v1/messages',
    status: batch.status,
    openai_status: openai ? openAIStatus(batch, openai) : null,
    files: openai
      ? {
          input: { id: openai.inputFileId, filename: openai.inputName },
          output: file(openai.outputFile),
          error: file(openai.errorFile),
        }
      : null,
    models: batch.models ?? null,
    created_at: seconds(batch.created),
    expires_at: seconds(batch.expires),
    ended_at: secondsOrNull(batch.endedAt),
    cancel_initiated_at: secondsOrNull(batch.cancelAt),
    total: batch.total,
    counts: {
      processing: batch.counts.processing,
      succeeded: batch.counts.succeeded,
      errored: batch.counts.errored,
      canceled: batch.counts.canceled,
      expired: batch.counts.expired,
    },
    cost_usd: microsToUsd(batch.costMicros),
    cost_micros: batch.costMicros,
    // Read with an API key of the account (`GET /v1/messages/batches/{id}/results`, an OpenAI batch's output file's
    // `GET /v1/files/{id}/content`), not with the console's session.
    results_path: openai
      ? openai.outputFile
        ? `/v1/files/${openai.outputFile.id}/content`
        : null
      : batch.status === 'ended'
        ? `/v1/messages/batches/${batch.id}/results`
        : null,
  };
}

/** Whether a batch may be deleted: ended, and an OpenAI batch's files written (not while it is finalizing). */
function deletable(batch: BatchRecord): boolean {
  if (batch.status !== 'ended') return false;
  return batch.dialect !== 'openai' || openAIStatus(batch) !== 'finalizing';
}

/** Batches are made with keys: owners and members. */
const batchUser: TeamNeed = { allows: may.ownKeys, roles: 'an owner or a member' };

/**
 * The most pages of a team's batches read to fill one page of a member's own (whose batches are filtered from the
 * team's).
 */
const memberPagesMost = 20;

export function addBatchConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const { redis, keyStore } = deps;
  /** The price multiple of flex, which every batch request is billed at (docs/api.md). */
  const flexMultiple = () => Number(deps.prices.tierMultiples().flex);

  /** The keys whose batches a team member sees: those they made; undefined for an owner (every key of the team). */
  const keysOf = async (scope: TeamScope): Promise<Set<string> | undefined> =>
    may.manageAllKeys(scope.role) ? undefined : new Set(await keyStore.keysMadeBy(scope.team.id, scope.account.id));

  /**
   * The batch `:id` names, if the signed-in person may act on it: the team's for its owner (any for an admin in their
   * own account), one of their keys' for a member; a 404 otherwise.
   */
  const batchFor = async (ctx: ConsoleContext, scope: TeamScope): Promise<BatchRecord> => {
    const id = String(ctx.params.id);
    const batch = batchIdPattern.test(id) ? await readBatch(redis, id) : undefined;
    const anyAccount = scope.account.role === 'admin' && scope.team.id === scope.account.id;
    if (!batch || (!anyAccount && batch.accountId !== scope.team.id)) throw notFound(id);
    const keys = await keysOf(scope);
    if (keys && !keys.has(batch.keyId)) throw notFound(id);
    return batch;
  };

  router.get('/api/batches', async (ctx) => {
    const scope = await requireTeam(ctx, deps, batchUser);
    // In another team than their own, even an admin reads that team's alone.
    const account: Account = scope.team.id === scope.account.id ? scope.account : { ...scope.team, role: 'member' };
    const query = parseStrict(batchListQuerySchema, withoutTeam(ctx.query));
    const limit = query.limit ?? 20;
    const flex = flexMultiple();
    const everyAccount = account.role === 'admin' && query.account_id === undefined;
    if (everyAccount) {
      let cursor;
      if (query.cursor !== undefined) {
        cursor = parseCursor(query.cursor);
        if (!cursor)
          throw invalidRequest(
            'cursor is not a cursor this list gave: pass the next_cursor of the page before.',
            'cursor',
            'invalid_value',
          );
      }
      // Every account's, deleted ones too (their batches run on until they end).
      const ids = (await keyStore.record.selectFrom('accounts').select('id').execute()).map((row) => row.id);
      const { batches, next } = await listEveryBatch(redis, ids, { limit, ...(cursor ? { cursor } : {}) });
      ctx.body = {
        object: 'list',
        account_id: null,
        data: batches.map(consoleBatchView),
        has_more: next !== undefined,
        next_cursor: next ? cursorText(next) : null,
        flex_price_multiple: flex,
      } satisfies BatchPage;
      return;
    }
    const accountId = account.role === 'admin' ? (query.account_id ?? account.id) : account.id;
    const afterId = query.after_id ?? query.cursor;
    const keys = await keysOf(scope);
    let { batches, hasMore } = await listBatches(redis, accountId, {
      limit,
      ...(afterId !== undefined ? { afterId } : {}),
    });
    // The page goes on after this one.
    let last = batches.at(-1);
    if (keys) {
      // A member's: the team's pages read on, filtered, until one is full or a bounded number were read (then
      // `has_more` with the cursor of the last one read, which may show none of theirs).
      const mine = batches.filter((batch) => keys.has(batch.keyId));
      for (let pages = 1; mine.length < limit && hasMore && pages < memberPagesMost; pages++) {
        ({ batches, hasMore } = await listBatches(redis, accountId, { limit: 100, afterId: last!.id }));
        last = batches.at(-1) ?? last;
        mine.push(...batches.filter((batch) => keys.has(batch.keyId)));
      }
      if (mine.length > limit) [hasMore, last] = [true, mine[limit - 1]];
      batches = mine.slice(0, limit);
    }
    ctx.body = {
      object: 'list',
      account_id: accountId,
      data: batches.map(consoleBatchView),
      has_more: hasMore,
      next_cursor: hasMore && last ? last.id : null,
      flex_price_multiple: flex,
    } satisfies BatchPage;
  });

  router.get('/api/batches/:id', async (ctx) => {
    ctx.body = consoleBatchView(await batchFor(ctx, await requireTeam(ctx, deps, batchUser)));
  });

  // The API's own cancel: the batch turns canceling, what still waits is canceled, what a vendor has ends as it will.
  // A message batch that has ended is answered as it is (as the API does); an ended OpenAI batch is a 400 (as
  // OpenAI's).
  router.post('/api/batches/:id/cancel', async (ctx) => {
    const batch = await batchFor(ctx, await requireTeam(ctx, deps, batchUser));
    const log = ctx.state.log;
    if (batch.dialect === 'openai') {
      ctx.body = consoleBatchView(
        await cancelOpenAIBatch({ ...deps, files: new AccountFileStore(redis, deps.blobs), log }, batch, log),
      );
      return;
    }
    ctx.body = consoleBatchView(
      await cancelMessageBatch({ redis, queues: deps.queues, config: deps.config, log }, batch, log),
    );
  });

  // Ended batches only, as the API's DELETE: a running one is canceled first. An OpenAI batch's files stay the
  // account's.
  router.delete('/api/batches/:id', async (ctx) => {
    const batch = await batchFor(ctx, await requireTeam(ctx, deps, batchUser));
    if (!deletable(batch))
      throw invalidRequest(
        `The batch ${batch.id} has not ended: cancel it, and delete it once it has ended.`,
        'id',
        'batch_not_ended',
      );
    await deleteBatch(redis, batch.id, batch.accountId);
    ctx.body = { id: batch.id, object: 'batch', deleted: true } satisfies ConsoleBatchDeleted;
  });
}
