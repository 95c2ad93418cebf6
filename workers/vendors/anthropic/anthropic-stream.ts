import type { AnswerEvent, FinishReason } from '../../answers/events.js';
import { malformedResponse, vendorRequest } from '../http.js';
import { postSse, streamEndedEarly } from '../sse-body.js';
import type { SseEvent } from '../sse-parser.js';
import type { CallContext } from '../types.js';
import { inlineVendorError } from '../vendor-errors.js';
import type { AnthropicRequestBody } from './anthropic-types.js';
import { anthropicApi } from './api.js';
import { convertAnthropicUsage, emptyUsageCounts, readAnthropicUsage } from './convert-anthropic-usage.js';
import { mapAnthropicError, mapAnthropicStreamError } from './map-anthropic-error.js';
import { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';

/** The fields of Anthropic stream events that are read; everything else is ignored. */
interface StreamPayload {
  type?: unknown;
  message?: { id?: unknown; usage?: unknown } | null;
  index?: unknown;
  content_block?: { type?: unknown; id?: unknown; name?: unknown; text?: unknown; thinking?: unknown } | null;
  delta?: { type?: unknown; text?: unknown; thinking?: unknown; partial_json?: unknown; stop_reason?: unknown } | null;
  usage?: unknown;
}

interface ToolBlock {
  /** The answer's tool-call index: counts tool blocks only, unlike Anthropic's block index. */
  index: number;
  sawArguments: boolean;
}

/** Anthropic answers with one message: everything is choice 0. */
const CHOICE = 0;

/**
 * Translates Anthropic stream events into answer events, one SSE event at a
 * time. The legacy `functions` shape (one call, `function_call`) is the
 * encoder's job; this reports every tool block as Anthropic sent it.
 */
export class AnthropicStreamTranslator {
  /** `message_stop` arrived: the answer is complete. */
  done = false;
  private started = false;
  private finished = false;
  private toolCount = 0;
  private readonly toolBlocks = new Map<number, ToolBlock>();
  private readonly counts = emptyUsageCounts();
  private readonly secrets: readonly string[];

  constructor(private readonly ctx: CallContext) {
    this.secrets = [ctx.channel.apiKey];
  }

  /** Appends the answer events one SSE event produces (often none) to `out`. */
  translate(event: SseEvent, out: AnswerEvent[]): void {
    let payload: StreamPayload;
    try {
      payload = JSON.parse(event.data) as StreamPayload;
    } catch (error) {
      if (event.event === 'error') throw inlineVendorError(event.data, this.secrets);
      throw malformedResponse(error);
    }
    if (typeof payload !== 'object' || payload === null) throw malformedResponse();

    switch (payload.type) {
      case 'message_start':
        this.start(payload, out);
        return;
      case 'content_block_start':
        this.startBlock(payload, out);
        return;
      case 'content_block_delta':
        this.delta(payload, out);
        return;
      case 'content_block_stop': {
        const tool = this.toolBlocks.get(payload.index as number);
        if (tool === undefined) return;
        this.toolBlocks.delete(payload.index as number);
        // A tool called without arguments streams no JSON at all; OpenAI clients parse `arguments`.
        if (!tool.sawArguments) out.push({ type: 'tool-call', choice: CHOICE, index: tool.index, arguments: '{}' });
        return;
      }
      case 'message_delta':
        this.requireStart();
        readAnthropicUsage(payload.usage, this.counts);
        if (!this.finished) this.finish(mapAnthropicStopReason(payload.delta?.stop_reason), out);
        return;
      case 'message_stop':
        this.requireStart();
        if (!this.finished) this.finish('stop', out);
        out.push({ type: 'usage', usage: convertAnthropicUsage(this.counts) });
        this.done = true;
        return;
      case 'error':
        throw mapAnthropicStreamError(payload, this.secrets);
      default:
        // `ping`, and event types newer than this adapter.
        return;
    }
  }

  private start(payload: StreamPayload, out: AnswerEvent[]): void {
    const message = payload.message;
    if (typeof message !== 'object' || message === null) throw malformedResponse();
    readAnthropicUsage(message.usage, this.counts);
    this.started = true;
    const id = `chatcmpl-${typeof message.id === 'string' ? message.id : this.ctx.requestId}`;
    // No model: the client sees the model id it asked for, not the upstream one.
    out.push({ type: 'start', id, created: Math.floor(Date.now() / 1000) }, { type: 'role', choice: CHOICE });
  }

  private requireStart(): void {
    if (!this.started) throw malformedResponse();
  }

  private finish(reason: FinishReason, out: AnswerEvent[]): void {
    this.finished = true;
    out.push({ type: 'finish', choice: CHOICE, reason });
  }

  private startBlock(payload: StreamPayload, out: AnswerEvent[]): void {
    this.requireStart();
    const block = payload.content_block;
    if (block?.type === 'text') {
      if (typeof block.text === 'string' && block.text.length > 0)
        out.push({ type: 'text', choice: CHOICE, text: block.text });
      return;
    }
    if (block?.type === 'thinking') {
      if (typeof block.thinking === 'string' && block.thinking.length > 0)
        out.push({ type: 'reasoning', choice: CHOICE, text: block.thinking });
      return;
    }
    if (block?.type !== 'tool_use' || typeof block.id !== 'string' || typeof block.name !== 'string') return;
    const tool: ToolBlock = { index: this.toolCount, sawArguments: false };
    this.toolCount += 1;
    this.toolBlocks.set(payload.index as number, tool);
    out.push({ type: 'tool-call', choice: CHOICE, index: tool.index, id: block.id, name: block.name, arguments: '' });
  }

  private delta(payload: StreamPayload, out: AnswerEvent[]): void {
    this.requireStart();
    const delta = payload.delta;
    if (delta?.type === 'text_delta') {
      if (typeof delta.text === 'string' && delta.text.length > 0)
        out.push({ type: 'text', choice: CHOICE, text: delta.text });
      return;
    }
    if (delta?.type === 'thinking_delta') {
      // Visible reasoning: a dialect that shows it (Gemini's thought parts, a thinking block) writes it; chat has no
      // field for it.
      if (typeof delta.thinking === 'string' && delta.thinking.length > 0)
        out.push({ type: 'reasoning', choice: CHOICE, text: delta.thinking });
      return;
    }
    if (delta?.type !== 'input_json_delta') return; // signature and citation deltas have no form beyond Anthropic's own
    const tool = this.toolBlocks.get(payload.index as number);
    // The first piece is often empty: it would be an event that says nothing.
    if (tool === undefined || typeof delta.partial_json !== 'string' || delta.partial_json.length === 0) return;
    tool.sawArguments = true;
    out.push({ type: 'tool-call', choice: CHOICE, index: tool.index, arguments: delta.partial_json });
  }
}

/**
 * Streams a Messages API answer as answer events, one array per network read
 * (so the worker encodes and publishes once per read). The request is built
 * (`prepare`), sent, and its status checked on the first `next()`, so a
 * refused request throws before anything is yielded. A stream without
 * `message_stop` is incomplete.
 */
export async function* streamAnthropicMessage(
  prepare: () => AnthropicRequestBody,
  ctx: CallContext,
): AsyncGenerator<AnswerEvent[]> {
  const request = vendorRequest(anthropicApi, ctx, anthropicApi.paths.messages, JSON.stringify(prepare()));
  const sse = await postSse(ctx, request, mapAnthropicError, (payload, secrets) =>
    (payload as { type?: unknown } | null)?.type === 'error' ? mapAnthropicStreamError(payload, secrets) : null,
  );
  const translator = new AnthropicStreamTranslator(ctx);
  const done = yield* sse.translate<AnswerEvent>((event, out) => {
    translator.translate(event, out);
    return translator.done;
  });
  if (!done) throw streamEndedEarly();
}
