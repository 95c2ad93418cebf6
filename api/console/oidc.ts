import { createHash, randomBytes } from 'node:crypto';
import * as client from 'openid-client';
import type { Account } from '../../shared/accounts.js';
import type { OidcConfig } from '../../shared/config.js';
import { oidcAttemptKey } from '../../shared/redis-keys.js';
import {
  ensureTeam,
  findOidcPerson,
  linkedSubject,
  linkOidcPerson,
  syncOidcMemberships,
  teamsForGroups,
} from '../accounts/oidc-people.js';
import { cookieOptions, startSession, type ConsoleContext, type ConsoleDeps } from './console-session.js';
import { sameSecret } from './sessions.js';
import { recordChange, type AuditBy } from '../accounts/audit-trail.js';
import { auditSource, changedFields } from '../../storage/record/audit-log.js';
import { accountAuditFields } from '../accounts/views.js';
import { as, luaFiles, redisScript } from '../../shared/redis-script.js';

/*
 * The console's sign-in through an OpenID Connect provider, any provider by its issuer URL. `GET
 * /console/api/oidc/login` sends the browser to the provider's authorization endpoint (authorization code with PKCE
 * S256, a fresh `state` and `nonce` per attempt, kept in Redis for a few minutes and bound to this browser by an
 * httpOnly cookie); `GET /console/api/oidc/callback` takes that attempt once, exchanges the code and has openid-client
 * verify the ID token (its signature by the provider's keys, issuer, audience, expiry, nonce), then finds or makes the
 * person, sets their teams and role from their groups, and starts a console session that ends no later than the ID
 * token. Every refusal goes back to the sign-in page with `?sso_error=<code>` (`signInRefusals` says each in words on
 * the page); every sign-in, made or refused, passes through `concludeSignIn`.
 */

/** Why a sign-in through the provider was refused: the `sso_error` the sign-in page reads. */
export type SignInRefusal =
  /** The callback's `state` is missing, unknown, used already, or was not started by this browser. */
  | 'state_invalid'
  /** The provider answered with an error (the person cancelled, or it refused them). */
  | 'provider_denied'
  /** The provider did not answer within OIDC_TIMEOUT_MS, or could not be reached. */
  | 'provider_unreachable'
  /** The code exchange or the ID token failed a check (signature, issuer, audience, expiry, nonce). */
  | 'token_invalid'
  /** The provider gave no email for the person. */
  | 'email_missing'
  /**
   * An account has the person's email and the provider does not vouch for it (`email_verified`), or it is another
   * person's.
   */
  | 'email_taken'
  /** None of the person's groups is one OIDC_TEAM_MAP or OIDC_ADMIN_GROUPS names. */
  | 'not_in_mapped_group'
  | 'account_disabled';

/** How long a sign-in at the provider may take, from the button to the callback. */
const attemptSeconds = 600;
/** The cookie binding attempts to this browser: a random value; Redis keeps only its hash. */
export const oidcBrowserCookie = 'sy_oidc';
export const oidcCallbackPath = '/console/api/oidc/callback';

/** One sign-in under way, as Redis keeps it. */
interface Attempt {
  browser: string;
  verifier: string;
  nonce: string;
  redirect: string;
}

/**
 * Deletes an attempt only if it still holds the value read (`lua/take-oidc-attempt.lua`): 1 when this caller took it.
 */
const takeAttemptScript = redisScript({
  name: 'oidc_take_attempt',
  files: luaFiles(import.meta.url, 'take-oidc-attempt'),
  keys: ['attempt'],
  args: ['value'],
  reply: as<number>(),
});

const hashOf = (value: string) => createHash('sha256').update(value).digest('hex');

/** What a sign-in decided: the person signed in, or why not (with what the log needs). */
export type SignInOutcome =
  { ok: true; account: Account; subject: string } | { ok: false; refusal: SignInRefusal; detail: string };

/** A refusal carried out of the flow to `concludeSignIn`. */
class Refused extends Error {
  constructor(
    readonly refusal: SignInRefusal,
    readonly detail: string,
  ) {
    super(detail);
  }
}

/**
 * oauth4webapi's codes for an answer that is not the provider's protocol at all (a 5xx, an HTML error page): it is not
 * reachable as a provider.
 */
const notAProviderAnswer = new Set(['OAUTH_RESPONSE_IS_NOT_CONFORM', 'OAUTH_RESPONSE_IS_NOT_JSON']);

/**
 * A failed call to the provider as a refusal: no answer in time, no connection or no protocol answer is
 * `provider_unreachable`; an OAuth error the provider answered is `provider_denied`; anything else is a check that
 * failed (`token_invalid`: signature, issuer, audience, expiry, nonce, a malformed token).
 */
