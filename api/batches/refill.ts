import type { Redis } from 'ioredis';
import { dialectOf, fillBatchWindow, isBatchId, type BatchQueues } from '../../shared/batches/index.js';
import type { Logger } from '../../shared/logger.js';
import { batchRefillChannel } from '../../shared/redis-keys.js';
import type { ReplyHub } from '../relay/reply-hub.js';

/**
 * An api's part in running batches: when a worker says a batch's window has room (shared/batches/queueing.ts), the api
 * fills it, so the placing and adding of its next jobs is done here and not on the workers' path between two vendor
 * calls. Every api hears every ask and the fill is one script, so whichever comes first fills it and the others find
 * nothing to do. One fill at a time per batch in this api; an ask that comes during one is done after it.
 *
 * An OpenAI batch's last result is said on the same channel: the api that finds it ended writes its files, and one
 * that finds many results waiting writes them out as a part (`advance`, api/batches/openai-finalize.ts; one api
 * does, under a lease).
 */
export function listenForRefills(
  hub: ReplyHub,
  redis: Redis,
  queues: BatchQueues,
  log: Logger,
  options: { keepMs: number; advance?: (batchId: string) => Promise<void> },
): void {
  const filling = new Map<string, boolean>();
  // An OpenAI batch's step (a part written out, or its files) runs beside its fills, never holding them up; one at a
  // time per batch, an ask during one makes one more after it.
  const advancing = new Map<string, boolean>();
  const advance = (batchId: string): void => {
    if (!options.advance) return;
    if (advancing.has(batchId)) {
      advancing.set(batchId, true);
      return;
    }
    advancing.set(batchId, false);
    void options.advance(batchId).finally(() => {
      const again = advancing.get(batchId) === true;
      advancing.delete(batchId);
      if (again) advance(batchId);
    });
  };
  const fill = async (batchId: string): Promise<void> => {
    filling.set(batchId, false);
    try {
      const missed = await fillBatchWindow(redis, queues, batchId, options.keepMs);
      if (missed.length > 0)
        log.warn({ batch: batchId, missed }, "a batch's requests could not be queued (the sweep will see them)");
      if (dialectOf(batchId) === 'openai') advance(batchId);
    } catch (error) {
      log.warn({ err: error, batch: batchId }, "could not refill a batch's window (the sweep will)");
    }
    const again = filling.get(batchId) === true;
    filling.delete(batchId);
    if (again) await fill(batchId);
  };
  hub.on(batchRefillChannel, (batchId) => {
    if (!isBatchId(batchId)) return;
    if (filling.has(batchId)) filling.set(batchId, true);
    else void fill(batchId);
  });
}
