import { GatewayError } from '../shared/errors.js';
import type { EndpointRequest } from '../shared/endpoints.js';
import { streamTrailer } from '../shared/reply.js';
import { ChatStreamEncoder, encodeChatAnswer, usesLegacyFunctions, type ChatEncoderOptions } from './answers/chat-encoder.js';
import type { Protocol } from '../shared/vendors.js';
import type { ReplyPublisher } from './reply-publisher.js';
import { adapterMethod } from './vendors/registry.js';
import type { AnswerEvent, CallContext, Usage } from './vendors/types.js';

/** A plain text answer as the client gets it, and its usage for billing. */
export interface TextOutput {
  body: string;
  usage?: Usage;
}

function encoderOptions(request: EndpointRequest, ctx: CallContext): ChatEncoderOptions {
  if (request.endpoint === 'chat.completions') {
    const payload = request.payload;
    return { form: 'chat.completion', model: ctx.model.id, includeUsage: payload.stream_options?.include_usage === true, legacyFunctions: usesLegacyFunctions(payload) };
  }
  if (request.endpoint === 'completions') {
    return { form: 'text_completion', model: ctx.model.id, includeUsage: request.payload.stream_options?.include_usage === true, legacyFunctions: false };
  }
  throw new GatewayError(400, `Streaming is not available for ${request.endpoint}.`, { param: 'stream' });
}

function streamFor(protocol: Protocol, request: EndpointRequest, ctx: CallContext): AsyncIterable<AnswerEvent[]> {
  if (request.endpoint === 'chat.completions') return adapterMethod(protocol, 'streamChat')(request.payload, ctx);
  if (request.endpoint === 'completions') return adapterMethod(protocol, 'streamCompletion')(request.payload, ctx);
  throw new GatewayError(400, `Streaming is not available for ${request.endpoint}.`, { param: 'stream' });
}

/**
 * A streamed chat or legacy completion: the adapter's events, encoded as the
 * client's chunks, go to the publisher as they come (it sends what one turn
 * of the event loop produced as one message). Returns the answer's usage.
 */
export async function runTextStream(
  protocol: Protocol,
  request: EndpointRequest,
  ctx: CallContext,
  publisher: ReplyPublisher,
  vendorDone: () => Promise<unknown>,
): Promise<Usage | undefined> {
  const encoder = new ChatStreamEncoder(encoderOptions(request, ctx));
  for await (const events of streamFor(protocol, request, ctx)) {
    const frames = encoder.encode(events);
    if (frames !== '') publisher.chunk(frames);
  }
  // The vendor is done: free its slot before the client hears the end, so a
  // client that sends its next request at once finds the slot free.
  await vendorDone();
  await publisher.endStream(streamTrailer);
  return encoder.usage;
}

/** A plain chat completion, legacy completion or embeddings call, as the client's body. */
export async function callText(protocol: Protocol, request: EndpointRequest, ctx: CallContext): Promise<TextOutput> {
  switch (request.endpoint) {
    case 'chat.completions': {
      const answer = await adapterMethod(protocol, 'chat')(request.payload, ctx);
      return { body: encodeChatAnswer(answer, encoderOptions(request, ctx)), ...(answer.usage ? { usage: answer.usage } : {}) };
    }
    case 'completions': {
      const answer = await adapterMethod(protocol, 'complete')(request.payload, ctx);
      return { body: encodeChatAnswer(answer, encoderOptions(request, ctx)), ...(answer.usage ? { usage: answer.usage } : {}) };
    }
    case 'embeddings':
      return adapterMethod(protocol, 'embed')(request.payload, ctx);
    default:
      throw new GatewayError(400, `${request.endpoint} is not a text endpoint.`);
  }
}
