import { GatewayError } from '../../../shared/errors.js';
import { countTextTokens } from '../../../shared/tokens.js';
import type {
  RealtimeClientEvent,
  RealtimeOpenContext,
  RealtimeServerEvent,
  RealtimeVendorEvents,
  RealtimeVendorSession,
} from '../types.js';
import { buildArguments } from './tool-calls.js';
import { digest } from './ids.js';

/**
 * The mock vendor's Realtime sessions: in-process (no socket), speaking OpenAI's GA Realtime events as OpenAI does, so
 * the relay, the billing and the record are tried offline. `session.created` on open; `session.update` →
 * `session.updated`; `input_audio_buffer.append/commit/clear` → `committed` (with the user's audio item) or `cleared`;
 * `conversation.item.create` → `conversation.item.added/done`; `response.create` → `response.created`,
 * `rate_limits.updated`, one output item written in deltas (text, or pcm16 24 kHz audio, a real tone, with its
 * transcript, per the output modalities) or a function call, then `response.done` with counted usage;
 * `response.cancel` → `response.done` with status `cancelled`.
 *
 * The reply: to typed text, `Mock reply: <text>`; to audio, `I heard <n> ms of audio.`. A function call when the
 * session (or the response) has function tools and the last user text says "call" and names one (the chat mock's
 * rule). Usage counts text with o200k_base, input audio at 10 tokens a second, output audio at 20 (OpenAI's rates).
 * Markers in user text, for tests: `[mock:vendor-close]` ends the session from the vendor's side (1011, an error),
 * `[mock:slow:<ms>]` paces that response's deltas.
 */

const sampleRate = 24_000;
/** Bytes of pcm16 audio per output delta: 100 ms. */
const deltaBytes = (sampleRate / 10) * 2;
/** Output audio per word of the reply. */
const msPerWord = 150;

type Json = Record<string, unknown>;
type Item = Json & { id: string; type: string };

/**
 * Text of an item read exactly when counting its tokens; past it the count is scaled from this much (a 1 MiB item
 * would otherwise hold the worker's loop for tens of ms, and a conversation of them for seconds, every response).
 */
const countedChars = 16_384;

interface FunctionTool {
  name: string;
  parameters?: Record<string, unknown>;
}

interface SessionState {
  output_modalities: string[];
  instructions: string;
  tools: Json[];
  tool_choice: unknown;
  voice: string;
}

interface ActiveResponse {
  id: string;
  cancelled: boolean;
  /** Wakes a pause early on a cancel or close. */
  wake?: () => void;
}

const isRecord = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** One real pcm16 tone (a 440 Hz sine at a quarter of full scale), `ms` long. */
export function mockTone(ms: number): Buffer {
  const samples = Math.round((sampleRate * ms) / 1000);
  const pcm = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++)
    pcm.writeInt16LE(Math.round(8192 * Math.sin((2 * Math.PI * 440 * i) / sampleRate)), i * 2);
  return pcm;
}

export function openMockRealtime(
  ctx: RealtimeOpenContext,
  events: RealtimeVendorEvents,
): Promise<RealtimeVendorSession> {
  if (ctx.signal.aborted) return Promise.reject(ctx.signal.reason ?? new GatewayError(499, 'aborted'));
  const session = new MockRealtimeSession(ctx, events);
  return Promise.resolve(session);
}

class MockRealtimeSession implements RealtimeVendorSession {
  private closed = false;
  private counter = 0;
  private readonly items: Item[] = [];
  /** Each item's text tokens, counted once when it joined (the conversation's total kept beside them). */
  private readonly itemTokens = new WeakMap<Item, number>();
  private conversationTokens = 0;
  /** Audio bytes appended and not yet committed. */
  private buffered = 0;
  private response: ActiveResponse | undefined;
  private readonly state: SessionState = {
    output_modalities: ['audio'],
    instructions: '',
    tools: [],
    tool_choice: 'auto',
    voice: 'marin',
  };
  private readonly expiresAt = Math.floor(Date.now() / 1000) + 3600;
  /** Events go out in order, each on a later turn, as frames off a socket do. */
  private outbox: RealtimeServerEvent[] = [];
  private flushing = false;

  constructor(
    private readonly ctx: RealtimeOpenContext,
    private readonly events: RealtimeVendorEvents,
  ) {
    this.emit({ type: 'session.created', session: this.sessionObject() });
  }

  send(event: RealtimeClientEvent): void {
    if (this.closed) return;
    try {
      this.handle(event);
    } catch (error) {
      this.error('server_error', 'mock_error', error instanceof Error ? error.message : String(error), event.event_id);
    }
  }

