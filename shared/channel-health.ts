import type { Redis } from 'ioredis';
import { channelFailuresKey } from './redis-keys.js';

/*
 * A channel's recent failures, per model: what the console's Channels page says beside a cool-down ("3 failures in
 * the last 15 min"), and after it ("OK, 3 failures in the last 15 min"). The router's own count (which starts a
 * cool-down) is each worker's alone and lasts 30 s; this one is shared by every worker and lasts the window below.
 */

/** The window the page counts failures over, in minutes. */
export const channelFailureWindowMin = 15;

const minuteOf = (ms: number) => Math.floor(ms / 60_000);

/**
 * One failed call of `model` on the channel (a 5xx, a network error, a 429, a refused credential), for every worker to
 * see.
 */
export async function recordChannelFailure(
  redis: Redis,
  channelId: string,
  model: string,
  now = Date.now(),
): Promise<void> {
  const key = channelFailuresKey(minuteOf(now));
  // Kept a minute past the window, so a page reading at the end of a minute still finds the window's first.
  await redis
    .multi()
    .hincrby(key, `${channelId}|${model}`, 1)
    .expire(key, (channelFailureWindowMin + 1) * 60)
    .exec();
}

/**
 * The failures of the last `channelFailureWindowMin` minutes (this minute and the ones before it, whole minutes), by
 * `<channel id>|<model>`.
 */
export async function readChannelFailures(redis: Redis, now = Date.now()): Promise<Map<string, number>> {
  const last = minuteOf(now);
  const pipeline = redis.pipeline();
  for (let minute = last - channelFailureWindowMin + 1; minute <= last; minute++)
    pipeline.hgetall(channelFailuresKey(minute));
  const counts = new Map<string, number>();
  for (const [error, value] of (await pipeline.exec()) ?? []) {
    if (error) throw error;
    for (const [field, n] of Object.entries(value as Record<string, string>))
      counts.set(field, (counts.get(field) ?? 0) + Number(n));
  }
  return counts;
}
