import type Router from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import { GatewayError } from '../../shared/errors.js';
import { asyncJobKey, cancelChannel, payloadKey, videosOfKey } from '../../shared/redis-keys.js';
import { removeWaitingJob } from '../../shared/scheduling/index.js';
import { inOneWrite } from '../../shared/redis.js';
import { checkBlobSignature } from '../../storage/blob-urls.js';
import type { ServingBlobStore } from '../../storage/create-blob-store.js';
import { uploadKeys } from '../../storage/upload-keys.js';
import { loadOwnedJob, renderJob, renderVideo, videoFiles } from './views.js';
import type { Redis } from 'ioredis';
import type { Config } from '../../shared/config.js';
import type { QueueShards } from '../../shared/queue-shards.js';
import type { AuthState } from '../accounts/auth.js';
import type { GatewayState } from '../http/context.js';

type State = GatewayState & AuthState;

export interface JobRoutesDeps {
  redis: Redis;
  queues: QueueShards;
  config: Pick<Config, 'asyncResultTtlSeconds'>;
  blobs: ServingBlobStore;
  /** What signed download links are checked against. */
  urlSecret: string;
}

/** Which of these async jobs still have their record (one round trip; the keys may lie in different slots). */
async function liveAsyncJobs(redis: Redis, ids: readonly string[]): Promise<Set<string>> {
  const batch = inOneWrite(redis);
  for (const id of ids) batch.exists(asyncJobKey(id));
  const replies = (await batch.exec()) ?? [];
  return new Set(ids.filter((_, i) => replies[i]?.[1] === 1));
}

/** Async jobs, videos (always async), and signed file downloads. */
export function jobRoutes(deps: JobRoutesDeps): { authed: Router<State>; public: Router } {
  const router = createRouter<State>('/v1');
  const { redis, queues, config } = deps;
  const expiry = config.asyncResultTtlSeconds;

  router.get('/jobs/:id', async (ctx) => {
    const owned = await loadOwnedJob(redis, queues, ctx.params.id!, ctx.state.keyId);
    ctx.body = await renderJob(owned, deps.blobs);
  });

  router.get('/videos', async (ctx) => {
    const limit = Math.min(100, Math.max(1, Number(ctx.query.limit ?? 20) || 20));
    const order = ctx.query.order === 'asc' ? 'asc' : 'desc';
    const index = videosOfKey(ctx.state.keyId);
    // Entries older than a video's lifetime name nothing any more: dropped before the page is cut.
    await redis.zremrangebyscore(index, '-inf', Date.now() - expiry * 1000);
    const ids = await redis.zrange(index, '0', '-1');
    if (order === 'desc') ids.reverse();
    const afterId = typeof ctx.query.after === 'string' ? ctx.query.after : undefined;
    const at = afterId === undefined ? -1 : ids.indexOf(afterId);
    if (afterId !== undefined && at < 0) {
      // The cursor aged out: everything older went with it. Newest first nothing is left; oldest first the rest is all
      // there is.
      if (order === 'desc') ids.length = 0;
    }
    // A deleted video keeps its entry until it ages out (so a cursor naming it still pages on): its record is what
    // tells.
    const data = [];
    let next = at + 1;
    let hasMore = false;
    while (next < ids.length && !hasMore) {
      const batch = ids.slice(next, next + limit + 1);
      next += batch.length;
      const alive = await liveAsyncJobs(redis, batch);
      for (const id of batch) {
        if (!alive.has(id)) continue;
        if (data.length === limit) {
          hasMore = true;
          break;
        }
        const owned = await loadOwnedJob(redis, queues, id, ctx.state.keyId, 'video').catch(() => undefined);
        if (owned) data.push(renderVideo(owned, expiry));
      }
    }
    ctx.body = {
      object: 'list',
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: hasMore,
    };
  });

  router.get('/videos/:id', async (ctx) => {
    ctx.body = renderVideo(await loadOwnedJob(redis, queues, ctx.params.id!, ctx.state.keyId, 'video'), expiry);
  });

  router.get('/videos/:id/content', async (ctx) => {
    const owned = await loadOwnedJob(redis, queues, ctx.params.id!, ctx.state.keyId, 'video');
    const files = await videoFiles(owned, deps.blobs);
    const variant = ctx.query.variant ?? 'video';
    const file = variant === 'video' ? files.video : variant === 'thumbnail' ? files.thumbnail : null;
    if (!file)
      throw new GatewayError(404, `Video '${owned.id}' has no ${String(variant)} variant.`, {
        code: 'not_found',
        param: 'variant',
      });
    ctx.type = file.contentType;
    ctx.length = file.size;
    ctx.body = await deps.blobs.stream(file.key);
  });

  router.delete('/videos/:id', async (ctx) => {
    const owned = await loadOwnedJob(redis, queues, ctx.params.id!, ctx.state.keyId, 'video');
    if (owned.job) {
      const removed = await removeWaitingJob(
        redis,
        queues.forJob(owned.record.queue, owned.id, owned.record.lane)!,
        owned.id,
      ).catch(() => false);
      if (!removed && owned.status === 'in_progress') await redis.publish(cancelChannel, owned.id);
      // Removed before a worker took it: nobody will read its reference image now.
      if (removed)
        await Promise.allSettled(uploadKeys(owned.record.request ?? {}).map((key) => deps.blobs.delete(key)));
    }
    if (owned.status === 'completed') {
      const files = await videoFiles(owned, deps.blobs).catch(() => undefined);
      for (const file of [files?.video, files?.thumbnail]) if (file) await deps.blobs.delete(file.key);
    }
    await inOneWrite(redis).del(asyncJobKey(owned.id)).del(payloadKey(owned.id)).exec();
    ctx.body = { id: owned.id, object: 'video.deleted', deleted: true };
  });

  // Signed links: fetchable without an API key, until they expire. Under `/v1/blobs/`; those signed before were
  // under `/v1/files/` (now the Files API's path: the api sends only links with a signature here, isSignedBlobPath).
  const files = createRouter();
  files.get(['/v1/blobs/{*key}', '/v1/files/{*key}'], async (ctx) => {
    const raw = (ctx.params as Record<string, string | string[]>).key!;
    const key = Array.isArray(raw) ? raw.join('/') : raw;
    const verdict = checkBlobSignature(
      deps.urlSecret,
      key,
      ctx.query.expires as string | undefined,
      ctx.query.signature as string | undefined,
    );
    if (verdict !== 'ok') {
      throw new GatewayError(
        verdict === 'expired' ? 410 : 403,
        verdict === 'expired' ? 'This link has expired.' : 'Invalid or missing link signature.',
        {
          code: verdict === 'expired' ? 'link_expired' : 'invalid_signature',
        },
      );
    }
    const meta = await deps.blobs.meta(key);
    ctx.type = meta.contentType;
    ctx.length = meta.size;
    ctx.set('cache-control', 'private, max-age=3600');
    ctx.body = await deps.blobs.stream(key);
  });

  return { authed: router, public: files };
}
