import { randomBytes } from 'node:crypto';
import { isGatewayError, type GatewayError } from '../../../shared/errors.js';
import { PcmResampler } from '../../audio/resample.js';
import type { RealtimeClientEvent, RealtimeServerEvent } from '../types.js';
import {
  applySessionUpdate,
  buildLiveSetup,
  defaultLiveSettings,
  describeSession,
  type LiveSessionSettings,
} from './live-setup.js';
import { LiveUsageMeter } from './live-usage.js';

/**
 * One Realtime session's translation between OpenAI's GA events (the worker's side) and Gemini Live's messages (the
 * vendor's), with no socket of its own: `live.ts` feeds it both ways and carries out what it asks (`LiveIo`).
 *
 * Client events become Gemini messages: audio appended (pcm16 24 kHz) is resampled to 16 kHz and streamed as
 * `realtimeInput.audio`, framed by `activityStart`/`activityEnd` when turn detection is off (manual turns), closed
 * by `audioStreamEnd` on a commit when it is on; a user text item is a `clientContent` turn kept in context
 * (`turnComplete: false`) and `response.create` completes the turn (or ends the activity); a function call's output
 * is a `toolResponse` under the call's id, after which Gemini goes on by itself, so the `response.create` that
 * follows waits for that continuation rather than asking for another turn.
 *
 * Gemini's messages become OpenAI's events with ids of the session's own (`event_…`, `resp_…`, `item_…`): a turn's
 * first content opens a response (unless `response.create` opened it already), audio parts are
 * `response.output_audio.delta` (24 kHz as OpenAI's; another rate is resampled), text parts
 * `response.output_text.delta` (thoughts are dropped), transcriptions the input and output transcript events, a
 * `toolCall` a function-call item per call (call_id = Gemini's id) that ends the response, `turnComplete` ends it,
 * `interrupted` ends it cancelled. Each `response.done` carries the usage Gemini reported since the last one.
 *
 * `response.cancel` is best effort, Gemini having no cancel: the response's open items end at once (incomplete),
 * nothing more of that turn is relayed, and `response.done` (cancelled) waits for the turn's end, for its usage, at
 * most `cancelGraceMs`; usage that comes later goes with the next response.
 */

type Json = Record<string, unknown>;

export interface LiveIo {
  /** A message for Gemini on the current socket. */
  vendor(message: Json): void;
  /** An event for the client. */
  emit(event: RealtimeServerEvent): void;
  /** Opens a socket with this setup in place of the current one (resolves once Gemini completed the setup). */
  reconfigure(setup: Json): Promise<void>;
}

export interface LiveTranslatorContext {
  sessionId: string;
  clientModel: string;
  upstreamModel: string;
  /** For `session.expires_at`: how long the session may last. */
  maxSessionMs?: number;
}

export interface LiveTranslatorOptions {
  /** How long a cancelled response waits for its turn's end (and usage) before it is done anyway. */
  cancelGraceMs?: number;
}

interface OpenMessage {
  item: Json;
  outputIndex: number;
  kind: 'audio' | 'text';
  text: string;
}

interface Response {
  id: string;
  output: Json[];
  message: OpenMessage | undefined;
  cancelled: boolean;
  /** The output sample rate Gemini's audio came at, when it was not 24 kHz. */
  resampler: PcmResampler | undefined;
}

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** 100 ms of pcm16 at 24 kHz: OpenAI refuses to commit less. */
const MIN_COMMIT_BYTES = 4800;

export class GeminiLiveTranslator {
  private settings: LiveSessionSettings = defaultLiveSettings();
  private setup: Json;
  private readonly prefix = randomBytes(6).toString('hex');
  private counter = 0;
  private readonly createdAt = Date.now();
  /** Anything sent that Gemini keeps in context: a new setup would lose it. */
  private conversationStarted = false;
  private reconfiguring = false;
  private readonly queued: RealtimeClientEvent[] = [];
  private lastItemId: string | null = null;

  private readonly inputResampler = new PcmResampler(24_000, 16_000);
  private bufferedBytes = 0;
  private activityOpen = false;
  /** The user audio item whose transcript Gemini sends. */
  private inputItem: { id: string; transcript: string; bytes: number } | undefined;
  /** Audio committed (or sent under automatic detection) that no response has answered yet. */
  private uncommittedAudio = 0;

