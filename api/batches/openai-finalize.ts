import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { openAIRecordedResponse, readBatch, readResultEntry, type BatchRecord } from '../../shared/batches/index.js';
import type { Config } from '../../shared/config.js';
import type { AccountFiles } from '../../shared/files.js';
import type { Logger } from '../../shared/logger.js';
import { batchFinalizeLeaseKey, batchResultsKey } from '../../shared/redis-keys.js';
import type { BlobStore } from '../../storage/blob-store.js';
import { yieldToLoop } from '../http/request-body.js';
import {
  awaitsFinal,
  finalStatusOf,
  noteFinal,
  noteFinalizing,
  noteSpilled,
  openAIFields,
  spilledOf,
} from './openai-record.js';

/**
 * An OpenAI batch's end: once the engine has ended it (every request recorded, or the rest canceled or expired),
 * its results are written as two files of its account (shared/files.ts, `purpose: batch_output`), as OpenAI writes
 * them: the output file, a line per request that succeeded (`{id: "batch_req_…", custom_id, response:
 * {status_code: 200, request_id, body}, error: null}`), and the error file, a line per request that did not (the
 * endpoint's error status and body as its `response`; `error: {code, message}` for one a cancel or the deadline
 * kept from running, `batch_cancelled` / `batch_expired`). A file with no line is not written. Both are streamed
 * from the batch's results, a page at a time, and expire after `output_expires_after` (or, without it, when the
 * batch's record does: BATCH_RESULTS_TTL_S). Then the batch takes its final status and its results leave Redis.
 *
 * Results do not wait in Redis for the end: a vector of an embeddings batch is about 20 KB, so 50,000 of them would
 * hold a gigabyte. Once a running batch has FILES_BATCH_SPILL_RESULTS of them (said on the refill channel, as its
 * window's), an api writes them out as a part (`batch-parts/`: its output lines and its error lines, two blobs) and
 * drops them from Redis in the step that notes the part (lua/spilled.lua). The files are the parts in order, then
 * the results still in Redis; the parts are deleted once the files are written (the blob janitor is the backstop).
 *
 * Whichever api hears first that the batch ended (the worker or the api that recorded its last result says so on
 * the refill channel; the cancel route and the sweep look too) writes them, under a lease renewed as it writes; one
 * that dies mid-way leaves the batch `finalizing` until the lease is out and the sweep writes them again.
 */

export interface FinalizeDeps {
  redis: Redis;
  files: AccountFiles;
  blobs: BlobStore;
  config: Pick<Config, 'batches'>;
  log: Logger;
}

const leaseMs = 60_000;
/** Results read per round trip: an embeddings answer may be tens of kilobytes. */
const resultsPage = 100;

/** What a request a cancel or the deadline kept from running (or that was lost on the way) says in the error file. */
function errorOf(result: string): { code: string; message: string } {
  let parsed: { type?: string; error?: { error?: { message?: unknown } } } = {};
  try {
    parsed = JSON.parse(result) as typeof parsed;
  } catch {
    // Said below as a failure without more.
  }
  if (parsed.type === 'canceled')
    return { code: 'batch_cancelled', message: 'This request was cancelled with its batch before it ran.' };
  if (parsed.type === 'expired')
    return {
      code: 'batch_expired',
      message: 'This request could not be executed before the completion window expired.',
    };
  const message = parsed.error?.error?.message;
  return { code: 'server_error', message: typeof message === 'string' ? message : 'The request failed.' };
}

/**
 * A result's line in the output file (`which` 'output') or the error file, or undefined when it belongs to the other.
 */
function lineOf(customId: string, result: string, which: 'output' | 'error'): string | undefined {
  const recorded = openAIRecordedResponse(result);
  if ((recorded?.outcome === 'succeeded') !== (which === 'output')) return undefined;
  const head = `{"id":"batch_req_${randomBytes(16).toString('hex')}","custom_id":${JSON.stringify(customId)},`;
  // The recorded response is spliced in as it is, never parsed again.
  if (recorded) return `${head}"response":${recorded.response},"error":null}`;
  return `${head}"response":null,"error":${JSON.stringify(errorOf(result))}}`;
}

