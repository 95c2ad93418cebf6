import type { Redis } from 'ioredis';
import { cancelChannel } from '../../shared/redis-keys.js';
import { RealtimeBus } from '../../shared/realtime-bus.js';
import type { RealtimeClose } from '../../shared/realtime.js';
import type { Logger } from '../../shared/logger.js';

/**
 * The api's half of each Realtime session's two channels (shared/realtime-bus.ts): its down channel subscribed on the
 * process's one subscriber connection, beside the reply channel the reply hub reads (api/relay/reply-hub.ts), and
 * its up channel published on the api's command connection, in order; and the two things only the api says: the
 * session is over, and (to whichever worker holds it) stop.
 */
export class SessionChannels extends RealtimeBus<'api'> {
  constructor(subscriber: Redis, publisher: Redis, log: Logger) {
    super(subscriber, publisher, log, 'api');
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
      (error: unknown) =>
        this.log.warn({ err: error, session: sessionId }, 'could not publish the cancel of a realtime session'),
    );
  }
}