  close(): void {
    this.closed = true;
    this.outbox = [];
    if (this.response) {
      this.response.cancelled = true;
      this.response.wake?.();
    }
  }

  private handle(event: RealtimeClientEvent): void {
    switch (event.type) {
      case 'session.update':
        return this.updateSession(event);
      case 'input_audio_buffer.append': {
        const audio = typeof event.audio === 'string' ? event.audio : '';
        this.buffered += Buffer.byteLength(audio, 'base64');
        return;
      }
      case 'input_audio_buffer.commit':
        return this.commitAudio(event);
      case 'input_audio_buffer.clear':
        this.buffered = 0;
        return this.emit({ type: 'input_audio_buffer.cleared' });
      case 'conversation.item.create':
        return this.createItem(event);
      case 'response.create':
        return this.startResponse(event);
      case 'response.cancel':
        if (!this.response)
          return this.error(
            'invalid_request_error',
            'response_cancel_not_active',
            'Cancellation failed: no active response found.',
            event.event_id,
          );
        this.response.cancelled = true;
        this.response.wake?.();
        return;
      default:
        return this.error(
          'invalid_request_error',
          'invalid_value',
          `Invalid value: '${String(event.type).slice(0, 100)}'. The mock speaks the GA Realtime client events.`,
          event.event_id,
          'type',
        );
    }
  }

  private updateSession(event: RealtimeClientEvent): void {
    const update = isRecord(event.session) ? event.session : {};
    if (Array.isArray(update.output_modalities) && update.output_modalities.length > 0)
      this.state.output_modalities = update.output_modalities
        .filter((m): m is string => m === 'text' || m === 'audio')
        .slice(0, 1);
    if (typeof update.instructions === 'string') this.state.instructions = update.instructions;
    if (Array.isArray(update.tools)) this.state.tools = update.tools.filter(isRecord);
    if (update.tool_choice !== undefined) this.state.tool_choice = update.tool_choice;
    const output = isRecord(update.audio) && isRecord(update.audio.output) ? update.audio.output : undefined;
    if (typeof output?.voice === 'string') this.state.voice = output.voice;
    this.emit({ type: 'session.updated', session: this.sessionObject() });
  }

  private commitAudio(event: RealtimeClientEvent): void {
    if (this.buffered === 0)
      return this.error(
        'invalid_request_error',
        'input_audio_buffer_commit_empty',
        'Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer ' +
          'only has 0.00ms of audio.',
        event.event_id,
      );
    const ms = Math.round((this.buffered / 2 / sampleRate) * 1000);
    this.buffered = 0;
    const previous = this.items.at(-1)?.id ?? null;
    const item: Item = {
      id: this.id('item'),
      type: 'message',
      object: 'realtime.item',
      status: 'completed',
      role: 'user',
      content: [{ type: 'input_audio' }],
      audio_ms: ms,
    };
    this.remember(item);
    this.emit({ type: 'input_audio_buffer.committed', previous_item_id: previous, item_id: item.id });
    this.emit({ type: 'conversation.item.added', previous_item_id: previous, item: this.wire(item) });
    this.emit({ type: 'conversation.item.done', previous_item_id: previous, item: this.wire(item) });
  }

  private createItem(event: RealtimeClientEvent): void {
    const given = isRecord(event.item) ? event.item : undefined;
    if (!given || typeof given.type !== 'string')
      return this.error(
        'invalid_request_error',
        'missing_required_parameter',
        "Missing required parameter: 'item'.",
        event.event_id,
        'item',
      );
    const previous = this.items.at(-1)?.id ?? null;
    // `audio_ms` is the mock's own note of committed audio (what usage counts): a client's item cannot bring one.
    const { audio_ms: _notTheClients, ...fields } = given;
    const item: Item = {
      ...fields,
      id: typeof given.id === 'string' && given.id !== '' ? given.id : this.id('item'),
      type: given.type,
      object: 'realtime.item',
      status: 'completed',
    };
    this.remember(item);
    this.emit({ type: 'conversation.item.added', previous_item_id: previous, item: this.wire(item) });
    this.emit({ type: 'conversation.item.done', previous_item_id: previous, item: this.wire(item) });
  }

