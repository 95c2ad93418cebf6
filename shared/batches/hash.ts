import type { BatchRecord, BatchStatus } from './types.js';
import { dialectOf } from './ids.js';

/**
 * A batch's hash (`batchKey`): the one place its engine's fields are named, written when it is made and read back
 * as a `BatchRecord`. The scripts in lua/ name the same fields as stored (they cannot import these), and a dialect
 * keeps fields of its own beside them under a prefix of its own (OpenAI's `oa_…`, api/batches/openai-record.ts).
 *
 * - `id`, `account`, `key`, `created`, `expires`, `total`: who made it, when, until when, how many requests.
 * - `status`, and `processing`, `succeeded`, `errored`, `canceled`, `expired`: its requests' counts by outcome.
 * - `cost` (µ$), `input_tokens`, `cached_tokens`, `output_tokens`: what its requests were billed so far.
 * - `next`, `stored`, `window`, `refill`, `asked`: its window (window.ts): the first request not yet let in, how
 *   many are stored, how many may be queued at once, how much room asks for a refill, and when one was last asked.
 * - `intake`: set when an intake stores its requests under a lease (create.ts).
 * - `models` (JSON), `ended_at`, `cancel_at`.
 */
export const batchField = {
  status: 'status',
  next: 'next',
  stored: 'stored',
} as const;

/** Who made a batch and what it holds: the part of its record it is made with. */
export type NewBatch = Pick<BatchRecord, 'id' | 'accountId' | 'keyId' | 'created' | 'expires' | 'total'>;

/** The fields every batch starts with: none of its requests recorded, every one processing. */
export function openingFields(batch: NewBatch, status: BatchStatus): Record<string, string | number> {
  return {
    id: batch.id,
    account: batch.accountId,
    key: batch.keyId,
    created: batch.created,
    expires: batch.expires,
    total: batch.total,
    status,
    processing: batch.total,
    succeeded: 0,
    errored: 0,
    canceled: 0,
    expired: 0,
    cost: 0,
  };
}

/**
 * The fields a batch the engine runs starts with: its opening fields, its window (`window` queued at once, refilled
 * once `refill` of it is free), the models it uses, and whether an intake holds its lease.
 */
export function runningFields(
  batch: NewBatch & { models?: readonly string[] },
  window: number,
  refill: number,
  underIntake: boolean,
): Record<string, string | number> {
  // Each model once: a batch of 10,000 requests keeps the one to three it uses, not a model per request.
  const models: Record<string, string> =
    batch.models === undefined ? {} : { models: JSON.stringify([...new Set(batch.models)].sort()) };
  return {
    ...openingFields(batch, batch.total > 0 ? 'in_progress' : 'ended'),
    next: 0,
    stored: 0,
    window,
    refill,
    asked: 0,
    ...models,
    ...(batch.total > 0 ? {} : { ended_at: Date.now() }),
    ...(underIntake ? { intake: 1 } : {}),
  };
}

/** A batch's record from its hash as Redis answers it (undefined for an empty one: the batch is gone). */
export function batchFromHash(row: Record<string, string>): BatchRecord | undefined {
  if (!row.id) return undefined;
  const number = (field: string) => Number(row[field] ?? 0) || 0;
  const record: BatchRecord = {
    id: row.id,
    accountId: row.account ?? '',
    keyId: row.key ?? '',
    created: number('created'),
    expires: number('expires'),
    total: number('total'),
    status:
      row.status === 'validating' || row.status === 'canceling' || row.status === 'ended' ? row.status : 'in_progress',
    counts: {
      processing: Math.max(0, number('processing')),
      succeeded: number('succeeded'),
      errored: number('errored'),
      canceled: number('canceled'),
      expired: number('expired'),
    },
    costMicros: number('cost'),
    tokens: { input: number('input_tokens'), cached: number('cached_tokens'), output: number('output_tokens') },
    dialect: dialectOf(row.id),
    row,
  };
  if (row.ended_at) record.endedAt = number('ended_at');
  if (row.cancel_at) record.cancelAt = number('cancel_at');
  const models = modelsOf(row.models);
  if (models) record.models = models;
  return record;
}

/** The models a batch recorded; undefined when it recorded none (made before they were) or they cannot be read. */
function modelsOf(text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  try {
    const models: unknown = JSON.parse(text);
    return Array.isArray(models) && models.every((model) => typeof model === 'string') ? models : undefined;
  } catch {
    return undefined;
  }
}
