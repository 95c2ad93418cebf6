/**
 * A strict fake of OpenAI's Realtime API (GA protocol) for tests and the realtime bench: `GET /v1/realtime?model=…`
 * upgraded to a WebSocket, refused at the upgrade as OpenAI refuses (401 without the key, an unknown model, 429 when
 * told to or past its session cap), then a session that speaks the GA events.
 *
 * Strict both ways: every client event is checked against the spec's `RealtimeClientEvent<Name>` schema for its type
 * (and its top-level fields, the session's and the response's, against the fields the spec names: OpenAI refuses an
 * unknown parameter), and a bad one is answered with an `error` event as OpenAI writes it; every event the fake sends
 * is checked against the spec's `RealtimeServerEvent<Name>` schema, a mismatch recorded in `problems` (tests assert it
 * stays empty).
 *
 * What a session does: session.update → session.updated (the whole effective session); input_audio_buffer.append /
 * commit / clear → committed (a user audio item, transcribed when the session asks) / cleared;
 * conversation.item.create / delete / retrieve / truncate; response.create → response.created, rate_limits.updated, the
 * output item as text or audio with its transcript (pcm16 at 24 kHz, a real tone) per `output_modalities`, or a
 * function call when tools are given and the last user text names one (`name({"json": "arguments"})`), then
 * response.done with usage counted as OpenAI counts it (text ≈ 4 characters a token, user audio 10 tokens a second,
 * assistant audio 20 a second; the previous response's input, in steps of 64 tokens, read back as cached);
 * response.cancel → response.done `cancelled` (its usage counting what was produced: the input read and the output sent
 * before the cancel, as OpenAI bills a cancelled response). A user text holding `[hold]` keeps its response going after
 * its first delta until it is cancelled (or `release()`d), so a cancel is tested without a race. It does not detect
 * speech: the session says server VAD as OpenAI's default does, but only commit and response.create make things happen.
 *
 * The bench's echo mode answers each appended frame at once with a `response.output_audio.delta` of the same bytes.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { ErrorObject } from 'ajv/dist/2020.js';
import { closeServer, listenOnLoopback } from './fake-server.js';
import { openApiSchema } from './openapi-schemas.js';
import { serverEventSchemas } from './realtime-client.js';

export const FAKE_REALTIME_KEY = 'sk-openai-realtime-test';
export const FAKE_REALTIME_MODELS = [
  'gpt-realtime',
  'gpt-realtime-2025-08-28',
  'gpt-realtime-mini',
  'gpt-realtime-mini-2025-10-06',
  'gpt-4o-realtime-preview',
  'gpt-4o-mini-realtime-preview',
];
const VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'sage', 'shimmer', 'verse', 'marin', 'cedar'];

/**
 * The schema of each client event type (`RealtimeClientEvent`'s members) and the fields it names: the spec's schemas
 * allow any other, OpenAI refuses them (`unknown_parameter`).
 */
const CLIENT_EVENTS: Record<string, { schema: string; fields: readonly string[] }> = {
  'conversation.item.create': {
    schema: 'RealtimeClientEventConversationItemCreate',
    fields: ['previous_item_id', 'item'],
  },
  'conversation.item.delete': { schema: 'RealtimeClientEventConversationItemDelete', fields: ['item_id'] },
  'conversation.item.retrieve': { schema: 'RealtimeClientEventConversationItemRetrieve', fields: ['item_id'] },
  'conversation.item.truncate': {
    schema: 'RealtimeClientEventConversationItemTruncate',
    fields: ['item_id', 'content_index', 'audio_end_ms'],
  },
  'input_audio_buffer.append': { schema: 'RealtimeClientEventInputAudioBufferAppend', fields: ['audio'] },
  'input_audio_buffer.clear': { schema: 'RealtimeClientEventInputAudioBufferClear', fields: [] },
  'input_audio_buffer.commit': { schema: 'RealtimeClientEventInputAudioBufferCommit', fields: [] },
  'output_audio_buffer.clear': { schema: 'RealtimeClientEventOutputAudioBufferClear', fields: [] },
  'response.cancel': { schema: 'RealtimeClientEventResponseCancel', fields: ['response_id'] },
  'response.create': { schema: 'RealtimeClientEventResponseCreate', fields: ['response'] },
  'session.update': { schema: 'RealtimeClientEventSessionUpdate', fields: ['session'] },
};

// The fields the spec names in a session and a response's parameters.
const SESSION_FIELDS = new Set([
  'type',
  'output_modalities',
  'model',
  'instructions',
  'audio',
  'include',
  'tracing',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'reasoning',
  'max_output_tokens',
  'truncation',
  'prompt',
]);
const RESPONSE_FIELDS = new Set([
  'output_modalities',
  'instructions',
  'audio',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'reasoning',
  'max_output_tokens',
  'conversation',
  'metadata',
  'prompt',
  'input',
]);

/** 24 kHz pcm16 mono: bytes per millisecond. */
const PCM_BYTES_PER_MS = 48;
/** An answer's audio: 60 ms a character of its transcript, sent in 100 ms deltas. */
const AUDIO_MS_PER_CHARACTER = 60;
const AUDIO_DELTA_MS = 100;
/** How long a `[hold]` response waits for a cancel before it finishes by itself. */
const HOLD_LIMIT_MS = 30_000;

type Json = Record<string, unknown>;

