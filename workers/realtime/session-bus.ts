import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { isCluster } from '../../shared/redis.js';
import { encodeRealtime, realtimeDownChannel, realtimeUpChannel, type RealtimeDownKind } from '../../shared/realtime.js';

/**
 * The worker process's half of its sessions' channels (shared/realtime.ts): every session's up channel heard on one
 * subscriber connection of the process's own (never one per session), and every down message published on one
 * publisher connection, in order. On a Redis Cluster both are sharded pub/sub (SSUBSCRIBE, SPUBLISH), as the api's
 * are: a session's two channels share its id's hash tag. ioredis subscribes again after a reconnect; what was
 * published meanwhile is lost, which the beats turn into a bounded end.
 */
export class SessionBus {
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

  /** Hears the session's up channel from now on (resolves once Redis confirmed the subscription). */
  async listen(sessionId: string, onUp: (message: string) => void): Promise<void> {
    const channel = realtimeUpChannel(sessionId);
    this.listeners.set(channel, onUp);
    if (this.sharded) await this.subscriber.ssubscribe(channel);
    else await this.subscriber.subscribe(channel);
  }

  forget(sessionId: string): void {
    const channel = realtimeUpChannel(sessionId);
    if (!this.listeners.delete(channel)) return;
    const done = this.sharded ? this.subscriber.sunsubscribe(channel) : this.subscriber.unsubscribe(channel);
    done.catch((error: unknown) => this.log.debug({ err: error, session: sessionId }, 'could not unsubscribe a realtime session channel'));
  }

  /** One message down to the api; resolves once Redis took it (a failure is logged: the beats bound what follows). */
  send(sessionId: string, kind: RealtimeDownKind, payload = '', stampMs?: number): Promise<void> {
    const message = encodeRealtime(kind, payload, stampMs);
    const channel = realtimeDownChannel(sessionId);
    const sent = this.sharded ? this.publisher.spublish(channel, message) : this.publisher.publish(channel, message);
    return sent.then(
      () => undefined,
      (error: unknown) => this.log.debug({ err: error, session: sessionId, kind }, 'could not publish on a realtime session channel'),
    );
  }

  get size(): number {
    return this.listeners.size;
  }
}
