import type Router from '@koa/router';
import type { RouterContext } from '@koa/router';
import type { ParameterizedContext } from 'koa';
import { createRouter } from '../http/canonical-path.js';
import type { Redis } from 'ioredis';
import type { Config } from '../../shared/config.js';
import { GatewayError, invalidRequest, type WireError } from '../../shared/errors.js';
import { cancelChannel, replayStreamKey, streamAliasKey } from '../../shared/redis-keys.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import { releaseReservation } from '../../shared/money/billing.js';
import { removeWaitingJob } from '../../shared/scheduling/index.js';
import { isRecord, replayFrames, type ResponseObject } from '../../shared/response-object.js';
import type { ConversationItem } from '../../shared/responses.js';
import type { LogEntry } from '../../shared/reply.js';
import type { AuthState } from '../accounts/auth.js';
import type { GatewayState } from '../http/context.js';
import { dataFrame, EventStream } from '../http/event-stream.js';
import { noStream, type EventLogs } from '../relay/event-log.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { deleteResponse, loadResponse, storeResponseObject, type StoredResponse } from './store.js';

/** A request past the API key, as these routes read it. */
type State = GatewayState & AuthState;
type KeyedContext = ParameterizedContext<State>;

export interface ResponseRouteDeps {
  config: Config;
  redis: Redis;
  queues: QueueShards;
  logs: EventLogs;
  blobs: BlobStore;
}

const running = (status: string) => status === 'queued' || status === 'in_progress';
/** How long a cancel waits for the worker to store what the response had produced. */
const cancelSettleMs = 2000;

/** `starting_after` / `Last-Event-ID`: a frame number, or absent (-1: from the start). */
function eventNumber(value: unknown, param: string): number {
  if (value === undefined || value === '') return -1;
  const text = Array.isArray(value) ? value.at(-1) : value;
  if (typeof text !== 'string' || !/^\d{1,15}$/.test(text))
    throw invalidRequest(`${param} must be a whole number of the stream's events (0 or more).`, param);
  return Number(text);
}

function errorFrame(entry: LogEntry): string {
  const { error } = JSON.parse(entry.payload ?? '{}') as WireError;
  return dataFrame(
    {
      type: 'error',
      code: error?.code ?? 'server_error',
      message: error?.message ?? 'The response failed.',
      param: error?.param ?? null,
      sequence_number: 0,
    },
    'error',
  );
}

/**
 * An input item as the list answers it (the spec's `ItemResource`): an
 * assistant message's `output_text` parts carry `logprobs`, which the input
 * as stored leaves out (those of responses stored before it did too).
 */
function itemResource(item: ConversationItem): ConversationItem {
  if (item.type !== 'message' || item.role !== 'assistant' || !Array.isArray(item.content)) return item;
  const content = item.content.map((part: unknown) =>
    isRecord(part) && part.type === 'output_text' && !Array.isArray(part.logprobs) ? { ...part, logprobs: [] } : part,
  );
  return { ...item, content };
}

/**
 * A response's events from after `after`: from its event log while it runs
 * or shortly after (live ones followed to the end), else rebuilt from the
 * stored object.
 */
export async function followResponse(
  ctx: KeyedContext,
  deps: ResponseRouteDeps,
  id: string,
  after: number,
  afterParam: string,
  stored?: StoredResponse,
): Promise<void> {
  const { keyId } = ctx.state;
  const logged = (await deps.redis.exists(replayStreamKey(id))) === 1;
  if (!logged && stored && !running(stored.response.status)) {
    const frames = replayFrames(stored.response as ResponseObject);
    if (after >= frames.length)
      throw invalidRequest(
        `${afterParam} ${after} is past the end of the stream: its last event is ${frames.length - 1}.`,
        afterParam,
      );
    const events = new EventStream(ctx);
    events.open();
    events.end(frames.slice(after + 1).join(''));
    return;
  }
  await deps.logs.follow(ctx, {
    jobId: id,
    named: id,
    owner: keyId,
    after,
    afterParam,
    whenMissing: 'wait',
    until: Date.now() + deps.config.deadlineMs.chat,
    keepAliveMs: deps.config.sseKeepAliveMs,
    onEnd: (entry) => (entry.end === 'error' ? errorFrame(entry) : (entry.payload ?? '')),
  });
}

/**
 * `/v1/responses/{id}` and its sub-resources, and the resume of a chat
 * stream. Every one is scoped to the key that made the response: to any
 * other key it does not exist (404).
 */