export interface FakeOpenAIRealtimeOptions {
  /** The key a client must bring (default FAKE_REALTIME_KEY). */
  apiKey?: string;
  /** Models served (default FAKE_REALTIME_MODELS). */
  models?: readonly string[];
  /** Answer each appended frame at once with an output audio delta of the same bytes (the bench's vendor). */
  echo?: boolean;
  /**
   * With `echo`: write the fake's clock (epoch ms, float64 little-endian) into bytes 12–19 of the echoed audio, so a
   * client times each way of the trip apart (the bench).
   */
  echoStamp?: boolean;
  /** Wait before answering each client event (0: at once, in the same turn). */
  latencyMs?: number;
  /** Sessions open at once past which an upgrade is refused with 429. */
  maxSessions?: number;
  /** Keep each session's received and sent events (default true; the bench turns it off to keep memory flat). */
  record?: boolean;
  /** Check every sent event against the spec (default true; the bench turns it off). */
  checkSentEvents?: boolean;
  /**
   * Never answer a `response.cancel` (a vendor gone quiet): the response goes on as if none came, and no
   * `response.done` follows until it ends by itself (a `[hold]` one: not before its socket closes). Default false.
   */
  ignoreCancels?: boolean;
}

export interface FakeRealtimeUpgrade {
  path: string;
  headers: IncomingHttpHeaders;
  /** 101 when accepted, else the refusal's status. */
  status: number;
}

export interface FakeRealtimeSessionView {
  id: string;
  model: string;
  headers: IncomingHttpHeaders;
  /** Every client event, parsed (or the raw text when it was not JSON), in arrival order (when recording). */
  received: unknown[];
  /** Every event sent (when recording). */
  sent: Json[];
  /** pcm16 bytes appended over the session. */
  appendedBytes: number;
  readonly open: boolean;
  /** Resolves when the socket has closed, with who closed it. */
  closed: Promise<{ code: number; reason: string; by: 'client' | 'fake' }>;
  /** Ends the session as OpenAI might: a close frame with `code`, or (no code) the connection dropped. */
  kill(code?: number, reason?: string): void;
  /** Sends an event of the test's own (an `error`, say) as OpenAI would. */
  push(event: Json): void;
  /** Lets a `[hold]` response finish. */
  release(): void;
}

export interface FakeOpenAIRealtime {
  /** Base URL including `/v1` (http: the adapter turns it into ws:). */
  url: string;
  port: number;
  key: string;
  /** Every session opened, in order (when recording; else only the open ones). */
  sessions: FakeRealtimeSessionView[];
  upgrades: FakeRealtimeUpgrade[];
  readonly openSessions: number;
  readonly opened: number;
  /** Sent events that did not match the spec: empty unless the fake itself is wrong. */
  problems: string[];
  /** Refuse every upgrade with this status (429 writes `retry-after`) until called with undefined. */
  refuseUpgrades(
    refusal: { status: number; retryAfterSeconds?: number; code?: string; message?: string } | undefined,
  ): void;
  /**
   * Accept the upgrade, then send an `error` event instead of session.created and close (as OpenAI does for some
   * refusals).
   */
  failAfterUpgrade(error: { type: string; code: string; message: string } | undefined): void;
  /** Hold upgrades unanswered (a vendor that never opens). */
  stallUpgrades(on: boolean): void;
  /** From now on, never answer (true) or answer again (false) a `response.cancel` (`ignoreCancels`). */
  ignoreCancels(on: boolean): void;
  killAll(code?: number): void;
  waitForOpenSessions(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

function eventIdFactory(): () => string {
  const prefix = randomBytes(6).toString('base64url');
  let next = 0;
  return () => `event_${prefix}${(next++).toString(36)}`;
}

const newId = (prefix: string) => `${prefix}_${randomBytes(11).toString('base64url')}`;
const textTokens = (text: string) => (text.length === 0 ? 0 : Math.ceil(text.length / 4));

/** A pcm16 24 kHz tone of `ms` milliseconds: real, playable samples. */
export function fakeToneBytes(ms: number, hz = 440): Buffer {
  const samples = Math.round((ms * PCM_BYTES_PER_MS) / 2);
  const out = Buffer.alloc(samples * 2);
  for (let i = 0; i < samples; i++)
    out.writeInt16LE(Math.round(Math.sin((2 * Math.PI * hz * i) / 24_000) * 6_000), i * 2);
  return out;
}

function describeAjvError(errors: ErrorObject[]): { code: string; message: string; param: string | null } {
  const isNoise = (e: ErrorObject) =>
    e.keyword === 'oneOf' ||
    e.keyword === 'anyOf' ||
    ((e.keyword === 'enum' || e.keyword === 'const') && e.instancePath.endsWith('/type'));
  const first = errors.find((e) => !isNoise(e)) ?? errors[0]!;
  const path = first.instancePath.split('/').filter(Boolean).join('.');
  if (first.keyword === 'required') {
    const missing = (first.params as { missingProperty: string }).missingProperty;
    const param = path ? `${path}.${missing}` : missing;
    return { code: 'missing_required_parameter', message: `Missing required parameter: '${param}'.`, param };
  }
  if (first.keyword === 'type') {
    return {
      code: 'invalid_type',
      message: `Invalid type for '${path}': expected ${(first.params as { type: string }).type}.`,
      param: path || null,
    };
  }
  return {
    code: 'invalid_value',
    message: `Invalid value for '${path || 'event'}': ${first.message ?? 'not allowed'}.`,
    param: path || null,
  };
}

interface Item {
  json: Json;
  /** Tokens this item adds to every later response's input. */
  text: number;
  audio: number;
}

interface ActiveResponse {
  id: string;
  cancelled: boolean;
  released: boolean;
  wake?: () => void;
}

interface SessionDeps {
  options: Required<Omit<FakeOpenAIRealtimeOptions, 'maxSessions'>> & { maxSessions: number };
  nextEventId: () => string;
  problems: string[];
}

/** One accepted socket: the conversation and what OpenAI would answer to each event. */
class FakeRealtimeSession implements FakeRealtimeSessionView {
  readonly id = newId('sess');
  received: unknown[] = [];
  sent: Json[] = [];
  appendedBytes = 0;
  closed: Promise<{ code: number; reason: string; by: 'client' | 'fake' }>;
  private closedBy: 'client' | 'fake' = 'client';
  private config: Json;
  private items: Item[] = [];
  private bufferBytes = 0;
  private active: ActiveResponse | undefined;
  private previousInput = { text: 0, audio: 0 };
  private audioSent = false;
  private pending = Promise.resolve();
  private readonly echoIds = { response: newId('resp'), item: newId('item') };

  constructor(
    private readonly socket: WebSocket,
    readonly model: string,
    readonly headers: IncomingHttpHeaders,
    private readonly deps: SessionDeps,
  ) {
    this.config = {
      type: 'realtime',
      object: 'realtime.session',
      id: this.id,
      model,
      output_modalities: ['audio'],
      instructions: 'You are a helpful, witty, and friendly AI.',
      tools: [],
      tool_choice: 'auto',
      max_output_tokens: 'inf',
      tracing: null,
      truncation: 'auto',
      prompt: null,
      expires_at: Math.floor(Date.now() / 1000) + 3600,
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: 24_000 },
          turn_detection: {
            type: 'server_vad',
            threshold: 0.5,
            prefix_padding_ms: 300,
            silence_duration_ms: 200,
            idle_timeout_ms: null,
            create_response: true,
            interrupt_response: true,
          },
        },
        output: { format: { type: 'audio/pcm', rate: 24_000 }, voice: 'alloy', speed: 1 },
      },
      include: [],
    };
    this.closed = new Promise((resolve) => {
      socket.once('close', (code, reason) => {
        // A response still running stops with the socket.
        if (this.active) {
          this.active.cancelled = true;
          this.active.wake?.();
        }
        resolve({ code, reason: reason.toString(), by: this.closedBy });
      });
    });
    socket.on('message', (data, isBinary) => this.onFrame(data.toString(), isBinary));
    socket.on('error', () => {});
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  start(): void {
    this.send({ type: 'session.created', session: this.config });
  }

