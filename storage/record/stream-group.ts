import type { Redis } from 'ioredis';

/*
 * What the record's writers share of reading a Redis stream through a consumer group (the usage writer, the alert
 * writer): the group made when missing, a read of a batch (own pending entries from id 0, or new ones with `>`),
 * the entries a consumer that died left unacknowledged taken over, and a pause that closing cuts short. What a
 * writer does with a batch, and when it reads history or new entries, is its own.
 */

/** A stream entry: its id and its fields as `[name, value, name, value, …]`. */
export type StreamEntry = [string, string[]];
export type StreamReply = Array<[string, StreamEntry[]]> | null;

/**
 * Creates the group on each stream where it is missing (a new or flushed Redis), from the stream's start: nothing
 * written before is skipped.
 */
export async function ensureGroup(redis: Redis, streams: readonly string[], group: string): Promise<void> {
  for (const stream of streams) {
    try {
      await redis.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
    } catch (error) {
      if (!String((error as Error).message).includes('BUSYGROUP')) throw error;
    }
  }
}

/** A stream or its group that went missing under a reader (a flushed Redis): the group is made again. */
export const isMissingGroup = (error: unknown): boolean => String((error as Error | null)?.message).includes('NOGROUP');

export interface GroupReader {
  redis: Redis;
  group: string;
  consumer: string;
  /** The most entries one read returns per stream. */
  count: number;
}

/**
 * One XREADGROUP: `ids[i]` is `0` (this consumer's pending entries of `streams[i]`) or `>` (new ones); `blockMs` waits
 * for new ones.
 */
export function readGroup(
  reader: GroupReader,
  streams: readonly string[],
  ids: readonly string[],
  blockMs?: number,
): Promise<StreamReply> {
  const { redis, group, consumer, count } = reader;
  const xreadgroup = redis.xreadgroup as unknown as (...args: Array<string | number>) => Promise<StreamReply>;
  return xreadgroup.call(
    redis,
    'GROUP',
    group,
    consumer,
    'COUNT',
    count,
    ...(blockMs === undefined ? [] : ['BLOCK', blockMs]),
    'STREAMS',
    ...streams,
    ...ids,
  );
}

/** Takes over (XAUTOCLAIM) up to `count` entries of `stream` another consumer has held unacknowledged for `idleMs`. */
export async function claimIdle(reader: GroupReader, stream: string, idleMs: number): Promise<StreamEntry[]> {
  const { redis, group, consumer, count } = reader;
  const claimed = (await redis.xautoclaim(stream, group, consumer, idleMs, '0-0', 'COUNT', count)) as [
    string,
    Array<StreamEntry | null>,
  ];
  // An entry deleted since it was read comes back as null.
  return (claimed?.[1] ?? []).filter((entry): entry is StreamEntry => Array.isArray(entry));
}

/** A wait a writer's loop takes between reads, which closing the writer cuts short. */
export class Pause {
  private wake: (() => void) | undefined;

  for(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  cut(): void {
    this.wake?.();
  }
}
