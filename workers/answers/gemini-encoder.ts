import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { GeminiStreamForm } from '../../shared/gemini.js';
import { sseFrame } from '../../shared/sse.js';
import type { AnswerEvent, FinishReason, Usage } from './events.js';
import { noFrames, type EncodedFrames, type StreamEncoder } from './stream-run.js';
import { GeminiChunkFold, type GenerateContentResponse, type GeminiUsageMetadata } from './gemini-fold.js';

export {
  GeminiChunkFold,
  type GenerateContentResponse,
  type GeminiCandidate,
  type GeminiUsageMetadata,
} from './gemini-fold.js';

/**
 * Google's Gemini API (`models/{model}:streamGenerateContent`, `:generateContent`)
 * over the answer event model: a chat vendor's answer written as Gemini's
 * `GenerateContentResponse` chunks, and the one body they fold to for a client
 * that asked for no stream. The sibling of `chat-encoder.ts` and
 * `messages-encoder.ts`; a vendor's own chat chunk (`wire`) means nothing here.
 * A model served by Gemini does not come through this encoder: its chunks are
 * relayed as sent (`workers/gemini-run.ts`), framed by the same `GeminiFramer`
 * and folded by the same `GeminiChunkFold`.
 *
 * Each batch of events (one upstream read) becomes at most one chunk holding
 * the new parts of every candidate it touched, as Gemini's own chunks hold only
 * what is new: text and visible reasoning (`thought: true`) as text parts, a
 * tool call as one `functionCall` part once its arguments are whole (Gemini
 * sends calls whole, `args` an object). The finish reasons and `usageMetadata`
 * ride on the last chunk, as on Gemini's: chat vendors say their usage after
 * the finish, so the finish waits for it (or for the end of the stream).
 */

export interface GeminiEncoderOptions {
  /** The model name the answer says (`modelVersion`): the one the client asked for. */
  model: string;
  /** The prompt's tokens as the api counted them: `promptTokenCount` when the vendor reported no usage. */
  inputTokens: number;
  /**
   * How a streamed answer is framed; absent for a client that gets one body (nothing is framed, the chunks are folded).
   */
  form?: GeminiStreamForm;
  /** Chat tool name → the client's function name, for the names the api had to change (`geminiToolNamesBack`). */
  toolNames?: ReadonlyMap<string, string>;
  /** Keep every chunk's JSON and fold them (the response cache keeps both forms of a streamed answer). */
  keep?: boolean;
  /** Where a tool call whose arguments are not a JSON object is told (its `args` are sent as `{}`). */
  log?: Pick<Logger, 'warn'>;
}

/**
 * The frames of one Gemini stream, as Google writes them: `?alt=sse` is one
 * `data:` event per chunk (the one SSE framer, `shared/sse.ts`); the default
 * form is one JSON array whose elements are the chunks, sent as they come
 * (`[` before the first, `,\r\n` before each later one, `]` at the end). The
 * `]` is the stream's trailer (the payload of its end, as `data: [DONE]` is
 * OpenAI's), not a chunk: the api writes it, or its own error element before
 * it, when the stream ends (`api/relay/stream-dialects.ts`).
 */
export class GeminiFramer {
  private written = 0;
  /** What the stream's end carries: the array's `]` (an SSE stream just ends). */
  readonly trailer: string;

  constructor(private readonly form: GeminiStreamForm) {
    this.trailer = form === 'array' ? ']' : '';
  }

  /** How many chunks were framed so far. */
  get chunks(): number {
    return this.written;
  }

  /** One chunk, its JSON text as given. */
  frame(json: string): string {
    this.written += 1;
    if (this.form === 'sse') return sseFrame(json);
    return `${this.written === 1 ? '[' : ',\r\n'}${json}`;
  }
}

/** A chat finish reason in Gemini's words (`map-gemini-finish-reason.ts` is the way back). */
export function geminiFinishReasonOf(reason: FinishReason | undefined): string {
  switch (reason) {
    case undefined:
    case 'stop':
    case 'tool_calls':
    case 'function_call':
      // Gemini ends a turn that called functions with STOP too; an answer that stopped without a reason ended its turn.
      return 'STOP';
    case 'length':
      return 'MAX_TOKENS';
    case 'content_filter':
      return 'SAFETY';
    default:
      return 'OTHER';
  }
}

