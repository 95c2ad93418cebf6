import type { AnswerEvent } from '../../answers/events.js';
import type { MessagesJob } from '../../../shared/messages.js';
import { malformedResponse, postJson, vendorRequest, type VendorRequest } from '../http.js';
import { postSse, streamEndedEarly } from '../sse-body.js';
import type { CallContext, NativeEvent } from '../types.js';
import { AnthropicStreamTranslator } from './anthropic-stream.js';
import { anthropicApi } from './api.js';
import { mapAnthropicError, mapAnthropicStreamError } from './map-anthropic-error.js';

/**
 * Anthropic's Messages API spoken natively, for a client that speaks it too:
 * the request goes as the client wrote it (thinking blocks and their
 * signatures, `cache_control` where the client put it, fields this gateway
 * does not know, the client's `anthropic-beta` flags), only the model named
 * the vendor's way; the vendor's events come back untouched. Each event is
 * also read as the gateway's answer events, for billing and the request log.
 */

function withBetas(request: VendorRequest, betas: string | undefined): VendorRequest {
  return betas ? { ...request, headers: { ...request.headers, 'anthropic-beta': betas } } : request;
}

/**
 * The conversation without the thinking blocks no one signed: the gateway writes another vendor's reasoning as
 * a thinking block with an empty signature, and a client that switches to an Anthropic model replays it, which
 * Anthropic refuses. Anthropic's own blocks (signed) stay exactly as they are; the array is copied only when
 * there is something to leave out.
 */
export function withoutUnsignedThinking(
  messages: MessagesJob['anthropic']['messages'],
): MessagesJob['anthropic']['messages'] {
  const unsigned = (block: unknown) => {
    const fields = block as { type?: unknown; signature?: unknown };
    return fields.type === 'thinking' && (typeof fields.signature !== 'string' || fields.signature === '');
  };
  if (
    !messages.some(
      (message) => message.role === 'assistant' && Array.isArray(message.content) && message.content.some(unsigned),
    )
  )
    return messages;
  return messages.map((message) =>
    message.role === 'assistant' && Array.isArray(message.content) && message.content.some(unsigned)
      ? { ...message, content: message.content.filter((block) => !unsigned(block)) }
      : message,
  );
}

/**
 * The vendor's stream, one array per network read. The request is sent (and
 * a refusal thrown) on the first `next()`. `message_start` carries the model
 * name the client asked for (an alias as it wrote it), not the vendor's id.
 */
export async function* streamNativeMessages(job: MessagesJob, ctx: CallContext): AsyncGenerator<NativeEvent[]> {
  const body = JSON.stringify({
    ...job.anthropic,
    messages: withoutUnsignedThinking(job.anthropic.messages),
    model: ctx.upstreamModel,
    stream: true,
  });
  const request = withBetas(vendorRequest(anthropicApi, ctx, anthropicApi.paths.messages, body), job.betas);
  const sse = await postSse(ctx, request, mapAnthropicError, (payload, secrets) =>
    (payload as { type?: unknown } | null)?.type === 'error' ? mapAnthropicStreamError(payload, secrets) : null,
  );
  const translator = new AnthropicStreamTranslator(ctx);
  const done = yield* sse.translate<NativeEvent>((event, out) => {
    const answers: AnswerEvent[] = [];
    translator.translate(event, answers);
    let name = event.event;
    let data = event.data;
    if (name === undefined || name === 'message_start' || data.includes('\n')) {
      // Rewritten (rarely: once per stream, or an event whose JSON spans lines, which one `data:` line cannot carry).
      const parsed = JSON.parse(data) as { type?: unknown; message?: Record<string, unknown> };
      if (typeof parsed !== 'object' || parsed === null || typeof parsed.type !== 'string') throw malformedResponse();
      name ??= parsed.type;
      if (parsed.type === 'message_start' && parsed.message) parsed.message.model = job.model;
      data = JSON.stringify(parsed);
    }
    out.push({ name, data, answers });
    return translator.done;
  });
  if (!done) throw streamEndedEarly();
}

/** `POST /v1/messages/count_tokens` at Anthropic: its answer (`{"input_tokens": N}`) as its JSON text. */
export async function countNativeTokens(job: MessagesJob, ctx: CallContext): Promise<string> {
  // The job's request went through the Messages schema with a placeholder `max_tokens`; counting takes none.
  const { max_tokens: _max, stream: _stream, ...fields } = job.anthropic;
  const body = JSON.stringify({ ...fields, model: ctx.upstreamModel });
  const { json } = await postJson(
    ctx,
    withBetas(vendorRequest(anthropicApi, ctx, `${anthropicApi.paths.messages}/count_tokens`, body), job.betas),
    mapAnthropicError,
  );
  if (typeof json.input_tokens !== 'number') throw malformedResponse();
  return JSON.stringify({ input_tokens: json.input_tokens });
}
