import { sseFrame } from '../../shared/sse.js';
import type { AnswerEvent, FinishReason, ToolCallEvent, Usage } from './events.js';
import type { EncodedFrames, StreamEncoder } from './stream-run.js';
import {
  toolInput,
  type AnthropicContentBlock,
  type AnthropicMessage,
  type AnthropicStopReason,
} from './messages-fold.js';

export {
  AnthropicEventFold,
  toolInput,
  type AnthropicContentBlock,
  type AnthropicMessage,
  type AnthropicStopReason,
  type AnthropicUsage,
} from './messages-fold.js';

/**
 * Anthropic's Messages API (`/v1/messages`) over the answer event model: a
 * chat vendor's answer written as Anthropic's stream events (`message_start`
 * … `message_stop`), and the message object they describe, for a client that
 * asked for no stream. The sibling of `chat-encoder.ts` and
 * `responses-encoder.ts`; a vendor's own chat chunk (`wire`) means nothing
 * here. A model served by Anthropic does not come through this encoder: its
 * events are relayed as sent (`AnthropicEventFold` builds their message).
 */

export interface MessagesEncoderOptions {
  /** The model name the answer says: the one the client asked for. */
  model: string;
  /**
   * The prompt's tokens as the gateway counted them: `message_start` says them, as chat vendors tell theirs only at the
   * end.
   */
  inputTokens: number;
  /** Chat tool name → the client's name, for the names the api had to shorten; a name not here is the client's own. */
  toolNames?: ReadonlyMap<string, string>;
}

/** The counts `message_delta` and the message's `usage` say. */
interface MessageCounts {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

interface TextBlock {
  /**
   * `thinking`: a vendor's visible reasoning, as Anthropic's thinking block (unsigned: only Anthropic signs its own).
   */
  kind: 'text' | 'thinking';
  index: number;
  pieces: string[];
  /** The JSON of a text delta up to its text, built once per block: a delta then costs one stringify of its text. */
  deltaHead: string;
}

interface ToolBlock {
  kind: 'tool';
  /** The answer's tool-call index. */
  call: number;
  /** Anthropic's block index once the block was started, -1 while it waits. */
  index: number;
  id: string;
  /** The client's name for the tool. */
  name: string;
  pieces: string[];
  state: 'waiting' | 'open' | 'closed';
}

/**
 * A block of the gateway's tool loop, written whole: a call of a server's tool (`mcp_tool_use`) or its result
 * (`mcp_tool_result`).
 */
interface McpBlock {
  kind: 'mcp';
  index: number;
  block: AnthropicContentBlock;
}

type Block = TextBlock | ToolBlock | McpBlock;

/** The loop's call id in Anthropic's form for an MCP tool use (`mcptoolu_…`). */
const mcpUseId = (id: string) => `mcptoolu_${id.replace(/^mcp_/, '')}`;

/** Anthropic answers with one message: only choice 0 is read. */
const CHOICE = 0;

const PING = '{"type":"ping"}';

/** The keep-alive frame: no `id:` line (see `ping()`). */
const PING_FRAME = sseFrame(PING, 'ping');

function stopReasonOf(reason: FinishReason, calledTools: boolean): AnthropicStopReason {
  switch (reason) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
    case 'function_call':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    case 'stop':
      // A chat vendor says `stop` for calls the request forced (OpenAI does, for a named tool_choice); Anthropic
      // says `tool_use` whenever its answer ends in calls, and clients run the tools on that word.
      // Which stop sequence ended an answer is not in chat's answer: `stop_sequence` is never said.
      return calledTools ? 'tool_use' : 'end_turn';
  }
}

/** A count from a usage object, or 0 where it says none. */
function tokens(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0;
}

/**
 * Chat usage in Anthropic's terms: chat's prompt tokens include the cached
 * ones, Anthropic's `input_tokens` leave out both the cache reads and the
 * cache writes, which it counts apart.
 */
export function anthropicCounts(usage: Usage): MessageCounts {
  const details =
    typeof usage.prompt_tokens_details === 'object' && usage.prompt_tokens_details !== null
      ? (usage.prompt_tokens_details as Record<string, unknown>)
      : {};
  const cacheRead = tokens(details.cached_tokens);
  const cacheWrite = tokens(details.cache_write_tokens);
  return {
    input_tokens: Math.max(0, tokens(usage.prompt_tokens) - cacheRead - cacheWrite),
    output_tokens: tokens(usage.completion_tokens),
    cache_creation_input_tokens: cacheWrite,
    cache_read_input_tokens: cacheRead,
  };
}

