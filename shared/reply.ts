/**
 * Messages on an api instance's reply channel. One line of header, then the
 * payload untouched, so the api never re-encodes what the worker serialized:
 *
 *   <kind> <jobId> <seq>\n<payload>
 *
 * kinds: `chunk` (payload = SSE frames exactly as the client gets them),
 * `done` (payload = final body, or empty after a stream), `done-ref` (payload =
 * Redis key holding the body), `error` (payload = WireError JSON), `started`.
 */
export type ReplyKind = 'chunk' | 'done' | 'done-ref' | 'error' | 'started';

export interface ReplyMessage {
  kind: ReplyKind;
  jobId: string;
  seq: number;
  payload: string;
}

export function encodeReply(kind: ReplyKind, jobId: string, seq: number, payload: string): string {
  return `${kind} ${jobId} ${seq}\n${payload}`;
}

export function decodeReply(message: string): ReplyMessage | undefined {
  const newline = message.indexOf('\n');
  if (newline < 0) return undefined;
  const [kind, jobId, seq] = message.slice(0, newline).split(' ');
  if (!kind || !jobId || seq === undefined) return undefined;
  return { kind: kind as ReplyKind, jobId, seq: Number(seq), payload: message.slice(newline + 1) };
}

/** Takes a reply message in the process that holds its channel. */
export type ReplyReceiver = (message: ReplyMessage) => void;

const heldHere = new Map<string, ReplyReceiver>();

/**
 * The reply channels an api of this process holds, each with its receiver. A worker in the same process (`npm start`,
 * a process of role `all`) hands its replies for one of them over in memory, in order, instead of through Redis
 * pub/sub; its job is still added, taken, finished and recorded in Redis like any other, and the replies of any other
 * process's workers still cross pub/sub. A channel let go (its api stopping) is published to again.
 */
export const repliesHeldHere = {
  /** Holds a channel for this process's api; returns what lets it go. */
  hold(channel: string, receive: ReplyReceiver): () => void {
    heldHere.set(channel, receive);
    return () => {
      if (heldHere.get(channel) === receive) heldHere.delete(channel);
    };
  },
  /** The receiver of a channel held here, if any. */
  receiver(channel: string): ReplyReceiver | undefined {
    return heldHere.get(channel);
  },
};

/**
 * How late a stream's replay log may trail its live chunks: the worker appends
 * the batches published since its last append at most this often (the first
 * batch, and every batch of a stream nobody holds, at once), not one entry per
 * batch. The log is read only to recover (a resume, a reconnected subscriber).
 */
export const replayLogIntervalMs = 100;
/** How long a reader that found the log behind the live chunks waits before it reads again. */
export const replayLogLagMs = 2 * replayLogIntervalMs;

/**
 * A stream's replay log (a Redis stream under `replayStreamKey`): entries of
 * published batches, `seq` (the entry's last batch), `frames` (their SSE
 * frames, in order) and `first` (the number of its first frame: frames are
 * numbered from 0 across the stream, as the `id:` lines of chat chunks and the
 * `sequence_number` of Responses events say), then one terminal entry with
 * `end` (`done` or `error`) and its `payload`. An entry holding several
 * batches (the log is written at most every so often, not every batch) also
 * has `from` (its first batch) and `lens` (each batch's length in `frames`).
 * The first entry also names the key that owns the stream (`owner`), so a
 * resume by another key is refused.
 */
export interface LogEntry {
  /** The Redis stream entry id. */
  id: string;
  /** The entry's last batch; `from` its first (the same when it holds one). */
  seq: number;
  from: number;
  /** Each batch's length in `frames`, from `from` to `seq` (absent for one batch). */
  lens?: number[];
  first: number;
  frames: string;
  end?: 'done' | 'error';
  payload?: string;
  owner?: string;
}

export function parseLogEntry(id: string, fields: readonly string[]): LogEntry {
  const entry: LogEntry = { id, seq: 0, from: Number.NaN, first: 0, frames: '' };
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const value = fields[i + 1]!;
    switch (fields[i]) {
      case 'seq':
        entry.seq = Number(value);
        break;
      case 'first':
        entry.first = Number(value);
        break;
      case 'from':
        entry.from = Number(value);
        break;
      case 'lens':
        entry.lens = value.split(',').map(Number);
        break;
      case 'frames':
        entry.frames = value;
        break;
      case 'end':
        entry.end = value === 'error' ? 'error' : 'done';
        break;
      case 'payload':
        entry.payload = value;
        break;
      case 'owner':
        entry.owner = value;
        break;
    }
  }
  if (Number.isNaN(entry.from)) entry.from = entry.seq;
  return entry;
}

/** The frames of an entry's batches after batch `afterSeq` (all of them when it starts later). */
export function framesAfterBatch(entry: LogEntry, afterSeq: number): string {
  if (afterSeq < entry.from) return entry.frames;
  if (afterSeq >= entry.seq || !entry.lens) return '';
  let at = 0;
  for (let batch = entry.from; batch <= afterSeq; batch++) at += entry.lens[batch - entry.from] ?? 0;
  return entry.frames.slice(at);
}

/** How many SSE frames a batch holds (each ends with a blank line; data never holds one). */
export function countFrames(frames: string): number {
  let count = 0;
  for (let at = frames.indexOf('\n\n'); at >= 0; at = frames.indexOf('\n\n', at + 2)) count++;
  return count;
}

/** The frames of an entry numbered above `after`, and the number of its last frame. */
export function framesAfter(entry: LogEntry, after: number): { frames: string; last: number } {
  const count = countFrames(entry.frames);
  const last = entry.first + count - 1;
  if (after < entry.first) return { frames: entry.frames, last };
  if (after >= last) return { frames: '', last };
  let at = 0;
  for (let n = entry.first; n <= after; n++) at = entry.frames.indexOf('\n\n', at) + 2;
  return { frames: entry.frames.slice(at), last };
}
