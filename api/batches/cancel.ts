import { cancelBatch, readBatch, type BatchRecord } from '../../shared/batches/index.js';
import { invalidRequest } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { activeMetrics } from '../../shared/metrics.js';
import { startFinalize } from './openai-finalize.js';
import type { OpenAIBatchDeps } from './openai-intake.js';
import { awaitsFinal, openAIStatus } from './openai-record.js';
import { sweepBatch, type SweepDeps } from './sweep.js';

/**
 * A batch's cancel, as its API's route (`POST /v1/messages/batches/{id}/cancel`, `POST /v1/batches/{id}/cancel`)
 * and the console's (api/console/batch-routes.ts) ask it: one way for both. The engine marks it `canceling`
 * (shared/batches/cancel.ts); what still waits is swept as canceled after the answer (a request a worker is running
 * ends as it will, and the batch with the last of them); an OpenAI batch's files are written once it has ended.
 * Each resolves to the batch as it is after the cancel; `log` (the request's) hears of a sweep that failed. The
 * caller has checked the batch is the caller's to cancel.
 */

/** Cancels a Message Batch (a batch that has ended is answered as it is). */
export async function cancelMessageBatch(deps: SweepDeps, batch: BatchRecord, log: Logger): Promise<BatchRecord> {
  const status = await cancelBatch(deps.redis, batch.id);
  const now = (await readBatch(deps.redis, batch.id)) ?? batch;
  if (status === 'canceling' && batch.status === 'in_progress') {
    activeMetrics()?.batches.get('canceled', 'anthropic').inc();
    // What still waits is removed now, after the answer; a worker's request under way ends as it will.
    void sweepBatch(deps, now).catch((error: unknown) =>
      log.warn({ err: error, batch: batch.id }, 'could not sweep a canceled batch (the periodic sweep will)'),
    );
  }
  return now;
}

/** Cancels an OpenAI batch: a 400 (`batch_not_cancellable`) for one already completed, failed, expired or cancelled. */
export async function cancelOpenAIBatch(deps: OpenAIBatchDeps, batch: BatchRecord, log: Logger): Promise<BatchRecord> {
  const status = openAIStatus(batch);
  if (status === 'completed' || status === 'failed' || status === 'expired' || status === 'cancelled') {
    throw invalidRequest(`The batch ${batch.id} is ${status}: it cannot be cancelled.`, null, 'batch_not_cancellable');
  }
  const after = await cancelBatch(deps.redis, batch.id);
  const now = (await readBatch(deps.redis, batch.id)) ?? batch;
  if (batch.status === 'in_progress' || batch.status === 'validating')
    activeMetrics()?.batches.get('canceled', 'openai').inc();
  if (after === 'canceling' && batch.status === 'in_progress') {
    // After the answer: what still waits is recorded cancelled (a worker's request under way ends as it will, and
    // the batch with it), then, if that ended it, its files are written.
    void (async () => {
      await sweepBatch({ redis: deps.redis, queues: deps.queues, config: deps.config, log: deps.log }, now);
      const swept = await readBatch(deps.redis, batch.id);
      if (swept && awaitsFinal(swept)) startFinalize(deps, batch.id);
    })().catch((error: unknown) =>
      log.warn({ err: error, batch: batch.id }, 'could not sweep a cancelled batch (the periodic sweep will)'),
    );
  } else if (awaitsFinal(now)) startFinalize(deps, batch.id);
  return now;
}
