import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { RealtimeBus } from '../../shared/realtime-bus.js';

/**
 * The worker process's half of its sessions' channels (shared/realtime-bus.ts): every session's up channel heard on
 * one subscriber connection of the process's own, every down message published on one publisher connection, in order.
 */
export class SessionBus extends RealtimeBus<'worker'> {
  constructor(subscriber: Redis, publisher: Redis, log: Logger) {
    super(subscriber, publisher, log, 'worker');
  }
}