/**
 * The message id a client sees: Anthropic's form (`msg_…`), made from the vendor's id so a retried encode says the
 * same.
 */
export function messageIdOf(vendorId: string): string {
  return vendorId.startsWith('msg_')
    ? vendorId
    : `msg_${vendorId.startsWith('chatcmpl-') ? vendorId.slice('chatcmpl-'.length) : vendorId}`;
}

/**
 * Writes answer events as Anthropic's stream events, and folds them into the
 * message object at the same time. Every frame is numbered (`id: 0`, `1`, …)
 * as the chat encoder's are, so a stream can be resumed after any of them.
 *
 * Anthropic's stream has one content block open at a time: started, given
 * deltas, stopped, never reopened. Chat vendors may interleave the pieces of
 * parallel tool calls, so a tool call does not always end when the next one
 * begins. The rule kept here: one tool call streams live; a call that begins
 * while it is open takes its place only if the open call's arguments are
 * already complete JSON (nothing valid can follow a complete JSON value, so
 * the open call cannot get more) and no other call is waiting. Otherwise the
 * new call waits, its pieces kept, and is written whole (start, all its
 * arguments in one delta, stop) once the open call closes, at the answer's
 * finish or when text comes. Calls sent in order (OpenAI) all stream live;
 * interleaved ones come out right, later calls arriving in one piece.
 */
export class MessagesStreamEncoder implements StreamEncoder {
  private vendorUsage: Usage | undefined;

  private id = '';
  private started = false;
  /** `message_stop` or `error` went out: the stream is over and nothing more is written. */
  private ended = false;
  private finished = false;
  private stopReason: AnthropicStopReason | null = null;
  /** The counts the message says: `message_start`'s until the vendor's usage came (or the stream ended without it). */
  private counts: MessageCounts;
  /** The blocks started, in Anthropic's index order (the calls still waiting are in `waiting`). */
  private readonly blocks: Block[] = [];
  private readonly tools = new Map<number, ToolBlock>();
  private readonly waiting: ToolBlock[] = [];
  private open: Block | null = null;
  private nextIndex = 0;
  /** The frames of one public call, and how many. */
  private frames = '';
  private count = 0;
  private nextFrame = 0;

  constructor(private readonly options: MessagesEncoderOptions) {
    this.counts = {
      input_tokens: options.inputTokens,
      output_tokens: 1,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    };
  }

  /** The vendor's usage (OpenAI-shaped, for billing), once the `usage` event came. */
  get usage(): Usage | undefined {
    return this.vendorUsage;
  }

  /** The message's id as the client got it (`msg_…`), once the stream started ('' before). */
  get messageId(): string {
    return this.id;
  }

  /** The SSE frames of one batch of events ('' when they say nothing the client gets). */
  encode(events: readonly AnswerEvent[]): EncodedFrames {
    if (!this.ended) for (const event of events) this.onEvent(event);
    return this.take();
  }

  /**
   * Ends a stream whose events stopped: closes the open block, writes the
   * calls still waiting, then `message_delta` and `message_stop` if the events
   * did not. A stream that never started writes nothing: there is no message
   * to end (the caller reports the failure with `fail`).
   */
  end(): EncodedFrames {
    if (this.ended || !this.started) return this.take();
    this.closeBlocks();
    // No finish: the answer stopped without a reason; Anthropic's ordinary word for a finished turn.
    this.stopReason ??= 'end_turn';
    this.finished = true;
    // No usage: the vendor never said what it produced. output_tokens stays 0 (not message_start's placeholder 1):
    // a count the gateway cannot vouch for is said as none, and `usage` stays undefined so billing counts on its own.
    if (this.vendorUsage === undefined) this.counts = { ...this.counts, output_tokens: 0 };
    this.stop();
    return this.take();
  }

  /**
   * Ends a stream that failed: Anthropic's `error` event, and nothing after it.
   * Open blocks stay unstopped, as Anthropic leaves them when its stream fails.
   */
  fail(error: { type: string; message: string }): EncodedFrames {
    if (this.ended) return this.take();
    this.ended = true;
    this.emit('error', JSON.stringify({ type: 'error', error: { type: error.type, message: error.message } }));
    return this.take();
  }

  /**
   * A keep-alive `ping`, to write while the vendor is silent. It has no `id:`
   * line: it is no part of the answer, and a client keeps the last id it saw,
   * so numbering and resumption are untouched by however many pings were sent.
   */
  ping(): string {
    return PING_FRAME;
  }

