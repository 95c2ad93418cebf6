import type { Redis } from 'ioredis';
import type { BudgetInForce } from '../../shared/money/budgets.js';
import { openingFields, type BatchRecord, type OpenAIBatchStatus } from '../../shared/batches/index.js';
import type { Endpoint } from '../../shared/endpoints.js';
import { inOneWrite } from '../../shared/redis.js';
import { as, luaFiles, redisScript } from '../../shared/redis-script.js';
import {
  accountBatchesKey,
  batchIntakeKey,
  batchKey,
  batchResultsKey,
  openBatchesKey,
} from '../../shared/redis-keys.js';

/**
 * What an OpenAI batch (`/v1/batches`) keeps of its own dialect beside the engine's record, in the same hash
 * (shared/batches/hash.ts): its endpoint, input file, metadata, the policy of its output files, the key's access its
 * requests are checked against (so another api can validate it again after this one dies), the lifecycle's times,
 * the errors of a file that could not run, and its output and error files once written. The engine's status is
 * read as OpenAI's: `validating` while the file is read, `in_progress`, `cancelling` (canceling, or ended after a
 * cancel and its files not yet written), `finalizing` (ended, files being written), then the final status this
 * record keeps: `completed`, `expired`, `cancelled`, or `failed` (the file could not run: nothing of it ran).
 */

/** The endpoints a batch's lines may call, by their path (a batch names one; each of its lines the same). */
export const batchEndpoints = {
  '/v1/chat/completions': 'chat.completions',
  '/v1/embeddings': 'embeddings',
  '/v1/responses': 'responses',
  '/v1/completions': 'completions',
  '/v1/messages': 'messages',
} as const satisfies Record<string, Endpoint>;
export type BatchEndpointPath = keyof typeof batchEndpoints;
export type BatchEndpoint = (typeof batchEndpoints)[BatchEndpointPath];

type FinalStatus = 'completed' | 'failed' | 'expired' | 'cancelled';

/** A line or a file that keeps a batch from running (OpenAI's BatchError). */
export interface BatchLineError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

/** What of the key that made the batch its requests are checked and billed against. */
export interface BatchAccess {
  models?: readonly string[];
  limitMicros?: number;
  weight?: number;
  /**
   * The budgets per period that held the key when the batch was made (each request counts in the period it runs in).
   */
  budgets?: readonly BudgetInForce[];
}

/** `output_expires_after`: the output and error files expire this long after they are written. */
export interface OutputExpiry {
  anchor: 'created_at';
  seconds: number;
}

export interface NewOpenAIBatch {
  id: string;
  accountId: string;
  keyId: string;
  /** Epoch ms. */
  created: number;
  expires: number;
  endpoint: BatchEndpointPath;
  inputFileId: string;
  metadata: Record<string, string> | null;
  outputExpiresAfter: OutputExpiry | null;
  access: BatchAccess;
}

/**
 * The hash's fields of this dialect (`oa_…`), apart from the engine's (shared/batches/hash.ts). The scripts in lua/
 * name some as they are here (`oa_final`, `oa_final_at`, `oa_errors`, `oa_parts`, `oa_parts_through`).
 */
const field = {
  endpoint: 'oa_endpoint',
  inputFile: 'oa_input_file',
  inputName: 'oa_input_name',
  metadata: 'oa_metadata',
  outputExpiry: 'oa_output_expiry',
  access: 'oa_access',
  inProgressAt: 'oa_in_progress_at',
  finalizingAt: 'oa_finalizing_at',
  final: 'oa_final',
  finalAt: 'oa_final_at',
  errors: 'oa_errors',
  outputFile: 'oa_output_file',
  errorFile: 'oa_error_file',
  outputName: 'oa_output_name',
  errorName: 'oa_error_name',
  /** Parts of its results written out to the blob store (lua/spilled.lua), and the last result they hold. */
  parts: 'oa_parts',
  partsThrough: 'oa_parts_through',
} as const;

/** The lease of whoever validates (then stores) a batch: the engine's intake lease, taken earlier. */
export const validationLeaseMs = 15_000;

/**
 * Records a batch `validating`: its engine fields with no request yet (nothing is released before it is started),
 * its own fields, its place in its account's list and among the open batches (the sweep validates it again if its
 * api dies), and the validation's lease held by the caller.
 */
export async function createValidatingBatch(redis: Redis, batch: NewOpenAIBatch, keepMs: number): Promise<void> {
  const ttl = Math.max(1, batch.expires - Date.now() + keepMs);
  await redis
    .multi()
    .hset(batchKey(batch.id), {
      // No request yet: the engine counts them once the file is read (`createBatch`, `fromValidating`).
      ...openingFields({ ...batch, total: 0 }, 'validating'),
      [field.endpoint]: batch.endpoint,
      [field.inputFile]: batch.inputFileId,
      [field.metadata]: batch.metadata === null ? '' : JSON.stringify(batch.metadata),
      [field.outputExpiry]: batch.outputExpiresAfter === null ? '' : String(batch.outputExpiresAfter.seconds),
      [field.access]: JSON.stringify(batch.access),
    })
    .pexpire(batchKey(batch.id), ttl)
    .set(batchIntakeKey(batch.id), '1', 'PX', validationLeaseMs)
    .exec();
  await inOneWrite(redis)
    .zadd(accountBatchesKey(batch.accountId), batch.created, batch.id)
    .zadd(openBatchesKey, batch.expires, batch.id)
    .exec();
}