/** Where part `part` of a batch's results keeps the lines of one of its files. */
export const batchPartKey = (batchId: string, part: number, which: 'output' | 'error') =>
  `batch-parts/${batchId}/${part}-${which}.jsonl`;

/**
 * The lines of one of the files from the results in Redis after `from` up to `through` (both stream ids; the start
 * and the end when undefined), a page of results at a time, in the order the results came.
 */
async function* resultLines(
  redis: Redis,
  batchId: string,
  which: 'output' | 'error',
  keepLease: () => Promise<unknown>,
  from?: string,
  through = '+',
): AsyncGenerator<string> {
  let after = from;
  for (;;) {
    const entries = await redis.xrange(
      batchResultsKey(batchId),
      after === undefined ? '-' : `(${after}`,
      through,
      'COUNT',
      resultsPage,
    );
    let text = '';
    for (const [, fields] of entries) {
      const { customId, result = '' } = readResultEntry(fields);
      const line = lineOf(customId, result, which);
      if (line !== undefined) text += `${line}\n`;
    }
    if (text) yield text;
    if (entries.length < resultsPage) return;
    after = entries.at(-1)![0];
    await keepLease();
    await yieldToLoop();
  }
}

/** The lines of one of the files: its parts' in order, then those of the results still in Redis. */
async function* fileLines(
  deps: FinalizeDeps,
  batch: BatchRecord,
  which: 'output' | 'error',
  keepLease: () => Promise<unknown>,
): AsyncGenerator<Buffer | string> {
  const { parts, through } = spilledOf(batch);
  for (let part = 0; part < parts; part++) {
    const stream = await deps.blobs.stream(batchPartKey(batch.id, part, which));
    try {
      for await (const chunk of stream as AsyncIterable<Buffer>) yield chunk;
    } finally {
      stream.destroy();
    }
    await keepLease();
  }
  yield* resultLines(deps.redis, batch.id, which, keepLease, through);
}

/**
 * Runs `step` under the batch's writing lease (a part and the files are never written at once), with the batch as
 * read under it and a way to keep the lease; false, without running it, when another holds the lease or the batch is
 * gone.
 */
async function underLease(
  redis: Redis,
  batchId: string,
  step: (batch: BatchRecord, keepLease: () => Promise<unknown>) => Promise<boolean>,
): Promise<boolean> {
  if ((await redis.set(batchFinalizeLeaseKey(batchId), '1', 'PX', leaseMs, 'NX')) !== 'OK') return false;
  try {
    // Read under the lease: the parts it names are all that were noted.
    const batch = await readBatch(redis, batchId);
    return batch ? await step(batch, () => redis.pexpire(batchFinalizeLeaseKey(batchId), leaseMs)) : false;
  } finally {
    await redis.del(batchFinalizeLeaseKey(batchId)).catch(() => undefined);
  }
}

/**
 * Writes out the results of a running OpenAI batch as its next part (see above), under the lease its files are
 * written under (so a part and the files are never written at once); true when a part was noted.
 */
export async function spillOpenAIResults(deps: FinalizeDeps, batchId: string): Promise<boolean> {
  const { redis } = deps;
  return underLease(redis, batchId, async (batch, keepLease) => {
    if (batch.dialect !== 'openai' || (batch.status !== 'in_progress' && batch.status !== 'canceling')) return false;
    const { parts, through } = spilledOf(batch);
    const last = (await redis.xrevrange(batchResultsKey(batchId), '+', '-', 'COUNT', 1))[0]?.[0];
    if (last === undefined || last === through) return false;
    const keys = [batchPartKey(batchId, parts, 'output'), batchPartKey(batchId, parts, 'error')] as const;
    await deps.blobs.putStream(
      keys[0],
      resultLines(redis, batchId, 'output', keepLease, through, last),
      'application/jsonl',
    );
    await deps.blobs.putStream(
      keys[1],
      resultLines(redis, batchId, 'error', keepLease, through, last),
      'application/jsonl',
    );
    if (await noteSpilled(redis, batchId, parts, last)) return true;
    // Not noted (the batch is gone): the part is nobody's.
    await Promise.all(keys.map((key) => deps.blobs.delete(key).catch(() => undefined)));
    return false;
  });
}

