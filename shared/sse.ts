/**
 * Server-sent events as every dialect writes them: the one framer the worker's encoders, a native vendor's relay,
 * the api's own events (keep-alives, late errors) and the cache's replay use. A frame is `id:` (a stream that can
 * be resumed numbers its frames), `event:` (Anthropic's and the Responses API's named events), then its `data:`
 * line, ended by a blank line. `data` is written as given: callers pass JSON they serialized once. What reads such
 * frames back (the cache's stored events, a hit's rewritten stream) reads them with `readSseFrame`.
 */

/** One event: `data` as given (already JSON text), under its `event:` name and `id:` when it has them. */
export function sseFrame(data: string, event?: string, id?: number): string {
  // One template per case: a nested one costs a chat chunk about 6 % more (it is written once per streamed token).
  if (id === undefined) return event === undefined ? `data: ${data}\n\n` : `event: ${event}\ndata: ${data}\n\n`;
  return event === undefined ? `id: ${id}\ndata: ${data}\n\n` : `id: ${id}\nevent: ${event}\ndata: ${data}\n\n`;
}

/** One event carrying `value` as JSON. */
export function sseJson(value: unknown, event?: string, id?: number): string {
  return sseFrame(JSON.stringify(value), event, id);
}

/** A comment line: every SSE client skips it, and the connection (and each proxy on the way) sees bytes. */
export const sseKeepAlive = ': keep-alive\n\n';

/** The `data` that ends OpenAI's chat and completions streams: not JSON. */
export const sseDoneData = '[DONE]';
/** The frame that ends every chat and completions stream. */
export const sseDone = `data: ${sseDoneData}\n\n`;

/** A frame as written here, read back: its `event:` name, its one `data:` line's text and that line's index. */
export interface ReadFrame {
  event: string | undefined;
  /** Undefined when the frame has no `data:` line, or several (not a frame this project writes). */
  data: string | undefined;
  dataLine: number;
}

/** One frame (its lines, without the blank line that ends it) read back. */
export function readSseFrame(frame: string): ReadFrame {
  let event: string | undefined;
  let data: string | undefined;
  let dataLine = -1;
  const lines = frame.split('\n');
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!;
    if (line.startsWith('data: ')) {
      if (dataLine >= 0) return { event, data: undefined, dataLine: -1 };
      data = line.slice(6);
      dataLine = index;
    } else if (line.startsWith('event: ')) event = line.slice(7);
  }
  return { event, data, dataLine };
}