/** Takes a validating batch's lease when nobody holds it (its api died mid-way); true when taken. */
export async function takeValidation(redis: Redis, batchId: string): Promise<boolean> {
  return (await redis.set(batchIntakeKey(batchId), '1', 'PX', validationLeaseMs, 'NX')) === 'OK';
}

/** Keeps holding the validation's lease (a long file is read over seconds). */
export async function renewValidation(redis: Redis, batchId: string): Promise<void> {
  await redis.set(batchIntakeKey(batchId), '1', 'PX', validationLeaseMs);
}

/**
 * Ends a validating batch `failed` (lua/fail-validation.lua, which names this dialect's fields as `field` does: the
 * Lua cannot import them) and lets go of its validation's lease; true when it did.
 */
const failValidationScript = redisScript({
  reply: (failed: number) => failed === 1,
  name: 'openai_batch_fail_validation',
  files: luaFiles(import.meta.url, 'fail-validation'),
  keys: ['batch', 'lease'],
  args: ['nowMs', 'errors', 'keepMs'],
});

/** Ends a validating batch `failed`, with the errors that name why; nothing when it is no longer validating. */
export async function failValidation(
  redis: Redis,
  batchId: string,
  errors: readonly BatchLineError[],
  keepMs: number,
): Promise<boolean> {
  const failed = await failValidationScript(redis, {
    batch: batchKey(batchId),
    lease: batchIntakeKey(batchId),
    nowMs: Date.now(),
    errors: JSON.stringify(errors),
    keepMs,
  });
  if (failed) await redis.zrem(openBatchesKey, batchId);
  return failed;
}

/** Notes a batch started (its file valid), with the input file's name for the console. */
export async function noteStarted(redis: Redis, batchId: string, inputName: string): Promise<void> {
  await redis.hset(batchKey(batchId), field.inProgressAt, Date.now(), field.inputName, inputName);
}

/** Notes that its files are being written (the first time only). */
export async function noteFinalizing(redis: Redis, batchId: string): Promise<void> {
  await redis.hsetnx(batchKey(batchId), field.finalizingAt, Date.now());
}

/** Sets fields of a batch only while it is there (lua/note-final.lua). */
const noteFinalScript = redisScript({
  name: 'openai_batch_note_final',
  files: luaFiles(import.meta.url, 'note-final'),
  keys: ['batch'],
  args: ['fields'],
  reply: as<number>(),
});

/** Its final status and files, once written: it leaves the open batches. */
export async function noteFinal(
  redis: Redis,
  batchId: string,
  final: Exclude<FinalStatus, 'failed'>,
  files: { output?: { id: string; name: string }; error?: { id: string; name: string } },
): Promise<void> {
  const fields: Record<string, string | number> = { [field.final]: final, [field.finalAt]: Date.now() };
  if (files.output)
    Object.assign(fields, { [field.outputFile]: files.output.id, [field.outputName]: files.output.name });
  if (files.error) Object.assign(fields, { [field.errorFile]: files.error.id, [field.errorName]: files.error.name });
  // Only while the batch is there: one deleted meanwhile is not brought back as a hash of these fields alone.
  await noteFinalScript(redis, { batch: batchKey(batchId), fields: Object.entries(fields).flat() });
  await redis.zrem(openBatchesKey, batchId);
}

/** The parts of its results already written out (openai-finalize.ts): how many, and the last result's id they hold. */
export function spilledOf(batch: BatchRecord): { parts: number; through: string | undefined } {
  return { parts: Number(batch.row[field.parts] ?? 0), through: batch.row[field.partsThrough] || undefined };
}

/**
 * Notes a part written out and trims the results it holds from the stream, in one step (lua/spilled.lua, which
 * names the `parts` fields as `field` does); true when noted.
 */
const spilledScript = redisScript({
  reply: (noted: number) => noted === 1,
  name: 'openai_batch_spilled',
  files: luaFiles(import.meta.url, 'spilled'),
  keys: ['batch', 'results'],
  args: ['partsBefore', 'through', 'trimFrom'],
});

/** The stream id just after `id` (`ms-seq`): the first one a trim to it keeps. */
const nextStreamId = (id: string) => {
  const [ms, seq] = id.split('-');
  return `${ms}-${Number(seq) + 1}`;
};

/**
 * Notes a part written out, holding the results up to `through`, and drops those results from Redis, in one step;
 * false when the batch is gone or its parts are no longer `partsBefore` (another api noted one meanwhile).
 */
export async function noteSpilled(
  redis: Redis,
  batchId: string,
  partsBefore: number,
  through: string,
): Promise<boolean> {
  return spilledScript(redis, {
    batch: batchKey(batchId),
    results: batchResultsKey(batchId),
    partsBefore,
    through,
    trimFrom: nextStreamId(through),
  });
}

