import type { Redis } from 'ioredis';
import { encodeReply } from '../shared/reply.js';
import { apiAliveKey, replayStreamKey, resultKey } from '../shared/queues.js';
import type { WireError } from '../shared/errors.js';

/** Results larger than this travel as a Redis key, not inside the pub/sub message. */
const inlineResultBytes = 512 * 1024;
const replayTtlSeconds = 600;
const replayMaxLength = 10_000;

/**
 * Writes one request's replies to its api instance's channel. Chunks are also
 * appended to a short-lived replay stream in the same pipeline (one round trip),
 * so a reply can be recovered after a subscriber reconnect.
 */
export class ReplyPublisher {
  private seq = 0;
  private buffer = '';
  private scheduled = false;
  private pending: Promise<unknown> = Promise.resolve();
  private failure: unknown;
  /** Since when chunks have reached no subscriber (the api may be reconnecting, or dead). */
  private unheardSince: number | undefined;
  private checkingListener = false;

  constructor(
    private readonly redis: Redis,
    private readonly channel: string,
    private readonly requestId: string,
    /** Called once the api has been gone `afterMs` (no subscriber, no heartbeat): nobody will read this reply. */
    private readonly orphan?: { afterMs: number; onOrphaned: () => void },
  ) {}

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
  chunk(frames: string): void {
    this.buffer += frames;
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.sendBuffered);
    }
  }

  private readonly sendBuffered = (): void => {
    this.scheduled = false;
    if (this.buffer === '') return;
    const frames = this.buffer;
    this.buffer = '';
    const seq = ++this.seq;
    const key = replayStreamKey(this.requestId);
    const pipeline = this.redis
      .pipeline()
      .publish(this.channel, encodeReply('chunk', this.requestId, seq, frames))
      .xadd(key, 'MAXLEN', '~', replayMaxLength, '*', 'seq', seq, 'frames', frames);
    // Set with the first batch, and again now and then: a log recreated mid-stream (Redis restarted empty) must expire too.
    if (seq === 1 || seq % 64 === 0) pipeline.expire(key, replayTtlSeconds);
    this.pending = pipeline.exec().then(
      (results) => this.noteReceivers(results?.[0]?.[1]),
      (error: unknown) => {
        this.failure ??= error;
      },
    );
  };

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

  async flush(): Promise<void> {
    this.sendBuffered();
    await this.pending;
    if (this.failure !== undefined) throw this.failure;
  }

  /** Final body of a plain request; large ones go by reference. Returns what the job should keep. */
  async done(body: string): Promise<{ body?: string; bodyRef?: string }> {
    await this.flush();
    if (body.length > inlineResultBytes) {
      // The api reads it once (GETDEL); the TTL only bounds one that never came to read it.
      const ref = resultKey(this.requestId);
      await this.redis
        .pipeline()
        .set(ref, body, 'EX', 120)
        .publish(this.channel, encodeReply('done-ref', this.requestId, this.seq, ref))
        .exec();
      return { bodyRef: ref };
    }
    await this.redis.publish(this.channel, encodeReply('done', this.requestId, this.seq, body));
    return { body };
  }

  async endStream(trailer: string): Promise<void> {
    await this.flush();
    await this.redis.publish(this.channel, encodeReply('done', this.requestId, this.seq, trailer));
  }

  async error(error: WireError): Promise<void> {
    await this.flush().catch(() => undefined);
    await this.redis.publish(this.channel, encodeReply('error', this.requestId, this.seq, JSON.stringify(error)));
  }
}
