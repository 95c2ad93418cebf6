import type { GatewayContext } from '../http/context.js';
import type { Redis } from 'ioredis';
import { setTimeout as pause } from 'node:timers/promises';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import { replayStreamKey, streamWatchKey } from '../../shared/redis-keys.js';
import { framesAfter, parseLogEntry, type LogEntry } from '../../shared/reply.js';
import { EventStream, type StreamFraming } from '../http/event-stream.js';
import { clientDisconnected, markFirstByte } from '../http/metrics.js';

/** Set while someone follows a stream's log: a stream whose first client left is kept running while it exists. */
const watchTtlMs = 6000;

/** The 404 for a stream this key cannot resume: alike for one that never was and for another key's. */
export const noStream = (named: string) =>
  new GatewayError(
    404,
    `No stream with id '${named.slice(0, 200)}' can be resumed here (streams are kept a while after they end).`,
    { code: 'not_found' },
  );

export interface FollowOptions {
  /** The stream's job id: its log is `replayStreamKey(jobId)`. */
  jobId: string;
  /** The id as the client named it (a chat completion's id, say): the only id an error may show. */
  named: string;
  /** The key asking: the log's owner must be it, or the stream does not exist for it. */
  owner: string;
  /** Frames numbered up to this one are skipped (-1: the whole stream). */
  after: number;
  /** How the client named `after`, for the error when it is past the end. */
  afterParam: string;
  /** No log yet: `wait` for a queued job's first events, or `fail` (404). */
  whenMissing: 'wait' | 'fail';
  /** Epoch ms after which a stream still running is left (the client may resume again). */
  until: number;
  keepAliveMs: number;
  /**
   * How the stream is labelled and kept alive (server-sent events unless said: a Google array stream follows in its own
   * form).
   */
  framing?: StreamFraming;
  /** What the client gets for the log's terminal entry. */
  onEnd(entry: LogEntry): string;
  /**
   * Rewrites the log's frames before they are written (whole frames, one or more at a time); absent: written as logged.
   */
  rewrite?: (text: string) => string;
  /** Stops following before the log's end (its writer is known gone): the client gets `onStop`'s frame. */
  stop?: { signal: AbortSignal; onStop(): string };
  /**
   * With `whenMissing: 'wait'`: nothing is written (not even the headers) until the log's first entry. Stopped or
   * past `until` before it, the follow resolves `unstarted` and the response is the caller's to answer.
   */
  openOnFirst?: boolean;
}

/**
 * How a follow ended: `ended` (the log's end, a stop, the deadline, or the client left), or `unstarted` (see
 * `openOnFirst`).
 */
export type FollowOutcome = 'ended' | 'unstarted';

function compareIds(a: string, b: string): number {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am - bm || as - bs;
}

interface Follower {
  cursor: string;
  push(entries: LogEntry[]): void;
}

/**
 * Replays a stream's event log to a client from any point, then follows it
 * live until its terminal entry: the resume of a chat stream
 * (`GET /v1/chat/completions/{id}/stream`) and of a Responses stream
 * (`GET /v1/responses/{id}?stream=true&starting_after=N`), on whichever api
 * instance the client reaches. Live entries are read with one blocking
 * `XREAD` over every followed log, on one connection of its own.
 */
export class EventLogs {
  private readonly followers = new Map<string, Set<Follower>>();
  private tail: Redis | undefined;
  private looping = false;
  private closed = false;

  constructor(
    private readonly redis: Redis,
    private readonly log: Logger,
  ) {}

  close(): void {
    this.closed = true;
    this.tail?.disconnect();
  }