/** A count from a usage object, or 0 where it says none. */
function tokens(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

function detail(usage: Usage, group: string, name: string): number {
  const details = usage[group];
  return typeof details === 'object' && details !== null ? tokens((details as Record<string, unknown>)[name]) : 0;
}

/**
 * Chat usage in Gemini's terms: chat's completion tokens include the
 * reasoning, Gemini's `candidatesTokenCount` leaves the thoughts out (they are
 * `thoughtsTokenCount`); both count cached prompt tokens in the prompt. Counts
 * Gemini leaves out when they are zero (cached, thoughts) are left out too.
 */
export function geminiUsageOf(usage: Usage): GeminiUsageMetadata {
  const prompt = tokens(usage.prompt_tokens);
  const completion = tokens(usage.completion_tokens);
  const thoughts = Math.min(completion, detail(usage, 'completion_tokens_details', 'reasoning_tokens'));
  const cached = Math.min(prompt, detail(usage, 'prompt_tokens_details', 'cached_tokens'));
  const metadata: GeminiUsageMetadata = {
    promptTokenCount: prompt,
    candidatesTokenCount: completion - thoughts,
    totalTokenCount: prompt + completion,
  };
  if (cached > 0) metadata.cachedContentTokenCount = cached;
  if (thoughts > 0) metadata.thoughtsTokenCount = thoughts;
  return metadata;
}

/** The response id a client sees: the vendor's answer id, without chat's `chatcmpl-` prefix (Gemini's ids are bare). */
export function responseIdOf(vendorId: string): string {
  return vendorId.startsWith('chatcmpl-') ? vendorId.slice('chatcmpl-'.length) : vendorId;
}

type Part = Record<string, unknown>;

/** A candidate as one chunk says it: its new parts, and its finish reason on the last chunk. */
interface BatchCandidate {
  index: number;
  parts?: Part[];
  finishReason?: string;
}

/** A chunk's parts as JSON: the encoder's text parts (the common ones) written around their text, a call as a whole. */
function partsJson(parts: readonly Part[]): string {
  let json = '[';
  for (let position = 0; position < parts.length; position += 1) {
    const part = parts[position]!;
    if (position > 0) json += ',';
    json +=
      typeof part.text === 'string'
        ? `{"text":${JSON.stringify(part.text)}${part.thought === true ? ',"thought":true' : ''}}`
        : JSON.stringify(part);
  }
  return `${json}]`;
}

interface PendingCall {
  index: number;
  id: string;
  name: string;
  pieces: string[];
  written: boolean;
}

interface CandidateState {
  calls: Map<number, PendingCall>;
  /** The finish reason in Gemini's words, once the choice finished (written on the last chunk). */
  finish: string | undefined;
}

/** Writes answer events as Gemini chunks (framed in the client's form), and folds them into the plain answer. */
export class GeminiStreamEncoder implements StreamEncoder {
  private vendorUsage: Usage | undefined;
  private id = '';
  private readonly candidates = new Map<number, CandidateState>();
  /** The last chunk (finish reasons and usage) went out: nothing more is written. */
  private ended = false;
  /** `,"modelVersion":…,"responseId":…}`: every chunk's tail, built once the id is known. */
  private tail = '';
  private readonly framer: GeminiFramer | undefined;
  private readonly folded: GeminiChunkFold | undefined;
  private readonly kept: string[] | undefined;
  /** The parts of the batch being encoded, by candidate (reused: a batch is encoded at once). */
  private readonly batch = new Map<number, Part[]>();

  constructor(private readonly options: GeminiEncoderOptions) {
    this.framer = options.form === undefined ? undefined : new GeminiFramer(options.form);
    this.folded = options.form === undefined || options.keep ? new GeminiChunkFold() : undefined;
    this.kept = options.keep ? [] : undefined;
  }

  /** The vendor's usage (OpenAI-shaped, for billing), once the `usage` event came. */
  get usage(): Usage | undefined {
    return this.vendorUsage;
  }

  /** The answer's `responseId` (what the client gets, and the request log keeps): '' before the first event. */
  get responseId(): string {
    return this.id;
  }

  /** What the stream's end carries (the array form's `]`; '' for `?alt=sse`, and for a plain answer). */
  get trailer(): string {
    return this.framer?.trailer ?? '';
  }

  /** Every chunk written so far, as JSON text (kept only with `keep`): the stream's events for the response cache. */
  chunks(): readonly string[] {
    return this.kept ?? [];
  }

  /** The frames of one batch of events ('' when they say nothing the client gets), and how many chunks they are. */
  encode(events: readonly AnswerEvent[]): EncodedFrames {
    if (this.ended) {
      for (const event of events) if (event.type === 'usage') this.vendorUsage = event.usage;
      return noFrames;
    }
    const parts = this.batch;
    parts.clear();
    for (const event of events) this.onEvent(event, parts);
    if (this.vendorUsage !== undefined && this.allFinished()) return this.last(parts);
    if (parts.size === 0) return noFrames;
    const candidates: BatchCandidate[] = [];
    for (const [index, list] of parts) candidates.push({ index, parts: list });
    return this.write(candidates);
  }

  /**
   * Ends a stream whose events stopped: writes the calls still open and the
   * last chunk (finish reasons and usage) if the events did not (the array
   * form's `]` is the `trailer`). A Gemini stream always has at least one
   * chunk: an answer that said nothing still gets one, with its finish
   * reason and usage.
   */
  end(): EncodedFrames {
    if (this.ended) return noFrames;
    this.batch.clear();
    return this.last(this.batch);
  }

  /** The plain answer the chunks fold to (after `end()`: the body a client that asked for no stream gets). */
  fold(): GenerateContentResponse {
    return this.folded?.response() ?? {};
  }

  private onEvent(event: AnswerEvent, parts: Map<number, Part[]>): void {
    switch (event.type) {
      case 'start':
        if (this.id === '') this.name(responseIdOf(event.id));
        return;
      case 'usage':
        this.vendorUsage = event.usage;
        return;
      case 'role':
        this.state(event.choice);
        return;
      case 'text':
      case 'reasoning': {
        if (event.text === '' || this.state(event.choice).finish !== undefined) return;
        const list = partsOf(parts, event.choice);
        const thought = event.type === 'reasoning';
        const previous = list.at(-1);
        if (previous !== undefined && typeof previous.text === 'string' && (previous.thought === true) === thought)
          previous.text += event.text;
        else list.push(thought ? { text: event.text, thought: true } : { text: event.text });
        return;
      }
      case 'tool-call': {
        const state = this.state(event.choice);
        if (state.finish !== undefined) return;
        let call = state.calls.get(event.index);
        if (call === undefined) {
          const name = event.name ?? '';
          call = {
            index: event.index,
            id: event.id ?? '',
            name: this.options.toolNames?.get(name) ?? name,
            pieces: [],
            written: false,
          };
          state.calls.set(event.index, call);
        } else if (call.id === '' && event.id !== undefined) {
          call.id = event.id;
        }
        if (call.written || event.arguments === '') return;
        call.pieces.push(event.arguments);
        // Arguments that parse to an object are whole: nothing valid can follow a complete JSON value.
        if (event.arguments.trimEnd().endsWith('}')) {
          const args = parseObject(call.pieces.join(''));
          if (args !== undefined) this.writeCall(call, event.choice, args, parts);
        }
        return;
      }
      case 'finish': {
        const state = this.state(event.choice);
        if (state.finish !== undefined) return;
        this.flushCalls(event.choice, state, parts);
        state.finish = geminiFinishReasonOf(event.reason);
        return;
      }
    }
  }

  /** The last chunk: this batch's parts, every candidate's finish reason, and the usage. */
  private last(parts: Map<number, Part[]>): EncodedFrames {
    this.ended = true;
    if (this.candidates.size === 0) this.state(0);
    const candidates = [...this.candidates.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([index, state]): BatchCandidate => {
        this.flushCalls(index, state, parts);
        const list = parts.get(index);
        return { index, ...(list === undefined ? {} : { parts: list }), finishReason: state.finish ?? 'STOP' };
      });
    const usage =
      this.vendorUsage !== undefined
        ? geminiUsageOf(this.vendorUsage)
        : { promptTokenCount: this.options.inputTokens, totalTokenCount: this.options.inputTokens };
    return this.write(candidates, usage);
  }

  private allFinished(): boolean {
    if (this.candidates.size === 0) return false;
    for (const state of this.candidates.values()) if (state.finish === undefined) return false;
    return true;
  }

  /**
   * One chunk: framed for a streaming client, kept and folded where asked. The
   * hot path (a text delta) writes its JSON around the text, one stringify of
   * it; the fold's objects are made only for an answer that is folded.
   */
  private write(candidates: readonly BatchCandidate[], usage?: GeminiUsageMetadata): EncodedFrames {
    if (this.id === '') this.name(randomBytes(16).toString('base64url'));
    if (this.folded !== undefined) {
      const built = candidates.map(({ index, parts, finishReason }) => ({
        content: parts === undefined ? { role: 'model' } : { role: 'model', parts },
        ...(finishReason ? { finishReason } : {}),
        index,
      }));
      this.folded.add({
        candidates: built,
        ...(usage ? { usageMetadata: usage } : {}),
        modelVersion: this.options.model,
        responseId: this.id,
      });
    }
    if (this.framer === undefined && this.kept === undefined) return noFrames;
    let json = '{"candidates":[';
    for (let position = 0; position < candidates.length; position += 1) {
      const { index, parts, finishReason } = candidates[position]!;
      json += `${position === 0 ? '' : ','}{"content":{"role":"model"${parts === undefined ? '' : `,"parts":${partsJson(parts)}`}}${finishReason ? `,"finishReason":"${finishReason}"` : ''},"index":${index}}`;
    }
    json += `]${usage ? `,"usageMetadata":${JSON.stringify(usage)}` : ''}${this.tail}`;
    this.kept?.push(json);
    return this.framer === undefined ? noFrames : { frames: this.framer.frame(json), count: 1 };
  }

  private name(id: string): void {
    this.id = id;
    this.tail = `,"modelVersion":${JSON.stringify(this.options.model)},"responseId":${JSON.stringify(id)}}`;
  }

  private state(choice: number): CandidateState {
    let state = this.candidates.get(choice);
    if (state === undefined) {
      state = { calls: new Map(), finish: undefined };
      this.candidates.set(choice, state);
    }
    return state;
  }

  /** Writes the choice's calls still open, in the order they began: their arguments are all there is. */
  private flushCalls(choice: number, state: CandidateState, parts: Map<number, Part[]>): void {
    for (const call of state.calls.values()) {
      if (call.written) continue;
      const json = call.pieces.join('');
      let args = json.trim() === '' ? {} : parseObject(json);
      if (args === undefined) {
        // Its length, not its text: arguments are the conversation's content, which the logs do not keep.
        this.options.log?.warn(
          { tool: call.name, argumentsLength: json.length },
          "a tool call's arguments are not a JSON object; the client gets the call with empty args",
        );
        args = {};
      }
      this.writeCall(call, choice, args, parts);
    }
  }

  private writeCall(
    call: PendingCall,
    choice: number,
    args: Record<string, unknown>,
    parts: Map<number, Part[]>,
  ): void {
    call.written = true;
    // The client sends the id back with its functionResponse: never empty, and the same on every encode.
    const id = call.id !== '' ? call.id : `call_${this.id === '' ? 'gemini' : this.id}_${choice}_${call.index}`;
    partsOf(parts, choice).push({ functionCall: { id, name: call.name, args } });
  }
}

function partsOf(parts: Map<number, Part[]>, choice: number): Part[] {
  let list = parts.get(choice);
  if (list === undefined) {
    list = [];
    parts.set(choice, list);
  }
  return list;
}

/** The JSON object a text holds, or undefined (not JSON, or JSON that is not an object). */
function parseObject(json: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(json);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}
