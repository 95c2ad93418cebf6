import { randomBytes } from 'node:crypto';
import type {
  Answer,
  AnswerEvent,
  FinishReason,
  McpCallEvent,
  McpResultEvent,
  ToolCallEvent,
  Usage,
} from './events.js';
import type { McpTool } from '../../shared/mcp/servers.js';
import type { ResponseError, ResponseShell, ResponseStatus } from '../../shared/responses.js';
import { clientToolName, namespacedTools, type NamespacedName } from '../../shared/responses-tools.js';
import type { ServiceTier } from '../../shared/scheduling/vocabulary.js';
import { sseFrame } from '../../shared/sse.js';
import type { EncodedFrames, StreamEncoder } from './stream-run.js';
import {
  CANCELLED,
  frame,
  functionCallItem,
  incompleteReasonOf,
  messageItem,
  nowSeconds,
  responseObject,
  responsesUsage,
  textPart,
  type IncompleteReason,
  type ResponseObject,
} from '../../shared/response-object.js';

const randomId = (prefix: string) => `${prefix}${randomBytes(12).toString('hex')}`;

export {
  replayFrames,
  responseObject,
  responsesUsage,
  type ResponseObject,
  type ResponsesUsage,
} from '../../shared/response-object.js';

/**
 * The OpenAI Responses API (`/v1/responses`) over the answer event model: the
 * stream's events (`response.created` … `response.completed`), the response
 * object they describe, and the same object for a plain answer. The sibling of
 * `chat-encoder.ts`; a vendor's own chat chunk (`wire`) means nothing here.
 */

interface OpenMessage {
  id: string;
  outputIndex: number;
  pieces: string[];
  /** The JSON between a text delta's sequence number and its text, built once per message. */
  deltaFields: string;
}

/** A call of the gateway's tool loop, said from the model's call of it to its result. */
interface OpenMcpCall {
  id: string;
  outputIndex: number;
  item: Record<string, unknown>;
}

/** A server's tool as an `mcp_list_tools` item lists it. */
function listedTool(tool: McpTool): Record<string, unknown> {
  return {
    name: tool.name,
    description: tool.description ?? null,
    input_schema: tool.inputSchema ?? { type: 'object', properties: {} },
    annotations: tool.annotations ?? null,
  };
}

interface OpenCall {
  index: number;
  id: string;
  outputIndex: number;
  callId: string;
  name: string;
  pieces: string[];
}

/**
 * An output_text delta's frame as the framer writes it, cut where its data goes: the hot path writes the data
 * between the two, in one concatenation with the JSON pieces built once per message.
 */
const [deltaHead, deltaTail] = sseFrame(
  '{"type":"response.output_text.delta","sequence_number":\u0000',
  'response.output_text.delta',
).split('\u0000') as [string, string];

/**
 * Writes answer events as Responses API stream events. Only one output item
 * is open at a time (a message, or a function call), so output indexes follow
 * the order items open in, and `current().output` holds every closed item.
 * Only choice 0 is read: the Responses API has one candidate.
 */
export class ResponsesStreamEncoder implements StreamEncoder {
  /** The vendor's usage once a 'usage' event came (chat-style, for billing). */
  usage: Usage | undefined;

  private sequence: number;
  private started = false;
  private ended = false;
  private status: ResponseStatus;
  private error: ResponseError | null = null;
  private completedAt: number | null = null;
  private finishReason: FinishReason | undefined;
  private incompleteReason: IncompleteReason | undefined;
  private readonly output: unknown[] = [];
  private message: OpenMessage | null = null;
  private call: OpenCall | null = null;
  private mcpCall: OpenMcpCall | null = null;
  /** Frames and their count, gathered by one public call. */
  private frames = '';
  private count = 0;

  private shell: ResponseShell;
  /** The request's namespaced tools by their flat names: a call comes back under its namespace and name. */
  private readonly names: ReadonlyMap<string, NamespacedName>;
  private readonly answeredTier: ((said: string | undefined) => ServiceTier) | undefined;

