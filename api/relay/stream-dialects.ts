import type { GatewayError } from '../../shared/errors.js';
import { anthropicErrorBody } from '../../shared/messages.js';
import { sseDone, sseJson } from '../../shared/sse.js';
import { sseFraming, type StreamFraming } from '../http/event-stream.js';
import { googleErrorBody } from '../http/envelope.js';

/*
 * What a stream writes of its own, beside the frames its job published, in each dialect: how it is labelled and
 * kept alive while it waits, the error it ends with once output began, and how it ends when the api answers for
 * a job it could not hear end (a reconnect). OpenAI's streams keep alive with a comment and end with `[DONE]`;
 * Anthropic's ping and send `event: error`; Google's come in two forms (`?alt=sse` server-sent events, or by
 * default one JSON array whose elements are the chunks) whose readers take no comment line, no `id:` and no
 * `event:` (Gemini CLI's reader matches `data:` at the start of what it has; the Python SDK parses every other
 * line as JSON): a Google stream keeps alive with a line break, which SSE reads as an empty event and JSON as
 * whitespace between elements.
 *
 * Speech's audio form (`audio`) is no event stream at all: the audio's own bytes, chunked as they come, under the
 * format's content type (`api/relay/audio-reply.ts` writes them; the worker sends them base64 on the text reply
 * channel). Nothing can keep it alive (any byte would be audio) and nothing can end it with an error: a failure
 * once its bytes began cuts the response short, so the client never takes truncated audio for whole.
 */

/**
 * A stream's dialect: OpenAI's, Anthropic's (the Messages API), Google's in its SSE or array form, speech's audio, or
 * MCP's (a tool call's progress notifications, then its JSON-RPC response, each an event; its late error is the
 * call's JSON-RPC error, which its holder writes: `HoldOptions.lateError`).
 */
export type StreamDialect = 'openai' | 'anthropic' | 'google-sse' | 'google-array' | 'audio' | 'mcp';

/** Google's keep-alive: a blank line (see above). */
const googleKeepAlive = '\n';

const googleSse: StreamFraming = { contentType: 'text/event-stream; charset=utf-8', keepAlive: googleKeepAlive };
const googleArray: StreamFraming = { contentType: 'application/json; charset=utf-8', keepAlive: googleKeepAlive };

const anthropicPing = sseJson({ type: 'ping' }, 'ping');
const anthropicFraming: StreamFraming = { ...sseFraming, keepAlive: anthropicPing };

/**
 * Speech's audio: labelled by its format where it is written (the content type here is only a fallback), never kept
 * alive.
 */
const audioFraming: StreamFraming = { contentType: 'application/octet-stream', keepAlive: '' };

/** How a stream of this dialect is labelled and kept alive. */
export function framingOf(dialect: StreamDialect): StreamFraming {
  switch (dialect) {
    case 'audio':
      return audioFraming;
    case 'google-sse':
      return googleSse;
    case 'google-array':
      return googleArray;
    // Anthropic's clients skip `ping` events wherever they come, as its own streams send them while a model thinks.
    case 'anthropic':
      return anthropicFraming;
    default:
      return sseFraming;
  }
}

/**
 * The last frame of a stream that fails once its output began. A Google array that has an element already gets
 * the error as its next one and is closed; one that has none yet is the error alone.
 */
export function lateErrorFrame(
  dialect: StreamDialect,
  error: GatewayError,
  requestId: string,
  wroteChunk: boolean,
): string {
  switch (dialect) {
    // Audio has no error frame: its response is cut short instead (see above).
    case 'audio':
      return '';
    // MCP's names the call's JSON-RPC id, which only its holder knows (`HoldOptions.lateError`).
    case 'mcp':
      return '';
    case 'anthropic':
      return sseJson(anthropicErrorBody(error.status, error.message, requestId), 'error');
    case 'google-sse':
      return sseJson(googleErrorBody(error));
    case 'google-array':
      return `${wroteChunk ? ',\r\n' : '['}${JSON.stringify(googleErrorBody(error))}]`;
    default:
      return sseJson(error.toBody());
  }
}

/** How a stream ends when the api answers for its job (the job finished while the api could not hear it). */
export function trailerOf(dialect: StreamDialect): string {
  switch (dialect) {
    case 'openai':
      return sseDone;
    case 'google-array':
      return ']';
    default:
      return '';
  }
}

/**
 * The end of a Google array as it goes out: the worker ends it with `]`, which closes the array its first chunk
 * opened (an empty end is read as that `]`); a stream that wrote no element (none came, or they were lost to a
 * reconnect) needs the opening too.
 */
export function arrayEnd(payload: string, wroteChunk: boolean): string {
  const end = payload.trim() === '' ? ']' : payload;
  return wroteChunk || end.startsWith('[') ? end : `[${end}`;
}
