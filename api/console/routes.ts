import type Router from '@koa/router';
import { createRouter } from '../canonical-path.js';
import type { Context, Next } from 'koa';
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Account } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import { readJsonObject } from '../request-body.js';
import { usdToMicros } from '../account-store.js';
import type { KeyStore } from '../key-store.js';
import { email, keyChanges, keyLimits, keyName, newKeyLimits, parseStrict, patchKeySchema, password } from '../account-requests.js';
import { accountView, keyView } from '../views.js';
import { bodyLimit } from '../routes/admin.js';
import { serve, type EndpointRouteDeps } from '../routes/endpoint-routes.js';
import type { ConsoleAssets } from './assets.js';
import { sameSecret, type Session, type SessionStore, type SigninThrottle } from './sessions.js';
import { pricingList, requestHistogramReport, requestList, usageReport, usageCsv, usageRequestSchema } from './reports.js';
import { addAdminConsoleRoutes } from './admin-routes.js';
import { queueDashboardEntry } from '../queue-dashboard.js';

/*
 * The web console: its built pages at /console/*, its JSON API at
 * /console/api/*. Every answer carries a CSP that forbids inline script and
 * framing. The API is cookie-authenticated (a server-side session), so every
 * state-changing call must also carry the session's CSRF token in
 * `x-csrf-token`; before sign-in, a pre-session token in its own cookie plays
 * that part (login CSRF). Errors have the OpenAI shape, as everywhere.
 */

export interface ConsoleState {
  session?: Session;
  account?: Account;
}

export interface ConsoleDeps extends EndpointRouteDeps {
  keyStore: KeyStore;
  sessions: SessionStore;
  throttle: SigninThrottle;
  assets: ConsoleAssets;
}

const sessionCookie = 'sy_session';
const csrfCookie = 'sy_csrf';
const csrfHeader = 'x-csrf-token';

const contentSecurityPolicy = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

export const notSignedIn = () => new GatewayError(401, 'Sign in to use the console.', { type: 'invalid_request_error', code: 'not_signed_in' });
const csrfFailed = () =>
  new GatewayError(403, `This request needs the console's CSRF token in the ${csrfHeader} header; reload the page and try again.`, {
    code: 'csrf_failed',
  });

const signInSchema = z.strictObject({ email: z.string().max(320), password: z.string().max(1024) });
const signUpSchema = z.strictObject({ email, password, name: z.string().trim().max(200).optional() });
const createOwnKeySchema = z.strictObject({ name: keyName, ...keyLimits });

function cookieOptions(ctx: Context, maxAgeMs?: number) {
  return {
    httpOnly: true,
    sameSite: 'lax' as const,
    // Koa's `secure` honours X-Forwarded-Proto only when TRUST_PROXY is on.
    secure: ctx.secure,
    path: '/console',
    overwrite: true,
    ...(maxAgeMs === undefined ? {} : { maxAge: maxAgeMs }),
  };
}

/** The pre-session CSRF token of this browser, made (and set as a cookie) when it has none. */
function preSessionToken(ctx: Context, fresh = false): string {
  const existing = ctx.cookies.get(csrfCookie);
  if (!fresh && existing && /^[A-Za-z0-9_-]{43}$/.test(existing)) return existing;
  const token = randomBytes(32).toString('base64url');
  ctx.cookies.set(csrfCookie, token, cookieOptions(ctx));
  return token;
}

/** The signed-in session and its account, loaded once per request; a session of a disabled or deleted account is ended. */
async function loadSession(ctx: Context, deps: ConsoleDeps): Promise<{ session: Session; account: Account } | undefined> {
  const state = ctx.state as ConsoleState;
  if (state.session && state.account) return { session: state.session, account: state.account };
  const session = await deps.sessions.get(ctx.cookies.get(sessionCookie));
  if (!session) return undefined;
  const account = await deps.keyStore.accounts.get(session.accountId);
  if (!account || account.disabled) {
    await deps.sessions.destroy(session);
    return undefined;
  }
  state.session = session;
  state.account = account;
  return { session, account };
}

export async function requireSession(ctx: Context, deps: ConsoleDeps): Promise<{ session: Session; account: Account }> {
  const found = await loadSession(ctx, deps);
  if (!found) throw notSignedIn();
  return found;
}

