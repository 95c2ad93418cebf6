import type { Context, Middleware } from 'koa';
import type { KeyAccess } from '../../shared/accounts.js';
import { GatewayError, invalidApiKey } from '../../shared/errors.js';
import { speaksGoogle } from '../../shared/gemini.js';
import { answersGoogle } from '../http/envelope.js';
import type { KeyCache } from './key-store.js';
import { accessRefusalMessage } from '../../shared/access/index.js';

export interface AuthState {
  keyId: string;
  /** The key's account and limits, for admission. */
  access: KeyAccess;
}

/**
 * The key Google's clients send: `x-goog-api-key` (the GenAI SDKs, Gemini CLI), or `?key=` in the URL (Google's
 * REST examples), read on Google's paths; the header also on `/v1/models`, which the SDKs list models from. A
 * `?key=` is taken out of the request's URL once read, so nothing that records the URL later (a log line, a
 * trace, an error message) can hold it.
 */
function googleKey(ctx: Context): string | undefined {
  const header = ctx.get('x-goog-api-key').trim();
  if (header !== '' && answersGoogle(ctx)) return header;
  if (!speaksGoogle(ctx.path) || !/(?:^|&)key=/.test(ctx.querystring)) return undefined;
  const query = new URLSearchParams(ctx.querystring);
  const key = query.get('key')?.trim();
  query.delete('key');
  ctx.querystring = query.toString();
  ctx.originalUrl = ctx.request.originalUrl = ctx.url;
  return key === '' ? undefined : key;
}

/**
 * The API key: `Authorization: Bearer <key>` as the OpenAI clients (and Anthropic's newest SDK) send it, or
 * `x-api-key: <key>` as Claude Code and the Anthropic SDKs do, on every /v1 path; on Google's paths first the
 * key Google's clients send (`googleKey`). All name the same keys.
 *
 * On Google's paths a missing key is 401 (UNAUTHENTICATED) and a key the gateway refuses (unknown, expired, its
 * account disabled) 403 (PERMISSION_DENIED, with Google's `API_KEY_INVALID` reason): Google answers an unknown key
 * 400, which reads as a malformed request in the gateway's own records, and no Google client retries a 403.
 */
export function authenticate(keys: KeyCache): Middleware<AuthState> {
  return async (ctx, next) => {
    const google = answersGoogle(ctx);
    const header = ctx.get('authorization');
    const apiKey = ctx.get('x-api-key').trim();
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    const key =
      (google ? googleKey(ctx) : undefined) ??
      match?.[1] ??
      (header === '' && /^\S+$/.test(apiKey) ? apiKey : undefined);
    if (key === undefined) {
      throw invalidApiKey(
        google
          ? 'You did not provide an API key. Send it in the x-goog-api-key header, as the key query parameter, or ' +
              'as "Authorization: Bearer <API key>".'
          : header || apiKey
            ? 'The Authorization header must be "Bearer <API key>" (or send the key alone in x-api-key).'
            : ctx.get('x-goog-api-key') !== ''
              ? "You did not provide an API key: x-goog-api-key is read on Google's paths (/v1beta/…, " +
                '/v1/models/{model}:{method}) only. Send it as "Authorization: Bearer <API key>" or in the ' +
                'x-api-key header.'
              : 'You did not provide an API key. Send it as "Authorization: Bearer <API key>" or in the x-api-key ' +
                'header.',
      );
    }
    const verdict = await keys.check(key);
    if ('refused' in verdict) {
      const refuse = (message: string) =>
        google ? new GatewayError(403, message, { code: 'invalid_api_key' }) : invalidApiKey(message);
      // Saying a key expired (rather than that it is wrong) tells its owner to ask for a new one, not to check for
      // typos.
      if (verdict.refused === 'expired') {
        throw refuse(
          `The API key provided expired at ${new Date(verdict.expiresAt * 1000).toISOString()}. Create a new key ` +
            `or extend this one.`,
        );
      }
      if (verdict.refused === 'disabled') throw refuse(accessRefusalMessage('disabled'));
      throw refuse(
        google
          ? 'API key not valid. Please pass a valid API key (create keys in the console, /console, with `npm run ' +
              'keys -- create`, or with the admin API).'
          : 'Incorrect API key provided. Create keys in the console (/console), with `npm run keys -- create`, or ' +
              'with the admin API.',
      );
    }
    ctx.state.keyId = verdict.access.keyId;
    ctx.state.access = verdict.access;
    await next();
  };
}