  kill(code?: number, reason = ''): void {
    this.closedBy = 'fake';
    this.release();
    if (code === undefined) this.socket.terminate();
    else this.socket.close(code, reason);
  }

  push(event: Json): void {
    this.send(event);
  }

  release(): void {
    if (!this.active) return;
    this.active.released = true;
    this.active.wake?.();
  }

  private send(event: Json): void {
    const full = { event_id: this.deps.nextEventId(), ...event };
    if (this.deps.options.checkSentEvents) this.check(full);
    if (this.deps.options.record) this.sent.push(full);
    if (this.open) this.socket.send(JSON.stringify(full));
  }

  private check(event: Json): void {
    const name = serverEventSchemas[event.type as string];
    if (!name) {
      if (event.type !== undefined) this.deps.problems.push(`sent an event of no known schema: ${String(event.type)}`);
      return;
    }
    const validate = openApiSchema(name);
    if (!validate(event))
      this.deps.problems.push(
        `${name}: ${JSON.stringify(validate.errors?.slice(0, 3))} in ${JSON.stringify(event).slice(0, 400)}`,
      );
  }

  private error(
    code: string,
    message: string,
    param: string | null,
    clientEventId: string | null,
    type = 'invalid_request_error',
  ): void {
    this.send({ type: 'error', error: { type, code, message, param, event_id: clientEventId } });
  }

  private onFrame(text: string, isBinary: boolean): void {
    if (isBinary) {
      if (this.deps.options.record) this.received.push(text);
      this.error('invalid_json', 'Binary frames are not supported: send events as JSON text.', null, null);
      return;
    }
    let event: unknown;
    try {
      event = JSON.parse(text);
    } catch {
      if (this.deps.options.record) this.received.push(text);
      this.error('invalid_json', 'The server had trouble parsing your JSON: it is not valid JSON.', null, null);
      return;
    }
    if (this.deps.options.record) this.received.push(event);
    if (this.deps.options.latencyMs <= 0) {
      this.handle(event);
      return;
    }
    this.pending = this.pending.then(
      () =>
        new Promise<void>((resolve) =>
          setTimeout(() => {
            this.handle(event);
            resolve();
          }, this.deps.options.latencyMs),
        ),
    );
  }

  private handle(event: unknown): void {
    if (typeof event !== 'object' || event === null || Array.isArray(event)) {
      this.error('invalid_value', 'Each event must be a JSON object.', null, null);
      return;
    }
    const fields = event as Json;
    const clientEventId = typeof fields.event_id === 'string' ? fields.event_id : null;
    const type = fields.type;
    const known = typeof type === 'string' ? CLIENT_EVENTS[type] : undefined;
    if (known === undefined) {
      const supported = Object.keys(CLIENT_EVENTS)
        .map((name) => `'${name}'`)
        .join(', ');
      this.error(
        'invalid_value',
        `Invalid value: '${String(type)}'. Supported values are: ${supported}.`,
        'type',
        clientEventId,
      );
      return;
    }
    const unknown = unknownField(fields, known.fields);
    if (unknown) {
      this.error('unknown_parameter', `Unknown parameter: '${unknown}'.`, unknown, clientEventId);
      return;
    }
    // The bench's hot path: echoed before the (cheap, but not free) schema check.
    if (type === 'input_audio_buffer.append' && this.deps.options.echo && typeof fields.audio === 'string') {
      this.appendedBytes += (fields.audio.length * 3) >> 2;
      const delta = this.deps.options.echoStamp ? stampAudio(fields.audio) : fields.audio;
      this.send({
        type: 'response.output_audio.delta',
        response_id: this.echoIds.response,
        item_id: this.echoIds.item,
        output_index: 0,
        content_index: 0,
        delta,
      });
      return;
    }
    const validate = openApiSchema(known.schema);
    if (!validate(fields)) {
      const { code, message, param } = describeAjvError(validate.errors ?? []);
      this.error(code, message, param, clientEventId);
      return;
    }
    switch (type) {
      case 'session.update':
        return this.updateSession(fields.session as Json, clientEventId);
      case 'input_audio_buffer.append':
        return this.append(fields.audio as string, clientEventId);
      case 'input_audio_buffer.commit':
        return this.commit(clientEventId);
      case 'input_audio_buffer.clear':
        this.bufferBytes = 0;
        return this.send({ type: 'input_audio_buffer.cleared' });
      case 'output_audio_buffer.clear':
        return this.error(
          'invalid_value',
          'output_audio_buffer.clear is only supported for WebRTC and SIP sessions.',
          'type',
          clientEventId,
        );
      case 'conversation.item.create':
        return this.createItem(fields.item as Json, fields.previous_item_id as string | undefined, clientEventId);
      case 'conversation.item.delete':
        return this.deleteItem(fields.item_id as string, clientEventId);
      case 'conversation.item.retrieve':
        return this.retrieveItem(fields.item_id as string, clientEventId);
      case 'conversation.item.truncate':
        return this.truncateItem(fields as Json, clientEventId);
      case 'response.create':
        return this.createResponse((fields.response as Json | undefined) ?? {}, clientEventId);
      case 'response.cancel':
        return this.cancelResponse(fields.response_id as string | undefined, clientEventId);
    }
  }

