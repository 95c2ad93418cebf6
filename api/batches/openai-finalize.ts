import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { readBatch } from '../../shared/batches.js';
import type { Config } from '../../shared/config.js';
import type { AccountFiles } from '../../shared/files.js';
import type { Logger } from '../../shared/logger.js';
import { batchKey, batchResultsKey } from '../../shared/redis-keys.js';
import { yieldToLoop } from '../http/request-body.js';
import { awaitsFinal, finalStatusOf, noteFinal, noteFinalizing, openAIFields } from './openai-record.js';

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
 * Whichever api hears first that the batch ended (the worker or the api that recorded its last result says so on
 * the refill channel; the cancel route and the sweep look too) writes them, under a lease renewed as it writes; one
 * that dies mid-way leaves the batch `finalizing` until the lease is out and the sweep writes them again.
 */

export interface FinalizeDeps {
  redis: Redis;
  files: AccountFiles;
  config: Pick<Config, 'batches'>;
  log: Logger;
}

const leaseMs = 60_000;
const finalizeLeaseKey = (batchId: string) => `${batchKey(batchId)}:finalize`;
/** Results read per round trip: an embeddings answer may be tens of kilobytes. */
const resultsPage = 100;

const succeededHead = '{"type":"succeeded","response":';
const erroredHead = '{"type":"errored","response":';

/** What a request a cancel or the deadline kept from running (or that was lost on the way) says in the error file. */
function errorOf(result: string): { code: string; message: string } {
  let parsed: { type?: string; error?: { error?: { message?: unknown } } } = {};
  try {
    parsed = JSON.parse(result) as typeof parsed;
  } catch {
    // Said below as a failure without more.
  }
  if (parsed.type === 'canceled') return { code: 'batch_cancelled', message: 'This request was cancelled with its batch before it ran.' };
  if (parsed.type === 'expired') return { code: 'batch_expired', message: 'This request could not be executed before the completion window expired.' };
  const message = parsed.error?.error?.message;
  return { code: 'server_error', message: typeof message === 'string' ? message : 'The request failed.' };
}

/** A result's line in the output file (`which` 'output') or the error file, or undefined when it belongs to the other. */
function lineOf(customId: string, result: string, which: 'output' | 'error'): string | undefined {
  const succeeded = result.startsWith(succeededHead);
  if (succeeded !== (which === 'output')) return undefined;
  const head = `{"id":"batch_req_${randomBytes(16).toString('hex')}","custom_id":${JSON.stringify(customId)},`;
  // The recorded response is spliced in as it is, never parsed again.
  if (succeeded) return `${head}"response":${result.slice(succeededHead.length, -1)},"error":null}`;
  if (result.startsWith(erroredHead)) return `${head}"response":${result.slice(erroredHead.length, -1)},"error":null}`;
  return `${head}"response":null,"error":${JSON.stringify(errorOf(result))}}`;
}

/** The lines of one of the files, a page of results at a time, in the order the results came. */
async function* fileLines(redis: Redis, batchId: string, which: 'output' | 'error', keepLease: () => Promise<unknown>): AsyncGenerator<string> {
  let after: string | undefined;
  for (;;) {
    const entries = await redis.xrange(batchResultsKey(batchId), after === undefined ? '-' : `(${after}`, '+', 'COUNT', resultsPage);
    let text = '';
    for (const [, fields] of entries) {
      let customId = '';
      let result = '';
      for (let i = 0; i + 1 < fields.length; i += 2) {
        if (fields[i] === 'custom_id') customId = fields[i + 1]!;
        else if (fields[i] === 'result') result = fields[i + 1]!;
      }
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

/** Writes an ended OpenAI batch's files and gives it its final status (see above); true when this call did. */
export async function finalizeOpenAIBatch(deps: FinalizeDeps, batchId: string): Promise<boolean> {
  const { redis } = deps;
  const batch = await readBatch(redis, batchId);
  if (!batch || !awaitsFinal(batch)) return false;
  if ((await redis.set(finalizeLeaseKey(batchId), '1', 'PX', leaseMs, 'NX')) !== 'OK') return false;
  try {
    await noteFinalizing(redis, batchId);
    const fields = openAIFields(batch);
    const keepLease = () => redis.pexpire(finalizeLeaseKey(batchId), leaseMs);
    const now = Date.now();
    const expiresAt = Math.floor((fields.outputExpirySeconds !== null ? now + fields.outputExpirySeconds * 1000 : now + deps.config.batches.resultsKeepMs) / 1000);
    const write = async (which: 'output' | 'error') => {
      const filename = `${batchId}_${which}.jsonl`;
      const file = await deps.files.put(batch.accountId, { purpose: 'batch_output', filename, body: fileLines(redis, batchId, which, keepLease), expiresAt });
      return { id: file.id, name: filename };
    };
    const { succeeded, errored, canceled, expired } = batch.counts;
    const output = succeeded > 0 ? await write('output') : undefined;
    const error = errored + canceled + expired > 0 ? await write('error') : undefined;
    const final = finalStatusOf(batch);
    await noteFinal(redis, batchId, final, { ...(output ? { output } : {}), ...(error ? { error } : {}) });
    // The files hold them now.
    await redis.del(batchResultsKey(batchId));
    deps.log.info({ batch: batchId, status: final, output: output?.id, error: error?.id }, 'OpenAI batch finalized');
    return true;
  } finally {
    await redis.del(finalizeLeaseKey(batchId)).catch(() => undefined);
  }
}

/** Finalizes in the background (a failure is logged; the sweep tries again). */
export function startFinalize(deps: FinalizeDeps, batchId: string): void {
  void finalizeOpenAIBatch(deps, batchId).catch((error: unknown) => deps.log.warn({ err: error, batch: batchId }, "could not write an OpenAI batch's files (the sweep will again)"));
}