  /**
   * The message the events describe so far: after `end()`, the body a client
   * that asked for no stream gets, equal to what the stream's events fold to.
   * One difference is possible: pieces of a call's arguments that came after
   * its block was stopped (only a vendor that sends text in the middle of a
   * call's arguments causes that) cannot be sent in the stream, but are kept
   * here, so a plain answer still has the whole call. Calls still waiting
   * come last, as they would be written.
   */
  message(): AnthropicMessage {
    const content: AnthropicContentBlock[] = [...this.blocks, ...this.waiting].map((block) =>
      block.kind === 'mcp'
        ? block.block
        : block.kind === 'tool'
          ? { type: 'tool_use', id: block.id, name: block.name, input: toolInput(block.pieces.join('')) }
          : block.kind === 'thinking'
            ? { type: 'thinking', thinking: block.pieces.join(''), signature: '' }
            : { type: 'text', text: block.pieces.join('') },
    );
    return {
      id: this.id,
      type: 'message',
      role: 'assistant',
      model: this.options.model,
      content,
      stop_reason: this.finished ? this.stopReason : null,
      stop_sequence: null,
      usage: { ...this.counts, service_tier: 'standard' },
    };
  }

  private take(): EncodedFrames {
    const result = { frames: this.frames, count: this.count };
    this.frames = '';
    this.count = 0;
    return result;
  }

  private emit(type: string, json: string): void {
    this.frames += sseFrame(json, type, this.nextFrame++);
    this.count += 1;
  }

  private onEvent(event: AnswerEvent): void {
    switch (event.type) {
      case 'start':
        if (!this.started) this.begin(event.id);
        return;
      case 'role':
        return;
      case 'usage':
        this.vendorUsage = event.usage;
        this.counts = anthropicCounts(event.usage);
        // The adapters send usage after finish; should one send it first, the end waits for the finish (or `end()`).
        if (this.finished) this.stop();
        return;
      case 'text':
      case 'reasoning':
        if (event.choice !== CHOICE || event.text === '' || this.finished) return;
        this.requireStart();
        this.appendText(event.text, event.type === 'text' ? 'text' : 'thinking');
        return;
      case 'tool-call':
        if (event.choice !== CHOICE || this.finished) return;
        this.requireStart();
        this.onToolCall(event);
        return;
      case 'mcp-call': {
        if (this.finished) return;
        this.requireStart();
        const input = toolInput(event.arguments);
        // Started as a tool use is (its input streamed as JSON), so clients fold it the same way.
        const index = this.startMcp(
          { type: 'mcp_tool_use', id: mcpUseId(event.id), name: event.tool, server_name: event.server, input },
          { type: 'mcp_tool_use', id: mcpUseId(event.id), name: event.tool, server_name: event.server, input: {} },
        );
        if (event.arguments !== '')
          this.emit(
            'content_block_delta',
            `{"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(event.arguments)}}}`,
          );
        this.closeOpen();
        return;
      }
      case 'mcp-result': {
        if (this.finished) return;
        this.requireStart();
        const block = {
          type: 'mcp_tool_result',
          tool_use_id: mcpUseId(event.id),
          is_error: event.error !== undefined,
          content: [{ type: 'text', text: event.output }],
        };
        this.startMcp(block, block);
        this.closeOpen();
        return;
      }
      case 'mcp-list':
      case 'mcp-approval':
        // Anthropic's MCP connector lists nothing in the message and asks no approvals.
        return;
      case 'finish':
        if (event.choice !== CHOICE || this.finished) return;
        this.requireStart();
        this.closeBlocks();
        this.finished = true;
        this.stopReason = stopReasonOf(event.reason, this.tools.size > 0);
        if (this.vendorUsage !== undefined) this.stop();
        return;
    }
  }

  private begin(vendorId: string): void {
    this.started = true;
    this.id = messageIdOf(vendorId);
    const message = {
      id: this.id,
      type: 'message',
      role: 'assistant',
      model: this.options.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { ...this.counts, service_tier: 'standard' },
    };
    this.emit('message_start', JSON.stringify({ type: 'message_start', message }));
    // Anthropic pings right after message_start; clients written against it may count on seeing one.
    this.emit('ping', PING);
  }

  private requireStart(): void {
    // Adapters send `start` first; an answer without one is an adapter bug, not a vendor's.
    if (!this.started) throw new Error('answer event before the start event');
  }

