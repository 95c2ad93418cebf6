/**
 * The batch engine: Anthropic's Message Batches and OpenAI's Batch API, on every model, run by one engine. A batch is
 * a hash in Redis under its own hash tag (`batchKey`), with its requests' entries, its window's queued requests, which
 * of its requests are done and its results (a stream, in the order they came) beside it, so that one script decides
 * each step on all of them at once. Nothing of a batch lives in an api's or a worker's memory.
 *
 * A batch's life, and the file that decides each step:
 *
 * 1. Created (create.ts): its record stored, every request processing, listed under its account and among the open
 *    batches; then each request's entry stored as its intake checks it (entries.ts says what an entry is: the job it
 *    will be, or the result of a request refused at intake). An OpenAI batch is first recorded `validating` while
 *    its input file is read (api/batches/openai-record.ts), and started here once it is valid.
 * 2. Its requests queued in windows (window.ts lets them in, queueing.ts makes them jobs): only `window` of a batch
 *    are jobs at once; each time an eighth of the window is free, the apis are asked to fill it again.
 * 3. Each result recorded once (record.ts): by the worker that ran the request (workers/batch-run.ts), however often
 *    it ran; the batch ends when none is left processing.
 * 4. Canceled, abandoned or expired (cancel.ts): a cancel asked, or an intake that died before storing every request,
 *    marks it `canceling`; the sweep (api/batches/sweep.ts) records `canceled` each request not yet run, or
 *    `expired` once its deadline has passed (as a worker does with a request it takes too late), and the last one
 *    recorded ends it (record.ts again).
 * 5. Results read back (results.ts): as the lines of a Message Batch's results, or written into an OpenAI batch's
 *    output and error files (api/batches/openai-finalize.ts). The batch itself is read, listed and counted by
 *    read.ts (every account's batches as one list by list-all.ts, for the console's admin), shown as Anthropic's
 *    `MessageBatch` by view.ts, and deleted by delete.ts.
 *
 * What the record's hash holds, field by field, is hash.ts; its scripts are declared in scripts.ts, their Lua in
 * lua/. The two dialects share all of it: a dialect's own fields sit beside the engine's in the same hash.
 */

export { cancelAbandonedIntake, cancelBatch } from './cancel.js';
export { createBatch, storeBatchEntries } from './create.js';
export { deleteBatch } from './delete.js';
export { decodeBatchEntry, encodeBatchEntry, entryCustomId, type BatchEntry, type RefusedEntry } from './entries.js';
export { batchField, openingFields } from './hash.js';
export { batchRequestJobId, dialectOf, isBatchId, newBatchId, newOpenAIBatchId } from './ids.js';
export {
  fillBatchWindow,
  queueBatchRequests,
  queueReleased,
  type BatchQueues,
  type QueuedRequests,
} from './queueing.js';
export { listBatches, listScanMost, openBatchCount, readBatch, seesBatch } from './read.js';
export { cursorText, listEveryBatch, parseCursor, type AllBatchesCursor } from './list-all.js';
export { batchRequestState, recordBatchResult, recordInBatch } from './record.js';
export {
  openAIBatchErrorBody,
  openAIBatchResult,
  openAIRecordedResponse,
  readBatchResults,
  readResultEntry,
} from './results.js';
export {
  batchOutcomes,
  type BatchBilled,
  type BatchDialect,
  type BatchJob,
  type BatchOutcome,
  type BatchRecord,
  type BatchResult,
  type BatchStatus,
  type OpenAIBatchStatus,
} from './types.js';
export { batchView } from './view.js';
export { pendingEntries, queuedIndices, releasedCount, releaseBatchRequests, type ReleasedRequest } from './window.js';
