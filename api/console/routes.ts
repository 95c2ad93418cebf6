import type Router from '@koa/router';
import type { RouterMiddleware } from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import type { Next } from 'koa';
import { z } from 'zod';
import { GatewayError } from '../../shared/errors.js';
import { storableText } from '../../shared/schemas/common.js';
import { readJsonObject } from '../http/request-body.js';
import { usdToMicros } from '../accounts/account-store.js';
import {
  accountName,
  email,
  keyChanges,
  keyName,
  keySettings,
  newKeyLimits,
  parseStrict,
  patchKeySchema,
  password,
} from '../accounts/account-requests.js';
import { accountAuditFields, accountView, keyAuditFields, keyView } from '../accounts/views.js';
import { recordChange } from '../accounts/audit-trail.js';
import { auditSource, changedFields } from '../../storage/record/audit-log.js';
import type {
  ConsoleBoot,
  ConsoleConfig,
  CreatedKeyView,
  KeyName,
  KeyView,
  List,
  SessionAnswer,
  SignOutAnswer,
} from '../../shared/console-api.js';
import { bodyLimit } from '../accounts/admin-api.js';
import type { AuthState } from '../accounts/auth.js';
import { serve } from '../requests/endpoint-route.js';
import {
  checkCsrf,
  cookieOptions,
  loadSession,
  preSessionToken,
  requireSession,
  requireTeam,
  sessionCookie,
  startSession,
  withoutTeam,
  type ConsoleContext,
  type ConsoleDeps,
  type ConsoleState,
  type TeamNeed,
  type TeamScope,
} from './console-session.js';
import { may } from '../accounts/team-roles.js';
import type { Account } from '../../shared/accounts.js';
import type { ApiKeyRecord } from '../accounts/key-store.js';
import type { RequestState } from '../requests/request-context.js';
import {
  pricingList,
  requestHistogramReport,
  requestList,
  teamKeyNames,
  usageReport,
  usageCsv,
  usageRequestSchema,
} from './reports.js';
import { addAdminConsoleRoutes } from './admin-routes.js';
import { addBatchConsoleRoutes } from './batch-routes.js';
import { addAuditConsoleRoutes } from './audit-routes.js';
import { addTeamConsoleRoutes, teamList } from './team-routes.js';
import { addMcpConsoleRoutes } from './mcp-routes.js';
import { addBudgetConsoleRoutes } from './budget-routes.js';
import { queueDashboardEntry } from './queue-dashboard.js';
import { isMockEnabled, isMockStandingIn } from '../../shared/vendors.js';
import { OidcSignIn } from './oidc.js';

/*
 * The web console: its built pages at /console/*, its JSON API at
 * /console/api/*. Every answer carries a CSP that forbids inline script and
 * framing. The API is cookie-authenticated (a server-side session), so every
 * state-changing call must also carry the session's CSRF token in
 * `x-csrf-token`; before sign-in, a pre-session token in its own cookie plays
 * that part (login CSRF). Errors have the OpenAI shape, as everywhere.
 */

const contentSecurityPolicy = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data: blob:",
  // The Playground's Speech tab plays its audio from a blob URL.
  "media-src 'self' blob:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const signInSchema = z.strictObject({ email: storableText().max(320), password: z.string().max(1024) });
const signUpSchema = z.strictObject({ email, password, name: accountName.optional() });
const createOwnKeySchema = z.strictObject({ name: keyName, ...keySettings });

/** Keys of one's own and the Playground: owners and members. */
const keyUser: TeamNeed = { allows: may.ownKeys, roles: 'an owner or a member' };
/** Usage and the request log: every role. */
const usageReader: TeamNeed = { allows: may.readUsage, roles: 'any role' };

/**
 * Whose usage and requests a team's page reads. In a person's own account, as before teams: theirs (an admin's,
 * every account's unless a query names one). In another team, the team's alone (an admin's too): all of it for an
 * owner or a viewer, a member's own keys' share (`keyIds`, revoked keys too) for a member.
 */
async function readerOf(deps: ConsoleDeps, scope: TeamScope): Promise<{ account: Account; keyIds?: string[] }> {
  // An admin's Usage and Activity are the gateway's, whichever team the switcher is on: their account filter picks one.
  if (scope.account.role === 'admin') return { account: scope.account };
  const keyIds = scope.role === 'member' ? await deps.keyStore.keysMadeBy(scope.team.id, scope.account.id) : undefined;
  if (scope.team.id === scope.account.id) return { account: scope.account };
  return { account: { ...scope.team, role: 'member' }, ...(keyIds ? { keyIds } : {}) };
}

