import { malformedResponse } from '../http.js';
import { rejectJsonStreamAnswer, SseBody, streamEndedEarly } from '../sse-body.js';
import type { SseEvent } from '../sse-parser.js';
import type { CallContext, StreamEvent } from '../types.js';
import { inlineVendorError } from '../vendor-errors.js';
import { postAnthropicMessages } from './api.js';
import type { AnthropicCall } from './build-anthropic-request.js';
import { convertAnthropicUsage, emptyUsageCounts, readAnthropicUsage } from './convert-anthropic-usage.js';
import { mapAnthropicStreamError, readAnthropicErrorResponse } from './map-anthropic-error.js';
import { mapAnthropicStopReason } from './map-anthropic-stop-reason.js';


const OPEN_CHOICE_END = ',"logprobs":null,"finish_reason":null}]}';

/** The fields of Anthropic stream events that are read; everything else is ignored. */
interface StreamPayload {
  type?: unknown;
  message?: { id?: unknown; usage?: unknown } | null;
  index?: unknown;
  content_block?: { type?: unknown; id?: unknown; name?: unknown; text?: unknown } | null;
  delta?: { type?: unknown; text?: unknown; partial_json?: unknown; stop_reason?: unknown } | null;
  usage?: unknown;
}

interface ToolBlock {
  /** The OpenAI tool-call index: counts tool blocks only, unlike Anthropic's block index. */
  index: number;
  sawArguments: boolean;
}

/**
 * Translates Anthropic stream events into OpenAI chunks, one event at a time.
 * Each chunk is written as JSON text around a prefix built once per stream,
 * so a text delta costs one `JSON.stringify` of its text.
 */
export class AnthropicStreamTranslator {
  /** `message_stop` arrived: the answer is complete. */
  done = false;
  private prefix = '';
  private usagePrefix = '';
  private finished = false;
  private toolCount = 0;
  private readonly toolBlocks = new Map<number, ToolBlock>();
  private readonly counts = emptyUsageCounts();
  private readonly secrets: readonly string[];

  constructor(
    private readonly ctx: CallContext,
    private readonly legacyFunctions: boolean,
  ) {
    this.secrets = [ctx.channel.apiKey];
  }

