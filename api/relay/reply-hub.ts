import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { setTimeout as pause } from 'node:timers/promises';
import { GatewayError } from '../../shared/errors.js';
import {
  decodeReply,
  framesAfterBatch,
  parseLogEntry,
  repliesHeldHere,
  replayLogLagMs,
  type ReplyMessage,
} from '../../shared/reply.js';
import { apiAliveKey, replayStreamKey } from '../../shared/redis-keys.js';
import { isCluster, inOneWrite } from '../../shared/redis.js';

/**
 * What answers a held request once its job is queued (api/relay/held-reply.ts): what arrives for the job is handed to
 * it.
 */
export interface ReplyTarget {
  /** The job's Redis key. The liveness sweep reads it. */
  readonly jobKey: string;
  deliver(message: ReplyMessage): void;
  reconcile(): void;
  abort(error: GatewayError): Promise<void>;
}

/**
 * A job's reply, expected from before the job is queued (so that nothing it
 * publishes is missed) until the request ends and it is released. What the
 * hub routes to it is kept, in order, until the reply that answers the
 * client takes over, then handed straight on.
 */
export class ExpectedReply {
  /** Highest chunk sequence number delivered, so a replay after a reconnect skips what was seen. */
  lastSeq = 0;
  private target: ReplyTarget | undefined;
  private early: ReplyMessage[] = [];
  /** A forced shutdown before the target took over: the error it gets when it does, and the wait for that. */
  private aborted: { error: GatewayError; done: () => void; settled: Promise<void> } | undefined;

  constructor(
    private readonly hub: ReplyHub,
    readonly jobId: string,
    readonly stream: boolean,
  ) {}

  /** The job's Redis key once its reply is held (the job is queued by then); the liveness sweep reads it. */
  get jobKey(): string | undefined {
    return this.target?.jobKey;
  }

  deliver(message: ReplyMessage): void {
    if (this.target) this.target.deliver(message);
    else this.early.push(message);
  }

  /** Before the job is queued there is nothing in Redis to learn from. */
  reconcile(): void {
    this.target?.reconcile();
  }

  /** Ends the request with this error and cancels its job; resolves once the client has its answer (or is gone). */
  abort(error: GatewayError): Promise<void> {
    if (this.target) return this.target.abort(error);
    if (!this.aborted) {
      let done!: () => void;
      const settled = new Promise<void>((resolve) => (done = resolve));
      this.aborted = { error, done, settled };
    }
    return this.aborted.settled;
  }

  /** The reply that answers the client takes over: first what arrived while the job was being queued. */
  attach(target: ReplyTarget): void {
    this.target = target;
    const early = this.early;
    this.early = [];
    for (const message of early) target.deliver(message);
    const aborted = this.aborted;
    this.aborted = undefined;
    if (aborted) void target.abort(aborted.error).then(aborted.done);
  }

  /** Nobody waits for the reply any more: the request ended, or its job was never queued. */
  release(): void {
    this.hub.forget(this);
    this.early = [];
    this.aborted?.done();
    this.aborted = undefined;
  }
}

/** Result of replaying a stream's chunks from its replay log. */
export interface Replayed {
  /** The first and last batch in the log, and how many batches it holds (`last - first + 1` when none is missing). */
  first: number;
  last: number;
  count: number;
}

const gapRetryMs = 250;

/** A stream whose chunks arrived with a gap, being filled from its replay log. */
interface Gap {
  /** Highest sequence number seen live meanwhile. */
  maxSeen: number;
  /** A `done` or `error` that must wait until the chunks before it are delivered. */
  held?: ReplyMessage;
}

/**
 * The one subscription of an api process: its own reply channel (plus any
 * extra channels, such as key revocations). Replies are routed to waiting
 * requests by request id.
 */
export class ReplyHub {
  private readonly pending = new Map<string, ExpectedReply>();
  private readonly handlers = new Map<string, (message: string) => void>();
  private readonly gaps = new Map<ExpectedReply, Gap>();
  private wasReady = false;
  private sweepTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private sweeping = false;
  /** Lets go of the channel held for this process's own workers (`repliesHeldHere`). */
  private letGo: (() => void) | undefined;