/** Deletes a finalized batch's parts (their lines are in its files now); one that fails is left to the janitor. */
async function deleteParts(deps: FinalizeDeps, batchId: string, parts: number): Promise<void> {
  for (let part = 0; part < parts; part++) {
    await Promise.all(
      (['output', 'error'] as const).map((which) =>
        deps.blobs.delete(batchPartKey(batchId, part, which)).catch(() => undefined),
      ),
    );
  }
}

/** Writes an ended OpenAI batch's files and gives it its final status (see above); true when this call did. */
export async function finalizeOpenAIBatch(deps: FinalizeDeps, batchId: string): Promise<boolean> {
  const { redis } = deps;
  return underLease(redis, batchId, async (batch, keepLease) => {
    if (!awaitsFinal(batch)) return false;
    await noteFinalizing(redis, batchId);
    const fields = openAIFields(batch);
    const now = Date.now();
    const expiresAt = Math.floor(
      (fields.outputExpirySeconds !== null
        ? now + fields.outputExpirySeconds * 1000
        : now + deps.config.batches.resultsKeepMs) / 1000,
    );
    const write = async (which: 'output' | 'error') => {
      const filename = `${batchId}_${which}.jsonl`;
      // The batch's key and models go with its files: who sees the batch sees them (api/files/key-scope.ts).
      const file = await deps.files.put(batch.accountId, {
        purpose: 'batch_output',
        filename,
        body: fileLines(deps, batch, which, keepLease),
        expiresAt,
        keyId: batch.keyId,
        batch: { id: batchId, models: batch.models ?? null },
      });
      return { id: file.id, name: filename };
    };
    const { succeeded, errored, canceled, expired } = batch.counts;
    const output = succeeded > 0 ? await write('output') : undefined;
    const error = errored + canceled + expired > 0 ? await write('error') : undefined;
    const final = finalStatusOf(batch);
    await noteFinal(redis, batchId, final, { ...(output ? { output } : {}), ...(error ? { error } : {}) });
    // The files hold them now.
    await redis.del(batchResultsKey(batchId));
    await deleteParts(deps, batchId, spilledOf(batch).parts);
    deps.log.info({ batch: batchId, status: final, output: output?.id, error: error?.id }, 'OpenAI batch finalized');
    return true;
  });
}

/** Finalizes in the background (a failure is logged; the sweep tries again). */
export function startFinalize(deps: FinalizeDeps, batchId: string): void {
  void finalizeOpenAIBatch(deps, batchId).catch((error: unknown) =>
    deps.log.warn({ err: error, batch: batchId }, "could not write an OpenAI batch's files (the sweep will again)"),
  );
}

/**
 * What an api does when an OpenAI batch's window has moved (the refill channel): writes its files once it has
 * ended, or a part of its results once FILES_BATCH_SPILL_RESULTS of them wait in Redis. One step at a time per
 * batch in this api (refill.ts); a failure is logged, and the next move or the sweep tries again.
 */
export async function advanceOpenAIBatch(deps: FinalizeDeps, batchId: string): Promise<void> {
  try {
    const batch = await readBatch(deps.redis, batchId);
    if (!batch || batch.dialect !== 'openai') return;
    if (awaitsFinal(batch)) {
      await finalizeOpenAIBatch(deps, batchId);
      return;
    }
    if (batch.status !== 'in_progress' && batch.status !== 'canceling') return;
    if ((await deps.redis.xlen(batchResultsKey(batchId))) < deps.config.batches.spillResults) return;
    await spillOpenAIResults(deps, batchId);
    // It may have ended while the part was written (its finalize found the lease taken).
    const after = await readBatch(deps.redis, batchId);
    if (after && awaitsFinal(after)) await finalizeOpenAIBatch(deps, batchId);
  } catch (error) {
    deps.log.warn(
      { err: error, batch: batchId },
      "could not write out an OpenAI batch's results (the next step or the sweep will again)",
    );
  }
}
