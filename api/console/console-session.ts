import type { McpRegistry } from '../../shared/mcp/registry.js';
import type { McpServerAdmin } from '../mcp/server-admin.js';
import type { ParameterizedContext } from 'koa';
import type { GatewayState } from '../http/context.js';
import { randomBytes } from 'node:crypto';
import type { Account } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import type { KeyStore } from '../accounts/key-store.js';
import type { EndpointRouteDeps } from '../requests/endpoint-route.js';
import { accountView } from '../accounts/views.js';
import type { SessionAnswer } from '../../shared/console-api.js';
import type { ConsoleAssets } from './assets.js';
import { sameSecret, type Session, type SessionExtras, type SessionStore, type SigninThrottle } from './sessions.js';
import { teamRole, type TeamRole } from '../accounts/team-roles.js';

/**
 * The console's session cookie and its CSRF tokens: who is signed in, and whether a state-changing call came from this
 * console.
 */

export interface ConsoleState {
  session?: Session;
  account?: Account;
}

/** A console request: the gateway's state with the signed-in session once it is loaded. */
export type ConsoleContext = ParameterizedContext<GatewayState & ConsoleState>;

export interface ConsoleDeps extends EndpointRouteDeps {
  keyStore: KeyStore;
  sessions: SessionStore;
  throttle: SigninThrottle;
  assets: ConsoleAssets;
  /** The upstream MCP servers as they are now, and an admin's way to change them. */
  mcpServers: McpRegistry;
  mcp: McpServerAdmin;
}

export const sessionCookie = 'sy_session';
export const csrfCookie = 'sy_csrf';
const csrfHeader = 'x-csrf-token';

export const notSignedIn = () =>
  new GatewayError(401, 'Sign in to use the console.', { type: 'invalid_request_error', code: 'not_signed_in' });
const csrfFailed = () =>
  new GatewayError(
    403,
    `This request needs the console's CSRF token in the ${csrfHeader} header; reload the page and try again.`,
    {
      code: 'csrf_failed',
    },
  );

export function cookieOptions(ctx: ConsoleContext, maxAgeMs?: number) {
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
export function preSessionToken(ctx: ConsoleContext, fresh = false): string {
  const existing = ctx.cookies.get(csrfCookie);
  if (!fresh && existing && /^[A-Za-z0-9_-]{43}$/.test(existing)) return existing;
  const token = randomBytes(32).toString('base64url');
  ctx.cookies.set(csrfCookie, token, cookieOptions(ctx));
  return token;
}

/**
 * The signed-in session and its account, loaded once per request; a session of a disabled or deleted account is ended.
 */
export async function loadSession(
  ctx: ConsoleContext,
  deps: ConsoleDeps,
): Promise<{ session: Session; account: Account } | undefined> {
  const { state } = ctx;
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

export async function requireSession(
  ctx: ConsoleContext,
  deps: ConsoleDeps,
): Promise<{ session: Session; account: Account }> {
  const found = await loadSession(ctx, deps);
  if (!found) throw notSignedIn();
  return found;
}

/**
 * Every POST, PATCH and DELETE must name a CSRF token this browser was given:
 * its session's, or before sign-in its pre-session one. A cross-site form or
 * fetch can send the cookies but cannot read either token.
 */
export async function checkCsrf(ctx: ConsoleContext, deps: ConsoleDeps): Promise<void> {
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

/**
 * Signs `account` in on this browser; `extras` (a sign-in through a provider) may end the session early and keep its ID
 * token.
 */
export async function startSession(
  ctx: ConsoleContext,
  deps: ConsoleDeps,
  account: Account,
  extras: SessionExtras = {},
): Promise<SessionAnswer> {
  // A new token at every sign-in: a token planted before it (session fixation) is never the one that signs in.
  const previous = await deps.sessions.get(ctx.cookies.get(sessionCookie));
  if (previous) await deps.sessions.destroy(previous);
  const { token, session } = await deps.sessions.create(account.id, extras);
  const maxAgeMs = Math.min(
    deps.config.console.sessionMaxSeconds * 1000,
    extras.ends === undefined ? Infinity : Math.max(0, extras.ends - Date.now()),
  );
  ctx.cookies.set(sessionCookie, token, cookieOptions(ctx, maxAgeMs));
  // The pre-session CSRF token ends with the sign-in: from here on only the session's own token is accepted.
  ctx.cookies.set(csrfCookie, '', { ...cookieOptions(ctx), maxAge: 0 });
  return { account: accountView(account), csrf_token: session.csrf };
}

/** The header naming the team a console request works in (a GET download may name it as the `team` query parameter). */
export const teamHeader = 'x-team';

/** A signed-in person working in a team, with their role there. */
export interface TeamScope {
  session: Session;
  /** The signed-in person. */
  account: Account;
  team: Account;
  role: TeamRole;
}

/** What a console request needs of the person's role in its team, and how a refusal names it. */
export interface TeamNeed {
  allows: (role: TeamRole | undefined) => boolean;
  /** The roles that may, as a refusal says them ("an owner or a member"). */
  roles: string;
}

const teamNotFound = (id: string) =>
  new GatewayError(404, `No team with id '${id.slice(0, 100)}'.`, { code: 'team_not_found' });

/**
 * The team a console request works in: the one its path names (`/teams/:id`), or its `x-team` header (or `team`
 * query parameter), else the person's own account; and their role there (`teamRole`, read afresh each request). A team
 * they are not in is a 404, as an unknown one (ids are not a way to probe); a role that may not do what the route does
 * is a 403 `permission_denied` naming the roles that may.
 */
export async function requireTeam(
  ctx: ConsoleContext,
  deps: ConsoleDeps,
  need: TeamNeed,
  teamIdInPath?: string,
): Promise<TeamScope> {
  const { session, account } = await requireSession(ctx, deps);
  const named = teamIdInPath ?? (ctx.get(teamHeader) || (typeof ctx.query.team === 'string' ? ctx.query.team : ''));
  const teamId = named === '' ? account.id : named;
  const role = teamId.length > 256 ? undefined : await teamRole(deps.keyStore.record, teamId, account);
  const team =
    role === undefined ? undefined : teamId === account.id ? account : await deps.keyStore.accounts.get(teamId);
  if (!team || role === undefined) throw teamNotFound(teamId);
  if (!need.allows(role)) {
    throw new GatewayError(
      403,
      `This needs ${need.roles} of the team '${team.name || team.email || team.id}'; you are ${role === 'owner' ? 'an' : 'a'} ${role} there.`,
      { code: 'permission_denied' },
    );
  }
  return { session, account, team, role };
}

/** A console query without the `team` parameter `requireTeam` read, for the strict schema of the route's own. */
export function withoutTeam(query: Record<string, unknown>): Record<string, unknown> {
  const { team: _team, ...rest } = query;
  return rest;
}
