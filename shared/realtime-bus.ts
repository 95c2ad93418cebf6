import type { Redis } from 'ioredis';
import type { Logger } from './logger.js';
import { isCluster } from './redis.js';
import {
  encodeRealtime,
  realtimeDownChannel,
  realtimeUpChannel,
  type RealtimeDownKind,
  type RealtimeUpKind,
} from './realtime.js';

/**
 * One process's end of its Realtime sessions' channels (shared/realtime.ts), the api's and the worker's alike: the
 * channel each session's messages come in on subscribed on the process's one subscriber connection (never one per
 * session), and every message out published on one publisher connection, in order. The api hears a session's down
 * channel and speaks on its up channel (`side: 'api'`); a worker the other way round (`side: 'worker'`). On a Redis
 * Cluster both are sharded pub/sub (SSUBSCRIBE, SPUBLISH), as the reply channels are: the session id's hash tag keeps
 * a session's two channels on one shard.
 *
 * Messages on channels not listened to here are ignored, and ioredis subscribes again to every channel after a
 * reconnect; what is published meanwhile is lost, which the beats turn into a bounded end (a side silent for
 * `realtimePeerDeadMs` is taken for dead), never a session hanging.
 */
export class RealtimeBus<Side extends 'api' | 'worker'> {
  private readonly listeners = new Map<string, (message: string) => void>();
  private readonly sharded: boolean;
  private readonly hears: (sessionId: string) => string;
  private readonly speaks: (sessionId: string) => string;

  constructor(
    private readonly subscriber: Redis,
    protected readonly publisher: Redis,
    protected readonly log: Logger,
    side: Side,
  ) {
    this.sharded = isCluster(subscriber);
    this.hears = side === 'api' ? realtimeDownChannel : realtimeUpChannel;
    this.speaks = side === 'api' ? realtimeUpChannel : realtimeDownChannel;
    const route = (channel: string, message: string) => this.listeners.get(channel)?.(message);
    subscriber.on('message', route);
    subscriber.on('smessage', route);
  }

  /** Hears the session's incoming channel from now on (resolves once Redis confirmed the subscription). */
  async listen(sessionId: string, onMessage: (message: string) => void): Promise<void> {
    const channel = this.hears(sessionId);
    this.listeners.set(channel, onMessage);
    if (this.sharded) await this.subscriber.ssubscribe(channel);
    else await this.subscriber.subscribe(channel);
  }

  /** Stops hearing it (idempotent; a failure only leaves a subscription to a channel nobody publishes on). */
  forget(sessionId: string): void {
    const channel = this.hears(sessionId);
    if (!this.listeners.delete(channel)) return;
    const done = this.sharded ? this.subscriber.sunsubscribe(channel) : this.subscriber.unsubscribe(channel);
    done.catch((error: unknown) =>
      this.log.debug({ err: error, session: sessionId }, 'could not unsubscribe a realtime session channel'),
    );
  }

  /** One message to the other side; resolves once Redis took it (a failure is logged: the beats bound what follows). */
  send(
    sessionId: string,
    kind: Side extends 'api' ? RealtimeUpKind : RealtimeDownKind,
    payload = '',
    stampMs?: number,
  ): Promise<void> {
    const message = encodeRealtime(kind, payload, stampMs);
    const channel = this.speaks(sessionId);
    const sent = this.sharded ? this.publisher.spublish(channel, message) : this.publisher.publish(channel, message);
    return sent.then(
      () => undefined,
      (error: unknown) =>
        this.log.debug({ err: error, session: sessionId, kind }, 'could not publish on a realtime session channel'),
    );
  }
}