/**
 * Every POST, PATCH and DELETE must name a CSRF token this browser was given:
 * its session's, or before sign-in its pre-session one. A cross-site form or
 * fetch can send the cookies but cannot read either token.
 */
async function checkCsrf(ctx: Context, deps: ConsoleDeps): Promise<void> {
  if (ctx.method === 'GET' || ctx.method === 'HEAD' || ctx.method === 'OPTIONS') return;
  const given = ctx.get(csrfHeader);
  if (!given) throw csrfFailed();
  const origin = ctx.get('origin');
  if (origin && origin !== 'null') {
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host !== ctx.host) throw csrfFailed();
  }
  const found = await loadSession(ctx, deps);
  // Signed in, only the session's own token counts: the pre-session one was rotated away at sign-in.
  if (found) {
    if (sameSecret(given, found.session.csrf)) return;
    throw csrfFailed();
  }
  const preSession = ctx.cookies.get(csrfCookie);
  if (preSession && sameSecret(given, preSession)) return;
  throw csrfFailed();
}

async function startSession(ctx: Context, deps: ConsoleDeps, account: Account) {
  // A new token at every sign-in: a token planted before it (session fixation) is never the one that signs in.
  const previous = await deps.sessions.get(ctx.cookies.get(sessionCookie));
  if (previous) await deps.sessions.destroy(previous);
  const { token, session } = await deps.sessions.create(account.id);
  ctx.cookies.set(sessionCookie, token, cookieOptions(ctx, deps.config.console.sessionMaxSeconds * 1000));
  // The pre-session CSRF token ends with the sign-in: from here on only the session's own token is accepted.
  ctx.cookies.set(csrfCookie, '', { ...cookieOptions(ctx), maxAge: 0 });
  return { account: accountView(account), csrf_token: session.csrf };
}