  /**
   * `serviceTier`: the tier that serves the response (`shared/scheduling/served-tier.ts`), said as the object's
   * `service_tier` in place of the shell's (the band it asked for); `answeredTier`: where the vendor's answer
   * decides it, the tier served given what its first chunk says (the `start` event, read before
   * `response.created` is written).
   */
  constructor(
    shell: ResponseShell,
    options: {
      firstSequence?: number;
      serviceTier?: ServiceTier;
      answeredTier?: (said: string | undefined) => ServiceTier;
    } = {},
  ) {
    this.shell = options.serviceTier === undefined ? shell : { ...shell, service_tier: options.serviceTier };
    this.answeredTier = options.answeredTier;
    this.names = namespacedTools(shell.tools);
    this.sequence = options.firstSequence ?? 0;
    this.status = shell.background ? 'queued' : 'in_progress';
  }

  /** The tier the response object says served it. */
  get serviceTier(): ServiceTier {
    return this.shell.service_tier ?? 'default';
  }

  /** Sequence number the next event gets. */
  get nextSequence(): number {
    return this.sequence;
  }

  /** SSE frames for one batch of events, and how many frames (events) they hold. */
  encode(events: readonly AnswerEvent[]): EncodedFrames {
    if (this.ended) return { frames: '', count: 0 };
    for (const event of events) this.onEvent(event);
    return this.take();
  }

  /** Ends a stream that finished normally: closes open items, then `response.completed` or `response.incomplete`. */
  end(): EncodedFrames {
    if (this.ended) return { frames: '', count: 0 };
    this.ensureStarted();
    this.closeOpen();
    this.ended = true;
    this.incompleteReason = incompleteReasonOf(this.finishReason);
    if (this.incompleteReason === undefined) {
      this.status = 'completed';
      this.completedAt = nowSeconds();
      this.emit('response.completed', { response: this.current() });
    } else {
      this.status = 'incomplete';
      this.emit('response.incomplete', { response: this.current() });
    }
    return this.take();
  }

  /** Ends a stream that failed: an `error` event, then `response.failed` (open items stay out of the output). */
  fail(error: ResponseError): EncodedFrames {
    if (this.ended) return { frames: '', count: 0 };
    this.ensureCreated();
    this.ended = true;
    this.status = 'failed';
    this.error = { code: error.code, message: error.message };
    this.emit('error', { code: error.code, message: error.message, param: null });
    this.emit('response.failed', { response: this.current() });
    return this.take();
  }

  /**
   * Ends a cancelled stream: an `error` event with code `response_cancelled`; the object's status becomes `cancelled`.
   */
  cancel(): EncodedFrames {
    if (this.ended) return { frames: '', count: 0 };
    this.ensureCreated();
    // What was produced before the cancel is kept (and billed): the open item is closed with it.
    this.closeOpen();
    this.ended = true;
    this.status = 'cancelled';
    this.emit('error', { code: CANCELLED.code, message: CANCELLED.message, param: null });
    return this.take();
  }

  /** The response object as it stands (after end/fail/cancel: final). */
  current(): ResponseObject {
    return responseObject(this.shell, {
      status: this.status,
      output: this.output.slice(),
      usage: this.usage === undefined ? null : responsesUsage(this.usage),
      error: this.error,
      ...(this.incompleteReason === undefined ? {} : { incompleteReason: this.incompleteReason }),
      completedAt: this.completedAt,
    });
  }

  private take(): EncodedFrames {
    const result = { frames: this.frames, count: this.count };
    this.frames = '';
    this.count = 0;
    return result;
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    this.frames += frame(type, this.sequence, fields);
    this.sequence += 1;
    this.count += 1;
  }

