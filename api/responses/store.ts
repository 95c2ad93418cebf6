import type { Redis } from 'ioredis';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import { responseKey } from '../../shared/redis-keys.js';
import type { ConversationItem } from '../../shared/responses.js';
import type { BlobStore } from '../../storage/blob-store.js';

/**
 * Stored responses: a hash per response under `responseKey(id)` with the key
 * that made it (`key`), its normalised input items (`input`) and its response
 * object (`response`, rewritten by the worker as the response runs and ends).
 * Input items past 256 KiB are kept in the blob store instead
 * (`responses/<id>/input.json`, named by `inputRef`). Everything expires
 * after RESPONSE_TTL_S (the blobs with the janitor's `responses/` rule). Only the key that made a response
 * sees it: to any other key it does not exist.
 */

export interface StoredResponse {
  id: string;
  input: ConversationItem[];
  response: Record<string, unknown> & { status: string; output?: unknown[] };
}

/** A chain followed through `previous_response_id` stops here: a conversation this long is refused, not walked. */
const maxChainLength = 1000;

const notFound = (id: string, param: string | null = null) =>
  new GatewayError(404, `Response with id '${id}' not found.`, {
    type: 'invalid_request_error',
    code: 'not_found',
    param,
  });

/** Ids are ours (`resp_` + hex): anything else is not looked up at all. */
const responseIdPattern = /^resp_[0-9a-f]{16,64}$/;

/** Input items larger than this (as JSON) are kept in the blob store, not in Redis. */
export const inlineInputBytes = 256 * 1024;

/** Where a stored response's input items are: inline JSON, or a blob key. */
export type StoredInput = { input: string } | { inputRef: string };

/** Keeps a response's input items: inline when small, else written to the blob store now. */
export async function storeInput(
  blobs: BlobStore,
  id: string,
  input: readonly ConversationItem[],
): Promise<StoredInput> {
  const text = JSON.stringify(input);
  if (text.length <= inlineInputBytes) return { input: text };
  const ref = await blobs.put(`responses/${id}/input.json`, Buffer.from(text), 'application/json');
  return { inputRef: ref.key };
}

export async function loadResponse(
  redis: Redis,
  blobs: BlobStore,
  id: string,
  keyId: string,
  param: string | null = null,
): Promise<StoredResponse> {
  if (!responseIdPattern.test(id)) throw notFound(id.slice(0, 80), param);
  const [key, input, inputRef, response] = await redis.hmget(responseKey(id), 'key', 'input', 'inputRef', 'response');
  if (key !== keyId || (input == null && inputRef == null) || response == null) throw notFound(id, param);
  // A blob gone before its record (deleted by hand, or a store wiped) leaves the response unreadable: the same 404.
  const items =
    input ??
    (await blobs.get(inputRef!).then(
      (bytes) => bytes.toString(),
      () => null,
    ));
  if (items === null) throw notFound(id, param);
  return {
    id,
    input: JSON.parse(items) as ConversationItem[],
    response: JSON.parse(response) as StoredResponse['response'],
  };
}

/**
 * The conversation a response chains onto: each earlier response's input
 * then output items, oldest first. Instructions are not carried over (the
 * Responses API's rule). Every link must belong to the key and be finished.
 */
export async function loadHistory(
  redis: Redis,
  blobs: BlobStore,
  previousId: string,
  keyId: string,
): Promise<ConversationItem[]> {
  const turns: ConversationItem[][] = [];
  let id: string | null = previousId;
  while (id !== null) {
    if (turns.length >= maxChainLength)
      throw invalidRequest(
        `The conversation chained by previous_response_id is longer than ${maxChainLength} responses.`,
        'previous_response_id',
      );
    const stored = await loadResponse(redis, blobs, id, keyId, 'previous_response_id');
    const { status } = stored.response;
    if (status === 'queued' || status === 'in_progress') {
      throw invalidRequest(
        `Previous response with id '${id}' is still ${status.replace('_', ' ')}; wait for it to finish.`,
        'previous_response_id',
      );
    }
    turns.push([...stored.input, ...((stored.response.output ?? []) as ConversationItem[])]);
    id = typeof stored.response.previous_response_id === 'string' ? stored.response.previous_response_id : null;
  }
  return turns.reverse().flat();
}

/** The record a new stored response starts with: written before its job is queued, so a worker always finds it. */
export async function createResponse(
  redis: Redis,
  id: string,
  keyId: string,
  input: StoredInput,
  response: object,
  ttlSeconds: number,
): Promise<void> {
  await redis
    .multi()
    .hset(responseKey(id), { key: keyId, ...input, response: JSON.stringify(response) })
    .expire(responseKey(id), ttlSeconds)
    .exec();
}

export async function deleteResponse(redis: Redis, blobs: BlobStore, id: string): Promise<void> {
  const inputRef = await redis.hget(responseKey(id), 'inputRef');
  await redis.del(responseKey(id));
  // The janitor's sweep is the backstop for a blob that cannot be deleted now.
  if (inputRef !== null) await blobs.delete(inputRef).catch(() => undefined);
}

/** Rewrites the stored object (the api's own changes: a cancel before any worker took the job, a job found lost). */
export async function storeResponseObject(redis: Redis, id: string, response: object): Promise<void> {
  await redis.hset(responseKey(id), 'response', JSON.stringify(response));
}
