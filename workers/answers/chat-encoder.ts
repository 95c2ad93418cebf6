import type { ChatCompletionRequest } from '../../shared/schemas/chat.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { sseFrame } from '../../shared/sse.js';
import type { Answer, AnswerEvent, FinishReason, ToolCallEvent, Usage } from './events.js';
import { noFrames, type EncodedFrames, type StreamEncoder } from './stream-run.js';

export type { EncodedFrames } from './stream-run.js';

/** Which OpenAI wire form an encoder writes: chat completions, or legacy text completions. */
export type ChatWireForm = 'chat.completion' | 'text_completion';

export interface ChatEncoderOptions {
  form: ChatWireForm;
  /** The model id the client asked for: the answer's `model` unless the vendor named one. */
  model: string;
  /** `stream_options.include_usage`: the trailing usage chunk is sent only then (it is always read, for billing). */
  includeUsage: boolean;
  /** The client used the deprecated `functions`: one `function_call` instead of `tool_calls`. */
  legacyFunctions: boolean;
  /**
   * The tier that served the answer (`shared/scheduling/served-tier.ts`): a chat completion and each of its chunks say
   * it as `service_tier`, in place of the vendor's own word (a text completion has no such field).
   */
  serviceTier: ServiceTier;
  /**
   * Where the vendor's answer decides the tier (a vendor that sells tiers): the tier served, given what the
   * stream's first chunk says (its `start` event's `serviceTier`). A stream's chunks then all say that tier.
   */
  answeredTier?: (said: string | undefined) => ServiceTier;
}

/**
 * The client used the deprecated `functions` (and no `tools`): it expects
 * one `function_call` and `finish_reason: "function_call"` back.
 */
export function usesLegacyFunctions(request: ChatCompletionRequest): boolean {
  return (
    request.functions != null && request.functions.length > 0 && !(request.tools != null && request.tools.length > 0)
  );
}

const OPEN = ',"logprobs":null,"finish_reason":null}]}';

const TIER_KEY = '"service_tier":';

/**
 * A vendor's chat body or chunk (JSON text) saying `tier` as its
 * `service_tier`: the vendor's own value is replaced (it names the vendor's
 * tier, or null), or the field is added at the end. The text is not parsed
 * again: outside string values, where a quote is always escaped, the key can
 * only be the top-level field (a chat chunk has no nested `service_tier`).
 */
export function withServiceTier(json: string, tier: ServiceTier): string {
  const value = `"${tier}"`;
  const at = json.indexOf(TIER_KEY);
  if (at !== -1) {
    const start = at + TIER_KEY.length;
    const match = /^\s*(null|"[^"\\]*")/.exec(json.slice(start, start + 64));
    if (match) return json.slice(0, start) + value + json.slice(start + match[0].length);
  }
  const end = json.lastIndexOf('}');
  if (end === -1) return json;
  const empty = json.slice(0, end).trimEnd().endsWith('{');
  return `${json.slice(0, end)}${empty ? '' : ','}${TIER_KEY}${value}${json.slice(end)}`;
}

function finishReasonFor(reason: FinishReason, legacyFunctions: boolean): FinishReason {
  return legacyFunctions && reason === 'tool_calls' ? 'function_call' : reason;
}

/**
 * Writes answer events as SSE frames in the chat-completion (or text-completion)
 * chunk form (the stream runner's encoder for chat, workers/answers/stream-run.ts). Each chunk is JSON text around an
 * envelope built once, on the `start` event, so a text delta costs one `JSON.stringify` of its text. A
 * vendor chunk that already is this form (`wire`) is sent untouched. Every
 * frame carries an `id:` line (0, 1, 2, …): a client that lost its connection
 * resumes after the last one it saw (`Last-Event-ID`).
 */
export class ChatStreamEncoder implements StreamEncoder {
  /** The answer's usage, once the vendor reported it. */
  usage: Usage | undefined;
  /** The answer's own id (the `start` event's), once known. */
  answerId: string | undefined;
  private head = '';
  private nextId = 0;
  private tier: ServiceTier;
  private heardTier = false;

  constructor(private readonly options: ChatEncoderOptions) {
    this.tier = options.serviceTier;
  }

  /**
   * The tier the chunks say served the answer: `serviceTier`, or from the first chunk's word (`answeredTier`) once it
   * came.
   */
  get serviceTier(): ServiceTier {
    return this.tier;
  }

  /** The SSE frames of one batch of events ('' when they say nothing the client gets). */
  encode(events: readonly AnswerEvent[]): EncodedFrames {
    let frames = '';
    const first = this.nextId;
    for (const event of events) {
      if (event.type === 'usage') this.usage = event.usage;
      else if (event.type === 'start') {
        this.answerId = event.id;
        // Before any chunk is written: the start event comes first, carried by (or before) the first chunk.
        if (this.options.answeredTier && !this.heardTier) {
          this.heardTier = true;
          this.tier = this.options.answeredTier(event.serviceTier);
        }
      }
      if (event.wire !== undefined) {
        if (event.wire !== '' && (event.type !== 'usage' || this.options.includeUsage))
          frames += sseFrame(this.stamped(event.wire), undefined, this.nextId++);
        continue;
      }
      const chunk = this.chunkOf(event);
      if (chunk !== undefined) frames += sseFrame(chunk, undefined, this.nextId++);
    }
    return { frames, count: this.nextId - first };
  }

  /** Nothing: a chat stream is ended by its trailer (`data: [DONE]`), which the publisher writes. */
  end(): EncodedFrames {
    return noFrames;
  }