  /** Answers the client with the log's frames after `options.after`, live ones included, until the end. */
  async follow(ctx: GatewayContext, options: FollowOptions): Promise<FollowOutcome> {
    const key = replayStreamKey(options.jobId);
    const entries = (await this.redis.xrange(key, '-', '+')).map(([id, fields]) => parseLogEntry(id, fields));
    // Missing, another key's, or one whose start was trimmed from the log: the same answer, naming only what the client
    // named.
    if (
      (entries.length === 0 && options.whenMissing === 'fail') ||
      (entries.length > 0 && entries[0]!.owner !== options.owner)
    )
      throw noStream(options.named);
    if (
      entries.length > 0 &&
      options.after >= 0 &&
      entries[0]!.first > options.after + 1 &&
      entries[0]!.end === undefined
    ) {
      throw invalidRequest(`The events after ${options.after} are no longer in this stream's log.`, options.afterParam);
    }
    let lastNumber = -1;
    let text = '';
    let ended: LogEntry | undefined;
    const take = (batch: readonly LogEntry[]) => {
      for (const entry of batch) {
        if (ended) break;
        if (entry.end !== undefined) {
          ended = entry;
          continue;
        }
        const { frames, last } = framesAfter(entry, options.after);
        lastNumber = Math.max(lastNumber, last);
        text += frames;
      }
    };
    take(entries);
    if (ended && options.after > lastNumber) {
      throw invalidRequest(
        `${options.afterParam} ${options.after} is past the end of the stream: its last event is ${lastNumber}.`,
        options.afterParam,
      );
    }

    const res = ctx.res;
    const events = new EventStream(ctx, options.framing);
    let open = false;
    const openNow = () => {
      if (open) return;
      open = true;
      events.open();
      markFirstByte(ctx);
    };
    if (entries.length > 0 || !options.openOnFirst) openNow();
    const flush = () => {
      if (text !== '') events.write(options.rewrite ? options.rewrite(text) : text);
      text = '';
    };
    if (open) flush();
    if (ended) {
      events.end(options.onEnd(ended));
      return 'ended';
    }

    // Live: every entry after the last one read.
    return new Promise<FollowOutcome>((resolve) => {
      let finished = false;
      const follower: Follower = {
        cursor: entries.at(-1)?.id ?? '0-0',
        push: (batch) => {
          openNow();
          take(batch);
          flush();
          if (ended) finish(options.onEnd(ended));
        },
      };
      const watch = () =>
        void this.redis.set(streamWatchKey(options.jobId), '1', 'PX', watchTtlMs).catch(() => undefined);
      watch();
      const watching = setInterval(watch, watchTtlMs / 3);
      const keepAlive = setInterval(() => open && events.keepAlive(), options.keepAliveMs);
      const deadline = setTimeout(() => finish(''), Math.max(0, options.until - Date.now()));
      const stopped = () => finish(open ? options.stop!.onStop() : '');
      const finish = (last: string, left = false) => {
        if (finished) return;
        finished = true;
        options.stop?.signal.removeEventListener('abort', stopped);
        clearInterval(watching);
        clearInterval(keepAlive);
        clearTimeout(deadline);
        res.off('close', onClose);
        this.unfollow(key, follower);
        if (!open && !left) return resolve('unstarted');
        if (open && !res.destroyed) events.end(last);
        resolve('ended');
      };
      const onClose = () => {
        clientDisconnected('follow');
        finish('', true);
      };
      res.once('close', onClose);
      this.followers.set(key, (this.followers.get(key) ?? new Set()).add(follower));
      void this.loop();
      if (options.stop?.signal.aborted) stopped();
      else options.stop?.signal.addEventListener('abort', stopped);
    });
  }

  private unfollow(key: string, follower: Follower): void {
    const set = this.followers.get(key);
    set?.delete(follower);
    if (set?.size === 0) this.followers.delete(key);
  }

  /**
   * One blocking read over every followed log at a time. It blocks at most
   * 250 ms, so a log followed meanwhile joins the next read (its follower
   * already read what the log held, so nothing is missed in between).
   */
  private async loop(): Promise<void> {
    if (this.looping) return;
    this.looping = true;
    try {
      this.tail ??= this.redis.duplicate({ connectionName: undefined, maxRetriesPerRequest: null });
      while (this.followers.size > 0 && !this.closed) {
        const keys = [...this.followers.keys()];
        const cursors = keys.map((key) =>
          [...this.followers.get(key)!].map((f) => f.cursor).reduce((a, b) => (compareIds(a, b) <= 0 ? a : b)),
        );
        let reply: Array<[string, Array<[string, string[]]>]> | null;
        try {
          reply = (await this.tail.xread('COUNT', 1000, 'BLOCK', 250, 'STREAMS', ...keys, ...cursors)) as typeof reply;
        } catch (error) {
          if (this.closed) return;
          this.log.debug({ err: error }, 'reading followed stream logs failed; retrying');
          await pause(250);
          continue;
        }
        for (const [key, raw] of reply ?? []) {
          const batch = raw.map(([id, fields]) => parseLogEntry(id, fields));
          for (const follower of [...(this.followers.get(key) ?? [])]) {
            const fresh = batch.filter((entry) => compareIds(entry.id, follower.cursor) > 0);
            if (fresh.length === 0) continue;
            follower.cursor = fresh.at(-1)!.id;
            follower.push(fresh);
          }
        }
      }
    } finally {
      this.looping = false;
    }
  }
}
