import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import { blobUrlSecretKey } from '../shared/redis-keys.js';

/**
 * Signed, expiring download URLs for stored blobs: fetchable without an API
 * key, as OpenAI's image URLs are. Signing and checking need the same secret
 * in every process: `BLOB_URL_SECRET`, or one generated once and kept in Redis.
 */
export async function resolveUrlSecret(redis: Redis, configured: string | undefined): Promise<string> {
  if (configured) return configured;
  await redis.set(blobUrlSecretKey, randomBytes(32).toString('base64url'), 'NX');
  return (await redis.get(blobUrlSecretKey))!;
}

function signature(secret: string, blobKey: string, expires: number): string {
  return createHmac('sha256', secret).update(`${blobKey}\n${expires}`).digest('base64url');
}

/**
 * A link under `/v1/blobs/`. Links signed before it had a path of its own were under `/v1/files/`, which is now
 * OpenAI's Files API: they are still served there while they last, told apart by their `signature` parameter.
 */
export function signBlobUrl(baseUrl: string, secret: string, blobKey: string, ttlSeconds: number): string {
  const expires = Math.floor(Date.now() / 1000) + ttlSeconds;
  return `${baseUrl.replace(/\/+$/, '')}/v1/blobs/${blobKey}?expires=${expires}&signature=${signature(secret, blobKey, expires)}`;
}

/** Whether a request is for a signed blob link: any path under `/v1/blobs/`, or an old link under `/v1/files/`. */
export function isSignedBlobPath(path: string, querystring: string): boolean {
  return path.startsWith('/v1/blobs/') || (path.startsWith('/v1/files/') && /(?:^|&)signature=/.test(querystring));
}

/** 'ok', or why the link is refused. */
export function checkBlobSignature(
  secret: string,
  blobKey: string,
  expires: string | undefined,
  given: string | undefined,
): 'ok' | 'expired' | 'invalid' {
  const at = Number(expires);
  if (!given || !Number.isInteger(at)) return 'invalid';
  const expected = Buffer.from(signature(secret, blobKey, at));
  const actual = Buffer.from(given);
  if (expected.length !== actual.length || !timingSafeEqual(expected, actual)) return 'invalid';
  return at < Date.now() / 1000 ? 'expired' : 'ok';
}
