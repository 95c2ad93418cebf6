import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { assertMatchesSchema } from './openapi-schemas.js';

/**
 * A Realtime client for the tests: the official SDK's `OpenAIRealtimeWS` pointed at a gateway's plain HTTP port (it
 * builds a `wss://` URL from the base URL; the connection is made here, in the clear), every event it gets kept and
 * checked against the spec's schema for its type, and waits on the next event of a type.
 */

/** The spec's schema of each GA server event, by its type. */
export const serverEventSchemas: Record<string, string> = {
  error: 'RealtimeServerEventError',
  'session.created': 'RealtimeServerEventSessionCreated',
  'session.updated': 'RealtimeServerEventSessionUpdated',
  'input_audio_buffer.committed': 'RealtimeServerEventInputAudioBufferCommitted',
  'input_audio_buffer.cleared': 'RealtimeServerEventInputAudioBufferCleared',
  'conversation.item.added': 'RealtimeServerEventConversationItemAdded',
  'conversation.item.done': 'RealtimeServerEventConversationItemDone',
  'response.created': 'RealtimeServerEventResponseCreated',
  'response.done': 'RealtimeServerEventResponseDone',
  'rate_limits.updated': 'RealtimeServerEventRateLimitsUpdated',
  'response.output_item.added': 'RealtimeServerEventResponseOutputItemAdded',
  'response.output_item.done': 'RealtimeServerEventResponseOutputItemDone',
  'response.content_part.added': 'RealtimeServerEventResponseContentPartAdded',
  'response.content_part.done': 'RealtimeServerEventResponseContentPartDone',
  'response.output_text.delta': 'RealtimeServerEventResponseTextDelta',
  'response.output_text.done': 'RealtimeServerEventResponseTextDone',
  'response.output_audio.delta': 'RealtimeServerEventResponseAudioDelta',
  'response.output_audio.done': 'RealtimeServerEventResponseAudioDone',
  'response.output_audio_transcript.delta': 'RealtimeServerEventResponseAudioTranscriptDelta',
  'response.output_audio_transcript.done': 'RealtimeServerEventResponseAudioTranscriptDone',
  'response.function_call_arguments.delta': 'RealtimeServerEventResponseFunctionCallArgumentsDelta',
  'response.function_call_arguments.done': 'RealtimeServerEventResponseFunctionCallArgumentsDone',
  'conversation.created': 'RealtimeServerEventConversationCreated',
  'conversation.item.created': 'RealtimeServerEventConversationItemCreated',
  'conversation.item.deleted': 'RealtimeServerEventConversationItemDeleted',
  'conversation.item.retrieved': 'RealtimeServerEventConversationItemRetrieved',
  'conversation.item.truncated': 'RealtimeServerEventConversationItemTruncated',
  'conversation.item.input_audio_transcription.delta':
    'RealtimeServerEventConversationItemInputAudioTranscriptionDelta',
  'conversation.item.input_audio_transcription.completed':
    'RealtimeServerEventConversationItemInputAudioTranscriptionCompleted',
  'conversation.item.input_audio_transcription.failed':
    'RealtimeServerEventConversationItemInputAudioTranscriptionFailed',
  'conversation.item.input_audio_transcription.segment':
    'RealtimeServerEventConversationItemInputAudioTranscriptionSegment',
  'input_audio_buffer.speech_started': 'RealtimeServerEventInputAudioBufferSpeechStarted',
  'input_audio_buffer.speech_stopped': 'RealtimeServerEventInputAudioBufferSpeechStopped',
  'input_audio_buffer.timeout_triggered': 'RealtimeServerEventInputAudioBufferTimeoutTriggered',
  'output_audio_buffer.started': 'RealtimeServerEventOutputAudioBufferStarted',
  'output_audio_buffer.stopped': 'RealtimeServerEventOutputAudioBufferStopped',
  'output_audio_buffer.cleared': 'RealtimeServerEventOutputAudioBufferCleared',
};

/** Checks a server event against the spec: its own schema, and the union of server events. */
export function assertServerEvent(event: { type: string }, where: string): void {
  const schema = serverEventSchemas[event.type];
  assert.ok(schema, `${where}: an event of a type the tests do not know: ${event.type}`);
  assertMatchesSchema(schema, event, `${where} ${event.type}`);
}

