/**
 * One racer of the billing concurrency test: fires its share of reservations
 * at once (alternating two keys of one account) on its own Redis connection
 * and reports how many were admitted per key. Args: redis url, index, count,
 * keys (`k1` or `k1,k2`: the keys taken in turn), the keys' spending limit in micros ('' = none), and `mixed` to
 * make every other request a cache hit's charge (admitted and billed in one step) rather than a reservation.
 */
import { Redis } from 'ioredis';
import { charge, reserve } from '../../shared/money/billing.js';
import { usageEntry } from './usage-entry.js';

const [url, index, count, keys, limit = '', mode = ''] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string?,
  string?,
];
const keyIds = keys.split(',') as Array<'k1' | 'k2'>;
const redis = new Redis(url, { maxRetriesPerRequest: 3 });
const admitted = { k1: 0, k2: 0 };
await Promise.all(
  Array.from({ length: Number(count) }, async (_, i) => {
    const keyId = keyIds[i % keyIds.length]!;
    const requestId = `race-${index}-${i}`;
    const limits = limit ? { limitMicros: Number(limit) } : {};
    const outcome =
      mode === 'mixed' && i % 2 === 1
        ? await charge(redis, usageEntry(requestId, 1000, { key_id: keyId, vendor: 'cache', cache: 'hit' }), limits, {
            bufferRecords: 10_000,
          })
        : await reserve(
            redis,
            { requestId, keyId, accountId: 'a1', micros: 1000, tokens: 10, deadline: Date.now() + 60_000 },
            limits,
          );
    if (outcome.ok) admitted[keyId] += 1;
  }),
);
process.send!(admitted);
redis.disconnect();
process.disconnect();
