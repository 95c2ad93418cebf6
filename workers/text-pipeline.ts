import type { ChatCompletionRequest } from '../shared/schemas/chat.js';
import type { CompletionRequest } from '../shared/schemas/completions.js';
import type { EmbeddingRequest } from '../shared/schemas/embeddings.js';
import { GatewayError } from '../shared/errors.js';
import type { GatewayJobData } from '../shared/queues.js';
import { streamTrailer } from '../shared/reply.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from './vendors/types.js';

/**
 * Chat, completions and embeddings through a chat adapter: a plain call whose
 * body is the answer, or a stream whose events are relayed as SSE frames.
 */
export async function runTextStream(
  adapter: VendorAdapter,
  endpoint: GatewayJobData['endpoint'],
  payload: Record<string, unknown>,
  ctx: CallContext,
  publisher: ReplyPublisher,
  vendorDone: () => Promise<unknown>,
): Promise<void> {
  const includeUsage = (payload.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
  for await (const event of streamFor(adapter, endpoint, payload, ctx)) {
    // Upstream streams always ask for usage (billing needs it); the client sees it only when it asked.
    if (event.usageOnly && !includeUsage) continue;
    publisher.chunk(`data: ${event.data}\n\n`);
  }
  // The vendor is done: free its slot before the client hears the end, so a
  // client that sends its next request at once finds the slot free.
  await vendorDone();
  await publisher.endStream(streamTrailer);
}

function streamFor(adapter: VendorAdapter, endpoint: GatewayJobData['endpoint'], payload: Record<string, unknown>, ctx: CallContext): AsyncIterable<StreamEvent> {
  if (endpoint === 'chat.completions') return adapter.streamChatCompletion(payload as ChatCompletionRequest, ctx);
  if (endpoint === 'completions') return adapter.streamCompletion(payload as CompletionRequest, ctx);
  throw new GatewayError(400, `Streaming is not available for ${endpoint}.`, { param: 'stream' });
}

export function callText(adapter: VendorAdapter, endpoint: GatewayJobData['endpoint'], payload: Record<string, unknown>, ctx: CallContext): Promise<VendorResult> {
  switch (endpoint) {
    case 'chat.completions':
      return adapter.createChatCompletion(payload as ChatCompletionRequest, ctx);
    case 'completions':
      return adapter.createCompletion(payload as CompletionRequest, ctx);
    case 'embeddings':
      return adapter.createEmbeddings(payload as EmbeddingRequest, ctx);
    default:
      throw new GatewayError(400, `${endpoint} is not a chat endpoint.`);
  }
}