export function responseRoutes(deps: ResponseRouteDeps): Router<State> {
  const router = createRouter<State>('/v1');
  const { redis, queues } = deps;

  /**
   * The stored response; one still running whose job is gone or failed is recorded as failed (its worker died, or Redis
   * lost it).
   */
  async function current(ctx: RouterContext<State>): Promise<StoredResponse> {
    const stored = await loadResponse(redis, deps.blobs, ctx.params.id!, ctx.state.keyId);
    if (!running(stored.response.status)) return stored;
    const job = (await queues.locate('chat', stored.id))?.job;
    const state = job ? await job.getState() : 'missing';
    if (state !== 'missing' && state !== 'failed' && state !== 'unknown') return stored;
    // Read again: the worker may have stored the end between the two reads.
    const again = await loadResponse(redis, deps.blobs, stored.id, ctx.state.keyId);
    if (!running(again.response.status)) return again;
    again.response = {
      ...again.response,
      status: 'failed',
      error: {
        code: 'server_error',
        message: 'The response was lost before it finished (its worker stopped); create it again.',
      },
    };
    await storeResponseObject(redis, again.id, again.response);
    return again;
  }

  router.get('/responses/:id', async (ctx) => {
    const stored = await current(ctx);
    const stream = ctx.query.stream;
    if (stream === 'true' || stream === '1') {
      await followResponse(
        ctx,
        deps,
        stored.id,
        eventNumber(ctx.query.starting_after, 'starting_after'),
        'starting_after',
        stored,
      );
      return;
    }
    if (stream !== undefined && stream !== 'false' && stream !== '0')
      throw invalidRequest('stream must be true or false.', 'stream');
    ctx.body = stored.response;
  });

  router.delete('/responses/:id', async (ctx) => {
    const stored = await loadResponse(redis, deps.blobs, ctx.params.id!, ctx.state.keyId);
    if (running(stored.response.status)) await stop(stored.id, ctx.state.access.accountId);
    await deleteResponse(redis, deps.blobs, stored.id);
    ctx.body = { id: stored.id, object: 'response', deleted: true };
  });

  /**
   * Stops a response's job (its id is the response's): removed if no worker took it yet, its reservation given
   * back (held under the id of the request that created it, which the job carries), else its worker told to abort.
   */
  async function stop(id: string, accountId: string): Promise<boolean> {
    const found = await queues.locate('chat', id).catch(() => undefined);
    const job = found?.job;
    const removed = found ? await removeWaitingJob(redis, found.queue, id).catch(() => false) : false;
    if (removed) await releaseReservation(redis, accountId, job?.data.requestId ?? id).catch(() => undefined);
    else await redis.publish(cancelChannel, id);
    return removed;
  }

  router.post('/responses/:id/cancel', async (ctx) => {
    const stored = await current(ctx);
    if (!stored.response.background) {
      throw invalidRequest(
        'Only responses created with background set to true can be cancelled.',
        null,
        'not_background',
      );
    }
    if (!running(stored.response.status)) {
      ctx.body = stored.response;
      return;
    }
    const removed = await stop(stored.id, ctx.state.access.accountId);
    if (removed) {
      const cancelled = { ...stored.response, status: 'cancelled' };
      await storeResponseObject(redis, stored.id, cancelled);
      ctx.body = cancelled;
      return;
    }
    // The worker aborts the vendor call and stores what was produced; the answer waits (briefly) for that.
    const until = Date.now() + cancelSettleMs;
    let latest = stored;
    while (Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      latest = await loadResponse(redis, deps.blobs, stored.id, ctx.state.keyId);
      if (!running(latest.response.status)) break;
    }
    ctx.body = running(latest.response.status) ? { ...latest.response, status: 'cancelled' } : latest.response;
  });

  router.get('/responses/:id/input_items', async (ctx) => {
    const stored = await loadResponse(redis, deps.blobs, ctx.params.id!, ctx.state.keyId);
    const limitText = ctx.query.limit;
    const limit = limitText === undefined ? 20 : Number(limitText);
    if (!Number.isInteger(limit) || limit < 1 || limit > 100)
      throw invalidRequest('limit must be a whole number from 1 to 100.', 'limit');
    const order = ctx.query.order ?? 'desc';
    if (order !== 'asc' && order !== 'desc') throw invalidRequest("order must be 'asc' or 'desc'.", 'order');
    const items = order === 'asc' ? stored.input : [...stored.input].reverse();
    let start = 0;
    for (const [param, shift] of [
      ['after', 1],
      ['before', 0],
    ] as const) {
      const cursor = ctx.query[param];
      if (cursor === undefined) continue;
      const at = items.findIndex((item) => item.id === cursor);
      if (at < 0)
        throw invalidRequest(`No input item with id '${String(cursor).slice(0, 80)}' in this response.`, param);
      if (shift === 1) start = at + 1;
      else {
        const page = items.slice(Math.max(0, at - limit), at).map(itemResource);
        ctx.body = {
          object: 'list',
          data: page,
          first_id: page[0]?.id ?? null,
          last_id: page.at(-1)?.id ?? null,
          has_more: at - limit > 0,
        };
        return;
      }
    }
    const page = items.slice(start, start + limit).map(itemResource);
    ctx.body = {
      object: 'list',
      data: page,
      first_id: page[0]?.id ?? null,
      last_id: page.at(-1)?.id ?? null,
      has_more: start + limit < items.length,
    };
  });

  router.get('/chat/completions/:id/stream', async (ctx) => {
    const named = ctx.params.id!;
    if (named.length > 200) throw noStream(named);
    const jobId =
      (await redis.exists(replayStreamKey(named))) === 1 ? named : ((await redis.get(streamAliasKey(named))) ?? named);
    const after = eventNumber(ctx.get('last-event-id') || ctx.query.last_event_id, 'Last-Event-ID');
    await deps.logs.follow(ctx, {
      jobId,
      named,
      owner: ctx.state.keyId,
      after,
      afterParam: 'Last-Event-ID',
      whenMissing: 'fail',
      until: Date.now() + deps.config.deadlineMs.chat,
      keepAliveMs: deps.config.sseKeepAliveMs,
      onEnd: (entry) =>
        entry.end === 'error'
          ? dataFrame(GatewayError.fromWire(JSON.parse(entry.payload ?? '{}') as WireError).toBody())
          : (entry.payload ?? ''),
    });
  });

  return router;
}