  private updateSession(update: Json, clientEventId: string | null): void {
    if (update.type !== 'realtime') {
      this.error(
        'invalid_value',
        "This session is a realtime session: 'session.type' must be 'realtime'.",
        'session.type',
        clientEventId,
      );
      return;
    }
    if (update.model !== undefined && update.model !== this.model) {
      this.error('invalid_value', "Cannot update a session's model.", 'session.model', clientEventId);
      return;
    }
    const audio = update.audio as { input?: Json; output?: Json } | undefined;
    const voice = audio?.output?.voice;
    if (voice !== undefined) {
      if (typeof voice === 'string' && !VOICES.includes(voice)) {
        this.error(
          'invalid_value',
          `Invalid value: '${voice}'. Supported values are: ${VOICES.map((v) => `'${v}'`).join(', ')}.`,
          'session.audio.output.voice',
          clientEventId,
        );
        return;
      }
      const current = (this.config.audio as { output: Json }).output.voice;
      if (this.audioSent && JSON.stringify(voice) !== JSON.stringify(current)) {
        this.error(
          'cannot_update_voice',
          "Cannot update a conversation's voice if assistant audio is present.",
          'session.audio.output.voice',
          clientEventId,
        );
        return;
      }
    }
    const modalities = update.output_modalities as string[] | undefined;
    if (modalities !== undefined && modalities.length !== 1) {
      this.error(
        'invalid_value',
        "Invalid 'session.output_modalities': give either ['text'] or ['audio'].",
        'session.output_modalities',
        clientEventId,
      );
      return;
    }
    const { type: _type, model: _model, audio: _audio, ...rest } = update;
    const current = this.config.audio as { input: Json; output: Json };
    this.config = {
      ...this.config,
      ...rest,
      audio: { input: { ...current.input, ...audio?.input }, output: { ...current.output, ...audio?.output } },
    };
    this.send({ type: 'session.updated', session: this.config });
  }

  private append(audio: string, clientEventId: string | null): void {
    const bytes = Buffer.from(audio, 'base64');
    if (bytes.toString('base64').replace(/=+$/, '') !== audio.replace(/=+$/, '')) {
      this.error('invalid_value', "Invalid 'audio'. Expected base64-encoded audio bytes.", 'audio', clientEventId);
      return;
    }
    this.appendedBytes += bytes.length;
    this.bufferBytes += bytes.length;
  }

  private commit(clientEventId: string | null): void {
    const ms = this.bufferBytes / PCM_BYTES_PER_MS;
    if (ms < 100) {
      this.error(
        'input_audio_buffer_commit_empty',
        `Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer ` +
          `only has ${ms.toFixed(2)}ms of audio.`,
        null,
        clientEventId,
      );
      return;
    }
    this.bufferBytes = 0;
    const previous = this.items.at(-1)?.json.id as string | undefined;
    const item: Json = {
      id: newId('item'),
      object: 'realtime.item',
      type: 'message',
      status: 'completed',
      role: 'user',
      content: [{ type: 'input_audio', transcript: '' }],
    };
    this.items.push({ json: item, text: 0, audio: Math.ceil(ms / 100) });
    this.send({ type: 'input_audio_buffer.committed', previous_item_id: previous ?? null, item_id: item.id });
    this.send({ type: 'conversation.item.added', previous_item_id: previous ?? null, item });
    this.send({ type: 'conversation.item.done', previous_item_id: previous ?? null, item });
    const transcription = (this.config.audio as { input: { transcription?: Json } }).input.transcription;
    if (transcription) {
      const transcript = `(${Math.round(ms)} ms of speech)`;
      const audioTokens = Math.ceil(ms / 100);
      this.send({
        type: 'conversation.item.input_audio_transcription.completed',
        item_id: item.id,
        content_index: 0,
        transcript,
        usage: {
          type: 'tokens',
          input_tokens: audioTokens,
          input_token_details: { text_tokens: 0, audio_tokens: audioTokens },
          output_tokens: textTokens(transcript),
          total_tokens: audioTokens + textTokens(transcript),
        },
      });
    }
  }

  private findItem(id: string): number {
    return this.items.findIndex((item) => item.json.id === id);
  }