  /** Text, or a vendor's reasoning as a thinking block: appended to the open block of its kind, else a new block. */
  private appendText(text: string, kind: 'text' | 'thinking'): void {
    let block = this.open;
    if (block === null || block.kind !== kind) {
      this.closeBlocks();
      const index = this.nextIndex++;
      const delta = kind === 'text' ? '"type":"text_delta","text":' : '"type":"thinking_delta","thinking":';
      block = {
        kind,
        index,
        pieces: [],
        deltaHead: `{"type":"content_block_delta","index":${index},"delta":{${delta}`,
      };
      this.blocks.push(block);
      this.open = block;
      const start = kind === 'text' ? '{"type":"text","text":""}' : '{"type":"thinking","thinking":"","signature":""}';
      this.emit('content_block_start', `{"type":"content_block_start","index":${index},"content_block":${start}}`);
    }
    block.pieces.push(text);
    // The hot path: the frame written around the text, one stringify.
    this.emit('content_block_delta', `${block.deltaHead}${JSON.stringify(text)}}}`);
  }

  private onToolCall(event: ToolCallEvent): void {
    const known = this.tools.get(event.index);
    if (known !== undefined) {
      // A later piece (a vendor that repeats the id or name on every piece is read the same way).
      if (event.arguments === '') return;
      known.pieces.push(event.arguments);
      // Sent only to the open block: a waiting call is written whole later, and a stopped one cannot take more
      // (its piece stays in the message; see `message()`).
      if (known.state === 'open') this.emitArguments(known, event.arguments);
      return;
    }
    const chatName = event.name ?? '';
    const tool: ToolBlock = {
      kind: 'tool',
      call: event.index,
      index: -1,
      // Anthropic's clients send the id back in their tool_result: it must not be empty, and the same on every encode.
      id: event.id !== undefined && event.id !== '' ? event.id : `toolu_${this.id.slice('msg_'.length)}_${event.index}`,
      name: this.options.toolNames?.get(chatName) ?? chatName,
      pieces: event.arguments === '' ? [] : [event.arguments],
      state: 'waiting',
    };
    this.tools.set(event.index, tool);
    const open = this.open;
    if (open !== null && open.kind === 'tool' && (this.waiting.length > 0 || !completeJson(open.pieces))) {
      this.waiting.push(tool);
      return;
    }
    this.closeBlocks();
    this.startTool(tool);
    if (event.arguments !== '') this.emitArguments(tool, event.arguments);
  }

  /**
   * Starts a block of the loop's (`whole`: as the message keeps it; `started`: as its start event says it); its index.
   */
  private startMcp(whole: AnthropicContentBlock, started: AnthropicContentBlock): number {
    this.closeBlocks();
    const block: McpBlock = { kind: 'mcp', index: this.nextIndex++, block: whole };
    this.blocks.push(block);
    this.open = block;
    this.emit(
      'content_block_start',
      JSON.stringify({ type: 'content_block_start', index: block.index, content_block: started }),
    );
    return block.index;
  }

  private startTool(tool: ToolBlock): void {
    tool.index = this.nextIndex++;
    tool.state = 'open';
    this.blocks.push(tool);
    this.open = tool;
    const block = { type: 'tool_use', id: tool.id, name: tool.name, input: {} };
    this.emit(
      'content_block_start',
      JSON.stringify({ type: 'content_block_start', index: tool.index, content_block: block }),
    );
  }

  private emitArguments(tool: ToolBlock, json: string): void {
    this.emit(
      'content_block_delta',
      `{"type":"content_block_delta","index":${tool.index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(json)}}}`,
    );
  }

  /** Stops the open block, then writes each waiting call whole, in the order the calls began. */
  private closeBlocks(): void {
    this.closeOpen();
    for (const tool of this.waiting.splice(0)) {
      this.startTool(tool);
      const args = tool.pieces.join('');
      if (args !== '') this.emitArguments(tool, args);
      this.closeOpen();
    }
  }

  private closeOpen(): void {
    const block = this.open;
    if (block === null) return;
    this.open = null;
    if (block.kind === 'tool') block.state = 'closed';
    this.emit('content_block_stop', `{"type":"content_block_stop","index":${block.index}}`);
  }

  /** `message_delta` with the stop reason and the counts, then `message_stop`: the end of the stream. */
  private stop(): void {
    this.ended = true;
    this.emit(
      'message_delta',
      JSON.stringify({
        type: 'message_delta',
        delta: { stop_reason: this.stopReason, stop_sequence: null },
        usage: this.counts,
      }),
    );
    this.emit('message_stop', '{"type":"message_stop"}');
  }
}

/** The pieces form one complete JSON value (an empty call may still be waiting for its arguments, so it is not). */
function completeJson(pieces: readonly string[]): boolean {
  const json = pieces.join('');
  if (json.trim() === '') return false;
  try {
    JSON.parse(json);
    return true;
  } catch {
    return false;
  }
}
