import type { Middleware } from 'koa';
import type { KeyAccess } from '../../shared/accounts.js';
import { invalidApiKey } from '../../shared/errors.js';
import type { KeyCache } from './key-store.js';

export interface AuthState {
  keyId: string;
  /** The key's account and limits, for admission. */
  access: KeyAccess;
}

/**
 * The API key: `Authorization: Bearer <key>` as the OpenAI clients (and Anthropic's newest SDK) send it, or
 * `x-api-key: <key>` as Claude Code and the Anthropic SDKs do. Both name the same keys on every /v1 path.
 */
export function authenticate(keys: KeyCache): Middleware<AuthState> {
  return async (ctx, next) => {
    const header = ctx.get('authorization');
    const apiKey = ctx.get('x-api-key').trim();
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const key = match?.[1] ?? (header === '' && /^\S+$/.test(apiKey) ? apiKey : undefined);
    if (key === undefined) {
      throw invalidApiKey(
        header || apiKey
          ? 'The Authorization header must be "Bearer <API key>" (or send the key alone in x-api-key).'
          : 'You did not provide an API key. Send it as "Authorization: Bearer <API key>" or in the x-api-key header.',
      );
    }
    const verdict = await keys.check(key);
    if ('refused' in verdict) {
      // Saying a key expired (rather than that it is wrong) tells its owner to ask for a new one, not to check for typos.
      if (verdict.refused === 'expired') {
        throw invalidApiKey(`The API key provided expired at ${new Date(verdict.expiresAt * 1000).toISOString()}. Create a new key or extend this one.`);
      }
      if (verdict.refused === 'disabled') throw invalidApiKey('The account this API key belongs to is disabled. Ask an administrator to enable it.');
      throw invalidApiKey('Incorrect API key provided. Create keys in the console (/console), with `npm run keys -- create`, or with the admin API.');
    }
    ctx.state.keyId = verdict.access.keyId;
    ctx.state.access = verdict.access;
    await next();
  };
}