  /** A vendor's own chunk with the serving tier (chat chunks only). */
  private stamped(wire: string): string {
    return this.options.form === 'chat.completion' ? withServiceTier(wire, this.tier) : wire;
  }

  private chunkOf(event: AnswerEvent): string | undefined {
    const { form, legacyFunctions } = this.options;
    switch (event.type) {
      case 'start': {
        const model = JSON.stringify(event.model ?? this.options.model);
        const fingerprint =
          event.systemFingerprint === undefined
            ? ''
            : `,"system_fingerprint":${JSON.stringify(event.systemFingerprint)}`;
        const tier = form === 'chat.completion' ? `,${TIER_KEY}"${this.tier}"` : '';
        this.head = `{"id":${JSON.stringify(event.id)},"object":"${form === 'chat.completion' ? 'chat.completion.chunk' : 'text_completion'}","created":${event.created},"model":${model}${tier}${fingerprint}`;
        return undefined;
      }
      case 'usage':
        return this.options.includeUsage
          ? `${this.requireHead()},"choices":[],"usage":${JSON.stringify(event.usage)}}`
          : undefined;
      case 'role':
        return form === 'chat.completion' ? this.delta(event.choice, '{"role":"assistant","content":""}') : undefined;
      case 'reasoning':
        // Chat has no standard field for it: only a vendor's own chunk (`wire`, sent above) carries it.
        return undefined;
      case 'text':
        if (form === 'text_completion')
          return `${this.requireHead()},"choices":[{"text":${JSON.stringify(event.text)},"index":${event.choice}${OPEN}`;
        return this.delta(event.choice, `{"content":${JSON.stringify(event.text)}}`);
      case 'tool-call':
        if (form !== 'chat.completion' || (legacyFunctions && event.index > 0)) return undefined;
        return this.delta(event.choice, legacyFunctions ? functionCallDelta(event) : toolCallDelta(event));
      case 'finish': {
        const reason = finishReasonFor(event.reason, legacyFunctions);
        if (form === 'text_completion')
          return `${this.requireHead()},"choices":[{"text":"","index":${event.choice},"logprobs":null,"finish_reason":"${reason}"}]}`;
        return `${this.requireHead()},"choices":[{"index":${event.choice},"delta":{},"logprobs":null,"finish_reason":"${reason}"}]}`;
      }
    }
  }

  private delta(choice: number, delta: string): string {
    return `${this.requireHead()},"choices":[{"index":${choice},"delta":${delta}${OPEN}`;
  }

  private requireHead(): string {
    // Adapters send `start` first; an answer without one is an adapter bug, not a vendor's.
    if (this.head === '') throw new Error('answer event before the start event');
    return this.head;
  }
}

function toolCallDelta(event: ToolCallEvent): string {
  const args = JSON.stringify(event.arguments);
  if (event.name === undefined) return `{"tool_calls":[{"index":${event.index},"function":{"arguments":${args}}}]}`;
  return `{"tool_calls":[{"index":${event.index},"id":${JSON.stringify(event.id ?? '')},"type":"function","function":{"name":${JSON.stringify(event.name)},"arguments":${args}}}]}`;
}

function functionCallDelta(event: ToolCallEvent): string {
  const args = JSON.stringify(event.arguments);
  if (event.name === undefined) return `{"function_call":{"arguments":${args}}}`;
  return `{"function_call":{"name":${JSON.stringify(event.name)},"arguments":${args}}}`;
}

/**
 * The tier a plain answer says served it: `serviceTier`, or, where the answer decides (`answeredTier`), from what its
 * body says.
 */
export function answerTier(
  answer: Pick<Answer, 'serviceTier'>,
  options: Pick<ChatEncoderOptions, 'serviceTier' | 'answeredTier'>,
): ServiceTier {
  return options.answeredTier ? options.answeredTier(answer.serviceTier) : options.serviceTier;
}

/**
 * A plain answer as the body of `chat.completion` (or `text_completion`); the vendor's own body when it already is
 * that.
 */
export function encodeChatAnswer(answer: Answer, options: Omit<ChatEncoderOptions, 'includeUsage'>): string {
  const { form, legacyFunctions } = options;
  const tier = answerTier(answer, options);
  if (answer.wire !== undefined) return form === 'chat.completion' ? withServiceTier(answer.wire, tier) : answer.wire;
  const choices = answer.choices.map((choice) => {
    const finish_reason = finishReasonFor(choice.finishReason, legacyFunctions);
    if (form === 'text_completion')
      return { text: choice.text ?? '', index: choice.index, logprobs: null, finish_reason };
    const message: Record<string, unknown> = { role: 'assistant', content: choice.text, refusal: null };
    if (choice.toolCalls.length > 0) {
      const calls = choice.toolCalls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: call.arguments },
      }));
      if (legacyFunctions) message.function_call = calls[0]!.function;
      else message.tool_calls = calls;
    }
    return { index: choice.index, message, logprobs: null, finish_reason };
  });
  const body: Record<string, unknown> = {
    id: answer.id,
    object: form,
    created: answer.created,
    model: answer.model ?? options.model,
    ...(form === 'chat.completion' ? { service_tier: tier } : {}),
    choices,
  };
  if (answer.usage !== undefined) body.usage = answer.usage;
  if (answer.systemFingerprint !== undefined) body.system_fingerprint = answer.systemFingerprint;
  return JSON.stringify(body);
}