  private response: Response | undefined;
  /** Gemini will start a turn without being asked (after a function response, an audio stream's end). */
  private vendorTurnComing = false;
  /** Drop content until the turn ends (a cancelled response that ended before its turn did). */
  private discardingTurn = false;
  private cancelTimer: NodeJS.Timeout | undefined;
  private readonly usage = new LiveUsageMeter();
  private readonly callNames = new Map<string, string>();
  private readonly cancelGraceMs: number;
  /** A `response.create` that came while a cancelled response waited for its turn's end. */
  private deferredCreate: { params: unknown; eventId: string | undefined } | undefined;

  constructor(
    private readonly ctx: LiveTranslatorContext,
    private readonly io: LiveIo,
    options: LiveTranslatorOptions = {},
  ) {
    this.cancelGraceMs = options.cancelGraceMs ?? 5_000;
    this.setup = buildLiveSetup(this.settings, ctx.upstreamModel);
  }

  /** The setup the first socket opens with (the defaults OpenAI's sessions start with). */
  initialSetup(): Json {
    return this.setup;
  }

  /** The first socket is set up: the client hears `session.created`. */
  start(): void {
    this.emit('session.created', { session: this.describe() });
  }

  dispose(): void {
    clearTimeout(this.cancelTimer);
  }

  // ---- ids and output ----

  private id(kind: string): string {
    return `${kind}_${this.prefix}${(++this.counter).toString(36).padStart(6, '0')}`;
  }

  private emit(type: string, fields: Json): void {
    this.io.emit({ type, event_id: this.id('event'), ...fields });
  }

  private error(
    message: string,
    options: { code?: string | null; param?: string | null; eventId?: string; type?: string } = {},
  ): void {
    this.emit('error', {
      error: {
        type: options.type ?? 'invalid_request_error',
        code: options.code ?? null,
        message,
        param: options.param ?? null,
        event_id: options.eventId ?? null,
      },
    });
  }

  private describe(): Json {
    const expiresAt = Math.floor((this.createdAt + (this.ctx.maxSessionMs ?? 3_600_000)) / 1000);
    return describeSession(this.settings, this.ctx.sessionId, this.ctx.clientModel, expiresAt);
  }

  private vendor(message: Json): void {
    this.conversationStarted ||= !('setup' in message);
    this.io.vendor(message);
  }

  private addItem(item: Json): void {
    this.emit('conversation.item.added', { previous_item_id: this.lastItemId, item });
    this.emit('conversation.item.done', { previous_item_id: this.lastItemId, item });
    this.lastItemId = item.id as string;
  }

  // ---- client → Gemini ----

  fromClient(event: RealtimeClientEvent): void {
    if (this.reconfiguring) {
      this.queued.push(event);
      return;
    }
    try {
      this.handleClient(event);
    } catch (caught) {
      if (!isGatewayError(caught)) throw caught;
      this.error(caught.message, { code: caught.code, param: caught.param, eventId: event.event_id });
    }
  }

  private handleClient(event: RealtimeClientEvent): void {
    const eventId = event.event_id;
    switch (event.type) {
      case 'session.update':
        return this.updateSession(event.session, eventId);
      case 'input_audio_buffer.append':
        return this.appendAudio(event.audio, eventId);
      case 'input_audio_buffer.commit':
        return this.commitAudio(eventId);
      case 'input_audio_buffer.clear':
        this.inputResampler.reset();
        this.bufferedBytes = 0;
        // Gemini has heard what was streamed already: clearing stops only what the resampler still held.
        return this.emit('input_audio_buffer.cleared', {});
      case 'conversation.item.create':
        return this.createItem(event.item, eventId);
      case 'conversation.item.truncate':
        // Gemini keeps its own context and cannot cut an answer short in it; the client's view is what truncates.
        return this.emit('conversation.item.truncated', {
          item_id: typeof event.item_id === 'string' ? event.item_id : '',
          content_index: Number.isInteger(event.content_index) ? event.content_index : 0,
          audio_end_ms: Number.isInteger(event.audio_end_ms) ? event.audio_end_ms : 0,
        });
      case 'response.create':
        return this.createResponse(event.response, eventId);
      case 'response.cancel':
        return this.cancelResponse(event.response_id, eventId);
      case 'conversation.item.delete':
      case 'conversation.item.retrieve':
        return this.error(
          `\`${event.type}\` is not available on Gemini Live models: Gemini keeps the conversation itself.`,
          { code: 'unsupported_event', eventId },
        );
      case 'output_audio_buffer.clear':
        return this.error('`output_audio_buffer.clear` is for WebRTC sessions; this session is a WebSocket.', {
          code: 'unsupported_event',
          eventId,
        });
      case 'transcription_session.update':
        return this.error('Gemini Live models serve realtime sessions, not transcription sessions.', {
          code: 'unsupported_event',
          eventId,
        });
      default:
        return this.error(
          `Invalid value: '${event.type.slice(0, 100)}'. This is not a client event of the Realtime API.`,
          { code: 'invalid_value', param: 'type', eventId },
        );
    }
  }