export type ServerEvent = Record<string, unknown> & { type: string };

/**
 * Events as they come, and the next one of a type not yet taken (one already received counts), waited for up to a
 * deadline: the tests' realtime clients read a session's events through it.
 */
export class EventInbox<E extends { type: string }> {
  readonly events: E[] = [];
  private readonly taken = new Set<E>();
  private readonly waiters: Array<{ type: string; resolve: (event: E) => void }> = [];

  push(event: E): void {
    this.events.push(event);
    const at = this.waiters.findIndex((w) => w.type === event.type);
    if (at >= 0) {
      this.taken.add(event);
      this.waiters.splice(at, 1)[0]!.resolve(event);
    }
  }

  next(type: string, timeoutMs: number): Promise<E> {
    return new Promise<E>((resolve, reject) => {
      const ready = this.events.find((e) => e.type === type && !this.taken.has(e));
      if (ready) {
        this.taken.add(ready);
        return resolve(ready);
      }
      const waiter = {
        type,
        resolve: (event: E) => {
          clearTimeout(timer);
          resolve(event);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(new Error(`no ${type} within ${timeoutMs} ms; got ${this.events.map((e) => e.type).join(', ')}`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }
}

/** A refused upgrade, as `opened` rejects with it: the gateway's HTTP status, headers and body. */
export interface RealtimeRefusal extends Error {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export interface RealtimeTestClient<E extends ServerEvent = ServerEvent> {
  rt: OpenAIRealtimeWS;
  events: E[];
  /** The next event of this type (one already received and not yet taken counts). */
  next(type: string, timeoutMs?: number): Promise<E>;
  /** Sends a client event as it is written (a test may send one the spec does not allow). */
  send(event: Record<string, unknown>): void;
  /** Resolves with the close code and reason once the socket closes. */
  closed: Promise<{ code: number; reason: string }>;
  /** Resolves once the socket is open (the gateway answered 101); rejects with a RealtimeRefusal when refused. */
  opened: Promise<void>;
  /** The upgrade's `x-request-id` (the session's id), once the gateway answered 101. */
  requestId: Promise<string>;
}

/** `E`: how the test reads the events' fields (the default keeps them `unknown`). */
export function openRealtime<E extends ServerEvent = ServerEvent>(
  gatewayUrl: string,
  apiKey: string,
  model = 'mock-realtime',
): RealtimeTestClient<E> {
  const port = Number(new URL(gatewayUrl).port);
  const client = new OpenAI({ apiKey, baseURL: `${gatewayUrl}/v1` });
  const rt = new OpenAIRealtimeWS(
    { model, options: { createConnection: () => net.connect(port, '127.0.0.1') } },
    client,
  );
  const inbox = new EventInbox<E>();
  rt.on('event', (event) => {
    const e = event as unknown as E;
    assertServerEvent(e, 'gateway');
    inbox.push(e);
  });
  // Error events are kept with the rest; the SDK throws them when nobody listens.
  rt.on('error', () => undefined);
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    rt.socket.once('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  const requestId = new Promise<string>((resolve) =>
    rt.socket.once('upgrade', (response) => resolve(String(response.headers['x-request-id']))),
  );
  const opened = new Promise<void>((resolve, reject) => {
    rt.socket.once('open', () => resolve());
    rt.socket.once('unexpected-response', (_request, response) => {
      let body = '';
      const refused = () =>
        reject(
          Object.assign(new Error(`refused with ${response.statusCode}`), {
            status: response.statusCode ?? 0,
            headers: response.headers,
            body,
          }) satisfies RealtimeRefusal,
        );
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      // 'close' follows 'end', and comes alone when the body is cut short: the refusal is said either way.
      response.once('end', refused);
      response.once('close', refused);
    });
    rt.socket.once('error', (error) => reject(error));
  });
  opened.catch(() => undefined);
  return {
    rt,
    events: inbox.events,
    next: (type, timeoutMs = 15_000) => inbox.next(type, timeoutMs),
    send: (event) => rt.send(event as never),
    closed,
    opened,
    requestId,
  };
}

/** The user's text as a conversation item. */
export function userText(text: string) {
  return {
    type: 'conversation.item.create' as const,
    item: { type: 'message' as const, role: 'user' as const, content: [{ type: 'input_text' as const, text }] },
  };
}