function providerFailure(error: unknown, step: string): Refused {
  const causes: unknown[] = [];
  for (let cause: unknown = error; cause instanceof Error && !causes.includes(cause); cause = cause.cause)
    causes.push(cause);
  const detail = causes
    .map(
      (cause) =>
        `${(cause as Error).message}${(cause as { code?: unknown }).code ? ` [${String((cause as { code?: unknown }).code)}]` : ''}`,
    )
    .join(': ');
  for (const cause of causes) {
    const { name, code } = cause as Error & { code?: unknown };
    // fetch's own failures: a TypeError ("fetch failed") over the socket's error, or the timeout's abort.
    if (
      name === 'TimeoutError' ||
      name === 'AbortError' ||
      (cause instanceof TypeError && /fetch failed/.test(cause.message)) ||
      notAProviderAnswer.has(String(code))
    ) {
      return new Refused('provider_unreachable', `${step}: ${detail}`);
    }
  }
  if (error instanceof client.ResponseBodyError || error instanceof client.AuthorizationResponseError) {
    return new Refused(
      'provider_denied',
      `${step}: ${error.error}${error.error_description ? ` (${error.error_description})` : ''}`,
    );
  }
  return new Refused('token_invalid', `${step}: ${detail}`);
}

export class OidcSignIn {
  /** The provider's metadata, read once it is first needed (a provider down at start does not stop the gateway). */
  private discovered: Promise<client.Configuration> | undefined;

  constructor(
    private readonly settings: OidcConfig,
    private readonly deps: ConsoleDeps,
  ) {}

  private configuration(): Promise<client.Configuration> {
    this.discovered ??= (async () => {
      const { issuer, clientId, clientSecret, timeoutMs } = this.settings;
      const auth = clientSecret === undefined ? client.None() : client.ClientSecretBasic(clientSecret);
      const execute = [client.enableNonRepudiationChecks];
      // A provider on plain http is for a laptop or a test: allowed only when the issuer itself says http.
      if (issuer.startsWith('http:')) execute.push(client.allowInsecureRequests);
      return client.discovery(new URL(issuer), clientId, undefined, auth, { execute, timeout: timeoutMs / 1000 });
    })();
    // A failed discovery is tried again at the next sign-in, not kept.
    this.discovered.catch(() => {
      this.discovered = undefined;
    });
    return this.discovered;
  }