  /** Appends the chunks one SSE event produces (usually one, often none) to `out`. */
  translate(event: SseEvent, out: StreamEvent[]): void {
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
        this.start(payload);
        out.push({ data: this.chunk('{"role":"assistant","content":""}') });
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
        if (!tool.sawArguments) this.pushArguments(tool, '{}', out);
        return;
      }
      case 'message_delta':
        this.requireStart();
        readAnthropicUsage(payload.usage, this.counts);
        if (!this.finished) this.finish(mapAnthropicStopReason(payload.delta?.stop_reason, this.legacyFunctions), out);
        return;
      case 'message_stop': {
        this.requireStart();
        if (!this.finished) this.finish('stop', out);
        const usage = convertAnthropicUsage(this.counts);
        out.push({ data: `${this.usagePrefix}${JSON.stringify(usage)}}`, usage, usageOnly: true });
        this.done = true;
        return;
      }
      case 'error':
        throw mapAnthropicStreamError(payload, this.secrets);
      default:
        // `ping`, and event types newer than this adapter.
        return;
    }
  }

  private start(payload: StreamPayload): void {
    const message = payload.message;
    if (typeof message !== 'object' || message === null) throw malformedResponse();
    readAnthropicUsage(message.usage, this.counts);
    const id = `chatcmpl-${typeof message.id === 'string' ? message.id : this.ctx.requestId}`;
    const head = `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(this.ctx.model.id)}`;
    this.prefix = `${head},"choices":[{"index":0,"delta":`;
    this.usagePrefix = `${head},"choices":[],"usage":`;
  }

  private requireStart(): void {
    if (this.prefix === '') throw malformedResponse();
  }

  private chunk(delta: string): string {
    return `${this.prefix}${delta}${OPEN_CHOICE_END}`;
  }

  private finish(reason: string, out: StreamEvent[]): void {
    this.finished = true;
    out.push({ data: `${this.prefix}{},"logprobs":null,"finish_reason":"${reason}"}]}` });
  }

  private startBlock(payload: StreamPayload, out: StreamEvent[]): void {
    this.requireStart();
    const block = payload.content_block;
    if (block?.type === 'text') {
      if (typeof block.text === 'string' && block.text.length > 0) out.push({ data: this.chunk(`{"content":${JSON.stringify(block.text)}}`) });
      return;
    }
    if (block?.type !== 'tool_use' || typeof block.id !== 'string' || typeof block.name !== 'string') return;
    const tool: ToolBlock = { index: this.toolCount, sawArguments: false };
    this.toolCount += 1;
    // A legacy `functions` client can take one call; parallel use was turned off in the request.
    if (this.legacyFunctions && tool.index > 0) return;
    this.toolBlocks.set(payload.index as number, tool);
    const name = JSON.stringify(block.name);
    out.push({
      data: this.chunk(
        this.legacyFunctions
          ? `{"function_call":{"name":${name},"arguments":""}}`
          : `{"tool_calls":[{"index":${tool.index},"id":${JSON.stringify(block.id)},"type":"function","function":{"name":${name},"arguments":""}}]}`,
      ),
    });
  }

  private delta(payload: StreamPayload, out: StreamEvent[]): void {
    this.requireStart();
    const delta = payload.delta;
    if (delta?.type === 'text_delta') {
      if (typeof delta.text === 'string' && delta.text.length > 0) out.push({ data: this.chunk(`{"content":${JSON.stringify(delta.text)}}`) });
      return;
    }
    if (delta?.type !== 'input_json_delta') return; // thinking, signature and citation deltas have no OpenAI form
    const tool = this.toolBlocks.get(payload.index as number);
    // The first piece is often empty: it would be a chunk that says nothing.
    if (tool === undefined || typeof delta.partial_json !== 'string' || delta.partial_json.length === 0) return;
    tool.sawArguments = true;
    this.pushArguments(tool, delta.partial_json, out);
  }

  private pushArguments(tool: ToolBlock, text: string, out: StreamEvent[]): void {
    const args = JSON.stringify(text);
    out.push({
      data: this.chunk(
        this.legacyFunctions
          ? `{"function_call":{"arguments":${args}}}`
          : `{"tool_calls":[{"index":${tool.index},"function":{"arguments":${args}}}]}`,
      ),
    });
  }
}



/**
 * Streams a Messages API answer as OpenAI chunks. The request is built
 * (`prepare`), sent, and its status checked on the first `next()`, so a
 * refused request throws before anything is yielded. A stream without
 * `message_stop` is incomplete.
 */
export async function* streamAnthropicMessage(prepare: () => AnthropicCall, ctx: CallContext): AsyncGenerator<StreamEvent> {
  const { body, legacyFunctions } = prepare();
  const response = await postAnthropicMessages(JSON.stringify(body), ctx, 'text/event-stream');
  if (response.status < 200 || response.status >= 300) throw await readAnthropicErrorResponse(response, ctx);
  await rejectJsonStreamAnswer(response, ctx, (payload, secrets) =>
    (payload as { type?: unknown } | null)?.type === 'error' ? mapAnthropicStreamError(payload, secrets) : null,
  );

  const translator = new AnthropicStreamTranslator(ctx, legacyFunctions);
  const sse = new SseBody(response, ctx);
  const out: StreamEvent[] = [];
  try {
    for await (const events of sse.batches()) {
      for (const event of events) {
        out.length = 0;
        translator.translate(event, out);
        for (const chunk of out) yield chunk;
        if (translator.done) break;
      }
      if (translator.done) break;
    }
    if (!translator.done) throw streamEndedEarly();
    sse.finish();
  } finally {
    sse.close();
  }
}