  private updateSession(session: unknown, eventId: string | undefined): void {
    const settings = applySessionUpdate(this.settings, session);
    const setup = buildLiveSetup(settings, this.ctx.upstreamModel);
    if (JSON.stringify(setup) === JSON.stringify(this.setup)) {
      this.settings = settings;
      this.emit('session.updated', { session: this.describe() });
      return;
    }
    if (this.conversationStarted) {
      this.error(
        "Gemini Live fixes a session's instructions, voice, tools, output modality, turn detection and " +
          'transcription when it starts: these cannot change once the conversation has begun. Send them in the ' +
          'first session.update.',
        { code: 'session_update_too_late', param: 'session', eventId },
      );
      return;
    }
    // Nothing is in Gemini's context yet: a new socket with the new setup loses nothing.
    this.reconfiguring = true;
    this.io.reconfigure(setup).then(
      () => {
        this.settings = settings;
        this.setup = setup;
        this.emit('session.updated', { session: this.describe() });
        this.drainQueue();
      },
      (caught: unknown) => {
        const error = caught as GatewayError;
        this.error(`The session could not be updated: ${error.message}`, {
          type: isGatewayError(error) && error.status < 500 ? 'invalid_request_error' : 'server_error',
          code: isGatewayError(error) ? error.code : null,
          eventId,
        });
        this.drainQueue();
      },
    );
  }

  private drainQueue(): void {
    this.reconfiguring = false;
    while (this.queued.length > 0 && !this.reconfiguring) this.fromClient(this.queued.shift()!);
  }

  private get manualTurns(): boolean {
    return this.settings.turnDetection === null;
  }

  private sendAudio(pcm16k: Buffer): void {
    if (pcm16k.length > 0)
      this.vendor({ realtimeInput: { audio: { data: pcm16k.toString('base64'), mimeType: 'audio/pcm;rate=16000' } } });
  }

  private appendAudio(audio: unknown, eventId: string | undefined): void {
    if (typeof audio !== 'string')
      return this.error('`audio` must be base64-encoded pcm16 audio.', {
        code: 'invalid_value',
        param: 'audio',
        eventId,
      });
    const bytes = Buffer.from(audio, 'base64');
    if (bytes.length === 0) return;
    if (this.manualTurns && !this.activityOpen) {
      this.vendor({ realtimeInput: { activityStart: {} } });
      this.activityOpen = true;
    }
    this.sendAudio(this.inputResampler.push(bytes));
    this.bufferedBytes += bytes.length;
    if (!this.manualTurns) this.uncommittedAudio += bytes.length;
  }

  private commitAudio(eventId: string | undefined): void {
    if (this.bufferedBytes < MIN_COMMIT_BYTES) {
      return this.error(
        `Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer ` +
          `only has ${(this.bufferedBytes / 48).toFixed(2)}ms of audio.`,
        { code: 'input_audio_buffer_commit_empty', eventId },
      );
    }
    this.sendAudio(this.inputResampler.flush());
    if (!this.manualTurns) {
      // Gemini answers the audio by itself once the stream ends: that answer is the response a commit asks for.
      this.vendor({ realtimeInput: { audioStreamEnd: true } });
      this.vendorTurnComing = true;
    }
    this.commitItem(this.bufferedBytes);
    this.bufferedBytes = 0;
    this.uncommittedAudio = 0;
  }

