import type { Redis } from 'ioredis';
import { isCluster, inOneWrite } from '../shared/redis.js';
import {
  encodeReply,
  repliesHeldHere,
  replayLogIntervalMs,
  type ReplyKind,
  type ReplyReceiver,
} from '../shared/reply.js';
import { apiAliveKey, replayStreamKey, resultKey } from '../shared/redis-keys.js';
import type { WireError } from '../shared/errors.js';

/** Results larger than this travel as a Redis key, not inside the pub/sub message. */
const inlineResultBytes = 512 * 1024;
const defaultReplayTtlSeconds = 600;
const replayMaxLength = 10_000;
/** Unlogged batches this large are logged at once, whatever the interval. */
const logBatchBytes = 64 * 1024;

export interface PublisherOptions {
  /** Called once the api has been gone `afterMs` (no subscriber, no heartbeat): nobody will read this reply. */
  orphan?: { afterMs: number; onOrphaned: () => void };
  /** How long a stream's replay log outlives its last write (STREAM_REPLAY_TTL_S). */
  replayTtlSeconds?: number;
  /** The key that made the request: recorded in the log's first entry, so only it may resume the stream. */
  owner?: string;
  /** A stream: its end is logged too (a plain request's answer is never logged). */
  stream?: boolean;
  /** Every batch goes to the log as it is published (a stream nobody holds is read from its log live). */
  logEveryBatch?: boolean;
}

/**
 * Writes one request's replies to its api instance's channel. Chunks are also
 * appended to a short-lived replay stream, so a reply can be recovered after a
 * subscriber reconnect or resumed by a client that comes back: the first batch
 * at once, then the batches published since the last append every
 * `replayLogIntervalMs` at most, in the same write as a publish (the log
 * trails the live chunks by that much; readers that find it behind wait).
 */
