/*
 * A batch's statuses, apart from the batch record's code (shared/batches.ts)
 * so that the console, which shows them, imports them without that code's
 * Redis and Node imports.
 */

/** `validating`: an OpenAI batch whose input file is being read; the engine has not started it (nothing is released). */
export type BatchStatus = 'validating' | 'in_progress' | 'canceling' | 'ended';

/** Which API a batch was made with: Anthropic's (`msgbatch_…`) or OpenAI's (`batch_…`). */
export type BatchDialect = 'anthropic' | 'openai';

/** OpenAI's statuses of a batch made with `POST /v1/batches` (api/batches/openai-record.ts reads it off the record). */
export type OpenAIBatchStatus = 'validating' | 'failed' | 'in_progress' | 'finalizing' | 'completed' | 'expired' | 'cancelling' | 'cancelled';