export function consoleRoutes(deps: ConsoleDeps): Router {
  const router = createRouter('/console');
  const { config, keyStore, sessions, throttle } = deps;
  const accounts = keyStore.accounts;

  router.use(async (ctx: Context, next: Next) => {
    ctx.set('content-security-policy', contentSecurityPolicy);
    ctx.set('x-frame-options', 'DENY');
    ctx.set('x-content-type-options', 'nosniff');
    ctx.set('referrer-policy', 'same-origin');
    // A created key's secret must never sit in a cache.
    if (ctx.path.startsWith('/console/api/') || ctx.path === '/console/api') ctx.set('cache-control', 'no-store');
    // Every state-changing request under /console, whatever route it is meant for, proves it came from the console.
    await checkCsrf(ctx, deps);
    await next();
  });

  // ---- public ----

  router.get('/api/config', (ctx) => {
    ctx.body = {
      signup: config.console.signup === 'open',
      public_pricing: config.console.publicPricing,
      base_url: config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`,
      queue_dashboard: queueDashboardEntry,
    };
  });

  router.get('/api/session', async (ctx) => {
    const found = await loadSession(ctx, deps);
    ctx.body = found ? { account: accountView(found.account), csrf_token: found.session.csrf } : { account: null, csrf_token: preSessionToken(ctx) };
  });

  router.post('/api/session', async (ctx) => {
    const body = parseStrict(signInSchema, await readJsonObject(ctx.req, bodyLimit));
    // Counted before the password is checked, atomically: a burst cannot run more checks than the limit.
    await throttle.attempt(body.email, ctx.ip);
    const account = await accounts.signIn(body.email, body.password);
    if (!account) {
      throw new GatewayError(401, 'Incorrect email or password.', { code: 'invalid_credentials' });
    }
    if (account.disabled) throw new GatewayError(403, 'This account is disabled. Ask an administrator to enable it.', { code: 'account_disabled' });
    await throttle.succeeded(body.email, ctx.ip);
    ctx.body = await startSession(ctx, deps, account);
  });

  router.delete('/api/session', async (ctx) => {
    const found = await loadSession(ctx, deps);
    if (found) await sessions.destroy(found.session);
    ctx.cookies.set(sessionCookie, '', { ...cookieOptions(ctx), maxAge: 0 });
    // A new pre-session token: the one used before this session is never good again.
    ctx.body = { signed_out: true, csrf_token: preSessionToken(ctx, true) };
  });

  router.post('/api/signup', async (ctx) => {
    if (config.console.signup !== 'open') {
      throw new GatewayError(403, 'Sign-up is closed on this gateway: ask an administrator for an account.', { code: 'signup_disabled' });
    }
    const body = parseStrict(signUpSchema, await readJsonObject(ctx.req, bodyLimit));
    // Sign-ups count against the address like failed sign-ins: one client cannot mint accounts without end.
    await throttle.attempt(undefined, ctx.ip);
    const account = await accounts.create({ email: body.email, password: body.password, name: body.name ?? '', role: 'member' });
    const credit = usdToMicros(config.console.signupCreditUsd);
    if (credit > 0) await accounts.credit(account.id, credit, 'sign-up credit');
    ctx.status = 201;
    ctx.body = await startSession(ctx, deps, (await accounts.get(account.id)) ?? account);
  });

  router.get('/api/pricing', async (ctx) => {
    if (!config.console.publicPricing) await requireSession(ctx, deps);
    ctx.body = { object: 'list', data: pricingList(deps.models, deps.prices) };
  });

  // ---- the member's own keys and usage ----

  const ownKey = async (ctx: Context, accountId: string) => {
    const id = String(ctx.params.id);
    const key = await keyStore.get(id);
    // Another account's key is reported missing, exactly as an unknown one: ids are not a way to probe.
    if (!key || key.accountId !== accountId) throw new GatewayError(404, `No API key with id '${id.slice(0, 100)}'.`, { code: 'key_not_found' });
    return key;
  };

  router.get('/api/keys', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    ctx.body = { object: 'list', data: (await keyStore.list({ accountId: account.id })).map(keyView) };
  });

  router.post('/api/keys', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const body = parseStrict(createOwnKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const created = await keyStore.create(body.name, {
      accountId: account.id,
      ...newKeyLimits(body),
    });
    ctx.status = 201;
    ctx.body = { ...keyView(created), key: created.key };
  });

  router.patch('/api/keys/:id', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const body = parseStrict(patchKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const key = await ownKey(ctx, account.id);
    const updated = await keyStore.update(key.id, keyChanges(body));
    if (!updated) throw new GatewayError(404, `No API key with id '${key.id}'.`, { code: 'key_not_found' });
    ctx.body = keyView(updated);
  });

  router.delete('/api/keys/:id', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const key = await ownKey(ctx, account.id);
    await keyStore.revoke(key.id);
    ctx.body = { id: key.id, object: 'api_key', deleted: true };
  });

  router.get('/api/usage', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const request = parseStrict(usageRequestSchema, ctx.query);
    ctx.body = await usageReport(keyStore, account, request);
  });

  router.get('/api/usage.csv', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    const request = parseStrict(usageRequestSchema, ctx.query);
    const { filename, csv } = await usageCsv(keyStore, account, request);
    ctx.type = 'text/csv; charset=utf-8';
    ctx.attachment(filename);
    ctx.body = csv;
  });

  // ---- activity: the request log, the account's own (every account's for an admin) ----

  router.get('/api/requests', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    ctx.body = await requestList(keyStore.record, account, ctx.query);
  });

  router.get('/api/requests/histogram', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    ctx.body = await requestHistogramReport(keyStore.record, account, ctx.query);
  });

  // ---- playground: the same endpoint route as /v1, billed to the account's own playground key ----

  const playground = (endpoint: 'chat.completions' | 'images.generations') => async (ctx: Context) => {
    const { account } = await requireSession(ctx, deps);
    const access = await keyStore.playgroundAccess(account.id);
    if (access.expiresAt !== undefined && access.expiresAt * 1000 <= Date.now()) {
      throw new GatewayError(401, 'The Playground key has expired: extend or revoke it on the keys page (a new one is made on the next use).', {
        code: 'invalid_api_key',
      });
    }
    ctx.state.keyId = access.keyId;
    ctx.state.access = access;
    await serve(endpoint, ctx, deps);
  };
  router.post('/api/playground/chat/completions', playground('chat.completions'));
  router.post('/api/playground/images/generations', playground('images.generations'));

  // ---- admin ----

  addAdminConsoleRoutes(router, deps);

  router.all('/api/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path.slice(0, 300)}.`, { code: 'unknown_url' });
  });

  // ---- pages ----

  router.get('/', (ctx) => deps.assets.serve(ctx, ''));
  router.get('/{*rest}', (ctx) => deps.assets.serve(ctx, ctx.path.slice('/console/'.length)));

  return router;
}