export class ReplyPublisher {
  private seq = 0;
  private buffer = '';
  /** Frames numbered so far (the next frame's number), and the number of the buffer's first frame. */
  private frameCount = 0;
  private bufferFirst = 0;
  /** Keys naming this stream by another id (the answer's own id), set with the first batch. */
  private aliases: string[] = [];
  private readonly orphan: PublisherOptions['orphan'];
  private readonly replayTtlSeconds: number;
  /** Set once the stream's end (or error) went out: nothing more is published. */
  ended = false;
  private scheduled = false;
  /**
   * Batches published and not yet in the replay log: their frames, each one's length, the first's batch and frame
   * numbers.
   */
  private logFrames = '';
  private logLens: number[] = [];
  private logFrom = 0;
  private logFirst = 0;
  private logAppends = 0;
  private loggedAt = 0;
  /** Appends what is unlogged if nothing else does within the interval (a stream that went quiet). */
  private logTimer: NodeJS.Timeout | undefined;
  private pending: Promise<unknown> = Promise.resolve();
  private failure: unknown;
  /** Since when chunks have reached no subscriber (the api may be reconnecting, or dead). */
  private unheardSince: number | undefined;
  private checkingListener = false;
  /** On a Redis Cluster replies use sharded pub/sub: a message crosses the reply channel's shard only. */
  private readonly publish: 'publish' | 'spublish';
  /** The api holding the channel runs in this process: its replies are handed over in memory (`repliesHeldHere`). */
  private readonly here: ReplyReceiver | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly channel: string,
    private readonly jobId: string,
    private readonly options: PublisherOptions = {},
  ) {
    this.orphan = options.orphan;
    this.replayTtlSeconds = options.replayTtlSeconds ?? defaultReplayTtlSeconds;
    this.publish = isCluster(redis) ? 'spublish' : 'publish';
    this.here = repliesHeldHere.receiver(channel);
  }

  /** Hands a reply to this process's api, when it holds the channel: whether it did (else it is published). */
  private handedOver(kind: ReplyKind, seq: number, payload: string): boolean {
    if (!this.here) return false;
    this.here({ kind, jobId: this.jobId, seq, payload });
    return true;
  }

  /** A key (`aliasKey`) that will name this stream's request id, for a resume by the answer's own id. */
  alias(key: string): void {
    this.aliases.push(key);
  }

  /** Whether any output has been sent to the client (after which retrying is no longer possible). */
  get started(): boolean {
    return this.seq > 0 || this.buffer !== '';
  }

  /**
   * Queues SSE frames. Frames produced in the same turn of the event loop
   * (e.g. every event of one upstream network read) go out as one message:
   * one Redis round trip per read, not per token. Order holds because every
   * send uses the same connection; errors surface on `flush`.
   */
  chunk(frames: string, count = 0): void {
    if (this.buffer === '') this.bufferFirst = this.frameCount;
    this.frameCount += count;
    this.buffer += frames;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.sendBuffered);
    }
  }

  private readonly sendBuffered = (): void => this.send(false);

  /** Publishes the buffered frames as one batch, and appends the unlogged batches to the log when due (or `logNow`). */
  private send(logNow: boolean): void {
    this.scheduled = false;
    const batch = inOneWrite(this.redis);
    const published = this.buffer !== '';
    if (published) {
      const frames = this.buffer;
      this.buffer = '';
      const seq = ++this.seq;
      if (this.logFrames === '') {
        this.logFrom = seq;
        this.logFirst = this.bufferFirst;
      }
      this.logFrames += frames;
      this.logLens.push(frames.length);
      if (!this.handedOver('chunk', seq, frames))
        batch[this.publish](this.channel, encodeReply('chunk', this.jobId, seq, frames));
    }
    const sent = published && !this.here;
    const due =
      this.logFrames !== '' &&
      (logNow ||
        this.logFrom === 1 ||
        this.options.logEveryBatch === true ||
        this.logFrames.length >= logBatchBytes ||
        Date.now() - this.loggedAt >= replayLogIntervalMs);
    if (due) this.appendLog(batch);
    else if (this.logFrames !== '') this.logTimer ??= setTimeout(() => this.send(true), replayLogIntervalMs);
    if (!sent && !due) return;
    this.pending = batch.exec().then(
      (results) => {
        if (sent) this.noteReceivers(results?.[0]?.[1]);
      },
      (error: unknown) => {
        this.failure ??= error;
      },
    );
  }

  /** One log entry for the batches not yet logged (`from` and `lens` when there are several). */
  private appendLog(batch: ReturnType<typeof inOneWrite>): void {
    const key = replayStreamKey(this.jobId);
    const opening = this.logFrom === 1;
    const several = this.logLens.length > 1 ? ['from', this.logFrom, 'lens', this.logLens.join(',')] : [];
    batch.xadd(
      key,
      'MAXLEN',
      '~',
      replayMaxLength,
      '*',
      'seq',
      this.seq,
      ...several,
      'frames',
      this.logFrames,
      'first',
      this.logFirst,
      ...(opening && this.options.owner ? ['owner', this.options.owner] : []),
    );
    // Set with the first entry, and again now and then: a log recreated mid-stream (Redis restarted empty) must expire
    // too.
    if (opening || ++this.logAppends % 16 === 0) batch.expire(key, this.replayTtlSeconds);
    if (opening) for (const alias of this.aliases) batch.set(alias, this.jobId, 'EX', this.replayTtlSeconds);
    this.logFrames = '';
    this.logLens = [];
    this.loggedAt = Date.now();
    clearTimeout(this.logTimer);
    this.logTimer = undefined;
  }

  /** PUBLISH answers how many subscribers got the message: zero for long, and no heartbeat, means the api is gone. */
  private noteReceivers(receivers: unknown): void {
    if (!this.orphan || typeof receivers !== 'number') return;
    if (receivers > 0) {
      this.unheardSince = undefined;
      return;
    }
    this.unheardSince ??= Date.now();
    if (Date.now() - this.unheardSince < this.orphan.afterMs || this.checkingListener) return;
    this.checkingListener = true;
    void this.redis
      .exists(apiAliveKey(this.channel))
      .then((alive) => {
        if (alive === 0) this.orphan?.onOrphaned();
      })
      .catch(() => undefined)
      .finally(() => {
        this.checkingListener = false;
      });
  }

  /** Sends what is buffered, the log included; resolves once Redis has it all. */
  async flush(): Promise<void> {
    this.send(true);
    await this.pending;
    if (this.failure !== undefined) throw this.failure;
  }

  /** Final body of a plain request; large ones go by reference. Returns what the job should keep. */
  async done(body: string): Promise<{ body?: string; bodyRef?: string }> {
    await this.flush();
    if (body.length > inlineResultBytes) {
      // The api reads it once (GETDEL); the TTL only bounds one that never came to read it.
      const ref = resultKey(this.jobId);
      // Stored before it is announced (on a Cluster the two are on different shards).
      await this.redis.set(ref, body, 'EX', 120);
      if (!this.handedOver('done-ref', this.seq, ref))
        await this.redis[this.publish](this.channel, encodeReply('done-ref', this.jobId, this.seq, ref));
      return { bodyRef: ref };
    }
    if (!this.handedOver('done', this.seq, body))
      await this.redis[this.publish](this.channel, encodeReply('done', this.jobId, this.seq, body));
    return { body };
  }

  /** Ends a stream: the trailer goes to the api and, as the log's terminal entry, to any later reader. */
  async endStream(trailer: string): Promise<void> {
    await this.flush();
    await this.terminal('done', trailer);
  }

  async error(error: WireError): Promise<void> {
    await this.flush().catch(() => undefined);
    await this.terminal('error', JSON.stringify(error));
  }

  private async terminal(kind: 'done' | 'error', payload: string): Promise<void> {
    this.ended = true;
    const key = replayStreamKey(this.jobId);
    const pipeline = inOneWrite(this.redis);
    if (!this.handedOver(kind, this.seq, payload))
      pipeline[this.publish](this.channel, encodeReply(kind, this.jobId, this.seq, payload));
    // A stream's log records its end; a plain request leaves no log behind.
    if (!this.options.stream && this.here) return;
    if (this.options.stream) {
      pipeline.xadd(
        key,
        'MAXLEN',
        '~',
        replayMaxLength,
        '*',
        'seq',
        this.seq,
        'end',
        kind,
        'payload',
        payload,
        ...(this.seq === 0 && this.options.owner ? ['owner', this.options.owner] : []),
      );
      pipeline.expire(key, this.replayTtlSeconds);
    }
    const results = await pipeline.exec();
    const failed = results?.find(([error]) => error)?.[0];
    if (failed) throw failed;
  }
}