  /** The user's audio item, as OpenAI writes one on a commit. */
  private commitItem(bytes: number): void {
    const id = this.id('item');
    this.emit('input_audio_buffer.committed', { previous_item_id: this.lastItemId, item_id: id });
    this.addItem({
      id,
      object: 'realtime.item',
      type: 'message',
      role: 'user',
      status: 'completed',
      content: [{ type: 'input_audio' }],
    });
    this.inputItem = { id, transcript: '', bytes };
  }

  private createItem(item: unknown, eventId: string | undefined): void {
    if (!isObject(item))
      return this.error('`item` must be an object.', { code: 'invalid_value', param: 'item', eventId });
    const id = typeof item.id === 'string' && item.id !== '' ? item.id : this.id('item');
    if (item.type === 'function_call_output') {
      const callId = item.call_id;
      if (typeof callId !== 'string' || typeof item.output !== 'string') {
        return this.error('A function_call_output item needs a `call_id` and an `output` string.', {
          code: 'invalid_value',
          param: 'item.call_id',
          eventId,
        });
      }
      const name = this.callNames.get(callId);
      if (name === undefined)
        return this.error(`No function call with call_id '${callId.slice(0, 100)}' awaits an output.`, {
          code: 'invalid_value',
          param: 'item.call_id',
          eventId,
        });
      this.callNames.delete(callId);
      this.vendor({
        toolResponse: { functionResponses: [{ id: callId, name, response: { output: parseOutput(item.output) } }] },
      });
      this.vendorTurnComing = true;
      this.addItem({
        id,
        object: 'realtime.item',
        type: 'function_call_output',
        status: 'completed',
        call_id: callId,
        output: item.output,
      });
      return;
    }
    if (item.type !== undefined && item.type !== 'message') {
      return this.error(
        `Gemini Live models take message and function_call_output items, not ${String(item.type).slice(0, 50)}.`,
        { code: 'unsupported_item', param: 'item.type', eventId },
      );
    }
    if (item.role !== 'user' && item.role !== 'assistant') {
      return this.error(
        'Gemini Live models take user and assistant messages; put system instructions in session.instructions.',
        { code: 'unsupported_item', param: 'item.role', eventId },
      );
    }
    const content = Array.isArray(item.content) ? item.content : [];
    const texts: string[] = [];
    for (const [index, part] of content.entries()) {
      const textType = item.role === 'user' ? 'input_text' : 'output_text';
      if (!isObject(part) || (part.type !== textType && part.type !== 'text') || typeof part.text !== 'string') {
        return this.error(`Gemini Live models take ${textType} content in ${item.role} items here.`, {
          code: 'unsupported_content',
          param: `item.content[${index}]`,
          eventId,
        });
      }
      texts.push(part.text);
    }
    if (texts.length === 0)
      return this.error('The message has no content.', { code: 'invalid_value', param: 'item.content', eventId });
    this.vendor({
      clientContent: {
        turns: [{ role: item.role === 'user' ? 'user' : 'model', parts: texts.map((text) => ({ text })) }],
        turnComplete: false,
      },
    });
    const type = item.role === 'user' ? 'input_text' : 'output_text';
    this.addItem({
      id,
      object: 'realtime.item',
      type: 'message',
      role: item.role,
      status: 'completed',
      content: texts.map((text) => ({ type, text })),
    });
  }

  private createResponse(params: unknown, eventId: string | undefined): void {
    if (this.response !== undefined && !this.response.cancelled) {
      return this.error(
        `Conversation already has an active response in progress: ${this.response.id}. Wait until the response ` +
          `is finished before creating a new one.`,
        { code: 'conversation_already_has_active_response', eventId },
      );
    }
    if (isObject(params)) {
      for (const field of ['input', 'instructions', 'tools', 'prompt'] as const) {
        if (params[field] !== undefined)
          return this.error(`Gemini Live models take \`${field}\` for the session, not per response.`, {
            code: 'unsupported_parameter',
            param: `response.${field}`,
            eventId,
          });
      }
      if (params.conversation === 'none')
        return this.error('Gemini Live models answer in the conversation only.', {
          code: 'unsupported_parameter',
          param: 'response.conversation',
          eventId,
        });
      const modalities = params.output_modalities;
      if (Array.isArray(modalities) && JSON.stringify(modalities) !== JSON.stringify(this.settings.outputModalities)) {
        return this.error("Gemini Live models keep the session's output modality for every response.", {
          code: 'unsupported_parameter',
          param: 'response.output_modalities',
          eventId,
        });
      }
    }
    if (this.response?.cancelled) {
      // The cancelled response is done when its turn is: a new turn asked for now would cut into that one.
      this.deferredCreate = { params, eventId };
      return;
    }
    const answerComing = this.vendorTurnComing;
    this.openResponse();
    if (answerComing) return;
    if (this.activityOpen) {
      this.sendAudio(this.inputResampler.flush());
      if (this.bufferedBytes > 0) this.commitItem(this.bufferedBytes);
      this.bufferedBytes = 0;
      this.vendor({ realtimeInput: { activityEnd: {} } });
      this.activityOpen = false;
      return;
    }
    this.vendor({ clientContent: { turnComplete: true } });
  }