  private createItem(input: Json, previousItemId: string | undefined, clientEventId: string | null): void {
    const id = typeof input.id === 'string' ? input.id : newId('item');
    if (this.findItem(id) >= 0) {
      this.error('invalid_value', `Item with id '${id}' already exists.`, 'item.id', clientEventId);
      return;
    }
    let at = this.items.length;
    if (previousItemId !== undefined && previousItemId !== 'root') {
      const index = this.findItem(previousItemId);
      if (index < 0) {
        this.error(
          'item_not_found',
          `Previous item with id '${previousItemId}' does not exist.`,
          'previous_item_id',
          clientEventId,
        );
        return;
      }
      at = index + 1;
    } else if (previousItemId === 'root') at = 0;
    if (
      input.type === 'function_call_output' &&
      !this.items.some((item) => item.json.type === 'function_call' && item.json.call_id === input.call_id)
    ) {
      this.error(
        'invalid_value',
        `No function call with call_id '${String(input.call_id)}' in the conversation.`,
        'item.call_id',
        clientEventId,
      );
      return;
    }
    const item: Json = { ...input, id, object: 'realtime.item', status: 'completed' };
    this.items.splice(at, 0, {
      json: item,
      text: textTokens(JSON.stringify(input.content ?? input.output ?? input.arguments ?? '')),
      audio: 0,
    });
    const previous = at > 0 ? (this.items[at - 1]!.json.id as string) : null;
    this.send({ type: 'conversation.item.added', previous_item_id: previous, item });
    this.send({ type: 'conversation.item.done', previous_item_id: previous, item });
  }

  private deleteItem(id: string, clientEventId: string | null): void {
    const index = this.findItem(id);
    if (index < 0) return this.error('item_not_found', `Item with id '${id}' not found.`, 'item_id', clientEventId);
    this.items.splice(index, 1);
    this.send({ type: 'conversation.item.deleted', item_id: id });
  }

  private retrieveItem(id: string, clientEventId: string | null): void {
    const index = this.findItem(id);
    if (index < 0) return this.error('item_not_found', `Item with id '${id}' not found.`, 'item_id', clientEventId);
    this.send({ type: 'conversation.item.retrieved', item: this.items[index]!.json });
  }

  private truncateItem(event: Json, clientEventId: string | null): void {
    const index = this.findItem(event.item_id as string);
    const item = index < 0 ? undefined : this.items[index]!;
    if (!item || item.json.role !== 'assistant' || item.audio === 0) {
      return this.error(
        'invalid_value',
        'Only assistant messages with audio can be truncated.',
        'item_id',
        clientEventId,
      );
    }
    const audioMs = item.audio * 50;
    if ((event.audio_end_ms as number) > audioMs) {
      return this.error(
        'invalid_value',
        `Audio content of ${audioMs}ms is already shorter than ${String(event.audio_end_ms)}ms.`,
        'audio_end_ms',
        clientEventId,
      );
    }
    item.audio = Math.ceil((event.audio_end_ms as number) / 50);
    this.send({
      type: 'conversation.item.truncated',
      item_id: item.json.id,
      content_index: event.content_index,
      audio_end_ms: event.audio_end_ms,
    });
  }

  private cancelResponse(responseId: string | undefined, clientEventId: string | null): void {
    if (this.deps.options.ignoreCancels) return;
    const active = this.active;
    if (!active || (responseId !== undefined && responseId !== active.id)) {
      this.error('response_cancel_not_active', 'Cancellation failed: no active response found.', null, clientEventId);
      return;
    }
    active.cancelled = true;
    active.wake?.();
  }

  private createResponse(params: Json, clientEventId: string | null): void {
    const outOfBand = params.conversation === 'none';
    if (this.active && !outOfBand) {
      this.error(
        'conversation_already_has_active_response',
        `Conversation already has an active response in progress: ${this.active.id}. Wait until the response is ` +
          `finished before creating a new one.`,
        null,
        clientEventId,
      );
      return;
    }
    const modalities =
      (params.output_modalities as string[] | undefined) ?? (this.config.output_modalities as string[]);
    if (modalities.length !== 1) {
      this.error(
        'invalid_value',
        "Invalid 'response.output_modalities': give either ['text'] or ['audio'].",
        'response.output_modalities',
        clientEventId,
      );
      return;
    }
    const active: ActiveResponse = { id: newId('resp'), cancelled: false, released: false };
    if (!outOfBand) this.active = active;
    void this.runResponse(active, params, modalities[0] === 'audio', outOfBand).finally(() => {
      if (this.active === active) this.active = undefined;
    });
  }

