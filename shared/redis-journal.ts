import type { Redis } from 'ioredis';

/**
 * What this process wrote to Redis in the last few seconds that a failover may lose, written again each time its
 * connection is ready again.
 *
 * Redis acknowledges a write before any replica has it. A failover promotes a replica without the last writes, and
 * an old primary that still answers takes writes until its clients hear `+switch-master` (about a second in the
 * soak's Sentinel run); it throws them away when it resyncs from the new one. A Redis that restarts loads an AOF
 * written once a second. A settlement among those writes is lost from Redis (the balance not debited, the usage
 * entry gone) while its client had its answer, and the record may even have its row (the usage writer read the old
 * primary's stream); a request's log event is lost with it.
 *
 * Only writes that may be sent twice are kept here: a settlement is idempotent by its request id (its settled
 * marker: those the new primary has change nothing, those it lost are applied), and the record keeps one row per
 * request id whatever number of times its log event arrives. Each is sent again once the connection is ready on
 * whatever Redis it now reaches.
 */

/**
 * How far back from the moment the connection was lost a reconnection looks: well past the time an old primary
 * takes writes after a failover (about a second) and a replica's lag behind its primary (milliseconds).
 */
export const journalWindowMs = 5_000;
/** At most this many writes are kept (the newest), whatever the rate. */
const journalMaxEntries = 30_000;
/** Sent again this many at a time. */
const replayChunk = 500;

/**
 * A write to send again on a connection, resolving to true when it had been lost (a settlement that applied again),
 * false when Redis had it or cannot tell (a log event).
 */
export type Rewrite = (redis: Redis) => Promise<boolean>;

interface Journaled {
  at: number;
  rewrite: Rewrite;
}

export class RedisJournal {
  private entries: Journaled[] = [];
  private first = 0;
  private replaying: Promise<unknown> = Promise.resolve();
  /** When the connection was lost (a primary that died: the writes just before it, however long the failover takes). */
  private downSince: number | undefined;

  constructor(private readonly redis: Redis) {}

  record(rewrite: Rewrite, now = Date.now()): void {
    this.entries.push({ at: now, rewrite });
    if (this.entries.length - this.first > journalMaxEntries) this.first = this.entries.length - journalMaxEntries;
    this.prune(this.downSince ?? now);
  }

  /** The connection was lost: the window ends here until it is ready again. */
  down(now = Date.now()): void {
    this.downSince ??= now;
  }

  /**
   * Sends again the writes of the window before the connection was lost (or before now), oldest first; resolves to
   * how many were sent and how many had been lost.
   */
  replay(now = Date.now()): Promise<{ sent: number; lost: number }> {
    this.prune(this.downSince ?? now);
    this.downSince = undefined;
    const entries = this.entries.slice(this.first);
    const run = this.replaying.then(async () => {
      let lost = 0;
      for (let start = 0; start < entries.length; start += replayChunk) {
        const done = await Promise.all(
          entries.slice(start, start + replayChunk).map((entry) => entry.rewrite(this.redis)),
        );
        lost += done.filter(Boolean).length;
      }
      return { sent: entries.length, lost };
    });
    this.replaying = run.catch(() => undefined);
    return run;
  }

  private prune(now: number): void {
    while (this.first < this.entries.length && this.entries[this.first]!.at < now - journalWindowMs) this.first++;
    // Compacted once the dropped part is the larger.
    if (this.first > 1024 && this.first * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.first);
      this.first = 0;
    }
  }
}

const journals = new WeakMap<Redis, RedisJournal>();

/**
 * Keeps a write this connection made, to be sent again after it comes back. The journal is made on the first: from
 * then on, each time the connection is ready again (a reconnection, a failover) the window's writes are sent again,
 * and what had been lost is reported.
 */
export function journalWrite(redis: Redis, rewrite: Rewrite): void {
  let journal = journals.get(redis);
  if (!journal) {
    const made = (journal = new RedisJournal(redis));
    journals.set(redis, made);
    redis.on('close', () => made.down());
    redis.on('ready', () => {
      made.replay().then(
        ({ sent, lost }) => {
          if (lost > 0)
            process.stderr.write(
              `redis: ${lost} settlements of the last ${sent} writes were lost by Redis (a failover or a ` +
                `restart) and are applied again\n`,
            );
        },
        (error: unknown) =>
          process.stderr.write(
            `redis: could not send the last writes again after a reconnection: ` +
              `${error instanceof Error ? error.message : String(error)}\n`,
          ),
      );
    });
  }
  journal.record(rewrite);
}