  constructor(
    private readonly subscriber: Redis,
    private readonly redis: Redis,
    readonly channel: string,
    private readonly log: Logger,
    /** How often the liveness of every pending job is checked; 0 turns the sweep off. */
    private readonly sweepMs = 5000,
  ) {
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.dispatch(message);
      else this.handlers.get(channel)?.(message);
    });
    // On a Redis Cluster the reply channel is sharded (SSUBSCRIBE): its messages stay on its shard.
    subscriber.on('smessage', (channel: string, message: string) => {
      if (channel === this.channel) this.dispatch(message);
    });
    subscriber.on('ready', () => {
      if (this.wasReady) this.afterReconnect();
      this.wasReady = true;
    });
  }

  async start(): Promise<void> {
    // A worker of this process hands its replies over in memory (in order, each after the one before it); any
    // other process's cross the subscription below.
    this.letGo = repliesHeldHere.hold(this.channel, (message) =>
      queueMicrotask(() => {
        try {
          this.route(message);
        } catch (error) {
          this.log.error({ err: error, jobId: message.jobId }, 'could not route a reply');
        }
      }),
    );
    if (isCluster(this.subscriber)) {
      await this.subscriber.ssubscribe(this.channel);
      if (this.handlers.size > 0) await this.subscriber.subscribe(...this.handlers.keys());
    } else {
      await this.subscriber.subscribe(this.channel, ...this.handlers.keys());
    }
    if (this.sweepMs > 0) {
      this.sweepTimer = setInterval(() => void this.sweep(), this.sweepMs);
      this.sweepTimer.unref();
    }
  }

  stop(): void {
    this.letGo?.();
    clearInterval(this.sweepTimer);
    clearInterval(this.heartbeatTimer);
  }

  /**
   * Tells the workers this api still waits for its replies: a key with a TTL,
   * renewed at a third of it. A worker whose answers reach no subscriber checks
   * it before deciding nobody will ever read them (the api died).
   */
  startHeartbeat(ttlMs: number): void {
    const beat = () => void this.redis.set(apiAliveKey(this.channel), '1', 'PX', ttlMs).catch(() => undefined);
    beat();
    this.heartbeatTimer = setInterval(beat, Math.max(250, Math.floor(ttlMs / 3)));
    this.heartbeatTimer.unref();
  }

  /** Ends every pending request with `error` and cancels its job (forced shutdown). */
  async abortAll(error: GatewayError): Promise<void> {
    await Promise.allSettled([...this.pending.values()].map((pending) => pending.abort(error)));
  }

  /** Extra channel on the same connection; must be registered before `start`. */
  on(channel: string, handler: (message: string) => void): void {
    this.handlers.set(channel, handler);
  }

  onReconnect?: () => void;

  /**
   * Expects a job's reply: called before the job is queued, so that what it
   * publishes from its first moment is kept for the request. The caller
   * releases it when the request ends, queued or not.
   */
  expect(jobId: string, stream: boolean): ExpectedReply {
    const expected = new ExpectedReply(this, jobId, stream);
    this.pending.set(jobId, expected);
    return expected;
  }

  /** A released reply: nothing more is routed to it. */
  forget(expected: ExpectedReply): void {
    if (this.pending.get(expected.jobId) === expected) this.pending.delete(expected.jobId);
  }

  get size(): number {
    return this.pending.size;
  }

  get connected(): boolean {
    return this.subscriber.status === 'ready';
  }

  private dispatch(raw: string): void {
    const message = decodeReply(raw);
    if (!message) {
      this.log.warn({ raw: raw.slice(0, 200) }, 'unreadable reply message');
      return;
    }
    this.route(message);
  }

  /** A reply to the request waiting for it, in order (a stream's chunks past a gap first recovered from its log). */
  private route(message: ReplyMessage): void {
    const pending = this.pending.get(message.jobId);
    if (!pending) return; // client already gone
    if (message.kind === 'chunk' && message.seq <= pending.lastSeq) return;
    if (pending.stream && (message.kind === 'chunk' || message.kind === 'done' || message.kind === 'error')) {
      // Chunks published while the subscriber was away skip ahead: delivering the next one would cut them out.
      const ahead = message.seq > pending.lastSeq + (message.kind === 'chunk' ? 1 : 0);
      if (ahead || this.gaps.has(pending)) {
        this.fillGap(message, pending);
        return;
      }
    }
    if (message.kind === 'chunk') pending.lastSeq = message.seq;
    pending.deliver(message);
  }

  /**
   * Delivers the missing chunks from the replay log, in order, then what was
   * held. Live chunks meanwhile are left to the log; a stream whose log cannot
   * fill the gap ends with an error rather than with silently missing output.
   */
  private fillGap(message: ReplyMessage, pending: ExpectedReply): void {
    const running = this.gaps.get(pending);
    const gap = running ?? { maxSeen: 0 };
    gap.maxSeen = Math.max(gap.maxSeen, message.seq);
    if (message.kind !== 'chunk') gap.held = message;
    if (running) return;
    this.gaps.set(pending, gap);
    const { jobId } = message;
    void (async () => {
      let idleRounds = 0;
      while (pending.lastSeq < gap.maxSeen && idleRounds < 3 && this.pending.get(jobId) === pending) {
        const before = pending.lastSeq;
        try {
          // The log trails the live chunks by up to replayLogLagMs: after a round that found nothing new, wait that
          // long.
          if (idleRounds > 0) await pause(replayLogLagMs);
          await this.replay(jobId, pending);
          idleRounds = pending.lastSeq === before ? idleRounds + 1 : 0;
        } catch (error) {
          // Redis unreachable says nothing about the log: try again until it answers (or the request ends).
          this.log.debug({ err: error, jobId }, 'could not read the replay log; retrying');
          await pause(gapRetryMs);
        }
      }
      this.gaps.delete(pending);
      if (this.pending.get(jobId) !== pending) return;
      if (pending.lastSeq < gap.maxSeen && gap.held?.kind !== 'error') {
        this.log.warn(
          { jobId, lastSeq: pending.lastSeq, maxSeen: gap.maxSeen },
          'stream chunks lost; ending the stream with an error',
        );
        const broken = new GatewayError(502, 'Part of the response stream was lost in transit; retry the request.', {
          code: 'stream_incomplete',
        });
        pending.deliver({ kind: 'error', jobId, seq: gap.maxSeen, payload: JSON.stringify(broken.toWire()) });
      } else if (gap.held) pending.deliver(gap.held);
    })();
  }

  /**
   * ioredis re-subscribes by itself; what was published while we were away is
   * recovered from each stream's replay log and, for the rest, from the job
   * (which may also be gone: a Redis restarted without persistence).
   */
  private afterReconnect(): void {
    this.log.warn({ pending: this.pending.size }, 'reply subscriber reconnected; reconciling pending requests');
    this.onReconnect?.();
    for (const pending of this.pending.values()) pending.reconcile();
  }

  /**
   * Replies are fire-and-forget pub/sub, so a job that vanished (Redis lost its
   * data) or finished while its reply was missed would leave its client waiting
   * for its deadline. One pipelined read for every pending job, every few
   * seconds, finds those; only they are looked at more closely.
   */
  private async sweep(): Promise<void> {
    if (this.sweeping || !this.connected || this.redis.status !== 'ready') return;
    const watched = [...this.pending.values()].filter((pending) => pending.jobKey !== undefined);
    if (watched.length === 0) return;
    this.sweeping = true;
    try {
      const pipeline = inOneWrite(this.redis);
      // `name` is set on every BullMQ job hash; `finishedOn` once it completed or finally failed.
      for (const pending of watched) pipeline.hmget(pending.jobKey!, 'name', 'finishedOn');
      const results = (await pipeline.exec()) ?? [];
      results.forEach(([error, fields], i) => {
        if (error) return; // e.g. LOADING: no conclusion from a failed read
        const [name, finishedOn] = fields as [string | null, string | null];
        if (name === null || finishedOn !== null) watched[i]!.reconcile();
      });
    } catch (error) {
      this.log.debug({ err: error }, 'liveness sweep failed; next one retries');
    } finally {
      this.sweeping = false;
    }
  }

  /** Delivers the chunks of a stream's replay log that were not seen yet; undefined when the log holds none. */
  async replay(jobId: string, pending: ExpectedReply): Promise<Replayed | undefined> {
    const raw = await this.redis.xrange(replayStreamKey(jobId), '-', '+');
    // The terminal entry is not a chunk: the job's own state says how the request ended.
    const entries = raw.map(([id, fields]) => parseLogEntry(id, fields)).filter((entry) => entry.end === undefined);
    if (entries.length === 0) return undefined;
    for (const entry of entries) {
      if (entry.seq > pending.lastSeq && this.pending.get(jobId) === pending) {
        const frames = framesAfterBatch(entry, pending.lastSeq);
        pending.lastSeq = entry.seq;
        pending.deliver({ kind: 'chunk', jobId, seq: entry.seq, payload: frames });
      }
    }
    const count = entries.reduce((batches, entry) => batches + entry.seq - entry.from + 1, 0);
    return { first: entries[0]!.from, last: entries.at(-1)!.seq, count };
  }
}
