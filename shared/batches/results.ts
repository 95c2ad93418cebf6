import type { Redis } from 'ioredis';
import { anthropicErrorType } from '../messages.js';
import { batchResultsKey } from '../redis-keys.js';

/**
 * A batch's results, as recorded (lua/record.lua: an entry of its results stream a request, `custom_id` and
 * `result`, in the order they came) and read back: as the lines of a Message Batch's `…/results`, or, for an OpenAI
 * batch, as the lines of its output and error files (api/batches/openai-finalize.ts). A result is JSON written once
 * and spliced into what is read, never parsed and written again: an embeddings answer may be hundreds of kilobytes.
 */

/** A results stream entry's fields read: its request's custom_id and its result's JSON (undefined when it has none). */
export function readResultEntry(fields: readonly string[]): { customId: string; result: string | undefined } {
  let customId = '';
  let result: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === 'custom_id') customId = fields[i + 1]!;
    else if (fields[i] === 'result') result = fields[i + 1]!;
  }
  return { customId, result };
}

/** Up to `count` result lines after the stream entry `after` ('0' from the start), and the last entry read. */
export async function readBatchResults(
  redis: Redis,
  batchId: string,
  after: string,
  count: number,
): Promise<{ lines: string[]; last: string | undefined }> {
  const entries = await redis.xrange(batchResultsKey(batchId), after === '0' ? '-' : `(${after}`, '+', 'COUNT', count);
  const lines = entries.map(([, fields]) => {
    const { customId, result = 'null' } = readResultEntry(fields);
    // The result is JSON as recorded: written in, not parsed and written again.
    return `{"custom_id":${JSON.stringify(customId)},"result":${result}}`;
  });
  return { lines, last: entries.at(-1)?.[0] };
}

/** How an OpenAI batch's recorded result begins, by its outcome: its `response` follows. */
const openAIResultHead = (outcome: 'succeeded' | 'errored') => `{"type":"${outcome}","response":`;

/**
 * An OpenAI batch's result as recorded: its outcome and its output line's `response` (`{status_code, request_id,
 * body}`), the body's JSON spliced in as it is (an embeddings answer of a few hundred kilobytes is not parsed to be
 * written again). api/batches/openai-finalize.ts copies the `response` into the output or error file
 * (`openAIRecordedResponse`).
 */
export function openAIBatchResult(
  outcome: 'succeeded' | 'errored',
  status: number,
  requestId: string | null,
  bodyJson: string,
): string {
  return `${openAIResultHead(outcome)}{"status_code":${status},"request_id":${JSON.stringify(requestId)},"body":${bodyJson}}}`;
}

/**
 * An OpenAI batch's recorded result read back: its outcome and its `response`'s JSON as written
 * (`openAIBatchResult`); undefined for one its endpoint never answered (canceled, expired, lost on the way).
 */
export function openAIRecordedResponse(
  result: string,
): { outcome: 'succeeded' | 'errored'; response: string } | undefined {
  for (const outcome of ['succeeded', 'errored'] as const) {
    const head = openAIResultHead(outcome);
    if (result.startsWith(head)) return { outcome, response: result.slice(head.length, -1) };
  }
  return undefined;
}

/**
 * An error as the body of an OpenAI batch's failed line: its endpoint's own error body (Anthropic's on `/v1/messages`,
 * OpenAI's elsewhere).
 */
export function openAIBatchErrorBody(
  error: { status: number; message: string; type: string; code: string | null; param: string | null },
  endpoint: string,
): string {
  if (endpoint === 'messages')
    return JSON.stringify({ type: 'error', error: { type: anthropicErrorType(error.status), message: error.message } });
  return JSON.stringify({ error: { message: error.message, type: error.type, param: error.param, code: error.code } });
}
