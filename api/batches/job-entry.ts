import { batchRequestJobId, encodeBatchEntry, type BatchJob } from '../../shared/batches/index.js';
import type { BudgetInForce } from '../../shared/money/budgets.js';
import { endpoints, type Endpoint } from '../../shared/endpoints.js';
import { payloadKey } from '../../shared/redis-keys.js';
import { vendorLimits } from '../../shared/scheduling/index.js';
import type { Accepted } from '../requests/endpoint-handlers.js';
import { jobData } from '../requests/build-job.js';
import type { EndpointRouteDeps } from '../requests/endpoint-route.js';
import { jobQueue } from '../requests/enqueue.js';

/**
 * What both dialects' intakes (anthropic-intake.ts, openai-intake.ts) make of a request they have checked: the entry
 * it waits as until its batch's window lets it in (shared/batches/entries.ts), which is the job it will be, in the
 * flex band of its model's lane, fair between accounts like every other job; and how wide a batch's window is. The
 * intake holds its batch's lease while it stores them.
 */

/**
 * The intake's lease on its batch, renewed at each round of storing (rounds are milliseconds apart): once it runs out
 * with requests not stored (the api died mid-way: its client had no answer), the sweep cancels the batch.
 */
export const intakeLeaseMs = 15_000;

/** A checked request, as its job will carry it. */
export interface Checked<E extends Endpoint = 'messages'> {
  customId: string;
  modelId: string;
  lane: string | undefined;
  accepted: Accepted<E>;
  micros: number;
  tokens: number;
}

/** Who a batch's requests are made for: its account, its key, and what of the key's access its jobs carry. */
export interface BatchOwner {
  accountId: string;
  keyId: string;
  weight: number;
  limitMicros?: number;
  budgets?: readonly BudgetInForce[];
}

/** Enough of a batch queued at once to fill the widest lane it uses twice over (a capped vendor never waits on it). */
export function batchWindow(config: EndpointRouteDeps['config'], lanes: Iterable<string | undefined>): number {
  return Math.max(
    config.batches.window,
    ...[...new Set(lanes)].map((lane) => (lane ? 2 * vendorLimits(config, lane).maxConcurrency : 0)),
  );
}

/**
 * The entry of a checked request of either dialect (what its job will be, shared/batches/entries.ts), and its payload's
 * key and JSON when that is kept apart (the caller writes it before the entry is stored: before its job can be taken).
 */
export function batchJobEntry<E extends Endpoint>(
  deps: Pick<EndpointRouteDeps, 'queues' | 'hub' | 'config'>,
  batch: { id: string; expires: number; dialect?: 'openai' },
  owner: BatchOwner,
  endpoint: E,
  index: number,
  request: Checked<E>,
): { entry: string; payload?: [string, string] } {
  const jobId = batchRequestJobId(batch.id, index);
  const job: BatchJob = {
    id: batch.id,
    index,
    customId: request.customId,
    reserve: {
      micros: request.micros,
      tokens: request.tokens,
      ...(owner.limitMicros !== undefined ? { keyLimitMicros: owner.limitMicros } : {}),
      ...(owner.budgets ? { budgets: owner.budgets } : {}),
    },
    ...(batch.dialect ? { dialect: batch.dialect } : {}),
  };
  // A batch's jobs are not admitted to the waiting room (they have limits of their own): only their queues are found.
  const queue = jobQueue(deps.queues, { id: jobId, queue: endpoints[endpoint].queue, lane: request.lane });
  const origin = {
    requestId: jobId,
    replyTo: deps.hub.channel,
    keyId: owner.keyId,
    accountId: owner.accountId,
    model: request.modelId,
    baseUrl: '',
  };
  const { data, storedPayload } = jobData(endpoint, request.accepted, origin, 'batch', batch.expires, deps.config);
  const claim = {
    accountId: owner.accountId,
    weight: owner.weight,
    tokens: request.tokens,
    tier: 'batch' as const,
    contended: true,
  };
  const entry = encodeBatchEntry({
    queue: queue.name,
    attempts: deps.config.jobAttempts,
    data: { ...data, batch: job, claim },
  });
  return storedPayload !== undefined ? { entry, payload: [payloadKey(jobId), storedPayload] } : { entry };
}
