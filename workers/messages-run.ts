import type { MessagesJob } from '../shared/messages.js';
import { toolNamesBack } from '../shared/messages-tools.js';
import { sseFrame } from '../shared/sse.js';
import { countChatPromptTokensAsync } from '../shared/tokens.js';
import { adapters, adapterMethod } from './vendors/registry.js';
import type { Protocol } from '../shared/vendor-definitions.js';
import { MessagesStreamEncoder } from './answers/messages-encoder.js';
import { AnthropicEventFold } from './answers/messages-fold.js';
import type { CallContext, NativeEvent } from './vendors/types.js';
import type { AnswerEvent } from './answers/events.js';
import { storedEvents } from './answers/answer-forms.js';
import { answerJob, RelayEncoder, relayedAnswer, type StreamedJob } from './answers/stream-run.js';

/**
 * One `/v1/messages` job. A vendor that speaks the Messages API itself
 * (Anthropic) gets the client's request as written and its events are
 * relayed as they come; every other vendor's chat adapter runs on the
 * request's chat form, and its answer events are written as Anthropic's.
 * Either way the stream runs through the one stream runner
 * (`workers/answers/stream-run.ts`), published frame by frame (numbered, so
 * it can be resumed) when the client streams, else folded into the one
 * message body. What the answer used goes to `produced`, for billing exactly
 * as a chat completion's.
 */
export async function runMessages(
  run: StreamedJob<MessagesJob>,
  loop?: AsyncIterable<AnswerEvent[]>,
): Promise<string | undefined> {
  const { protocol, job, ctx, clientStreams, keep = false } = run;
  const native = adapters[protocol].nativeMessages;
  // A request with MCP servers runs the gateway's tool loop on the chat form, whoever the vendor is.
  if (native && !loop) {
    const relay = relayAnthropic(clientStreams, keep);
    return answerJob(run, {
      source: native.call(adapters[protocol], job, ctx),
      settle: (meter) => {
        // The translator names its chat form of the answer `chatcmpl-<message id>`; the client got the message's own.
        if (meter.answerId !== undefined) meter.answerId = meter.answerId.replace(/^chatcmpl-/, '');
      },
      ...relayedAnswer(relay),
    });
  }
  const encoder = new MessagesStreamEncoder({
    model: job.model,
    inputTokens: job.inputTokens,
    toolNames: toolNamesBack(job.anthropic.tools),
  });
  let body: string | undefined;
  return answerJob(run, {
    source: loop ?? adapterMethod(protocol, 'streamChat')(job.chat, ctx),
    encoder,
    settle: (meter) => {
      // The request log names the answer by the message's id, as the client got it.
      meter.answerId = encoder.messageId;
    },
    // The message is whole once the encoder ended: written once, for the client and the cache alike.
    body: () => (body ??= JSON.stringify(encoder.message())),
    // The cache replays the frames the client was sent.
    keepsFrames: true,
    events: storedEvents,
  });
}

/**
 * Anthropic's own events, relayed as they came: each written as a numbered frame for a client that streams,
 * folded into the message for one that does not (and for the cache), and kept as it was for the cache's replay.
 */
function relayAnthropic(clientStreams: boolean, keep: boolean): RelayEncoder<NativeEvent> {
  const fold = clientStreams && !keep ? undefined : new AnthropicEventFold();
  return new RelayEncoder<NativeEvent>({
    frame: clientStreams ? (event, n) => sseFrame(event.data, event.name, n) : undefined,
    fold: fold && ((event) => fold.add(event.name, JSON.parse(event.data))),
    body: fold && (() => JSON.stringify(fold.message())),
    keep: keep ? (event) => ({ e: event.name, d: event.data }) : undefined,
  });
}

/**
 * `/v1/messages/count_tokens`: the vendor's own count where it has one (Anthropic), else the gateway's tokenizer on the
 * chat form.
 */
export async function countMessageTokens(protocol: Protocol, job: MessagesJob, ctx: CallContext): Promise<string> {
  const count = adapters[protocol].countMessageTokens;
  if (count) return count.call(adapters[protocol], job, ctx);
  return JSON.stringify({ input_tokens: await countChatPromptTokensAsync(job.chat.messages, job.chat.tools ?? null) });
}
