/**
 * What a batch is, as both halves (the api that takes and ends it, the worker that runs its requests) and both
 * dialects (Anthropic's Message Batches, OpenAI's Batch API) speak of it: its status, its requests' outcomes and
 * results, its record as read from Redis (hash.ts), and what each of its requests carries in its job. It imports
 * nothing: the console, which shows batches, imports its types without the engine's Redis and Node imports.
 */

// A type only (erased when compiled): nothing is imported at run time.
import type { BudgetInForce } from '../money/budgets.js';

/**
 * `validating`: an OpenAI batch whose input file is being read; the engine has not started it (nothing is released).
 */
export type BatchStatus = 'validating' | 'in_progress' | 'canceling' | 'ended';
/** Which API a batch was made with: Anthropic's (`msgbatch_…`) or OpenAI's (`batch_…`). */
export type BatchDialect = 'anthropic' | 'openai';
/** OpenAI's statuses of a batch made with `POST /v1/batches` (api/batches/openai-record.ts reads it off the record). */
export type OpenAIBatchStatus =
  'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';

export type BatchOutcome = 'succeeded' | 'errored' | 'canceled' | 'expired';
export const batchOutcomes: readonly BatchOutcome[] = ['succeeded', 'errored', 'canceled', 'expired'];

/** A request's result, as a line of `…/results` says it (`{custom_id, result}`). */
export type BatchResult =
  | { type: 'succeeded'; message: unknown }
  | { type: 'errored'; error: { type: 'error'; error: { type: string; message: string }; request_id: string | null } }
  | { type: 'canceled' }
  | { type: 'expired' };

export interface BatchRecord {
  id: string;
  accountId: string;
  keyId: string;
  /** Epoch ms. */
  created: number;
  /** Epoch ms: requests not run by then are expired. */
  expires: number;
  total: number;
  status: BatchStatus;
  counts: Record<BatchOutcome | 'processing', number>;
  /** Epoch ms, once ended / once a cancel was asked. */
  endedAt?: number;
  cancelAt?: number;
  /** What its requests cost so far, in integer micro-dollars (each added as it is settled). */
  costMicros: number;
  /** The tokens its requests were billed for so far (each added as it is settled). */
  tokens: { input: number; cached: number; output: number };
  dialect: BatchDialect;
  /** The hash as stored: what a dialect keeps of its own beside the engine's fields (api/batches/openai-record.ts). */
  row: Readonly<Record<string, string>>;
  /**
   * The catalog ids of the models its requests use, each once: a key limited to models sees only the batches whose
   * every model it may use (`seesBatch`). Undefined for a batch made before they were recorded.
   */
  models?: string[];
}

/** What a batch's request carries in its job: its batch, its place and name there, and the most it may cost. */
export interface BatchJob {
  id: string;
  index: number;
  customId: string;
  /**
   * Reserved by the worker just before the vendor is called (a request the balance cannot cover is `errored`): its
   * worst case, and its key's spending limit and budgets as they were when the batch was made.
   */
  reserve: { micros: number; tokens: number; keyLimitMicros?: number; budgets?: readonly BudgetInForce[] };
  /**
   * The batch's API, which says how its results are written: absent for Anthropic's (jobs queued before OpenAI's
   * existed too).
   */
  dialect?: 'openai';
}

/** What a request was billed, as its result adds it to its batch's totals. */
export interface BatchBilled {
  costMicros: number;
  input?: number;
  cached?: number;
  output?: number;
}