  /** Yields (a turn, or `ms`), ending early when the response is cancelled or released. */
  private pause(active: ActiveResponse, ms = 0): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let immediate: NodeJS.Immediate | undefined;
      const done = () => {
        clearTimeout(timer);
        if (immediate) clearImmediate(immediate);
        active.wake = undefined;
        resolve();
      };
      if (ms > 0) timer = setTimeout(done, ms);
      else immediate = setImmediate(done);
      active.wake = done;
    });
  }

  private async runResponse(active: ActiveResponse, params: Json, audio: boolean, outOfBand: boolean): Promise<void> {
    const context: Item[] =
      outOfBand && Array.isArray(params.input)
        ? (params.input as Json[]).map((json) => ({
            json,
            text: textTokens(JSON.stringify(json.content ?? json.output ?? '')),
            audio: 0,
          }))
        : [...this.items];
    const instructions = (params.instructions as string | undefined) ?? (this.config.instructions as string);
    const tools = ((params.tools ?? this.config.tools) as Json[]).filter((tool) => tool.type === 'function');
    const toolChoice = params.tool_choice ?? this.config.tool_choice;
    const input = {
      text:
        textTokens(instructions) +
        textTokens(tools.length ? JSON.stringify(tools) : '') +
        context.reduce((sum, item) => sum + item.text, 0),
      audio: context.reduce((sum, item) => sum + item.audio, 0),
    };
    const cached = {
      text: Math.min(Math.floor(this.previousInput.text / 64) * 64, input.text),
      audio: Math.min(Math.floor(this.previousInput.audio / 64) * 64, input.audio),
    };
    if (!outOfBand) this.previousInput = input;
    const voice = (this.config.audio as { output: Json }).output.voice;
    const format = (this.config.audio as { output: Json }).output.format;
    const response: Json = {
      object: 'realtime.response',
      id: active.id,
      status: 'in_progress',
      output: [],
      conversation_id: outOfBand ? undefined : this.id.replace('sess_', 'conv_'),
      output_modalities: [audio ? 'audio' : 'text'],
      max_output_tokens: params.max_output_tokens ?? this.config.max_output_tokens,
      audio: { output: { format, voice } },
      metadata: (params.metadata as Json | undefined) ?? null,
    };
    if (outOfBand) delete response.conversation_id;
    this.send({ type: 'response.created', response });
    this.send({
      type: 'rate_limits.updated',
      rate_limits: [
        { name: 'requests', limit: 1000, remaining: 999, reset_seconds: 0.06 },
        { name: 'tokens', limit: 40_000, remaining: 40_000 - input.text - input.audio, reset_seconds: 1.2 },
      ],
    });

    const last = context.at(-1)?.json;
    const lastText = last?.role === 'user' ? userText(last) : undefined;
    const call = toolChoice === 'none' || lastText === undefined ? undefined : functionCallFor(lastText, tools);
    const output = { text: 0, audio: 0 };
    let item: Json;
    if (call) {
      item = await this.streamFunctionCall(active, call, outOfBand);
      output.text = textTokens(call.arguments) + 4;
    } else {
      const answer = answerFor(last);
      const streamed = await this.streamMessage(
        active,
        answer,
        audio,
        outOfBand,
        lastText?.includes('[hold]') ?? false,
      );
      item = streamed.item;
      output.text = textTokens(streamed.said);
      // Assistant audio: a token each 50 ms.
      output.audio = Math.ceil(streamed.audioBytes / PCM_BYTES_PER_MS / 50);
    }
    if (!outOfBand) this.items.push({ json: item, text: output.text, audio: output.audio });

    const inputTokens = input.text + input.audio;
    const outputTokens = output.text + output.audio;
    this.send({
      type: 'response.done',
      response: {
        ...response,
        status: active.cancelled ? 'cancelled' : 'completed',
        ...(active.cancelled ? { status_details: { type: 'cancelled', reason: 'client_cancelled' } } : {}),
        output: [item],
        usage: {
          total_tokens: inputTokens + outputTokens,
          input_tokens: inputTokens,
          output_tokens: outputTokens,
          input_token_details: {
            text_tokens: input.text,
            audio_tokens: input.audio,
            image_tokens: 0,
            cached_tokens: cached.text + cached.audio,
            cached_tokens_details: { text_tokens: cached.text, audio_tokens: cached.audio, image_tokens: 0 },
          },
          output_token_details: { text_tokens: output.text, audio_tokens: output.audio },
        },
      },
    });
  }

  private async streamFunctionCall(
    active: ActiveResponse,
    call: { name: string; arguments: string },
    outOfBand: boolean,
  ): Promise<Json> {
    const base = {
      id: newId('item'),
      object: 'realtime.item',
      type: 'function_call',
      call_id: newId('call'),
      name: call.name,
    };
    const ids = { response_id: active.id, item_id: base.id, output_index: 0, call_id: base.call_id };
    this.send({
      type: 'response.output_item.added',
      response_id: active.id,
      output_index: 0,
      item: { ...base, status: 'in_progress', arguments: '' },
    });
    if (!outOfBand)
      this.send({
        type: 'conversation.item.added',
        previous_item_id: this.items.at(-1)?.json.id ?? null,
        item: { ...base, status: 'in_progress', arguments: '' },
      });
    for (const piece of pieces(call.arguments, 8)) {
      await this.pause(active);
      if (active.cancelled) break;
      this.send({ type: 'response.function_call_arguments.delta', ...ids, delta: piece });
    }
    const item = {
      ...base,
      status: active.cancelled ? 'incomplete' : 'completed',
      arguments: active.cancelled ? '' : call.arguments,
    };
    if (!active.cancelled)
      this.send({ type: 'response.function_call_arguments.done', ...ids, name: call.name, arguments: call.arguments });
    this.send({ type: 'response.output_item.done', response_id: active.id, output_index: 0, item });
    if (!outOfBand)
      this.send({ type: 'conversation.item.done', previous_item_id: this.items.at(-1)?.json.id ?? null, item });
    return item;
  }

  private async streamMessage(
    active: ActiveResponse,
    answer: string,
    audio: boolean,
    outOfBand: boolean,
    hold: boolean,
  ): Promise<{ item: Json; said: string; audioBytes: number }> {
    const base = { id: newId('item'), object: 'realtime.item', type: 'message', role: 'assistant' };
    const at = { response_id: active.id, item_id: base.id, output_index: 0, content_index: 0 };
    const previous = this.items.at(-1)?.json.id ?? null;
    this.send({
      type: 'response.output_item.added',
      response_id: active.id,
      output_index: 0,
      item: { ...base, status: 'in_progress', content: [] },
    });
    if (!outOfBand)
      this.send({
        type: 'conversation.item.added',
        previous_item_id: previous,
        item: { ...base, status: 'in_progress', content: [] },
      });
    this.send({
      type: 'response.content_part.added',
      ...at,
      part: audio ? { type: 'audio', transcript: '' } : { type: 'text', text: '' },
    });

    const words = answer.split(/(?<= )/);
    const tone = audio ? fakeToneBytes(answer.length * AUDIO_MS_PER_CHARACTER) : Buffer.alloc(0);
    const chunkBytes = AUDIO_DELTA_MS * PCM_BYTES_PER_MS;
    const steps = Math.max(words.length, Math.ceil(tone.length / chunkBytes));
    let said = '';
    let audioBytes = 0;
    for (let step = 0; step < steps; step++) {
      await this.pause(active);
      if (active.cancelled) break;
      const word = words[step];
      if (audio) {
        const chunk = tone.subarray(step * chunkBytes, (step + 1) * chunkBytes);
        if (chunk.length > 0) {
          this.audioSent = true;
          audioBytes += chunk.length;
          this.send({ type: 'response.output_audio.delta', ...at, delta: chunk.toString('base64') });
        }
        if (word !== undefined) this.send({ type: 'response.output_audio_transcript.delta', ...at, delta: word });
      } else if (word !== undefined) {
        this.send({ type: 'response.output_text.delta', ...at, delta: word });
      }
      if (word !== undefined) said += word;
      if (hold && step === 0) {
        const holdStarted = Date.now();
        while (!active.cancelled && !active.released && Date.now() - holdStarted < HOLD_LIMIT_MS)
          await this.pause(active, HOLD_LIMIT_MS);
        if (active.cancelled) break;
      }
    }
    if (audio) {
      this.send({ type: 'response.output_audio.done', ...at });
      this.send({ type: 'response.output_audio_transcript.done', ...at, transcript: said });
    } else {
      this.send({ type: 'response.output_text.done', ...at, text: said });
    }
    const part = audio ? { type: 'audio', transcript: said } : { type: 'text', text: said };
    this.send({ type: 'response.content_part.done', ...at, part });
    const item = {
      ...base,
      status: active.cancelled ? 'incomplete' : 'completed',
      content: [audio ? { type: 'output_audio', transcript: said } : { type: 'output_text', text: said }],
    };
    this.send({ type: 'response.output_item.done', response_id: active.id, output_index: 0, item });
    if (!outOfBand) this.send({ type: 'conversation.item.done', previous_item_id: previous, item });
    return { item, said, audioBytes };
  }
}

