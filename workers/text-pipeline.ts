import { GatewayError } from '../shared/errors.js';
import type { EndpointRequest } from '../shared/endpoints.js';
import { streamTrailer } from '../shared/reply.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { CallContext, StreamEvent, VendorAdapter, VendorResult } from './vendors/types.js';

/**
 * Chat, completions and embeddings through a chat adapter: a plain call whose
 * body is the answer, or a stream whose events are relayed as SSE frames.
 */
export async function runTextStream(
  adapter: VendorAdapter,
  request: EndpointRequest,
  ctx: CallContext,
  publisher: ReplyPublisher,
  vendorDone: () => Promise<unknown>,
): Promise<void> {
  const includeUsage =
    (request.endpoint === 'chat.completions' || request.endpoint === 'completions') && request.payload.stream_options?.include_usage === true;
  for await (const event of streamFor(adapter, request, ctx)) {
    // Upstream streams always ask for usage (billing needs it); the client sees it only when it asked.
    if (event.usageOnly && !includeUsage) continue;
    publisher.chunk(`data: ${event.data}\n\n`);
  }
  // The vendor is done: free its slot before the client hears the end, so a
  // client that sends its next request at once finds the slot free.
  await vendorDone();
  await publisher.endStream(streamTrailer);
}

function streamFor(adapter: VendorAdapter, request: EndpointRequest, ctx: CallContext): AsyncIterable<StreamEvent> {
  if (request.endpoint === 'chat.completions') return adapter.streamChatCompletion(request.payload, ctx);
  if (request.endpoint === 'completions') return adapter.streamCompletion(request.payload, ctx);
  throw new GatewayError(400, `Streaming is not available for ${request.endpoint}.`, { param: 'stream' });
}

export function callText(adapter: VendorAdapter, request: EndpointRequest, ctx: CallContext): Promise<VendorResult> {
  switch (request.endpoint) {
    case 'chat.completions':
      return adapter.createChatCompletion(request.payload, ctx);
    case 'completions':
      return adapter.createCompletion(request.payload, ctx);
    case 'embeddings':
      return adapter.createEmbeddings(request.payload, ctx);
    default:
      throw new GatewayError(400, `${request.endpoint} is not a chat endpoint.`);
  }
}
