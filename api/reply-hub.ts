import type { Redis } from 'ioredis';
import type { Logger } from '../shared/logger.js';
import { decodeReply, type ReplyMessage } from '../shared/reply.js';
import { replayStreamKey } from '../shared/queues.js';

export interface PendingReply {
  /** Highest chunk sequence number delivered, so a replay after a reconnect skips what was seen. */
  lastSeq: number;
  stream: boolean;
  deliver(message: ReplyMessage): void;
  /** Called after the subscriber reconnected: messages may have been lost meanwhile. */
  reconcile(): void;
}

/**
 * The one subscription of an api process: its own reply channel (plus any
 * extra channels, such as key revocations). Replies are routed to waiting
 * requests by request id.
 */
export class ReplyHub {
  private readonly pending = new Map<string, PendingReply>();
  private readonly handlers = new Map<string, (message: string) => void>();
  private wasReady = false;

  constructor(
    private readonly subscriber: Redis,
    private readonly redis: Redis,
    readonly channel: string,
    private readonly log: Logger,
  ) {
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.dispatch(message);
      else this.handlers.get(channel)?.(message);
    });
    subscriber.on('ready', () => {
      if (this.wasReady) this.afterReconnect();
      this.wasReady = true;
    });
  }

  async start(): Promise<void> {
    await this.subscriber.subscribe(this.channel, ...this.handlers.keys());
  }

  /** Extra channel on the same connection; must be registered before `start`. */
  on(channel: string, handler: (message: string) => void): void {
    this.handlers.set(channel, handler);
  }

  onReconnect?: () => void;

  register(requestId: string, pending: PendingReply): void {
    this.pending.set(requestId, pending);
  }

  unregister(requestId: string): void {
    this.pending.delete(requestId);
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
    const pending = this.pending.get(message.requestId);
    if (!pending) return; // client already gone
    if (message.kind === 'chunk') {
      if (message.seq <= pending.lastSeq) return;
      pending.lastSeq = message.seq;
    }
    pending.deliver(message);
  }

  /**
   * ioredis re-subscribes by itself; what was published while we were away is
   * recovered from each stream's replay log and, for the rest, from the job.
   */
  private afterReconnect(): void {
    this.log.warn({ pending: this.pending.size }, 'reply subscriber reconnected; reconciling pending requests');
    this.onReconnect?.();
    for (const [requestId, pending] of this.pending) {
      if (pending.stream) void this.replay(requestId, pending);
      pending.reconcile();
    }
  }

  private async replay(requestId: string, pending: PendingReply): Promise<void> {
    try {
      const entries = await this.redis.xrange(replayStreamKey(requestId), '-', '+');
      for (const [, fields] of entries) {
        const seq = Number(fields[1]);
        const frames = fields[3] ?? '';
        if (seq > pending.lastSeq && this.pending.get(requestId) === pending) {
          pending.lastSeq = seq;
          pending.deliver({ kind: 'chunk', requestId, seq, payload: frames });
        }
      }
    } catch (error) {
      this.log.warn({ err: error, reqId: requestId }, 'replay after reconnect failed');
    }
  }
}