  private cancelResponse(responseId: unknown, eventId: string | undefined): void {
    const response = this.response;
    if (response === undefined || response.cancelled) {
      return this.error('Cancellation failed: no active response found', {
        code: 'response_cancel_not_active',
        eventId,
      });
    }
    if (typeof responseId === 'string' && responseId !== response.id) {
      return this.error(
        `Cancellation failed: the active response is ${response.id}, not ${responseId.slice(0, 100)}.`,
        { code: 'response_cancel_not_active', eventId },
      );
    }
    response.cancelled = true;
    this.closeMessage('incomplete');
    this.cancelTimer = setTimeout(() => {
      if (this.response !== response) return;
      this.finishResponse('cancelled', 'client_cancelled');
      this.discardingTurn = true;
    }, this.cancelGraceMs);
  }

  // ---- Gemini → client ----

  fromVendor(message: Json): void {
    if (message.usageMetadata !== undefined) this.usage.record(message.usageMetadata);
    if (isObject(message.serverContent)) this.serverContent(message.serverContent);
    if (isObject(message.toolCall)) this.toolCall(message.toolCall);
    if (isObject(message.toolCallCancellation) && Array.isArray(message.toolCallCancellation.ids)) {
      for (const id of message.toolCallCancellation.ids) if (typeof id === 'string') this.callNames.delete(id);
    }
  }

  private serverContent(content: Json): void {
    if (isObject(content.inputTranscription)) this.inputTranscript(content.inputTranscription);
    const parts = isObject(content.modelTurn) && Array.isArray(content.modelTurn.parts) ? content.modelTurn.parts : [];
    for (const part of parts) if (isObject(part) && part.thought !== true) this.modelPart(part);
    if (
      isObject(content.outputTranscription) &&
      typeof content.outputTranscription.text === 'string' &&
      content.outputTranscription.text !== ''
    ) {
      this.outputTranscript(content.outputTranscription.text);
    }
    if (content.interrupted === true) {
      this.finishInputTranscript();
      if (this.response !== undefined)
        this.finishResponse('cancelled', this.response.cancelled ? 'client_cancelled' : 'turn_detected');
    }
    if (content.turnComplete === true) {
      this.finishInputTranscript();
      this.discardingTurn = false;
      if (this.response !== undefined)
        this.finishResponse(
          this.response.cancelled ? 'cancelled' : 'completed',
          this.response.cancelled ? 'client_cancelled' : undefined,
        );
    }
  }

  /** The response content goes to: the open one, or a new one for a turn Gemini started; none while discarding. */
  private liveResponse(): Response | undefined {
    if (this.discardingTurn) return undefined;
    const response = this.response ?? this.openResponse();
    return response.cancelled ? undefined : response;
  }

  private openResponse(): Response {
    if (!this.manualTurns && this.uncommittedAudio > 0) {
      // Gemini detected the end of speech itself: OpenAI's server VAD commits the audio then.
      this.sendAudio(this.inputResampler.flush());
      this.commitItem(this.uncommittedAudio);
      this.bufferedBytes = 0;
      this.uncommittedAudio = 0;
    }
    const response: Response = {
      id: this.id('resp'),
      output: [],
      message: undefined,
      cancelled: false,
      resampler: undefined,
    };
    this.response = response;
    this.vendorTurnComing = false;
    this.emit('response.created', { response: this.describeResponse(response, 'in_progress') });
    return response;
  }

