import type { Redis } from 'ioredis';
import { GatewayError, invalidRequest } from '../shared/errors.js';
import { responseKey, type ConversationItem } from '../shared/responses.js';

/**
 * Stored responses: a hash per response under `responseKey(id)` with the key
 * that made it (`key`), its normalised input items (`input`) and its response
 * object (`response`, rewritten by the worker as the response runs and ends).
 * Everything expires after RESPONSE_TTL_S. Only the key that made a response
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
  new GatewayError(404, `Response with id '${id}' not found.`, { type: 'invalid_request_error', code: 'not_found', param });

/** Ids are ours (`resp_` + hex): anything else is not looked up at all. */
const responseIdPattern = /^resp_[0-9a-f]{16,64}$/;

export async function loadResponse(redis: Redis, id: string, keyId: string, param: string | null = null): Promise<StoredResponse> {
  if (!responseIdPattern.test(id)) throw notFound(id.slice(0, 80), param);
  const [key, input, response] = await redis.hmget(responseKey(id), 'key', 'input', 'response');
  if (key !== keyId || input == null || response == null) throw notFound(id, param);
  return { id, input: JSON.parse(input) as ConversationItem[], response: JSON.parse(response) as StoredResponse['response'] };
}

/**
 * The conversation a response chains onto: each earlier response's input
 * then output items, oldest first. Instructions are not carried over (the
 * Responses API's rule). Every link must belong to the key and be finished.
 */
export async function loadHistory(redis: Redis, previousId: string, keyId: string): Promise<ConversationItem[]> {
  const turns: ConversationItem[][] = [];
  let id: string | null = previousId;
  while (id !== null) {
    if (turns.length >= maxChainLength) throw invalidRequest(`The conversation chained by previous_response_id is longer than ${maxChainLength} responses.`, 'previous_response_id');
    const stored = await loadResponse(redis, id, keyId, 'previous_response_id');
    const { status } = stored.response;
    if (status === 'queued' || status === 'in_progress') {
      throw invalidRequest(`Previous response with id '${id}' is still ${status.replace('_', ' ')}; wait for it to finish.`, 'previous_response_id');
    }
    turns.push([...stored.input, ...((stored.response.output ?? []) as ConversationItem[])]);
    id = typeof stored.response.previous_response_id === 'string' ? stored.response.previous_response_id : null;
  }
  return turns.reverse().flat();
}

/** The record a new stored response starts with: written before its job is queued, so a worker always finds it. */
export async function createResponse(redis: Redis, id: string, keyId: string, input: ConversationItem[], response: object, ttlSeconds: number): Promise<void> {
  await redis
    .multi()
    .hset(responseKey(id), 'key', keyId, 'input', JSON.stringify(input), 'response', JSON.stringify(response))
    .expire(responseKey(id), ttlSeconds)
    .exec();
}

export async function deleteResponse(redis: Redis, id: string): Promise<void> {
  await redis.del(responseKey(id));
}

/** Rewrites the stored object (the api's own changes: a cancel before any worker took the job, a job found lost). */
export async function storeResponseObject(redis: Redis, id: string, response: object): Promise<void> {
  await redis.hset(responseKey(id), 'response', JSON.stringify(response));
}