/** A console request's state: the gateway's, with the signed-in session once it is loaded. */
type State = RequestState & ConsoleState;

/**
 * The playground's way in: the signed-in person comes in as their own
 * Playground key in the current team (made by them on its first use), set on
 * the request as an API key in an Authorization header sets it
 * (api/accounts/auth.ts), so the keyed route past it is the one /v1 runs. Its
 * access is read as a presented key's (`KeyStore.playgroundAccess`): the team's
 * budget and the person's member cap there hold it as they hold their own keys.
 */
function authenticatePlayground(deps: ConsoleDeps): RouterMiddleware<State & AuthState> {
  return async (ctx, next) => {
    const { account, team } = await requireTeam(ctx, deps, keyUser);
    const access = await deps.keyStore.playgroundAccess(team.id, account.id);
    if (access.expiresAt !== undefined && access.expiresAt * 1000 <= Date.now()) {
      throw new GatewayError(
        401,
        'The Playground key has expired: extend or revoke it on the keys page (a new one is made on the next use).',
        {
          code: 'invalid_api_key',
        },
      );
    }
    ctx.state.keyId = access.keyId;
    ctx.state.access = access;
    await next();
  };
}

export function consoleRoutes(deps: ConsoleDeps): Router {
  const router = createRouter<State>('/console');
  const { config, keyStore, sessions, throttle } = deps;
  const accounts = keyStore.accounts;
  const oidcSettings = config.console.oidc;
  // Sign-in through the provider, when OIDC_ISSUER names one (api/console/oidc.ts).
  const oidc = oidcSettings ? new OidcSignIn(oidcSettings, deps) : undefined;
  const passwordsOnlyForBreakGlass = oidcSettings?.only === true;
  const passwordSigninDisabled = () =>
    new GatewayError(
      403,
      `Password sign-in is turned off on this gateway: use "${oidcSettings?.name ?? 'Sign in with SSO'}".`,
      { code: 'password_signin_disabled' },
    );

  router.use(async (ctx: ConsoleContext, next: Next) => {
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

  // Whether anyone can sign in as an admin yet (an admin with an email and a password: the built-in default account is
  // an admin with neither): the sign-in page says how the first one is made while nobody can.
  // Only that yes or no, never who; read from the record at most every few seconds, and once yes, kept.
  let adminSeen = false;
  let adminChecked = 0;
  const hasAdmin = async (): Promise<boolean> => {
    if (adminSeen || Date.now() - adminChecked < 5000) return adminSeen;
    adminChecked = Date.now();
    try {
      const found = await keyStore.record
        .selectFrom('accounts')
        .select('id')
        .where('role', '=', 'admin')
        .where('disabled', '=', false)
        .where('deleted', '=', false)
        .where('email', '<>', '')
        .where('password', '<>', '')
        .limit(1)
        .executeTakeFirst();
      adminSeen = found !== undefined;
    } catch {
      // The record unreachable: no hint rather than no console.
      return true;
    }
    return adminSeen;
  };

  /** The console's settings: `GET /console/api/config`'s answer, and a page's boot data. */
  const consoleConfig = async (ctx: ConsoleContext): Promise<ConsoleConfig> => ({
    has_admin: await hasAdmin(),
    signup: config.console.signup === 'open' && !passwordsOnlyForBreakGlass,
    public_pricing: config.console.publicPricing,
    base_url: config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`,
    queue_dashboard: queueDashboardEntry,
    // What a member's own keys may set at most where an admin set nothing (null: unlimited).
    key_defaults: { rpm: config.defaultKeyRpm ?? null, tpm: config.defaultKeyTpm ?? null },
    // Whether answers may come from the built-in mock, and whether they are billed: the console's header says so.
    mock: {
      on: isMockEnabled(config),
      billed: config.mock.billed,
      models: isMockStandingIn(config)
        ? 'all'
        : isMockEnabled(config)
          ? deps.models.list().filter((model) => model.owned_by === 'mock').length
          : 0,
    },
    sso: { on: oidc !== undefined, label: oidcSettings?.name ?? '' },
    password_signin: !passwordsOnlyForBreakGlass,
  });

  router.get('/api/config', async (ctx) => {
    ctx.body = await consoleConfig(ctx);
  });

  /** Who is signed in on this browser, with the CSRF token its changes carry (the pre-session one when nobody is). */
  const sessionAnswer = async (ctx: ConsoleContext): Promise<SessionAnswer> => {
    const found = await loadSession(ctx, deps);
    return found
      ? { account: accountView(found.account), csrf_token: found.session.csrf }
      : { account: null, csrf_token: preSessionToken(ctx) };
  };

  router.get('/api/session', async (ctx) => {
    ctx.body = await sessionAnswer(ctx);
  });

  router.post('/api/session', async (ctx) => {
    const body = parseStrict(signInSchema, await readJsonObject(ctx.req, bodyLimit));
    // Under OIDC_ONLY a password signs in only the break-glass admins: anyone else is told so before any password is
    // checked.
    const breakGlass = passwordsOnlyForBreakGlass && oidcSettings.breakGlass.includes(body.email.trim().toLowerCase());
    const refusedPassword = async () => {
      await recordChange(keyStore.record, {
        ...auditSource(ctx, 'anonymous'),
        actorEmail: body.email,
        action: 'signin.failed',
        teamId: null,
        target: null,
        after: { method: 'password', reason: 'password_signin_disabled' },
      });
      return passwordSigninDisabled();
    };
    if (passwordsOnlyForBreakGlass && !breakGlass) throw await refusedPassword();
    // Counted before the password is checked, atomically: a burst cannot run more checks than the limit.
    await throttle.attempt(body.email, ctx.ip);
    const account = await accounts.signIn(body.email, body.password);
    if (!account || account.disabled) {
      // Who tried: the account the email names, when one does (the address tried is kept either way, never the
      // password).
      const named = account ?? (await accounts.findByEmail(body.email));
      await recordChange(keyStore.record, {
        ...auditSource(ctx, named ? { id: named.id, email: named.email } : 'anonymous'),
        ...(named ? {} : { actorEmail: body.email }),
        action: 'signin.failed',
        teamId: named?.id ?? null,
        target: named?.id ?? null,
        after: { method: 'password', reason: account ? 'account_disabled' : 'invalid_credentials' },
      });
    }
    if (!account) {
      throw new GatewayError(401, 'Incorrect email or password.', { code: 'invalid_credentials' });
    }
    // A break-glass email that is no admin's account is no way in.
    if (breakGlass && account.role !== 'admin') throw await refusedPassword();
    if (account.disabled)
      throw new GatewayError(403, 'This account is disabled. Ask an administrator to enable it.', {
        code: 'account_disabled',
      });
    await throttle.succeeded(body.email, ctx.ip);
    await recordChange(keyStore.record, {
      ...auditSource(ctx, account),
      action: 'signin.succeeded',
      teamId: account.id,
      target: account.id,
      after: { method: 'password' },
    });
    ctx.body = await startSession(ctx, deps, account);
  });

  router.delete('/api/session', async (ctx) => {
    const found = await loadSession(ctx, deps);
    if (found) await sessions.destroy(found.session);
    ctx.cookies.set(sessionCookie, '', { ...cookieOptions(ctx), maxAge: 0 });
    // Signed in through the provider: its own session ends too when the console goes to its sign-out page.
    const idToken = found?.session.idToken;
    const endSessionUrl = oidc && idToken ? await oidc.endSessionUrl(ctx, idToken) : undefined;
    // A new pre-session token: the one used before this session is never good again.
    ctx.body = {
      signed_out: true,
      csrf_token: preSessionToken(ctx, true),
      end_session_url: endSessionUrl ?? null,
    } satisfies SignOutAnswer;
  });

  if (oidc) {
    router.get('/api/oidc/login', (ctx) => oidc.login(ctx));
    router.get('/api/oidc/callback', (ctx) => oidc.callback(ctx));
  }

  router.post('/api/signup', async (ctx) => {
    if (config.console.signup !== 'open' || passwordsOnlyForBreakGlass) {
      throw new GatewayError(403, 'Sign-up is closed on this gateway: ask an administrator for an account.', {
        code: 'signup_disabled',
      });
    }
    const body = parseStrict(signUpSchema, await readJsonObject(ctx.req, bodyLimit));
    // Sign-ups count against the address like failed sign-ins: one client cannot mint accounts without end.
    await throttle.attempt(undefined, ctx.ip);
    const account = await accounts.create({
      email: body.email,
      password: body.password,
      name: body.name ?? '',
      role: 'member',
    });
    const source = auditSource(ctx, account);
    await recordChange(keyStore.record, {
      ...source,
      action: 'account.created',
      teamId: account.id,
      target: account.id,
      after: { ...accountAuditFields(account), signup: true },
    });
    const credit = usdToMicros(config.console.signupCreditUsd);
    if (credit > 0) {
      const balance = await accounts.credit(account.id, credit, 'sign-up credit');
      // The gateway's grant (SIGNUP_CREDIT_USD), not the person's.
      await recordChange(keyStore.record, {
        ...source,
        actor: 'system',
        actorEmail: null,
        action: 'credit.granted',
        teamId: account.id,
        target: account.id,
        after: { amount_micros: credit, note: 'sign-up credit', balance_micros: balance },
      });
    }
    ctx.status = 201;
    ctx.body = await startSession(ctx, deps, (await accounts.get(account.id)) ?? account);
  });

  router.get('/api/pricing', async (ctx) => {
    if (!config.console.publicPricing) await requireSession(ctx, deps);
    // Token prices of a request served as priority or flex are these multiples of the listed ones (default: 1).
    ctx.body = {
      object: 'list',
      data: pricingList(deps.models, deps.prices),
      service_tiers: deps.prices.tierMultiples(),
    };
  });

  // ---- the team's keys (a member's own, an owner's every one) and usage ----

  /** Keys as the console shows them: with the ceilings an admin set and who made each. */
  const keyViews = async (keys: ApiKeyRecord[]): Promise<KeyView[]> => {
    const [limited, creators] = await Promise.all([keyStore.withAdminLimits(keys), keyStore.creators(keys)]);
    return limited.map((key) => ({ ...keyView(key), created_by: creators.get(key.id) ?? null }));
  };

  /**
   * The key `:id` names, if the person may change it: any of the team's for an owner, their own for a member; 404
   * otherwise.
   */
  const teamKey = async (ctx: ConsoleContext, scope: TeamScope) => {
    const id = String(ctx.params.id);
    const key = await keyStore.get(id);
    // Another account's key, or another member's, is reported missing exactly as an unknown one: ids are not a way to
    // probe.
    const mine =
      key &&
      key.accountId === scope.team.id &&
      (may.manageAllKeys(scope.role) || (await keyStore.creators([key])).get(key.id)?.id === scope.account.id);
    if (!key || !mine)
      throw new GatewayError(404, `No API key with id '${id.slice(0, 100)}'.`, { code: 'key_not_found' });
    return key;
  };

  router.get('/api/keys', async (ctx) => {
    const scope = await requireTeam(ctx, deps, keyUser);
    const keys = await keyViews(await keyStore.list({ accountId: scope.team.id }));
    ctx.body = {
      object: 'list',
      data: may.manageAllKeys(scope.role) ? keys : keys.filter((key) => key.created_by?.id === scope.account.id),
    } satisfies List<KeyView>;
  });

  router.post('/api/keys', async (ctx) => {
    const { account, team } = await requireTeam(ctx, deps, keyUser);
    const body = parseStrict(createOwnKeySchema, await readJsonObject(ctx.req, bodyLimit));
    // A member's own key: its rates at most the operator's defaults. An admin's is an admin's. It spends the team's
    // money, and the signed-in person made it: their cap in the team holds what it spends.
    const created = await keyStore.create(
      body.name,
      { accountId: team.id, createdBy: account.id, ...newKeyLimits(body) },
      account.role,
    );
    await recordChange(keyStore.record, {
      ...auditSource(ctx, account),
      action: 'key.created',
      teamId: team.id,
      target: created.id,
      after: keyAuditFields(created),
    });
    ctx.status = 201;
    ctx.body = { ...(await keyViews([created]))[0]!, key: created.key } satisfies CreatedKeyView;
  });

  router.patch('/api/keys/:id', async (ctx) => {
    const scope = await requireTeam(ctx, deps, keyUser);
    const body = parseStrict(patchKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const key = await teamKey(ctx, scope);
    // A member only tightens: below what an admin set on the key, and the operator's default rates (403 otherwise).
    const [was] = await keyStore.withAdminLimits([key]);
    const updated = await keyStore.update(key.id, keyChanges(body), scope.account.role);
    if (!updated) throw new GatewayError(404, `No API key with id '${key.id}'.`, { code: 'key_not_found' });
    await recordChange(keyStore.record, {
      ...auditSource(ctx, scope.account),
      action: 'key.updated',
      teamId: updated.accountId,
      target: key.id,
      ...changedFields(keyAuditFields(was!), keyAuditFields(updated)),
    });
    ctx.body = (await keyViews([updated]))[0]!;
  });

  router.delete('/api/keys/:id', async (ctx) => {
    const scope = await requireTeam(ctx, deps, keyUser);
    const key = await teamKey(ctx, scope);
    await keyStore.revoke(key.id);
    await recordChange(keyStore.record, {
      ...auditSource(ctx, scope.account),
      action: 'key.revoked',
      teamId: key.accountId,
      target: key.id,
      before: { revoked: false },
      after: { revoked: true },
    });
    ctx.body = { id: key.id, object: 'api_key', deleted: true };
  });

  router.get('/api/usage', async (ctx) => {
    const reader = await readerOf(deps, await requireTeam(ctx, deps, usageReader));
    const request = parseStrict(usageRequestSchema, withoutTeam(ctx.query));
    ctx.body = await usageReport(keyStore, reader.account, request, reader.keyIds);
  });

  router.get('/api/usage.csv', async (ctx) => {
    const reader = await readerOf(deps, await requireTeam(ctx, deps, usageReader));
    const request = parseStrict(usageRequestSchema, withoutTeam(ctx.query));
    const { filename, csv } = await usageCsv(keyStore, reader.account, request, reader.keyIds);
    ctx.type = 'text/csv; charset=utf-8';
    ctx.attachment(filename);
    ctx.body = csv;
  });

  // ---- activity: the request log, the team's (every account's for an admin in their own) ----

  // The names of the keys a reader's usage shows (a viewer lists no keys, but reads their usage by name).
  router.get('/api/key-names', async (ctx) => {
    const scope = await requireTeam(ctx, deps, usageReader);
    const reader = await readerOf(deps, scope);
    ctx.body = {
      object: 'list',
      data: await teamKeyNames(keyStore, scope.team.id, reader.keyIds),
    } satisfies List<KeyName>;
  });

  router.get('/api/requests', async (ctx) => {
    const reader = await readerOf(deps, await requireTeam(ctx, deps, usageReader));
    ctx.body = await requestList(keyStore.record, reader.account, withoutTeam(ctx.query), reader.keyIds);
  });

  router.get('/api/requests/histogram', async (ctx) => {
    const reader = await readerOf(deps, await requireTeam(ctx, deps, usageReader));
    ctx.body = await requestHistogramReport(keyStore.record, reader.account, withoutTeam(ctx.query), reader.keyIds);
  });

  // ---- batches of both dialects: listed, read, canceled and deleted (batch-routes.ts) ----

  addBatchConsoleRoutes(router, deps);

  // ---- playground: the same endpoint route as /v1, billed to the account's own playground key ----

  const playgroundKey = authenticatePlayground(deps);
  router.post<AuthState>('/api/playground/chat/completions', playgroundKey, (ctx) =>
    serve('chat.completions', ctx, deps),
  );
  router.post<AuthState>('/api/playground/images/generations', playgroundKey, (ctx) =>
    serve('images.generations', ctx, deps),
  );
  router.post<AuthState>('/api/playground/audio/speech', playgroundKey, (ctx) => serve('audio.speech', ctx, deps));

  // ---- admin ----

  addAdminConsoleRoutes(router, deps);

  // ---- the audit log: every row for an admin, the rows of the teams they own for anyone else ----

  addAuditConsoleRoutes(router, deps);
  // ---- teams: their members and roles (team-routes.ts) ----

  addTeamConsoleRoutes(router, deps);

  // ---- budgets: a team's, its members' caps, and its alerts (budget-routes.ts) ----

  addBudgetConsoleRoutes(router, deps);
  // The Tools page: the MCP servers, and the tools each key may use.
  addMcpConsoleRoutes(router, deps);

  router.all('/api/{*rest}', (ctx) => {
    throw new GatewayError(404, `Unknown request URL: ${ctx.method} ${ctx.path.slice(0, 300)}.`, {
      code: 'unknown_url',
    });
  });

  // ---- pages ----

  /**
   * A page: index.html with what its script would ask for first (the settings, the session, the person's teams), so
   * the first page of a visit is drawn at once and its own data are its only round of calls. Anything in the way of
   * reading them (the record unreachable) leaves them out: the script asks for them itself, as it always could.
   */
  const page = async (ctx: ConsoleContext, rest: string) => {
    if (!deps.assets.isPage(rest)) return deps.assets.serve(ctx, rest);
    let boot: ConsoleBoot | undefined;
    try {
      const [config, session] = await Promise.all([consoleConfig(ctx), sessionAnswer(ctx)]);
      boot = { config, session, teams: ctx.state.account ? await teamList(deps, ctx.state.account) : null };
    } catch (error) {
      ctx.state.log.warn({ err: error }, 'console page served without its boot data');
    }
    if (boot) deps.assets.servePage(ctx, boot);
    else deps.assets.serve(ctx, rest);
  };
  router.get('/', (ctx) => page(ctx, ''));
  router.get('/{*rest}', (ctx) => page(ctx, ctx.path.slice('/console/'.length)));

  return router;
}