  private onEvent(event: AnswerEvent): void {
    switch (event.type) {
      case 'start':
        if (this.answeredTier && !this.started)
          this.shell = { ...this.shell, service_tier: this.answeredTier(event.serviceTier) };
        this.ensureStarted();
        return;
      case 'role':
      case 'reasoning':
        // A vendor's visible reasoning has no item here yet (a response's reasoning items are OpenAI's own).
        return;
      case 'usage':
        this.usage = event.usage;
        return;
      case 'text':
        if (event.choice !== 0 || event.text === '') return;
        this.ensureStarted();
        this.appendText(event.text);
        return;
      case 'tool-call':
        if (event.choice !== 0) return;
        this.ensureStarted();
        this.onToolCall(event);
        return;
      case 'finish':
        if (event.choice !== 0) return;
        this.ensureStarted();
        this.closeOpen();
        this.finishReason = event.reason;
        return;
      case 'mcp-list': {
        this.ensureStarted();
        this.closeOpen();
        const item = {
          type: 'mcp_list_tools',
          id: randomId('mcpl_'),
          server_label: event.server,
          tools: [] as unknown[],
        };
        const outputIndex = this.output.length;
        const at = { item_id: item.id, output_index: outputIndex };
        this.emit('response.output_item.added', { output_index: outputIndex, item });
        this.emit('response.mcp_list_tools.in_progress', at);
        const done = {
          ...item,
          tools: event.tools.map(listedTool),
          ...(event.error !== undefined ? { error: event.error } : {}),
        };
        this.emit(
          event.error !== undefined ? 'response.mcp_list_tools.failed' : 'response.mcp_list_tools.completed',
          at,
        );
        this.output.push(done);
        this.emit('response.output_item.done', { output_index: outputIndex, item: done });
        return;
      }
      case 'mcp-call':
        this.ensureStarted();
        this.openMcpCall(event);
        return;
      case 'mcp-result':
        this.ensureStarted();
        this.closeMcpCall(event);
        return;
      case 'mcp-approval': {
        this.ensureStarted();
        this.closeOpen();
        const item = {
          type: 'mcp_approval_request',
          id: event.id,
          server_label: event.server,
          name: event.tool,
          arguments: event.arguments,
        };
        const outputIndex = this.output.length;
        this.emit('response.output_item.added', { output_index: outputIndex, item });
        this.output.push(item);
        this.emit('response.output_item.done', { output_index: outputIndex, item });
        return;
      }
    }
  }

  /** The model's call of a server's tool, which the gateway makes: the item opens with its arguments, in progress. */
  private openMcpCall(event: McpCallEvent): void {
    this.closeOpen();
    const item = {
      type: 'mcp_call',
      id: event.id,
      server_label: event.server,
      name: event.tool,
      arguments: '',
      output: null,
      error: null,
      status: 'in_progress',
      approval_request_id: event.approvalRequestId ?? null,
    };
    const call: OpenMcpCall = {
      id: event.id,
      outputIndex: this.output.length,
      item: { ...item, arguments: event.arguments },
    };
    this.mcpCall = call;
    const at = { item_id: call.id, output_index: call.outputIndex };
    this.emit('response.output_item.added', { output_index: call.outputIndex, item });
    this.emit('response.mcp_call.in_progress', at);
    if (event.arguments !== '') this.emit('response.mcp_call_arguments.delta', { ...at, delta: event.arguments });
    this.emit('response.mcp_call_arguments.done', { ...at, arguments: event.arguments });
  }

  /** The call's result: the item is done, completed with its output or failed with its error. */
  private closeMcpCall(event: McpResultEvent): void {
    const call = this.mcpCall;
    if (call === null || call.id !== event.id) return;
    this.mcpCall = null;
    const at = { item_id: call.id, output_index: call.outputIndex };
    const item = {
      ...call.item,
      output: event.error === undefined || event.error.type === 'mcp_tool_execution_error' ? event.output : null,
      error: event.error ?? null,
      status: event.error === undefined ? 'completed' : 'failed',
    };
    this.emit(event.error === undefined ? 'response.mcp_call.completed' : 'response.mcp_call.failed', at);
    this.output.push(item);
    this.emit('response.output_item.done', { output_index: call.outputIndex, item });
  }

  /** `response.created` only (a failed or cancelled stream that never started). */
  private ensureCreated(): void {
    if (this.started) return;
    this.started = true;
    this.emit('response.created', { response: this.current() });
  }

  /** `response.created`, `response.queued` (background), `response.in_progress`: once. */
  private ensureStarted(): void {
    if (this.started) return;
    this.ensureCreated();
    if (this.shell.background) this.emit('response.queued', { response: this.current() });
    this.status = 'in_progress';
    this.emit('response.in_progress', { response: this.current() });
  }

  private appendText(text: string): void {
    if (this.message === null) {
      this.closeCall();
      const id = randomId('msg_');
      const outputIndex = this.output.length;
      const message: OpenMessage = {
        id,
        outputIndex,
        pieces: [],
        deltaFields: `,"item_id":"${id}","output_index":${outputIndex},"content_index":0,"delta":`,
      };
      this.message = message;
      this.emit('response.output_item.added', {
        output_index: message.outputIndex,
        item: messageItem(message.id, 'in_progress', []),
      });
      this.emit('response.content_part.added', {
        item_id: message.id,
        output_index: message.outputIndex,
        content_index: 0,
        part: textPart(''),
      });
    }
    const message = this.message;
    message.pieces.push(text);
    // The hot path of a stream: the frame is written around the text, as `frame` would build it, with one stringify.
    this.frames += `${deltaHead}${this.sequence}${message.deltaFields}${JSON.stringify(text)},"logprobs":[]}${deltaTail}`;
    this.sequence += 1;
    this.count += 1;
  }