  private redirectUrl(ctx: ConsoleContext): string {
    return (
      this.settings.redirectUrl ??
      `${this.deps.config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`}${oidcCallbackPath}`
    );
  }

  /** `GET /console/api/oidc/login`: off to the provider. */
  async login(ctx: ConsoleContext): Promise<void> {
    let configuration: client.Configuration;
    try {
      configuration = await this.configuration();
    } catch (error) {
      return this.concludeSignIn(ctx, { ok: false, ...refusalOf(providerFailure(error, 'discovery')) });
    }
    // One value per browser, kept while it has one: two tabs signing in at once both come back to it.
    let browser = ctx.cookies.get(oidcBrowserCookie);
    if (!browser || !/^[A-Za-z0-9_-]{43}$/.test(browser)) browser = randomBytes(32).toString('base64url');
    ctx.cookies.set(oidcBrowserCookie, browser, cookieOptions(ctx, attemptSeconds * 1000));
    const state = client.randomState();
    const attempt: Attempt = {
      browser: hashOf(browser),
      verifier: client.randomPKCECodeVerifier(),
      nonce: client.randomNonce(),
      redirect: this.redirectUrl(ctx),
    };
    await this.deps.redis.set(oidcAttemptKey(state), JSON.stringify(attempt), 'EX', attemptSeconds);
    const url = client.buildAuthorizationUrl(configuration, {
      redirect_uri: attempt.redirect,
      scope: this.settings.scopes,
      state,
      nonce: attempt.nonce,
      code_challenge: await client.calculatePKCECodeChallenge(attempt.verifier),
      code_challenge_method: 'S256',
    });
    ctx.redirect(url.href);
  }

  /** `GET /console/api/oidc/callback`: the provider's answer, signed in or refused. */
  async callback(ctx: ConsoleContext): Promise<void> {
    let outcome: SignInOutcome;
    try {
      const found = await this.signIn(ctx);
      outcome = { ok: true, ...found };
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      outcome = { ok: false, ...refusalOf(error) };
    }
    await this.concludeSignIn(ctx, outcome);
  }

  /**
   * Where every sign-in through the provider ends, made or refused: the one place that says so (the log, and the
   * audit log's hook), then the browser goes to the console, or back to its sign-in page with the refusal's code.
   */
  private async concludeSignIn(ctx: ConsoleContext, outcome: SignInOutcome): Promise<void> {
    const { log } = ctx.state;
    const record = this.deps.keyStore.record;
    if (outcome.ok) {
      log.info(
        { account: outcome.account.id, subject: outcome.subject },
        'console sign-in through the identity provider',
      );
      await recordChange(record, {
        ...auditSource(ctx, outcome.account),
        action: 'signin.succeeded',
        teamId: outcome.account.id,
        target: outcome.account.id,
        after: { method: 'oidc', issuer: this.settings.issuer, subject: outcome.subject },
      });
      ctx.redirect('/console/');
      return;
    }
    log.warn(
      { refusal: outcome.refusal, detail: outcome.detail.slice(0, 500) },
      'console sign-in through the identity provider refused',
    );
    // A callback no sign-in of this browser started (no state, unknown or used) is no attempt: logged, not audited,
    // so anyone calling the URL cannot fill the audit log.
    if (outcome.refusal !== 'state_invalid')
      await recordChange(record, {
        ...auditSource(ctx, 'anonymous'),
        action: 'signin.failed',
        teamId: null,
        target: null,
        after: {
          method: 'oidc',
          issuer: this.settings.issuer,
          reason: outcome.refusal,
          detail: outcome.detail.slice(0, 300),
        },
      });
    ctx.redirect(`/console/?sso_error=${outcome.refusal}`);
  }

  /** The whole callback, throwing `Refused` for each way it fails. */
  private async signIn(ctx: ConsoleContext): Promise<{ account: Account; subject: string }> {
    const attempt = await this.takeAttempt(ctx);
    const providerError = ctx.query.error;
    if (typeof providerError === 'string')
      throw new Refused('provider_denied', `the provider answered ${providerError.slice(0, 100)}`);
    let configuration: client.Configuration;
    try {
      configuration = await this.configuration();
    } catch (error) {
      throw providerFailure(error, 'discovery');
    }
    // The URL the provider sent the browser to: the redirect URL this attempt named, with the provider's parameters.
    const currentUrl = new URL(attempt.redirect);
    currentUrl.search = ctx.querystring;
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(configuration, currentUrl, {
        pkceCodeVerifier: attempt.verifier,
        expectedState: attempt.state,
        expectedNonce: attempt.nonce,
        idTokenExpected: true,
      });
    } catch (error) {
      throw providerFailure(error, 'code exchange');
    }
    const claims = tokens.claims();
    if (!claims || !tokens.id_token) throw new Refused('token_invalid', 'no ID token');
    const person = await this.personClaims(configuration, claims, tokens.access_token);
    const account = await this.admit(configuration.serverMetadata().issuer, person, auditSource(ctx, 'system'));
    await startSession(ctx, this.deps, account, { ends: claims.exp * 1000, idToken: tokens.id_token });
    return { account, subject: person.subject };
  }

  /**
   * Takes this callback's attempt once (a second callback with the same `state` finds nothing), and only when it is
   * this browser's: the attempt is read, its browser checked against this request's cookie, and only then deleted,
   * if it still holds what was read (one atomic compare-and-delete). A callback from another browser (a `state`
   * handed to it, without the cookie) is refused and leaves the attempt for its own browser; of two callbacks of the
   * right browser at once, one takes it and the other finds it used.
   */
  private async takeAttempt(ctx: ConsoleContext): Promise<Attempt & { state: string }> {
    const state = ctx.query.state;
    if (typeof state !== 'string' || state === '' || state.length > 512) throw new Refused('state_invalid', 'no state');
    const key = oidcAttemptKey(state);
    const stored = await this.deps.redis.get(key);
    if (!stored) throw new Refused('state_invalid', 'an unknown, expired or used state');
    const attempt = JSON.parse(stored) as Attempt;
    const browser = ctx.cookies.get(oidcBrowserCookie);
    if (!browser || !sameSecret(hashOf(browser), attempt.browser))
      throw new Refused('state_invalid', 'the state was started by another browser');
    if ((await takeAttemptScript(this.deps.redis, { attempt: key, value: stored })) !== 1)
      throw new Refused('state_invalid', 'an unknown, expired or used state');
    return { ...attempt, state };
  }

  /** Who the provider says signed in: from the ID token, with what it leaves out (groups, email) from userinfo. */
  private async personClaims(
    configuration: client.Configuration,
    claims: client.IDToken,
    accessToken: string,
  ): Promise<PersonClaims> {
    const { groupsClaim } = this.settings;
    let source: Record<string, unknown> = claims;
    if (
      (claims[groupsClaim] === undefined || claims.email === undefined) &&
      configuration.serverMetadata().userinfo_endpoint
    ) {
      try {
        source = { ...(await client.fetchUserInfo(configuration, accessToken, claims.sub)), ...claims };
        // The ID token's groups claim wins when both have one; userinfo's fills it in when the token had none.
      } catch (error) {
        throw providerFailure(error, 'userinfo');
      }
    }
    const groups = source[groupsClaim];
    return {
      subject: claims.sub,
      email: typeof source.email === 'string' ? source.email.trim() : '',
      emailVerified: source.email_verified === true,
      name: typeof source.name === 'string' ? source.name.slice(0, 200) : '',
      groups: Array.isArray(groups)
        ? groups.filter((group): group is string => typeof group === 'string')
        : typeof groups === 'string'
          ? [groups]
          : [],
    };
  }

  /**
   * The account the person signs in as, after what their groups decide: found by (issuer, subject), else an account
   * of theirs with that email linked when the provider vouches for the email (`email_verified`), else made; its role
   * set by OIDC_ADMIN_GROUPS (when set) and its teams by OIDC_TEAM_MAP. A person no group lets in is refused.
   */
  private async admit(issuer: string, person: PersonClaims, by: AuditBy): Promise<Account> {
    const { teamMap, adminGroups, breakGlass } = this.settings;
    const accounts = this.deps.keyStore.accounts;
    if (person.email === '') throw new Refused('email_missing', `subject ${person.subject} has no email`);
    let account = await findOidcPerson(accounts, issuer, person.subject);
    if (!account) {
      const same = await accounts.findByEmail(person.email);
      if (same) {
        // An account the gateway has already: linked only when the provider says the email is proven theirs.
        if (!person.emailVerified)
          throw new Refused(
            'email_taken',
            `${person.email} belongs to an account and the provider does not say it is verified`,
          );
        if (
          (await linkedSubject(accounts.record, same.id)) !== undefined ||
          !(await linkOidcPerson(accounts.record, same.id, issuer, person.subject))
        ) {
          throw new Refused('email_taken', `${person.email} belongs to an account linked to another subject`);
        }
        account = same;
      }
    }
    const teams = teamsForGroups(teamMap, person.groups);
    const admin =
      adminGroups.length > 0 ? person.groups.some((group) => adminGroups.includes(group)) : account?.role === 'admin';
    // A break-glass admin stays one whatever the groups say: it is the way in when the provider is wrong.
    const role =
      admin || (account?.role === 'admin' && breakGlass.includes(account.email.toLowerCase())) ? 'admin' : 'member';
    if (teams.size === 0 && role !== 'admin')
      throw new Refused('not_in_mapped_group', `groups: ${person.groups.join(', ').slice(0, 300) || 'none'}`);
    if (!account) {
      let made = true;
      try {
        account = await accounts.create({
          email: person.email,
          name: person.name,
          role,
          oidc: { issuer, subject: person.subject },
        });
      } catch (error) {
        // Two first sign-ins at once: the other made it (and recorded it).
        made = false;
        account = await findOidcPerson(accounts, issuer, person.subject);
        if (!account) throw error;
      }
      if (made)
        await recordChange(accounts.record, {
          ...by,
          action: 'account.created',
          teamId: account.id,
          target: account.id,
          after: { ...accountAuditFields(account), via: 'oidc' },
        });
    }
    if (account.disabled) throw new Refused('account_disabled', `account ${account.id} is disabled`);
    if (account.role !== role || (person.name !== '' && account.name !== person.name)) {
      const was = account;
      account =
        (await accounts.update(account.id, { role, ...(person.name === '' ? {} : { name: person.name }) })) ?? account;
      await recordChange(accounts.record, {
        ...by,
        action: 'account.updated',
        teamId: account.id,
        target: account.id,
        ...changedFields({ role: was.role, name: was.name }, { role: account.role, name: account.name }),
      });
    }
    const memberships = new Map<string, 'owner' | 'member' | 'viewer'>();
    for (const { team, role: teamRole } of teams.values())
      memberships.set((await ensureTeam(accounts, team, by)).id, teamRole);
    await syncOidcMemberships(accounts, account.id, memberships, by);
    return account;
  }

  /**
   * The provider's sign-out URL for a session signed in through it, or undefined (none, or the metadata is not at
   * hand).
   */
  async endSessionUrl(ctx: ConsoleContext, idToken: string): Promise<string | undefined> {
    try {
      const configuration = await this.configuration();
      if (!configuration.serverMetadata().end_session_endpoint) return undefined;
      const base = this.deps.config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`;
      return client.buildEndSessionUrl(configuration, {
        id_token_hint: idToken,
        post_logout_redirect_uri: `${base}/console/`,
      }).href;
    } catch {
      return undefined;
    }
  }
}

interface PersonClaims {
  subject: string;
  email: string;
  emailVerified: boolean;
  name: string;
  groups: string[];
}

const refusalOf = (refused: Refused) => ({ refusal: refused.refusal, detail: refused.detail });
