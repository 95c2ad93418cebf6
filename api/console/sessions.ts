import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import { accountsPrefix } from '../../shared/queues.js';
import { GatewayError } from '../../shared/errors.js';

/*
 * Console sessions, server-side in Redis so that signing out (or an admin
 * disabling an account) ends them at once, wherever the cookie went. The
 * cookie holds a random token; Redis holds only its SHA-256, so a copy of the
 * database signs nobody in. Each session has an idle expiry (the key's TTL,
 * renewed as it is used) and an absolute one (`created` + the maximum),
 * whichever comes first, and its own CSRF token.
 */

export const sessionKey = (tokenHash: string) => `${accountsPrefix}session:${tokenHash}`;
export const accountSessionsKey = (accountId: string) => `${accountsPrefix}account-sessions:${accountId}`;
const signinFailuresKey = (scope: 'email' | 'ip', value: string) => `${accountsPrefix}signin-fail:${scope}:${createHash('sha256').update(value).digest('hex').slice(0, 32)}`;

export interface Session {
  tokenHash: string;
  accountId: string;
  csrf: string;
  /** Epoch ms of the sign-in. */
  created: number;
}

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
const newToken = () => randomBytes(32).toString('base64url');
/** A session's idle TTL is renewed at most this often: a console page polling every few seconds costs one write a minute, not one each. */
const renewEveryMs = 60_000;

/** Constant-time string comparison (false for different lengths). */
export function sameSecret(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

export class SessionStore {
  /** Sessions renewed lately by this process: token hash → epoch ms. */
  private readonly renewed = new Map<string, number>();

  constructor(
    private readonly redis: Redis,
    private readonly idleSeconds: number,
    private readonly maxSeconds: number,
  ) {}

  async create(accountId: string): Promise<{ token: string; session: Session }> {
    const token = newToken();
    const session: Session = { tokenHash: hashToken(token), accountId, csrf: newToken(), created: Date.now() };
    const ttl = Math.min(this.idleSeconds, this.maxSeconds);
    await this.redis
      .multi()
      .hset(sessionKey(session.tokenHash), 'account', accountId, 'csrf', session.csrf, 'created', String(session.created))
      .expire(sessionKey(session.tokenHash), ttl)
      .sadd(accountSessionsKey(accountId), session.tokenHash)
      // The index lives as long as the longest session it can name.
      .expire(accountSessionsKey(accountId), this.maxSeconds)
      .exec();
    return { token, session };
  }

  /** The live session of a cookie's token, its idle expiry pushed back; undefined when there is none or it is past its absolute expiry. */
  async get(token: string | undefined): Promise<Session | undefined> {
    if (!token || token.length > 256) return undefined;
    const tokenHash = hashToken(token);
    const row = await this.redis.hgetall(sessionKey(tokenHash));
    if (!row.account || !row.csrf) return undefined;
    const session: Session = { tokenHash, accountId: row.account, csrf: row.csrf, created: Number(row.created) || 0 };
    const now = Date.now();
    const leftMs = session.created + this.maxSeconds * 1000 - now;
    if (leftMs <= 0) {
      await this.destroy(session);
      return undefined;
    }
    const last = this.renewed.get(tokenHash) ?? 0;
    if (now - last >= renewEveryMs) {
      this.renewed.set(tokenHash, now);
      if (this.renewed.size > 10_000) this.renewed.clear();
      await this.redis.expire(sessionKey(tokenHash), Math.max(1, Math.min(this.idleSeconds, Math.ceil(leftMs / 1000))));
    }
    return session;
  }

  async destroy(session: Pick<Session, 'tokenHash' | 'accountId'>): Promise<void> {
    this.renewed.delete(session.tokenHash);
    await this.redis.multi().del(sessionKey(session.tokenHash)).srem(accountSessionsKey(session.accountId), session.tokenHash).exec();
  }

  /** Ends every session of an account (it was disabled or deleted); returns how many there were. */
  async destroyAll(accountId: string): Promise<number> {
    const hashes = await this.redis.smembers(accountSessionsKey(accountId));
    const multi = this.redis.multi();
    for (const hash of hashes) multi.del(sessionKey(hash));
    await multi.del(accountSessionsKey(accountId)).exec();
    return hashes.length;
  }
}

export interface ThrottleLimits {
  /** Failed sign-ins per email within the window before further tries are refused. */
  perEmail: number;
  /** Failed sign-ins per client address within the window. */
  perIp: number;
  windowSeconds: number;
}

export const defaultThrottle: ThrottleLimits = { perEmail: 5, perIp: 20, windowSeconds: 900 };

/**
 * Failed sign-ins counted per email (whether or not an account has it, so
 * the refusal tells nothing) and per client address, in Redis so every api
 * instance counts together. Past either limit, sign-ins are refused with a
 * 429 until the window that began with the first failure ends, even with the
 * right password: guessing must not be able to outpace the lock.
 */
export class SigninThrottle {
  constructor(
    private readonly redis: Redis,
    private readonly limits: ThrottleLimits = defaultThrottle,
  ) {}

  /** Throws a 429 when the email's or the address's counter is at its limit (no email: the address's alone). */
  async check(email: string | undefined, ip: string): Promise<void> {
    const keys = this.keys(email, ip);
    const multi = this.redis.multi();
    for (const { key } of keys) multi.get(key).ttl(key);
    const replies = ((await multi.exec()) ?? []).map(([, value]) => Number(value));
    const waits = keys.flatMap(({ limit }, i) => (replies[2 * i]! >= limit ? [replies[2 * i + 1]!] : []));
    if (waits.length === 0) return;
    const seconds = Math.max(1, ...waits.filter((s) => s > 0));
    throw new GatewayError(429, `Too many failed sign-ins. Try again in ${Math.ceil(seconds / 60)} minute${seconds > 60 ? 's' : ''}.`, {
      type: 'requests',
      code: 'rate_limit_exceeded',
      headers: { 'retry-after': String(seconds) },
    });
  }

  /** Counts a failed sign-in against the email and the address (no email: a sign-up, against the address alone). */
  async failed(email: string | undefined, ip: string): Promise<void> {
    const multi = this.redis.multi();
    for (const { key } of this.keys(email, ip)) multi.incr(key).expire(key, this.limits.windowSeconds, 'NX');
    await multi.exec();
  }

  private keys(email: string | undefined, ip: string): Array<{ key: string; limit: number }> {
    const keys = [{ key: signinFailuresKey('ip', ip), limit: this.limits.perIp }];
    if (email !== undefined) keys.push({ key: signinFailuresKey('email', email.trim().toLowerCase()), limit: this.limits.perEmail });
    return keys;
  }

  /** A successful sign-in clears the email's count (the address's stays: one right password must not reset a spray). */
  async succeeded(email: string): Promise<void> {
    await this.redis.del(signinFailuresKey('email', email.trim().toLowerCase()));
  }
}
