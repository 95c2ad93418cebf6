import type { MessagesJob } from '../shared/messages.js';
import { toolNamesBack } from '../shared/messages-tools.js';
import { countChatPromptTokensAsync } from '../shared/tokens.js';
import { adapters, adapterMethod } from './vendors/registry.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { MessagesStreamEncoder } from './answers/messages-encoder.js';
import { AnthropicEventFold } from './answers/messages-fold.js';
import type { ReplyPublisher } from './reply-publisher.js';
import type { Meter } from './settlement.js';
import { meterEvents } from './text-pipeline.js';
import type { CallContext } from './vendors/types.js';
import { storedEvents } from './answers/answer-forms.js';

/**
 * One `/v1/messages` job. A vendor that speaks the Messages API itself
 * (Anthropic) gets the client's request as written and its events are
 * relayed as they come; every other vendor's chat adapter runs on the
 * request's chat form, and its answer events are written as Anthropic's.
 * Either way the stream is published frame by frame (numbered, so it can be
 * resumed) when the client streams, else folded into the one message body.
 * What the answer used goes to `produced`, for billing exactly as a chat
 * completion's.
 */
export async function runMessages(
  protocol: Protocol,
  job: MessagesJob,
  ctx: CallContext,
  publisher: ReplyPublisher,
  clientStreams: boolean,
  produced: Meter,
  vendorDone: () => Promise<unknown>,
  /** Keep the answer's forms for the response cache (`produced.cacheable`) once it ended well. */
  keep = false,
  /** Stores them before a stream's end goes out, so the client's next identical request finds them. */
  beforeEnd?: () => Promise<void>,
): Promise<string | undefined> {
  const native = adapters[protocol].nativeMessages;
  if (native) return relayNative(native.bind(adapters[protocol]), job, ctx, publisher, clientStreams, produced, vendorDone, keep, beforeEnd);
  const encoder = new MessagesStreamEncoder({ model: job.model, inputTokens: job.inputTokens, toolNames: toolNamesBack(job.anthropic.tools) });
  let kept = '';
  try {
    for await (const events of adapterMethod(protocol, 'streamChat')(job.chat, ctx)) {
      const { frames, count } = encoder.encode(events);
      if (clientStreams && count > 0) publisher.chunk(frames, count);
      if (keep) kept += frames;
      meterEvents(events, produced);
    }
  } finally {
    produced.usage = encoder.usage;
    // The request log names the answer by the message's id, as the client got it.
    produced.answerId = encoder.message().id;
  }
  await vendorDone();
  const end = encoder.end();
  const body = JSON.stringify(encoder.message());
  if (keep) produced.cacheable = { body, events: storedEvents(kept + end.frames) };
  if (!clientStreams) return body;
  if (keep) await beforeEnd?.();
  publisher.chunk(end.frames, end.count);
  await publisher.endStream('');
  return undefined;
}

async function relayNative(
  native: NonNullable<(typeof adapters)[Protocol]['nativeMessages']>,
  job: MessagesJob,
  ctx: CallContext,
  publisher: ReplyPublisher,
  clientStreams: boolean,
  produced: Meter,
  vendorDone: () => Promise<unknown>,
  keep: boolean,
  beforeEnd: (() => Promise<void>) | undefined,
): Promise<string | undefined> {
  const fold = clientStreams && !keep ? undefined : new AnthropicEventFold();
  const kept: Array<{ e: string; d: string }> = [];
  let frameId = 0;
  let usage: Meter['usage'];
  try {
    for await (const batch of native(job, ctx)) {
      let frames = '';
      const first = frameId;
      for (const event of batch) {
        for (const answer of event.answers) if (answer.type === 'usage') usage = answer.usage;
        meterEvents(event.answers, produced);
        if (fold) fold.add(event.name, JSON.parse(event.data));
        if (keep) kept.push({ e: event.name, d: event.data });
        if (clientStreams) frames += `id: ${frameId++}\nevent: ${event.name}\ndata: ${event.data}\n\n`;
      }
      if (frames !== '') publisher.chunk(frames, frameId - first);
    }
  } finally {
    produced.usage = usage;
    // The translator names its chat form of the answer `chatcmpl-<message id>`; the client got the message's own.
    if (produced.answerId !== undefined) produced.answerId = produced.answerId.replace(/^chatcmpl-/, '');
  }
  await vendorDone();
  const body = fold ? JSON.stringify(fold.message()) : '';
  if (keep) produced.cacheable = { body, events: kept };
  if (!clientStreams) return body;
  if (keep) await beforeEnd?.();
  await publisher.endStream('');
  return undefined;
}

/** `/v1/messages/count_tokens`: the vendor's own count where it has one (Anthropic), else the gateway's tokenizer on the chat form. */
export async function countMessageTokens(protocol: Protocol, job: MessagesJob, ctx: CallContext): Promise<string> {
  const count = adapters[protocol].countMessageTokens;
  if (count) return count.call(adapters[protocol], job, ctx);
  return JSON.stringify({ input_tokens: await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null) });
}
