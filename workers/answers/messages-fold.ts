/**
 * The Anthropic message object (`/v1/messages`), and the fold of Anthropic's
 * own stream events into it.
 *
 * A model served by Anthropic answers a Messages client with Anthropic's
 * events relayed untouched; a client that did not ask for a stream still gets
 * one body, so the worker folds the same events into the message Anthropic's
 * plain call would have answered. The encoder of the other vendors' answers
 * (`messages-encoder.ts`) builds the same object from answer events.
 */

/** Why the model stopped, in Anthropic's words. */
export type AnthropicStopReason =
  'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'pause_turn' | 'refusal' | 'model_context_window_exceeded';

/**
 * Anthropic's token counts: `input_tokens` leaves out the cached ones, counted apart. Newer fields are kept as sent.
 */
export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  service_tier?: string | null;
  [extra: string]: unknown;
}

/** A content block: `text`, `tool_use`, `thinking`, … with the fields of its type. */
export interface AnthropicContentBlock {
  type: string;
  [field: string]: unknown;
}

/** The message object of a plain (non-stream) Messages answer. */
export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: AnthropicContentBlock[];
  /** Null only while the answer is still coming. */
  stop_reason: string | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
  [extra: string]: unknown;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * A tool's arguments as the object `input` a client reads. Arguments that do
 * not parse, or parse to something that is not an object, become `{}`: the
 * SDKs type `input` as an object and a client replays it as one, so a string
 * in its place would break the next request rather than show the fault.
 */
export function toolInput(json: string): Json {
  if (json.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(json);
    return isObject(parsed) ? parsed : {};
  } catch {
    return {};
  }
}

/** One block of the message, as its start gave it, with the pieces its deltas brought. */
interface FoldedBlock {
  block: Json;
  /**
   * text_delta pieces, joined once when the message is built (so a long answer costs its size, not its size squared).
   */
  text: string[];
  thinking: string[];
  /** input_json_delta pieces, until the block stops and they are parsed into `input`. */
  json: string[];
}

/**
 * Folds Anthropic's stream events into the message of a plain call. Events
 * are read as Anthropic documents them and anything else (a newer event, a
 * newer delta or block type, a malformed payload) is passed over without
 * throwing: the events are relayed to the client anyway, and a fold that gave
 * up would lose the whole answer over one field it does not know.
 */
export class AnthropicEventFold {
  private start: Json | undefined;
  private readonly blocks = new Map<number, FoldedBlock>();
  /** Fields of `message_delta.delta` (stop_reason, stop_sequence, and newer ones such as stop_details). */
  private readonly delta: Json = {};
  private readonly usage: Json = {};
  /** `message_stop` came: the answer is complete. */
  done = false;

  /** One event, by its SSE event name and its parsed `data`. */
  add(eventName: string, data: unknown): void {
    if (!isObject(data)) return;
    switch (eventName) {
      case 'message_start': {
        const message = data.message;
        if (!isObject(message)) return;
        this.start = message;
        mergeCounts(this.usage, message.usage);
        // A message_start with content (Anthropic's is always empty) seeds the first blocks.
        if (Array.isArray(message.content)) {
          message.content.forEach((block, index) => {
            if (isObject(block) && typeof block.type === 'string')
              this.blocks.set(index, { block: { ...block }, text: [], thinking: [], json: [] });
          });
        }
        return;
      }
      case 'content_block_start': {
        const index = data.index;
        const block = data.content_block;
        if (!isIndex(index) || !isObject(block) || typeof block.type !== 'string') return;
        // Copied: the caller may relay or reuse the parsed event.
        this.blocks.set(index, { block: { ...block }, text: [], thinking: [], json: [] });
        return;
      }
      case 'content_block_delta':
        this.applyDelta(data);
        return;
      case 'content_block_stop': {
        const folded = isIndex(data.index) ? this.blocks.get(data.index) : undefined;
        if (folded !== undefined) settleInput(folded);
        return;
      }
      case 'message_delta':
        if (isObject(data.delta)) {
          for (const [key, value] of Object.entries(data.delta)) if (value !== undefined) this.delta[key] = value;
        }
        mergeCounts(this.usage, data.usage);
        return;
      case 'message_stop':
        this.done = true;
        return;
      default:
        // `ping`, `error` (the caller ends the stream on it), and event types newer than this fold.
        return;
    }
  }