/**
 * Compiles the spec's schema of every client event now, not at each type's first use (a pause of seconds the bench must
 * not measure).
 */
export function preloadFakeRealtimeSchemas(): void {
  for (const { schema } of Object.values(CLIENT_EVENTS)) openApiSchema(schema);
}

/**
 * Base64 audio with the clock in its bytes 12–19: only the first 24 bytes (32 characters) are decoded and written
 * again.
 */
function stampAudio(audio: string): string {
  if (audio.length < 32) return audio;
  const head = Buffer.from(audio.slice(0, 32), 'base64');
  head.writeDoubleLE(performance.timeOrigin + performance.now(), 12);
  return head.toString('base64') + audio.slice(32);
}

/** The first field the spec does not name: at the event's top, in a session update, in a response's parameters. */
function unknownField(event: Json, fields: readonly string[]): string | undefined {
  for (const key in event) if (key !== 'type' && key !== 'event_id' && !fields.includes(key)) return key;
  if (event.type === 'session.update' && typeof event.session === 'object' && event.session !== null) {
    for (const key of Object.keys(event.session)) if (!SESSION_FIELDS.has(key)) return `session.${key}`;
  }
  if (event.type === 'response.create' && typeof event.response === 'object' && event.response !== null) {
    for (const key of Object.keys(event.response)) if (!RESPONSE_FIELDS.has(key)) return `response.${key}`;
  }
  return undefined;
}

function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out.length ? out : [''];
}

/** The text of a user message (its input_text parts), or its audio's stand-in. */
function userText(item: Json): string | undefined {
  const content = Array.isArray(item.content) ? (item.content as Json[]) : [];
  const texts = content.filter((part) => part.type === 'input_text').map((part) => String(part.text ?? ''));
  return texts.length ? texts.join(' ') : undefined;
}

/** `get_weather({"city":"Paris"})` in the text calls get_weather with those arguments; the bare name with `{}`. */
function functionCallFor(text: string, tools: Json[]): { name: string; arguments: string } | undefined {
  for (const tool of tools) {
    const name = String(tool.name);
    const at = text.indexOf(name);
    if (at < 0) continue;
    const open = text.indexOf('(', at + name.length);
    const close = text.lastIndexOf(')');
    if (open === at + name.length && close > open) {
      try {
        return { name, arguments: JSON.stringify(JSON.parse(text.slice(open + 1, close))) };
      } catch {
        // Not JSON: called without arguments.
      }
    }
    return { name, arguments: '{}' };
  }
  return undefined;
}

function answerFor(last: Json | undefined): string {
  if (!last) return 'Hello from the fake realtime upstream.';
  if (last.type === 'function_call_output') return `The tool answered ${String(last.output)}.`;
  const text = userText(last);
  if (text !== undefined) return `You said: ${text.replace('[hold]', '').trim()}`;
  return 'I heard you speak.';
}