  private startResponse(event: RealtimeClientEvent): void {
    if (this.response)
      return this.error(
        'invalid_request_error',
        'conversation_already_has_active_response',
        `Conversation already has an active response in progress: ${this.response.id}. Wait until the response ` +
          `is finished before creating a new one.`,
        event.event_id,
      );
    const options = isRecord(event.response) ? event.response : {};
    const modalities =
      Array.isArray(options.output_modalities) && options.output_modalities.length > 0
        ? options.output_modalities.filter((m): m is string => m === 'text' || m === 'audio').slice(0, 1)
        : this.state.output_modalities;
    const tools = Array.isArray(options.tools) ? options.tools.filter(isRecord) : this.state.tools;
    const response: ActiveResponse = { id: this.id('resp'), cancelled: false };
    this.response = response;
    void this.runResponse(
      response,
      modalities.length > 0 ? modalities : ['audio'],
      tools,
      typeof options.instructions === 'string' ? options.instructions : this.state.instructions,
    ).finally(() => {
      if (this.response === response) this.response = undefined;
    });
  }

  private async runResponse(
    response: ActiveResponse,
    modalities: string[],
    tools: Json[],
    instructions: string,
  ): Promise<void> {
    const audio = modalities.includes('audio');
    const lastUser = [...this.items].reverse().find((item) => item.type === 'message' && item.role === 'user');
    const userText = lastUser ? textOf(lastUser) : '';
    const inputUsage = this.inputUsage(instructions);
    const base = {
      id: response.id,
      object: 'realtime.response',
      conversation_id: this.conversationId,
      output_modalities: modalities,
      max_output_tokens: 'inf',
      audio: { output: { format: { type: 'audio/pcm', rate: sampleRate }, voice: this.state.voice } },
      metadata: null,
    };
    this.emit({ type: 'response.created', response: { ...base, status: 'in_progress', output: [] } });
    this.emit({
      type: 'rate_limits.updated',
      rate_limits: [
        { name: 'requests', limit: 5000, remaining: 4999, reset_seconds: 0.012 },
        { name: 'tokens', limit: 400_000, remaining: 400_000 - inputUsage.total - 4096, reset_seconds: 0.7 },
      ],
    });
    if (userText.includes('[mock:vendor-close]')) {
      this.closeFromVendor();
      return;
    }
    const slow = /\[mock:slow:(\d{1,5})\]/.exec(userText);
    const delayMs = slow ? Number(slow[1]) : this.ctx.http.mock.streamDelayMs;
    // After a function's output the model answers from it, not with the call again.
    const last = this.items.at(-1);
    const answered = last?.type === 'function_call_output' ? textOf(last) : undefined;
    const call = answered === undefined ? planCall(tools, this.state.tool_choice, userText) : undefined;
    const previous = this.items.at(-1)?.id ?? null;
    const itemId = this.id('item');
    const where = { response_id: response.id, item_id: itemId, output_index: 0 };
    let item: Item;
    let outputText = 0;
    let outputAudio = 0;
    if (call) {
      const callId = `call_${digest('call', this.ctx.sessionId, itemId)}`;
      const started: Item = {
        id: itemId,
        type: 'function_call',
        object: 'realtime.item',
        status: 'in_progress',
        call_id: callId,
        name: call.name,
        arguments: '',
      };
      this.emit({ type: 'response.output_item.added', response_id: response.id, output_index: 0, item: started });
      this.emit({ type: 'conversation.item.added', previous_item_id: previous, item: started });
      let written = '';
      for (const piece of chunks(call.arguments, 16)) {
        if (!(await this.pause(response, delayMs))) break;
        written += piece;
        this.emit({ type: 'response.function_call_arguments.delta', ...where, call_id: callId, delta: piece });
      }
      outputText = countTextTokens(written);
      item = { ...started, status: response.cancelled ? 'incomplete' : 'completed', arguments: written };
      this.emit({
        type: 'response.function_call_arguments.done',
        ...where,
        call_id: callId,
        name: call.name,
        arguments: written,
      });
    } else {
      const reply =
        answered !== undefined
          ? `The function said: ${answered.slice(0, 200)}`
          : lastUser && lastUser.audio_ms !== undefined && userText === ''
            ? `I heard ${String(lastUser.audio_ms)} ms of audio.`
            : `Mock reply: ${
                userText
                  .replace(/\[mock:[^\]]*\]/g, '')
                  .trim()
                  .slice(0, 200) || 'hello'
              }`;
      const started: Item = {
        id: itemId,
        type: 'message',
        object: 'realtime.item',
        status: 'in_progress',
        role: 'assistant',
        content: [],
      };
      this.emit({ type: 'response.output_item.added', response_id: response.id, output_index: 0, item: started });
      this.emit({ type: 'conversation.item.added', previous_item_id: previous, item: started });
      const part = { ...where, content_index: 0 };
      this.emit({
        type: 'response.content_part.added',
        ...part,
        part: audio ? { type: 'audio', transcript: '' } : { type: 'text', text: '' },
      });
      const words = reply.split(/(?<= )/);
      let said = '';
      for (const word of words) {
        if (!(await this.pause(response, delayMs))) break;
        said += word;
        if (audio) {
          const pcm = mockTone(msPerWord);
          for (let at = 0; at < pcm.length; at += deltaBytes)
            this.emit({
              type: 'response.output_audio.delta',
              ...part,
              delta: pcm.subarray(at, at + deltaBytes).toString('base64'),
            });
          outputAudio += Math.ceil((msPerWord / 1000) * 20);
          this.emit({ type: 'response.output_audio_transcript.delta', ...part, delta: word });
        } else this.emit({ type: 'response.output_text.delta', ...part, delta: word });
      }
      outputText = audio ? 0 : countTextTokens(said);
      if (audio) {
        this.emit({ type: 'response.output_audio.done', ...part });
        this.emit({ type: 'response.output_audio_transcript.done', ...part, transcript: said });
        this.emit({ type: 'response.content_part.done', ...part, part: { type: 'audio', transcript: said } });
      } else {
        this.emit({ type: 'response.output_text.done', ...part, text: said });
        this.emit({ type: 'response.content_part.done', ...part, part: { type: 'text', text: said } });
      }
      item = {
        ...started,
        status: response.cancelled ? 'incomplete' : 'completed',
        content: [audio ? { type: 'output_audio', transcript: said } : { type: 'output_text', text: said }],
      };
    }
    if (this.closed) return;
    this.remember(item);
    this.emit({ type: 'response.output_item.done', response_id: response.id, output_index: 0, item });
    this.emit({ type: 'conversation.item.done', previous_item_id: previous, item });
    const usage = {
      total_tokens: inputUsage.total + outputText + outputAudio,
      input_tokens: inputUsage.total,
      output_tokens: outputText + outputAudio,
      input_token_details: {
        text_tokens: inputUsage.text,
        audio_tokens: inputUsage.audio,
        image_tokens: 0,
        cached_tokens: 0,
        cached_tokens_details: { text_tokens: 0, audio_tokens: 0, image_tokens: 0 },
      },
      output_token_details: { text_tokens: outputText, audio_tokens: outputAudio },
    };
    const status = response.cancelled ? 'cancelled' : 'completed';
    this.emit({
      type: 'response.done',
      response: {
        ...base,
        status,
        ...(response.cancelled ? { status_details: { type: 'cancelled', reason: 'client_cancelled' } } : {}),
        output: [item],
        usage,
      },
    });
  }

