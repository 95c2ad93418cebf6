import type { Redis } from 'ioredis';
import { defaultAccountId } from '../shared/accounts.js';
import { announceOutcome, followersEntryName, storeEntry, type LeadOutcome } from '../shared/cache/index.js';
import type { Config } from '../shared/config.js';
import type { GatewayJobData } from '../shared/jobs.js';
import type { Logger } from '../shared/logger.js';
import { answerCached } from './metrics.js';
import type { Meter } from './settlement.js';

/**
 * The worker's half of the response cache (shared/cache/): the end of a job whose request opted in. Its answer is
 * stored once it ended well, and a job that leads identical requests reports to its followers how it ended, stored
 * or not (they wait for it, or follow its stream).
 */

export interface CachedJobEndDeps {
  redis: Redis;
  config: Pick<Config, 'cache'>;
  log: Logger;
}

/**
 * How long a leading job's answer is kept at least, whatever its request asked (`max-age=0` keeps nothing for later
 * requests): its followers read it from the cache once it is stored.
 */
const followersAnswerMs = 30_000;

/**
 * Stores a job's answer once it ended well (never a failed, cut or filtered one); a leading job's followers are told
 * in the same step. A cache that cannot write costs the answer nothing: the failure is logged and the followers run
 * their own calls.
 */
export async function storeAnswer(deps: CachedJobEndDeps, data: GatewayJobData, produced: Meter): Promise<void> {
  const plan = data.cache;
  if (!plan) return;
  try {
    const forms = produced.cacheable;
    const keepMs = plan.flight ? followersAnswerMs : 0;
    const jobId = data.jobId ?? data.requestId;
    if (
      forms &&
      produced.finishReason !== 'content_filter' &&
      Math.max(plan.ttlMs, keepMs) > 0 &&
      deps.config.cache.maxTtlS > 0
    ) {
      const billed = produced.billed ?? { costMicros: 0, input: 0, cached: 0, output: 0 };
      const now = Date.now();
      const size = await storeEntry(
        deps.redis,
        data.accountId ?? defaultAccountId,
        data.keyId,
        plan.hash,
        {
          v: 1,
          created: now,
          expires: now + plan.ttlMs,
          endpoint: data.endpoint,
          model: data.model,
          costMicros: billed.costMicros,
          tokens: { input: billed.input, cached: billed.cached, output: billed.output },
          ...forms,
        },
        deps.config.cache,
        keepMs,
        // The lead's outcome goes in the same script as the entry.
        plan.flight ? { jobId, ...(plan.ttlMs > 0 ? {} : { name: followersEntryName(plan.hash, jobId) }) } : undefined,
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
  await reportLeadOutcome(deps, data, 'failed');
}

/** A leading job ended (or will never run): its lead mark goes, and its followers hear how it ended. */
export async function reportLeadOutcome(
  deps: CachedJobEndDeps,
  data: GatewayJobData,
  status: LeadOutcome['status'],
  costMicros?: number,
): Promise<void> {
  const plan = data.cache;
  if (!plan?.flight) return;
  try {
    await announceOutcome(
      deps.redis,
      data.accountId ?? defaultAccountId,
      plan.hash,
      data.jobId ?? data.requestId,
      status,
      costMicros,
    );
  } catch (error) {
    // The mark expires at the job's deadline; the followers give up then, or sooner at their own.
    deps.log.warn({ err: error }, 'could not tell this call’s followers how it ended');
  }
}
