/**
 * Messages on an api instance's reply channel. One line of header, then the
 * payload untouched, so the api never re-encodes what the worker serialized:
 *
 *   <kind> <requestId> <seq>\n<payload>
 *
 * kinds: `chunk` (payload = SSE frames exactly as the client gets them),
 * `done` (payload = final body, or empty after a stream), `done-ref` (payload =
 * Redis key holding the body), `error` (payload = WireError JSON), `started`.
 */
export type ReplyKind = 'chunk' | 'done' | 'done-ref' | 'error' | 'started';

export interface ReplyMessage {
  kind: ReplyKind;
  requestId: string;
  seq: number;
  payload: string;
}

export function encodeReply(kind: ReplyKind, requestId: string, seq: number, payload: string): string {
  return `${kind} ${requestId} ${seq}\n${payload}`;
}

export function decodeReply(message: string): ReplyMessage | undefined {
  const newline = message.indexOf('\n');
  if (newline < 0) return undefined;
  const [kind, requestId, seq] = message.slice(0, newline).split(' ');
  if (!kind || !requestId || seq === undefined) return undefined;
  return { kind: kind as ReplyKind, requestId, seq: Number(seq), payload: message.slice(newline + 1) };
}

/** The frame that ends every chat and completions SSE stream. */
export const streamTrailer = 'data: [DONE]\n\n';