/** Writes an HTTP refusal on a socket that asked to upgrade, as OpenAI's edge answers one. */
function refuse(socket: Duplex, status: number, body: Json, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  const lines = [
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : status === 429 ? 'Too Many Requests' : status === 404 ? 'Not Found' : 'Error'}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(text)}`,
    'connection: close',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  socket.end(`${lines.join('\r\n')}\r\n\r\n${text}`);
}

const errorBody = (message: string, type: string, code: string | null, param: string | null = null) => ({
  error: { message, type, code, param },
});

/** Starts the fake on a free loopback port. */
export async function startFakeOpenAIRealtime(options: FakeOpenAIRealtimeOptions = {}): Promise<FakeOpenAIRealtime> {
  const settings: SessionDeps['options'] = {
    apiKey: options.apiKey ?? FAKE_REALTIME_KEY,
    models: options.models ?? FAKE_REALTIME_MODELS,
    echo: options.echo ?? false,
    echoStamp: options.echoStamp ?? false,
    latencyMs: options.latencyMs ?? 0,
    maxSessions: options.maxSessions ?? Number.POSITIVE_INFINITY,
    record: options.record ?? true,
    checkSentEvents: options.checkSentEvents ?? true,
    ignoreCancels: options.ignoreCancels ?? false,
  };
  const deps: SessionDeps = { options: settings, nextEventId: eventIdFactory(), problems: [] };
  const sessions: FakeRealtimeSession[] = [];
  const open = new Set<FakeRealtimeSession>();
  const upgrades: FakeRealtimeUpgrade[] = [];
  const stalled = new Set<Duplex>();
  let opened = 0;
  let refusal: Parameters<FakeOpenAIRealtime['refuseUpgrades']>[0];
  let afterUpgradeError: Parameters<FakeOpenAIRealtime['failAfterUpgrade']>[0];
  let stall = false;

  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: 16 * 1024 * 1024,
    // Browsers send `realtime` beside the key's subprotocol; OpenAI answers with `realtime`.
    handleProtocols: (protocols) => (protocols.has('realtime') ? 'realtime' : false),
  });

  const server: Server = createServer((request, response) => {
    response.writeHead(request.url?.startsWith('/v1/realtime') ? 426 : 404, { 'content-type': 'application/json' });
    response.end(
      JSON.stringify(
        errorBody('This fake serves only the Realtime WebSocket at /v1/realtime.', 'invalid_request_error', null),
      ),
    );
  });

  const keyOf = (request: IncomingMessage): string | undefined => {
    const authorization = request.headers.authorization;
    if (typeof authorization === 'string' && /^Bearer /i.test(authorization)) return authorization.slice(7).trim();
    const protocols = String(request.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    const insecure = protocols.find((p) => p.startsWith('openai-insecure-api-key.'));
    return insecure?.slice('openai-insecure-api-key.'.length);
  };

  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => {});
    const url = new URL(request.url ?? '/', 'http://fake');
    const record = (status: number) =>
      upgrades.push({ path: `${url.pathname}${url.search}`, headers: request.headers, status });
    if (stall) {
      record(0);
      stalled.add(socket);
      return;
    }
    if (url.pathname !== '/v1/realtime') {
      record(404);
      return refuse(socket, 404, errorBody(`Invalid URL (GET ${url.pathname})`, 'invalid_request_error', null));
    }
    const key = keyOf(request);
    if (key === undefined || key === '') {
      record(401);
      return refuse(
        socket,
        401,
        errorBody(
          "You didn't provide an API key. You need to provide your API key in an Authorization header using " +
            'Bearer auth (i.e. Authorization: Bearer YOUR_KEY).',
          'invalid_request_error',
          null,
        ),
      );
    }
    if (key !== settings.apiKey) {
      record(401);
      return refuse(
        socket,
        401,
        errorBody(
          `Incorrect API key provided: ${key.slice(0, 3)}***${key.slice(-4)}. You can find your API key at https://platform.openai.com/account/api-keys.`,
          'invalid_request_error',
          'invalid_api_key',
        ),
      );
    }
    const model = url.searchParams.get('model') ?? '';
    if (!settings.models.includes(model)) {
      record(404);
      return refuse(
        socket,
        404,
        errorBody(
          `The model \`${model}\` does not exist or you do not have access to it.`,
          'invalid_request_error',
          'model_not_found',
        ),
      );
    }
    if (refusal) {
      record(refusal.status);
      const retry: Record<string, string> =
        refusal.status === 429
          ? {
              'retry-after': String(refusal.retryAfterSeconds ?? 1),
              'retry-after-ms': String((refusal.retryAfterSeconds ?? 1) * 1000),
            }
          : {};
      return refuse(
        socket,
        refusal.status,
        errorBody(
          refusal.message ?? 'Rate limit reached for requests.',
          refusal.status === 429 ? 'requests' : 'server_error',
          refusal.code ?? (refusal.status === 429 ? 'rate_limit_exceeded' : null),
        ),
        retry,
      );
    }
    if (open.size >= settings.maxSessions) {
      record(429);
      return refuse(
        socket,
        429,
        errorBody(
          `Too many concurrent realtime sessions: the limit is ${settings.maxSessions}.`,
          'requests',
          'session_limit_reached',
        ),
        { 'retry-after': '1' },
      );
    }
    record(101);
    wss.handleUpgrade(request, socket, head, (ws) => {
      if (afterUpgradeError) {
        ws.send(
          JSON.stringify({
            type: 'error',
            event_id: deps.nextEventId(),
            error: { ...afterUpgradeError, param: null, event_id: null },
          }),
        );
        ws.close(1008, afterUpgradeError.code);
        return;
      }
      const session = new FakeRealtimeSession(ws, model, request.headers, deps);
      opened++;
      open.add(session);
      sessions.push(session);
      void session.closed.then(() => {
        open.delete(session);
        if (!settings.record) sessions.splice(sessions.indexOf(session), 1);
      });
      session.start();
    });
  });

  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/v1`,
    port,
    key: settings.apiKey,
    sessions,
    upgrades,
    get openSessions() {
      return open.size;
    },
    get opened() {
      return opened;
    },
    problems: deps.problems,
    refuseUpgrades(next) {
      refusal = next;
    },
    failAfterUpgrade(next) {
      afterUpgradeError = next;
    },
    ignoreCancels(on) {
      settings.ignoreCancels = on;
    },
    stallUpgrades(on) {
      stall = on;
      if (!on) for (const socket of stalled) socket.destroy();
      if (!on) stalled.clear();
    },
    killAll(code) {
      for (const session of open) session.kill(code);
    },
    async waitForOpenSessions(count, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs;
      while (open.size !== count) {
        if (Date.now() > until)
          throw new Error(`the fake has ${open.size} open realtime sessions, not ${count}, after ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async close() {
      for (const socket of stalled) socket.destroy();
      for (const session of open) session.kill();
      wss.close();
      await closeServer(server);
    },
  };
}