  /** Waits between deltas; false once the response is cancelled or the session closed. */
  private pause(response: ActiveResponse, ms: number): Promise<boolean> {
    if (response.cancelled || this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const timer = setTimeout(done, Math.max(0, ms));
      function done() {
        clearTimeout(timer);
        response.wake = undefined;
        resolve(!response.cancelled);
      }
      response.wake = done;
    }).then((going) => (going as boolean) && !this.closed);
  }

  /**
   * An item joins the conversation, its tokens counted once. The conversation keeps to the model's context window as
   * OpenAI's does (its oldest items dropped: `truncation: auto`), so neither its memory nor a response's count grows
   * with the session's length.
   */
  private remember(item: Item): void {
    const tokens =
      boundedTokens(textOf(item)) + (typeof item.audio_ms === 'number' ? Math.ceil(item.audio_ms / 100) : 0);
    this.itemTokens.set(item, tokens);
    this.items.push(item);
    this.conversationTokens += tokens;
    const window = this.ctx.model.context_window > 0 ? this.ctx.model.context_window : 16_000;
    while (this.conversationTokens > window && this.items.length > 1)
      this.conversationTokens -= this.itemTokens.get(this.items.shift()!) ?? 0;
  }

  /** What a response reads: the instructions and every item, text counted, audio at 10 tokens a second. */
  private inputUsage(instructions: string): { text: number; audio: number; total: number } {
    let text = boundedTokens(instructions);
    let audio = 0;
    for (const item of this.items) {
      const itemAudio = typeof item.audio_ms === 'number' ? Math.ceil(item.audio_ms / 100) : 0;
      audio += itemAudio;
      text += (this.itemTokens.get(item) ?? 0) - itemAudio;
    }
    return { text, audio, total: text + audio };
  }

  private closeFromVendor(): void {
    if (this.closed) return;
    // What a socket says when it goes: its remaining frames first, then the close.
    this.emit({
      type: 'error',
      error: {
        type: 'server_error',
        code: 'mock_vendor_closed',
        message: 'The mock vendor closed the session on purpose.',
        param: null,
        event_id: null,
      },
    });
    setImmediate(() => {
      if (this.closed) return;
      this.close();
      this.events.closed({
        code: 1011,
        reason: 'mock vendor closed',
        error: new GatewayError(502, 'The vendor closed the Realtime session.', {
          type: 'server_error',
          code: 'vendor_closed',
        }),
      });
    });
  }

  private error(type: string, code: string, message: string, eventId: unknown, param: string | null = null): void {
    // The client event's id as OpenAI echoes it: a string, else null (a number or an object is not an id).
    this.emit({
      type: 'error',
      error: { type, code, message, param, event_id: typeof eventId === 'string' ? eventId : null },
    });
  }

  private get conversationId(): string {
    return `conv_${digest('conv', this.ctx.sessionId)}`;
  }

  private sessionObject(): Json {
    return {
      type: 'realtime',
      object: 'realtime.session',
      id: this.ctx.sessionId,
      model: this.ctx.clientModel,
      output_modalities: this.state.output_modalities,
      instructions: this.state.instructions,
      tools: this.state.tools,
      tool_choice: this.state.tool_choice,
      max_output_tokens: 'inf',
      tracing: null,
      prompt: null,
      expires_at: this.expiresAt,
      audio: {
        input: { format: { type: 'audio/pcm', rate: sampleRate }, turn_detection: null },
        output: { format: { type: 'audio/pcm', rate: sampleRate }, voice: this.state.voice, speed: 1 },
      },
    };
  }

  /** An item as events show it (the mock's own bookkeeping left out). */
  private wire(item: Item): Item {
    const { audio_ms: _ms, ...shown } = item;
    return shown as Item;
  }

  private id(kind: string): string {
    return `${kind}_${digest(kind, this.ctx.sessionId, this.counter++)}`;
  }

  private emit(event: Json & { type: string }): void {
    if (this.closed) return;
    this.outbox.push({
      ...event,
      event_id: `event_${digest('event', this.ctx.sessionId, this.counter++)}`,
    } as RealtimeServerEvent);
    if (this.flushing) return;
    this.flushing = true;
    setImmediate(() => {
      this.flushing = false;
      const out = this.outbox;
      this.outbox = [];
      for (const each of out) if (!this.closed) this.events.event(each);
    });
  }
}

