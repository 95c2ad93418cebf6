import type { Middleware } from 'koa';
import { invalidApiKey } from '../../shared/errors.js';
import type { KeyCache } from '../key-store.js';

export interface AuthState {
  keyId: string;
}

/** Bearer API key, as the OpenAI clients send it. */
export function authenticate(keys: KeyCache): Middleware<AuthState> {
  return async (ctx, next) => {
    const header = ctx.get('authorization');
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) {
      throw invalidApiKey(
        header
          ? 'The Authorization header must be "Bearer <API key>".'
          : 'You did not provide an API key. Send it as "Authorization: Bearer <API key>".',
      );
    }
    const keyId = await keys.resolve(match[1]!);
    if (!keyId) throw invalidApiKey('Incorrect API key provided. Create keys with `npm run keys -- create` or the admin API.');
    ctx.state.keyId = keyId;
    await next();
  };
}
