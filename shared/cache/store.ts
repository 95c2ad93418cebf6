import type { Redis } from 'ioredis';
import {
  cacheBytesKey,
  cacheEntryKey,
  cacheIndexKey,
  cacheLeadKey,
  cacheMetaKey,
  cacheOutcomesChannel,
} from '../redis-keys.js';
import type { LeadOutcome } from './coalescing.js';
import { decodeEntry, encodeEntry, type CacheEntry } from './entry.js';
import { storeEntryScript } from './scripts.js';

/**
 * Where entries live: each account's under its own hash tag, with an index by expiry and a total size that keeps the
 * account under its bound; written by the worker, read by the api, purged by an admin.
 */

export interface StoreLimits {
  /** Largest entry stored, in bytes as stored (compressed or not). */
  maxEntryBytes: number;
  /** Most bytes of entries one account keeps. */
  maxAccountBytes: number;
}

/**
 * Stores an answer; resolves to its stored size, or 0 when it is past the entry bound (not stored). It is served
 * until `entry.expires`; Redis keeps it `keepMs` at least (its followers read it after that). Stored by the job that
 * leads the request (`leader`), its lead mark is dropped and its followers told it is stored in the same script (the
 * mark shares the entries' hash tag): one round trip, not two.
 */
export async function storeEntry(
  redis: Redis,
  accountId: string,
  keyId: string,
  hash: string,
  entry: CacheEntry,
  limits: StoreLimits,
  keepMs = 0,
  leader?: { jobId: string; name?: string },
): Promise<number> {
  const stored = await encodeEntry(entry);
  if (stored.length > limits.maxEntryBytes) return 0;
  const ttlMs = Math.max(1, entry.expires - Date.now(), keepMs);
  // An answer kept only for its followers is stored under a name of its own: the request's entry, which others may
  // have stored fresh, is left as it was.
  const name = leader?.name ?? hash;
  const outcome: LeadOutcome = {
    account: accountId,
    hash,
    status: 'stored',
    cost: entry.costMicros,
    ...(leader ? { job: leader.jobId } : {}),
    ...(name !== hash ? { entry: name } : {}),
  };
  await storeEntryScript(redis, {
    entry: cacheEntryKey(accountId, name),
    index: cacheIndexKey(accountId),
    bytes: cacheBytesKey(accountId),
    meta: cacheMetaKey(accountId),
    lead: cacheLeadKey(accountId, hash),
    stored,
    ttlMs,
    maxAccountBytes: limits.maxAccountBytes,
    nowMs: Date.now(),
    name,
    entryMeta: `${stored.length} ${keyId} ${entry.model}`,
    entryKeyPrefix: cacheEntryKey(accountId, ''),
    leaderJobId: leader?.jobId ?? '',
    channel: cacheOutcomesChannel,
    outcome: leader ? JSON.stringify(outcome) : '',
  });
  return stored.length;
}

/** The stored entry of a request (or an answer kept for its followers, by its name), if any. */
export async function readEntry(redis: Redis, accountId: string, hash: string): Promise<CacheEntry | undefined> {
  const stored = await redis.getBuffer(cacheEntryKey(accountId, hash));
  return stored ? decodeEntry(stored) : undefined;
}

/**
 * Removes an account's entries, all or those of one key or one model; resolves to how many went. The index names
 * every live entry with its key and model, so a purge reads the account's index only.
 */
export async function purgeEntries(
  redis: Redis,
  accountId: string,
  filter: { keyId?: string; model?: string } = {},
): Promise<number> {
  const meta = await redis.hgetall(cacheMetaKey(accountId));
  let removed = 0;
  const batch = redis.multi();
  for (const [hash, value] of Object.entries(meta)) {
    const [size = '0', keyId, model] = value.split(' ');
    if (
      (filter.keyId !== undefined && keyId !== filter.keyId) ||
      (filter.model !== undefined && model !== filter.model)
    )
      continue;
    batch
      .del(cacheEntryKey(accountId, hash))
      .hdel(cacheMetaKey(accountId), hash)
      .zrem(cacheIndexKey(accountId), hash)
      .decrby(cacheBytesKey(accountId), Number(size));
    removed += 1;
  }
  if (removed > 0) await batch.exec();
  else batch.discard();
  return removed;
}

/** The accounts that have entries (for a purge of every account by model): their index keys, found with SCAN. */
export async function accountsWithEntries(redis: Redis): Promise<string[]> {
  const accounts = new Set<string>();
  const pattern = cacheIndexKey('*');
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
    cursor = next;
    for (const key of keys) {
      const match = /\{([^}]+)\}:index$/.exec(key);
      if (match) accounts.add(match[1]!);
    }
  } while (cursor !== '0');
  return [...accounts];
}
