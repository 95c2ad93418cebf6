import { createHash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keyPrefix } from '../shared/queues.js';

/**
 * API keys: random, prefixed, shown once, stored only as a SHA-256 hash.
 *   sy:keyhash        hash  sha256(secret) → key id
 *   sy:key:<id>       hash  id, name, created, hash, hint
 *   sy:keyids         set   of ids
 * Revocation publishes the hash on `sy:keys:revoked` so every api instance drops it from its cache.
 */
const byHashKey = `${keyPrefix}keyhash`;
const idsKey = `${keyPrefix}keyids`;
const recordKey = (id: string) => `${keyPrefix}key:${id}`;
export const revokedChannel = `${keyPrefix}keys:revoked`;

export interface ApiKeyRecord {
  id: string;
  name: string;
  created: number;
  /** First characters of the secret, to tell keys apart without revealing them. */
  hint: string;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export class KeyStore {
  constructor(private readonly redis: Redis) {}

  async create(name: string): Promise<ApiKeyRecord & { key: string }> {
    const secret = `sy-${randomBytes(32).toString('base64url')}`;
    const id = `key_${randomBytes(8).toString('hex')}`;
    const record: ApiKeyRecord = { id, name, created: Math.floor(Date.now() / 1000), hint: `${secret.slice(0, 7)}…` };
    const hash = hashSecret(secret);
    await this.redis
      .multi()
      .hset(recordKey(id), { ...record, created: String(record.created), hash })
      .hset(byHashKey, hash, id)
      .sadd(idsKey, id)
      .exec();
    return { ...record, key: secret };
  }

  async list(): Promise<ApiKeyRecord[]> {
    const ids = await this.redis.smembers(idsKey);
    if (ids.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const id of ids) pipeline.hgetall(recordKey(id));
    const rows = (await pipeline.exec()) ?? [];
    return rows
      .map(([, value]) => value as Record<string, string>)
      .filter((row) => row && row.id)
      .map((row) => ({ id: row.id!, name: row.name ?? '', created: Number(row.created), hint: row.hint ?? '' }))
      .sort((a, b) => a.created - b.created || a.id.localeCompare(b.id));
  }

  /** Returns false when no such key exists. */
  async revoke(id: string): Promise<boolean> {
    const hash = await this.redis.hget(recordKey(id), 'hash');
    if (!hash) return false;
    await this.redis.multi().hdel(byHashKey, hash).del(recordKey(id)).srem(idsKey, id).publish(revokedChannel, hash).exec();
    return true;
  }

  /** Key id for a presented secret, or undefined. */
  async lookup(secretHash: string): Promise<string | undefined> {
    return (await this.redis.hget(byHashKey, secretHash)) ?? undefined;
  }
}

/**
 * Per-process cache of valid keys, so the hot path makes no Redis round trip.
 * Entries expire after `ttlMs` and are dropped at once on a revocation message;
 * after a subscriber reconnect (messages may have been missed) everything is dropped.
 */
export class KeyCache {
  private readonly entries = new Map<string, { id: string; expires: number }>();
  /** Bumped on every revocation, so a lookup that raced one does not cache a key just revoked. */
  private generation = 0;

  constructor(
    private readonly store: KeyStore,
    private readonly ttlMs: number,
  ) {}

  async resolve(secret: string): Promise<string | undefined> {
    const hash = hashSecret(secret);
    const now = Date.now();
    const hit = this.entries.get(hash);
    if (hit && hit.expires > now) return hit.id;
    const generation = this.generation;
    const id = await this.store.lookup(hash);
    if (id && generation === this.generation) this.entries.set(hash, { id, expires: now + this.ttlMs });
    else this.entries.delete(hash);
    return id;
  }

  revoke(hash: string): void {
    this.generation++;
    this.entries.delete(hash);
  }

  clear(): void {
    this.generation++;
    this.entries.clear();
  }
}