/** This dialect's fields of a batch, read from its record. */
export interface OpenAIBatchFields {
  endpoint: BatchEndpointPath;
  inputFileId: string;
  inputName: string | null;
  metadata: Record<string, string> | null;
  outputExpirySeconds: number | null;
  access: BatchAccess;
  inProgressAt?: number;
  finalizingAt?: number;
  final?: FinalStatus;
  finalAt?: number;
  errors: BatchLineError[] | null;
  outputFile: { id: string; name: string | null } | null;
  errorFile: { id: string; name: string | null } | null;
}

function json<T>(text: string | undefined): T | null {
  if (!text) return null;
  try {
    return JSON.parse(text) as T;
  } catch {
    return null;
  }
}

const fileOf = (id: string | undefined, name: string | undefined) => (id ? { id, name: name || null } : null);

export function openAIFields(batch: BatchRecord): OpenAIBatchFields {
  const row = batch.row;
  const time = (name: string) => (row[name] ? Number(row[name]) || undefined : undefined);
  const final = row[field.final];
  const fields: OpenAIBatchFields = {
    endpoint: (row[field.endpoint] ?? '/v1/chat/completions') as BatchEndpointPath,
    inputFileId: row[field.inputFile] ?? '',
    inputName: row[field.inputName] || null,
    metadata: json<Record<string, string>>(row[field.metadata]),
    outputExpirySeconds: row[field.outputExpiry] ? Number(row[field.outputExpiry]) || null : null,
    access: json<BatchAccess>(row[field.access]) ?? {},
    errors: json<BatchLineError[]>(row[field.errors]),
    outputFile: fileOf(row[field.outputFile], row[field.outputName]),
    errorFile: fileOf(row[field.errorFile], row[field.errorName]),
  };
  const inProgressAt = time(field.inProgressAt);
  const finalizingAt = time(field.finalizingAt);
  const finalAt = time(field.finalAt);
  if (inProgressAt !== undefined) fields.inProgressAt = inProgressAt;
  if (finalizingAt !== undefined) fields.finalizingAt = finalizingAt;
  if (finalAt !== undefined) fields.finalAt = finalAt;
  if (final === 'completed' || final === 'failed' || final === 'expired' || final === 'cancelled') fields.final = final;
  return fields;
}

/** The batch's status as OpenAI says it (see above). */
export function openAIStatus(batch: BatchRecord, fields = openAIFields(batch)): OpenAIBatchStatus {
  if (fields.final) return fields.final;
  switch (batch.status) {
    case 'validating':
      return 'validating';
    case 'in_progress':
      return 'in_progress';
    case 'canceling':
      return 'cancelling';
    case 'ended':
      return batch.cancelAt !== undefined ? 'cancelling' : 'finalizing';
  }
}

/** Whether the batch has ended and its files are still to be written. */
export function awaitsFinal(batch: BatchRecord): boolean {
  return batch.dialect === 'openai' && batch.status === 'ended' && !batch.row[field.final];
}

/** The final status of an ended batch whose files are written: canceled, past its deadline, or run to its end. */
export function finalStatusOf(batch: BatchRecord): Exclude<FinalStatus, 'failed'> {
  return batch.cancelAt !== undefined ? 'cancelled' : batch.counts.expired > 0 ? 'expired' : 'completed';
}

const seconds = (ms: number | undefined) => (ms === undefined ? null : Math.floor(ms / 1000));

/** A batch as OpenAI's API answers it (the `Batch` object). */
export function openAIBatchView(batch: BatchRecord): Record<string, unknown> {
  const fields = openAIFields(batch);
  const status = openAIStatus(batch, fields);
  const final = fields.final;
  const endedAt = final === undefined ? null : seconds(fields.finalAt);
  const { input, cached, output } = batch.tokens;
  return {
    id: batch.id,
    object: 'batch',
    endpoint: fields.endpoint,
    // One model for a batch of one model; a batch that mixes them names none (OpenAI's batches have one).
    ...(batch.models?.length === 1 ? { model: batch.models[0] } : {}),
    errors: fields.errors && fields.errors.length > 0 ? { object: 'list', data: fields.errors } : null,
    input_file_id: fields.inputFileId,
    completion_window: '24h',
    status,
    output_file_id: fields.outputFile?.id ?? null,
    error_file_id: fields.errorFile?.id ?? null,
    created_at: seconds(batch.created),
    in_progress_at: seconds(fields.inProgressAt),
    expires_at: seconds(batch.expires),
    finalizing_at: seconds(fields.finalizingAt),
    completed_at: final === 'completed' ? endedAt : null,
    failed_at: final === 'failed' ? endedAt : null,
    expired_at: final === 'expired' ? endedAt : null,
    cancelling_at: seconds(batch.cancelAt),
    cancelled_at: final === 'cancelled' ? endedAt : null,
    // OpenAI counts the requests that failed, not those a cancel or the deadline kept from running.
    request_counts: { total: batch.total, completed: batch.counts.succeeded, failed: batch.counts.errored },
    usage: {
      input_tokens: input,
      input_tokens_details: { cached_tokens: cached },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: input + output,
    },
    metadata: fields.metadata,
  };
}