  private describeResponse(response: Response, status: string, details?: Json, usage?: Json): Json {
    return {
      id: response.id,
      object: 'realtime.response',
      status,
      ...(details ? { status_details: details } : {}),
      output: response.output,
      output_modalities: this.settings.outputModalities,
      audio: { output: { format: { type: 'audio/pcm', rate: 24000 }, voice: this.settings.voice ?? 'Puck' } },
      max_output_tokens: this.settings.maxOutputTokens,
      ...(usage ? { usage } : {}),
    };
  }

  private openMessage(response: Response, kind: 'audio' | 'text'): OpenMessage {
    if (response.message !== undefined) return response.message;
    const item: Json = {
      id: this.id('item'),
      object: 'realtime.item',
      type: 'message',
      role: 'assistant',
      status: 'in_progress',
      content: [],
    };
    const message: OpenMessage = { item, outputIndex: response.output.length, kind, text: '' };
    response.output.push(item);
    response.message = message;
    this.emit('response.output_item.added', {
      response_id: response.id,
      output_index: message.outputIndex,
      item: { ...item },
    });
    this.emit('conversation.item.added', { previous_item_id: this.lastItemId, item: { ...item } });
    this.lastItemId = item.id as string;
    this.emit('response.content_part.added', {
      ...this.at(response, message),
      part: kind === 'audio' ? { type: 'audio', transcript: '' } : { type: 'text', text: '' },
    });
    return message;
  }

  private at(response: Response, message: OpenMessage): Json {
    return { response_id: response.id, item_id: message.item.id, output_index: message.outputIndex, content_index: 0 };
  }

  private modelPart(part: Json): void {
    const audio = this.settings.outputModalities[0] === 'audio';
    if (isObject(part.inlineData) && typeof part.inlineData.data === 'string') {
      const mimeType = typeof part.inlineData.mimeType === 'string' ? part.inlineData.mimeType : '';
      if (!audio || !mimeType.startsWith('audio/pcm')) return;
      const response = this.liveResponse();
      if (response === undefined) return;
      const rate = Number(/rate=(\d+)/.exec(mimeType)?.[1] ?? 24000);
      let delta = part.inlineData.data;
      if (rate !== 24000 && Number.isInteger(rate) && rate > 0) {
        response.resampler ??= new PcmResampler(rate, 24_000);
        delta = response.resampler.push(Buffer.from(delta, 'base64')).toString('base64');
      }
      if (delta === '') return;
      this.emit('response.output_audio.delta', { ...this.at(response, this.openMessage(response, 'audio')), delta });
      return;
    }
    if (typeof part.text === 'string' && part.text !== '' && !audio) {
      const response = this.liveResponse();
      if (response === undefined) return;
      const message = this.openMessage(response, 'text');
      message.text += part.text;
      this.emit('response.output_text.delta', { ...this.at(response, message), delta: part.text });
    }
  }

  private outputTranscript(text: string): void {
    if (this.settings.outputModalities[0] !== 'audio') return;
    const response = this.liveResponse();
    if (response === undefined) return;
    const message = this.openMessage(response, 'audio');
    message.text += text;
    this.emit('response.output_audio_transcript.delta', { ...this.at(response, message), delta: text });
  }

  private inputTranscript(transcription: Json): void {
    if (this.settings.inputTranscription === null) return;
    if (this.inputItem === undefined) {
      if (this.uncommittedAudio === 0) return;
      this.commitItem(this.uncommittedAudio);
      this.uncommittedAudio = 0;
      this.bufferedBytes = 0;
    }
    const item = this.inputItem!;
    if (typeof transcription.text === 'string' && transcription.text !== '') {
      item.transcript += transcription.text;
      this.emit('conversation.item.input_audio_transcription.delta', {
        item_id: item.id,
        content_index: 0,
        delta: transcription.text,
      });
    }
    if (transcription.finished === true) this.finishInputTranscript();
  }

  private finishInputTranscript(): void {
    const item = this.inputItem;
    if (item === undefined) return;
    this.inputItem = undefined;
    if (this.settings.inputTranscription === null) return;
    this.emit('conversation.item.input_audio_transcription.completed', {
      item_id: item.id,
      content_index: 0,
      transcript: item.transcript,
      usage: { type: 'duration', seconds: Math.round((item.bytes / 48_000) * 1000) / 1000 },
    });
  }

