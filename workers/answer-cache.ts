import type { Redis } from 'ioredis';
import { defaultAccountId } from '../shared/accounts.js';
import { landFlight, sharedOnlyName, storeEntry, type CacheEvent } from '../shared/cache.js';
import type { Config } from '../shared/config.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { Logger } from '../shared/logger.js';
import { answerCached } from './metrics.js';
import type { Meter } from './settlement.js';

/**
 * The worker's half of the response cache (shared/cache.ts): a finished job of a request that opted in keeps its
 * answer, and the identical requests waiting on it (coalesced) hear that it ended, stored or not.
 */

export interface AnswerCacheDeps {
  redis: Redis;
  config: Pick<Config, 'cache'>;
  log: Logger;
}

/**
 * How long the answer of a request that shares its call is kept at least, whatever it asked (`max-age=0` keeps
 * nothing for later requests): the requests waiting on it read it from the cache once it is stored.
 */
const sharedAnswerMs = 30_000;

/**
 * Keeps a job's answer once it ended well (never a failed, cut or filtered one), then tells the waiting requests.
 * A cache that cannot write costs the answer nothing: the failure is logged and the waiters run their own calls.
 */
export async function keepAnswer(deps: AnswerCacheDeps, data: GatewayJobData, produced: Meter): Promise<void> {
  const plan = data.cache;
  if (!plan) return;
  try {
    const forms = produced.cacheable;
    const keepMs = plan.flight ? sharedAnswerMs : 0;
    const jobId = data.jobId ?? data.requestId;
    if (forms && produced.finishReason !== 'content_filter' && Math.max(plan.ttlMs, keepMs) > 0 && deps.config.cache.maxTtlS > 0) {
      const billed = produced.billed ?? { costMicros: 0, input: 0, cached: 0, output: 0 };
      const now = Date.now();
      const size = await storeEntry(
        deps.redis,
        data.accountId ?? defaultAccountId,
        data.keyId,
        plan.hash,
        { v: 1, created: now, expires: now + plan.ttlMs, endpoint: data.endpoint, model: data.model, costMicros: billed.costMicros, tokens: { input: billed.input, cached: billed.cached, output: billed.output }, ...forms },
        deps.config.cache,
        keepMs,
        // The flight mark's end goes in the same script as the entry.
        plan.flight ? { jobId, ...(plan.ttlMs > 0 ? {} : { name: sharedOnlyName(plan.hash, jobId) }) } : undefined,
      );
      if (size > 0) {
        answerCached(data.model, size);
        return;
      }
      deps.log.debug({ hash: plan.hash }, 'answer larger than CACHE_MAX_ENTRY_BYTES: not cached');
    }
  } catch (error) {
    deps.log.warn({ err: error }, 'could not keep the answer in the cache');
  }
  await endFlight(deps, data, 'failed');
}

/** The job holding a request's flight mark ended: the mark goes, and the requests waiting on it hear how. */
export async function endFlight(deps: AnswerCacheDeps, data: GatewayJobData, status: CacheEvent['status'], costMicros?: number): Promise<void> {
  const plan = data.cache;
  if (!plan?.flight) return;
  try {
    await landFlight(deps.redis, data.accountId ?? defaultAccountId, plan.hash, data.jobId ?? data.requestId, status, costMicros);
  } catch (error) {
    // The mark expires at the job's deadline; the waiters give up then, or sooner at their own.
    deps.log.warn({ err: error }, 'could not tell the requests sharing this call that it ended');
  }
}
