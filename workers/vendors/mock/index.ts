/**
 * The built-in offline vendor: deterministic answers for chat, legacy
 * completions and embeddings, so a fresh checkout runs (and is tested) with
 * no keys. Token counts are real (o200k_base), so billing paths see real numbers.
 *
 * Markers, written anywhere in the last user message (chat), a prompt
 * (completions) or an input string (embeddings), steer the mock for tests:
 *
 *   [mock:error:<status>]  fail with a GatewayError of that status (400-599),
 *                          before any output. Retryable for 429 and 5xx, so
 *                          the gateway's retry path can be exercised.
 *   [mock:slow:<ms>]       wait <ms> between stream chunks instead of
 *                          MOCK_STREAM_DELAY_MS (default 20); a non-stream
 *                          call waits <ms> once before answering.
 *
 * The pause between stream chunks is MOCK_STREAM_DELAY_MS, read on every
 * call. Every wait ends at once when `ctx.signal` aborts, rejecting with its reason.
 */
import type { ChatCompletionRequest } from '../../../shared/schemas/chat.js';
import type { CallContext, VendorAdapter, VendorResult } from '../types.js';
import { planChatCompletion, renderChatCompletion } from './chat.js';
import { streamChatCompletion } from './chat-stream.js';
import { createCompletion, streamCompletion } from './completions.js';
import { createEmbeddings } from './embeddings.js';
import { sleep } from '../sleep.js';

async function createChatCompletion(request: ChatCompletionRequest, ctx: CallContext): Promise<VendorResult> {
  const plan = await planChatCompletion(request, ctx);
  if (plan.markers.slowMs !== undefined) await sleep(plan.markers.slowMs, ctx.signal);
  return { body: renderChatCompletion(plan), usage: plan.usage };
}

export const mockAdapter: VendorAdapter = {
  createChatCompletion,
  streamChatCompletion,
  createCompletion,
  streamCompletion,
  createEmbeddings,
};

export { MOCK_EMBEDDING_DIMENSIONS } from './embeddings.js';
