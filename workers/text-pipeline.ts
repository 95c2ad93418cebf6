import { GatewayError } from '../shared/errors.js';
import type { EndpointRequest } from '../shared/endpoints.js';
import { streamAliasKey } from '../shared/redis-keys.js';
import { sseDone } from '../shared/sse.js';
import {
  answerTier,
  ChatStreamEncoder,
  encodeChatAnswer,
  usesLegacyFunctions,
  type ChatEncoderOptions,
} from './answers/chat-encoder.js';
import type { TierRule } from '../shared/scheduling/index.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { adapterMethod } from './vendors/registry.js';
import type { CallContext } from './vendors/types.js';
import type { Answer, AnswerEvent } from './answers/events.js';
import type { Meter } from './settlement.js';
import { chatForms, foldAnswer } from './answers/answer-forms.js';
import { runStream, type StreamedJob } from './answers/stream-run.js';

function encoderOptions(request: EndpointRequest, ctx: CallContext, tier: TierRule): ChatEncoderOptions {
  const serviceTier = { serviceTier: tier.before, answeredTier: tier.answered };
  if (request.endpoint === 'chat.completions') {
    const payload = request.payload;
    return {
      form: 'chat.completion',
      model: ctx.model.id,
      includeUsage: payload.stream_options?.include_usage === true,
      legacyFunctions: usesLegacyFunctions(payload),
      ...serviceTier,
    };
  }
  if (request.endpoint === 'completions') {
    return {
      form: 'text_completion',
      model: ctx.model.id,
      includeUsage: request.payload.stream_options?.include_usage === true,
      legacyFunctions: false,
      ...serviceTier,
    };
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
 * of the event loop produced as one message). What it used, and the tier
 * that served it, go to `produced`; that tier (`tier`: the gateway's, or a
 * native vendor's first chunk's word) is said on each chat chunk.
 */
export async function runTextStream(run: StreamedJob<EndpointRequest>, tier: TierRule): Promise<void> {
  const { protocol, job: request, ctx, publisher, keep = false } = run;
  const options = encoderOptions(request, ctx, tier);
  const encoder = new ChatStreamEncoder(options);
  // The cache keeps the answer's events, not its chunks: its forms are written anew from them (chatForms), the
  // vendor's own chunks and the usage chunk apart.
  const kept: AnswerEvent[] | undefined = keep ? [] : undefined;
  let named = false;
  await runStream({
    source: streamFor(protocol, request, ctx),
    encoder,
    publisher,
    produced: run.produced,
    // Only a streaming chat or completion comes here: a plain one is `callText`'s.
    visible: true,
    vendorDone: run.vendorDone,
    trailer: sseDone,
    onBatch: (events) => {
      if (kept) for (const event of events) kept.push(event);
      if (!named && encoder.answerId !== undefined) {
        // A client may resume by the id its chunks carry as well as by the request id.
        named = true;
        publisher.alias(streamAliasKey(encoder.answerId));
      }
    },
    settle: (meter) => {
      meter.servedTier = encoder.serviceTier;
    },
    cache: kept && { forms: () => chatForms(foldAnswer(kept), options), store: run.beforeEnd },
  });
}

function keepAnswer(answer: Answer, produced: Meter): void {
  produced.answerId = answer.id;
  produced.finishReason = answer.choices[0]?.finishReason ?? undefined;
  if (answer.usage) {
    produced.usage = answer.usage;
    return;
  }
  for (const choice of answer.choices) {
    if (choice.text) produced.output.push(choice.text);
    for (const call of choice.toolCalls) produced.output.push(call.arguments);
  }
}

/**
 * A plain chat completion, legacy completion or embeddings call: the client's body (a chat completion says the
 * tier that served it: the gateway's, or a native vendor's word in its body); what it used, and that tier, go to
 * `produced`.
 */
export async function callText(
  protocol: Protocol,
  request: EndpointRequest,
  ctx: CallContext,
  produced: Meter,
  tier: TierRule,
  keep = false,
): Promise<string> {
  switch (request.endpoint) {
    case 'chat.completions':
    case 'completions': {
      const answer =
        request.endpoint === 'chat.completions'
          ? await adapterMethod(protocol, 'chat')(request.payload, ctx)
          : await adapterMethod(protocol, 'complete')(request.payload, ctx);
      keepAnswer(answer, produced);
      const options = encoderOptions(request, ctx, tier);
      produced.servedTier = answerTier(answer, options);
      if (keep) {
        produced.cacheable = chatForms(answer, options);
        return produced.cacheable.body;
      }
      return encodeChatAnswer(answer, options);
    }
    case 'embeddings': {
      const answer = await adapterMethod(protocol, 'embed')(request.payload, ctx);
      produced.usage = answer.usage;
      if (keep) produced.cacheable = { body: answer.body };
      return answer.body;
    }
    default:
      throw new GatewayError(400, `${request.endpoint} is not a text endpoint.`);
  }
}
