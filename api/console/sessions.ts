import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Redis } from 'ioredis';
import { accountSessionsKey, sessionKey, signinFailuresKey } from '../../shared/redis-keys.js';
import { GatewayError } from '../../shared/errors.js';
import { as, luaFiles, redisScript } from '../../shared/redis-script.js';

/*
 * Console sessions, server-side in Redis so that signing out (or an admin
 * disabling an account) ends them at once, wherever the cookie went. The
 * cookie holds a random token; Redis holds only its SHA-256, so a copy of the
 * database signs nobody in. Each session has an idle expiry (the key's TTL,
 * renewed as it is used) and an absolute one (`created` + the maximum, or
 * earlier: a sign-in through a provider ends when its ID token does),
 * whichever comes first, and its own CSRF token.
 */

export interface Session {
  tokenHash: string;
  accountId: string;
  csrf: string;
  /** Epoch ms of the sign-in. */
  created: number;
  /**
   * Epoch ms it ends at the latest, before `created` + the maximum (a provider's ID token's expiry); undefined: none.
   */
  ends?: number;
  /** The provider's ID token it was signed in with: the hint of the provider's sign-out. */
  idToken?: string;
}

/** What a session may carry besides its account: an earlier end, and the ID token of a sign-in through a provider. */
export interface SessionExtras {
  ends?: number;
  idToken?: string;
}

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');
const newToken = () => randomBytes(32).toString('base64url');
/**
 * A session's idle TTL is renewed at most this often: a console page polling every few seconds costs one write a
 * minute, not one each.
 */
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

  /**
   * A new session; with `extras.ends`, it is gone from then on even if the maximum is later (undefined: already past).
   */
  async create(accountId: string, extras: SessionExtras = {}): Promise<{ token: string; session: Session }> {
    const token = newToken();
    const session: Session = {
      tokenHash: hashToken(token),
      accountId,
      csrf: newToken(),
      created: Date.now(),
      ...extras,
    };
    const ttl = Math.max(
      1,
      Math.min(
        this.idleSeconds,
        this.maxSeconds,
        extras.ends === undefined ? Infinity : Math.floor((extras.ends - session.created) / 1000),
      ),
    );
    const fields = ['account', accountId, 'csrf', session.csrf, 'created', String(session.created)];
    if (extras.ends !== undefined) fields.push('ends', String(extras.ends));
    if (extras.idToken !== undefined) fields.push('id_token', extras.idToken);
    await this.redis
      .multi()
      .hset(sessionKey(session.tokenHash), ...fields)
      .expire(sessionKey(session.tokenHash), ttl)
      .sadd(accountSessionsKey(accountId), session.tokenHash)
      // The index lives as long as the longest session it can name.
      .expire(accountSessionsKey(accountId), this.maxSeconds)
      .exec();
    return { token, session };
  }

  /**
   * The live session of a cookie's token, its idle expiry pushed back; undefined when there is none or it is past its
   * absolute expiry.
   */
  async get(token: string | undefined): Promise<Session | undefined> {
    if (!token || token.length > 256) return undefined;
    const tokenHash = hashToken(token);
    const row = await this.redis.hgetall(sessionKey(tokenHash));
    if (!row.account || !row.csrf) return undefined;
    const session: Session = { tokenHash, accountId: row.account, csrf: row.csrf, created: Number(row.created) || 0 };
    if (row.ends) session.ends = Number(row.ends) || 0;
    if (row.id_token) session.idToken = row.id_token;
    const now = Date.now();
    const leftMs = Math.min(session.created + this.maxSeconds * 1000, session.ends ?? Infinity) - now;
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
    await this.redis
      .multi()
      .del(sessionKey(session.tokenHash))
      .srem(accountSessionsKey(session.accountId), session.tokenHash)
      .exec();
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
 * Takes one sign-in attempt for every counter, or none (`lua/take-attempt.lua`): 0 when it may run, else the seconds
 * until the first full counter's window ends. Each counter's limit goes in the order of the counters.
 */
const takeAttemptScript = redisScript({
  name: 'signin_take_attempt',
  files: luaFiles(import.meta.url, 'take-attempt'),
  keys: ['counters'],
  args: ['windowSeconds', 'limits'],
  reply: as<number>(),
});

/** Gives an attempt back (it succeeded): every counter down by one, never below zero. */
const giveBackScript = redisScript({
  name: 'signin_give_back',
  files: luaFiles(import.meta.url, 'give-back'),
  keys: ['counters'],
  args: [],
  reply: as<number>(),
});

/**
 * Sign-in attempts counted per email (whether or not an account has it, so
 * the refusal tells nothing) and per client address, in Redis so every api
 * instance counts together. An attempt is counted before its password is
 * checked, in the same atomic step that decides whether it may run, so at
 * most the limit of password checks run in a window however many arrive at
 * once; past either limit, sign-ins are refused with a 429 until the window
 * that began with the first attempt ends, even with the right password:
 * guessing must not be able to outpace the lock. A successful sign-in gives
 * back its own attempt only.
 */
export class SigninThrottle {
  constructor(
    private readonly redis: Redis,
    private readonly limits: ThrottleLimits = defaultThrottle,
  ) {}

  /**
   * Takes one attempt against the email's and the address's counters (no
   * email: a sign-up, the address's alone), or throws a 429 when either is
   * at its limit. A refused attempt is not counted.
   */
  async attempt(email: string | undefined, ip: string): Promise<void> {
    const keys = this.keys(email, ip);
    const wait = Number(
      await takeAttemptScript(this.redis, {
        counters: keys.map(({ key }) => key),
        windowSeconds: this.limits.windowSeconds,
        limits: keys.map(({ limit }) => limit),
      }),
    );
    if (wait === 0) return;
    const seconds = Math.max(1, wait);
    throw new GatewayError(
      429,
      `Too many sign-in attempts. Try again in ${Math.ceil(seconds / 60)} minute${seconds > 60 ? 's' : ''}.`,
      {
        type: 'requests',
        code: 'rate_limit_exceeded',
        headers: { 'retry-after': String(seconds) },
      },
    );
  }

  /**
   * The attempt succeeded and is given back. The failures before it stay
   * counted until their window ends: clearing them would let a sign-in in
   * the middle of a burst open more places for the guesses beside it.
   */
  async succeeded(email: string, ip: string): Promise<void> {
    await giveBackScript(this.redis, { counters: this.keys(email, ip).map(({ key }) => key) });
  }

  private keys(email: string | undefined, ip: string): Array<{ key: string; limit: number }> {
    const keys = [{ key: signinFailuresKey('ip', ip), limit: this.limits.perIp }];
    if (email !== undefined)
      keys.push({ key: signinFailuresKey('email', email.trim().toLowerCase()), limit: this.limits.perEmail });
    return keys;
  }
}