  /** The message as Anthropic's plain call would answer it (while the stream is still coming: as it stands). */
  message(): AnthropicMessage {
    const start = this.start ?? {};
    const content: AnthropicContentBlock[] = [];
    for (const index of [...this.blocks.keys()].sort((a, b) => a - b)) content.push(built(this.blocks.get(index)!));
    const usage = { ...this.usage } as AnthropicUsage;
    if (typeof usage.input_tokens !== 'number') usage.input_tokens = 0;
    if (typeof usage.output_tokens !== 'number') usage.output_tokens = 0;
    return {
      ...start,
      ...this.delta,
      id: typeof start.id === 'string' ? start.id : '',
      type: 'message',
      role: 'assistant',
      model: typeof start.model === 'string' ? start.model : '',
      content,
      stop_reason: typeof this.delta.stop_reason === 'string' ? this.delta.stop_reason : null,
      stop_sequence: typeof this.delta.stop_sequence === 'string' ? this.delta.stop_sequence : null,
      usage,
    };
  }

  private applyDelta(data: Json): void {
    const folded = isIndex(data.index) ? this.blocks.get(data.index) : undefined;
    const delta = data.delta;
    if (folded === undefined || !isObject(delta)) return;
    switch (delta.type) {
      case 'text_delta':
        if (typeof delta.text === 'string') folded.text.push(delta.text);
        return;
      case 'input_json_delta':
        if (typeof delta.partial_json === 'string') folded.json.push(delta.partial_json);
        return;
      case 'thinking_delta':
        if (typeof delta.thinking === 'string') folded.thinking.push(delta.thinking);
        return;
      case 'signature_delta':
        // The signature comes whole, in one delta, after the thinking text.
        if (typeof delta.signature === 'string') folded.block.signature = delta.signature;
        return;
      case 'citations_delta': {
        if (delta.citation === undefined) return;
        const citations = folded.block.citations;
        if (Array.isArray(citations)) citations.push(delta.citation);
        else folded.block.citations = [delta.citation];
        return;
      }
      default:
        return;
    }
  }
}

function isIndex(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/**
 * Usage fields merged in: a later event's value replaces an earlier one (the
 * counts in `message_delta` are cumulative totals), but a null does not erase
 * a count already known.
 */
function mergeCounts(into: Json, usage: unknown): void {
  if (!isObject(usage)) return;
  for (const [key, value] of Object.entries(usage)) if (value !== null && value !== undefined) into[key] = value;
}

/** A tool block's streamed JSON, parsed into `input` (no JSON at all leaves the start's `input`, normally `{}`). */
function settleInput(folded: FoldedBlock): void {
  if (folded.json.length === 0) return;
  const json = folded.json.join('');
  folded.json = [];
  if (json.trim() !== '') folded.block.input = toolInput(json);
}

function built(folded: FoldedBlock): AnthropicContentBlock {
  const block = { ...folded.block } as AnthropicContentBlock;
  if (folded.json.length > 0) {
    // A block the stream has not stopped yet (a message taken mid-stream): the input its JSON so far parses to.
    // The pieces stay, joined into one, so the block's stop still parses the whole JSON.
    const json = folded.json.join('');
    folded.json = [json];
    if (json.trim() !== '') block.input = toolInput(json);
  }
  if (folded.text.length > 0) {
    block.text = (typeof block.text === 'string' ? block.text : '') + folded.text.join('');
    // Joined once: later deltas append to the joined text.
    folded.block.text = block.text;
    folded.text = [];
  }
  if (folded.thinking.length > 0) {
    block.thinking = (typeof block.thinking === 'string' ? block.thinking : '') + folded.thinking.join('');
    folded.block.thinking = block.thinking;
    folded.thinking = [];
  }
  if (Array.isArray(block.citations)) block.citations = block.citations.slice();
  return block;
}
