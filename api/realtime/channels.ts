import type { Redis } from 'ioredis';
import { cancelChannel } from '../../shared/redis-keys.js';
import { isCluster } from '../../shared/redis.js';
import { encodeRealtime, realtimeDownChannel, realtimeUpChannel, type RealtimeClose, type RealtimeUpKind } from '../../shared/realtime.js';
import type { Logger } from '../../shared/logger.js';

/**
 * The api's half of each Realtime session's two channels (shared/realtime.ts): its down channel subscribed on the
 * process's one subscriber connection, beside the reply channel the reply hub reads (api/relay/reply-hub.ts), and
 * its up channel published on the api's command connection, in order. On a Redis Cluster both are sharded pub/sub
 * (SSUBSCRIBE, SPUBLISH), as the reply channels are: the session id's hash tag keeps a session's two on one shard.
 *
 * The hub's own listener ignores channels it was not given, and ioredis subscribes again to every channel after a
 * reconnect; what is published meanwhile is lost, which the beats turn into a bounded end (a side silent for
 * `realtimePeerDeadMs` is taken for dead), never a session hanging.
 */
export class SessionChannels {
  private readonly listeners = new Map<string, (message: string) => void>();
  private readonly sharded: boolean;

  constructor(
    private readonly subscriber: Redis,
    private readonly publisher: Redis,
    private readonly log: Logger,
  ) {
    this.sharded = isCluster(subscriber);
    const route = (channel: string, message: string) => this.listeners.get(channel)?.(message);
    subscriber.on('message', route);
    subscriber.on('smessage', route);
  }

  /** Hears the session's down channel from now on (resolves once Redis confirmed the subscription). */
  async listen(sessionId: string, onDown: (message: string) => void): Promise<void> {
    const channel = realtimeDownChannel(sessionId);
    this.listeners.set(channel, onDown);
    if (this.sharded) await this.subscriber.ssubscribe(channel);
    else await this.subscriber.subscribe(channel);
  }

  /** Stops hearing it (idempotent; a failure only leaves a subscription to a channel nobody publishes on). */
  forget(sessionId: string): void {
    const channel = realtimeDownChannel(sessionId);
    if (!this.listeners.delete(channel)) return;
    const done = this.sharded ? this.subscriber.sunsubscribe(channel) : this.subscriber.unsubscribe(channel);
    done.catch((error: unknown) => this.log.debug({ err: error, session: sessionId }, 'could not unsubscribe a realtime session channel'));
  }

  /** One message up to the worker; fire and forget (a lost one is covered by the beats). */
  send(sessionId: string, kind: RealtimeUpKind, payload = '', stampMs?: number): Promise<void> {
    const message = encodeRealtime(kind, payload, stampMs);
    const channel = realtimeUpChannel(sessionId);
    const sent = this.sharded ? this.publisher.spublish(channel, message) : this.publisher.publish(channel, message);
    return sent.then(
      () => undefined,
      (error: unknown) => this.log.debug({ err: error, session: sessionId, kind }, 'could not publish on a realtime session channel'),
    );
  }

  /** Tells the worker the session is over. */
  close(sessionId: string, end: RealtimeClose): Promise<void> {
    return this.send(sessionId, 'close', JSON.stringify(end));
  }

  /**
   * Tells whichever worker holds the session's job to stop it, on the channel every worker hears (a worker still
   * opening the vendor's socket has not subscribed to the up channel yet).
   */
  cancel(sessionId: string): Promise<void> {
    return this.publisher.publish(cancelChannel, sessionId).then(
      () => undefined,
      (error: unknown) => this.log.warn({ err: error, session: sessionId }, 'could not publish the cancel of a realtime session'),
    );
  }
}