  private onToolCall(event: ToolCallEvent): void {
    if (event.name !== undefined) {
      this.closeOpen();
      const call: OpenCall = {
        index: event.index,
        id: randomId('fc_'),
        outputIndex: this.output.length,
        callId: event.id ?? randomId('call_'),
        name: event.name,
        pieces: [],
      };
      this.call = call;
      this.emit('response.output_item.added', {
        output_index: call.outputIndex,
        item: functionCallItem(call.id, 'in_progress', '', call.callId, this.toolName(call.name)),
      });
      this.appendArguments(call, event.arguments);
      return;
    }
    // More arguments: only for the call still open (a call once closed cannot take more).
    if (this.call !== null && this.call.index === event.index) this.appendArguments(this.call, event.arguments);
  }

  private appendArguments(call: OpenCall, args: string): void {
    if (args === '') return;
    call.pieces.push(args);
    this.emit('response.function_call_arguments.delta', {
      item_id: call.id,
      output_index: call.outputIndex,
      delta: args,
    });
  }

  private toolName(flat: string): { name: string; namespace?: string } {
    return clientToolName(flat, this.names);
  }

  private closeOpen(): void {
    this.closeMessage();
    this.closeCall();
    this.closeUnansweredMcpCall();
  }

  /** A call whose result never came (the answer was cancelled while it ran): kept, incomplete. */
  private closeUnansweredMcpCall(): void {
    const call = this.mcpCall;
    if (call === null) return;
    this.mcpCall = null;
    const item = { ...call.item, status: 'incomplete' };
    this.output.push(item);
    this.emit('response.output_item.done', { output_index: call.outputIndex, item });
  }

  private closeMessage(): void {
    const message = this.message;
    if (message === null) return;
    this.message = null;
    const text = message.pieces.join('');
    const base = { item_id: message.id, output_index: message.outputIndex, content_index: 0 };
    this.emit('response.output_text.done', { ...base, text, logprobs: [] });
    const part = textPart(text);
    this.emit('response.content_part.done', { ...base, part });
    const item = messageItem(message.id, 'completed', [part]);
    this.output.push(item);
    this.emit('response.output_item.done', { output_index: message.outputIndex, item });
  }

  private closeCall(): void {
    const call = this.call;
    if (call === null) return;
    this.call = null;
    const args = call.pieces.join('');
    const tool = this.toolName(call.name);
    this.emit('response.function_call_arguments.done', {
      item_id: call.id,
      output_index: call.outputIndex,
      name: tool.name,
      arguments: args,
    });
    const item = functionCallItem(call.id, 'completed', args, call.callId, tool);
    this.output.push(item);
    this.emit('response.output_item.done', { output_index: call.outputIndex, item });
  }
}

/**
 * A plain (non-stream) answer as the response object, its items as the stream would have built them (choice 0 only).
 */
export function responseFromAnswer(answer: Answer, shell: ResponseShell): ResponseObject {
  const choice = answer.choices.find((candidate) => candidate.index === 0) ?? answer.choices[0];
  const output: unknown[] = [];
  if (choice !== undefined) {
    if (choice.text !== null && choice.text !== '')
      output.push(messageItem(randomId('msg_'), 'completed', [textPart(choice.text)]));
    const names = namespacedTools(shell.tools);
    for (const call of choice.toolCalls) {
      output.push(
        functionCallItem(
          randomId('fc_'),
          'completed',
          call.arguments,
          call.id || randomId('call_'),
          clientToolName(call.name, names),
        ),
      );
    }
  }
  const incompleteReason = incompleteReasonOf(choice?.finishReason);
  return responseObject(shell, {
    status: incompleteReason === undefined ? 'completed' : 'incomplete',
    output,
    usage: answer.usage === undefined ? null : responsesUsage(answer.usage),
    error: null,
    ...(incompleteReason === undefined ? {} : { incompleteReason }),
    completedAt: incompleteReason === undefined ? nowSeconds() : null,
  });
}