/** Tokens of a text, counted exactly up to `countedChars` and scaled past it. */
function boundedTokens(text: string): number {
  if (text.length <= countedChars) return countTextTokens(text);
  return Math.ceil((countTextTokens(text.slice(0, countedChars)) * text.length) / countedChars);
}

/** The text of an item: a message's text parts, a function call's arguments or output. */
function textOf(item: Item): string {
  if (typeof item.arguments === 'string') return item.arguments;
  if (typeof item.output === 'string') return item.output;
  if (!Array.isArray(item.content)) return '';
  return item.content
    .map((part: unknown) =>
      isRecord(part)
        ? typeof part.text === 'string'
          ? part.text
          : typeof part.transcript === 'string'
            ? part.transcript
            : ''
        : '',
    )
    .join(' ')
    .trim();
}

function* chunks(text: string, size: number): Generator<string> {
  if (text === '') yield '';
  for (let at = 0; at < text.length; at += size) yield text.slice(at, at + size);
}

/**
 * The chat mock's rule: a function tool the user text names, with "call" said; or the one `tool_choice` names or
 * requires.
 */
function planCall(
  tools: readonly Json[],
  choice: unknown,
  userText: string,
): { name: string; arguments: string } | undefined {
  const functions: FunctionTool[] = tools
    .filter((tool) => tool.type === 'function' && typeof tool.name === 'string')
    .map((tool) => ({
      name: tool.name as string,
      ...(isRecord(tool.parameters) ? { parameters: tool.parameters } : {}),
    }));
  if (functions.length === 0 || choice === 'none') return undefined;
  const named =
    isRecord(choice) && typeof choice.name === 'string' ? functions.find((fn) => fn.name === choice.name) : undefined;
  const mentioned = /\bcall\b/i.test(userText)
    ? functions.find((fn) =>
        new RegExp(`(^|[^\\w-])${fn.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}($|[^\\w-])`, 'i').test(userText),
      )
    : undefined;
  const fn = named ?? mentioned ?? (choice === 'required' ? functions[0] : undefined);
  return fn ? { name: fn.name, arguments: buildArguments(fn.parameters) } : undefined;
}