  private toolCall(call: Json): void {
    const calls = Array.isArray(call.functionCalls) ? call.functionCalls.filter(isObject) : [];
    if (calls.length === 0) return;
    const response = this.liveResponse();
    if (response === undefined) {
      // A cancelled response's call: nobody will answer it, and Gemini waits for an answer to go on.
      return;
    }
    this.closeMessage('completed');
    for (const fn of calls) {
      const callId = typeof fn.id === 'string' && fn.id !== '' ? fn.id : this.id('call');
      const name = typeof fn.name === 'string' ? fn.name : '';
      const args = JSON.stringify(isObject(fn.args) ? fn.args : {});
      this.callNames.set(callId, name);
      const item: Json = {
        id: this.id('item'),
        object: 'realtime.item',
        type: 'function_call',
        status: 'in_progress',
        call_id: callId,
        name,
        arguments: '',
      };
      const outputIndex = response.output.length;
      response.output.push(item);
      this.emit('response.output_item.added', {
        response_id: response.id,
        output_index: outputIndex,
        item: { ...item },
      });
      this.emit('conversation.item.added', { previous_item_id: this.lastItemId, item: { ...item } });
      this.lastItemId = item.id as string;
      const at = { response_id: response.id, item_id: item.id, output_index: outputIndex, call_id: callId };
      this.emit('response.function_call_arguments.delta', { ...at, delta: args });
      this.emit('response.function_call_arguments.done', { ...at, name, arguments: args });
      item.status = 'completed';
      item.arguments = args;
      this.emit('response.output_item.done', {
        response_id: response.id,
        output_index: outputIndex,
        item: { ...item },
      });
      this.emit('conversation.item.done', { previous_item_id: null, item: { ...item } });
    }
    // OpenAI's response ends with its calls; Gemini's turn goes on once the calls are answered.
    this.finishResponse('completed');
  }

  private closeMessage(status: 'completed' | 'incomplete'): void {
    const response = this.response;
    const message = response?.message;
    if (response === undefined || message === undefined) return;
    response.message = undefined;
    const at = this.at(response, message);
    if (message.kind === 'audio') {
      const tail = response.resampler?.flush();
      if (tail !== undefined && tail.length > 0)
        this.emit('response.output_audio.delta', { ...at, delta: tail.toString('base64') });
      this.emit('response.output_audio.done', at);
      this.emit('response.output_audio_transcript.done', { ...at, transcript: message.text });
      this.emit('response.content_part.done', { ...at, part: { type: 'audio', transcript: message.text } });
      message.item.content = [{ type: 'output_audio', transcript: message.text }];
    } else {
      this.emit('response.output_text.done', { ...at, text: message.text });
      this.emit('response.content_part.done', { ...at, part: { type: 'text', text: message.text } });
      message.item.content = [{ type: 'output_text', text: message.text }];
    }
    message.item.status = status;
    this.emit('response.output_item.done', {
      response_id: response.id,
      output_index: message.outputIndex,
      item: { ...message.item },
    });
    this.emit('conversation.item.done', { previous_item_id: null, item: { ...message.item } });
  }

  private finishResponse(status: 'completed' | 'cancelled', reason?: 'client_cancelled' | 'turn_detected'): void {
    const response = this.response;
    if (response === undefined) return;
    clearTimeout(this.cancelTimer);
    this.closeMessage(status === 'completed' ? 'completed' : 'incomplete');
    this.response = undefined;
    const details = reason === undefined ? { type: status } : { type: status, reason };
    this.emit('response.done', { response: this.describeResponse(response, status, details, this.usage.take()) });
    const deferred = this.deferredCreate;
    this.deferredCreate = undefined;
    if (deferred !== undefined)
      this.fromClient({
        type: 'response.create',
        ...(deferred.eventId ? { event_id: deferred.eventId } : {}),
        response: deferred.params,
      });
  }
}

/** A function's output as Gemini's `response` wants it: `{output: …}`, JSON when the string is JSON. */
function parseOutput(output: string): unknown {
  try {
    return JSON.parse(output);
  } catch {
    return output;
  }
}
