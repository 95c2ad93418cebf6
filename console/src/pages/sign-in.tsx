import type { TargetedSubmitEvent } from 'preact';
import { useState } from 'preact/hooks';
import { api, messageOf, setCsrfToken } from '../api';
import { useApp } from '../app-context';
import { Logo } from '../components/shell';
import { ErrorMessage, Spinner, useTitle } from '../components/ui';
import { Link } from '../router';
import type { Account } from '../types';

type Mode = 'sign-in' | 'sign-up';

/**
 * What each `sso_error` the sign-in callback sends back here means, in words (api/console/oidc.ts, `SignInRefusal`).
 */
const ssoErrors: Record<string, string> = {
  state_invalid: 'That sign-in link was already used, expired, or was started in another browser. Try again.',
  provider_denied: 'The identity provider did not sign you in.',
  provider_unreachable: 'The identity provider did not answer in time. Try again in a moment.',
  token_invalid:
    'The identity provider’s answer failed its checks, so it was not trusted. Try again; if it keeps failing, ' +
    'tell your administrator.',
  email_missing: 'The identity provider gave no email address for your account.',
  email_taken:
    'An account with your email exists here already, and the identity provider does not say the email is ' +
    'verified. Ask an administrator to link it.',
  not_in_mapped_group: 'Your account is not in any group this gateway maps. Ask an administrator for access.',
  account_disabled: 'This account is disabled. Ask an administrator to enable it.',
};

/** The refusal the identity provider's callback sent the browser back with, in words; undefined when there is none. */
function ssoErrorMessage(): string | undefined {
  const code = new URLSearchParams(window.location.search).get('sso_error');
  if (!code) return undefined;
  return ssoErrors[code] ?? 'Signing in through the identity provider failed. Try again.';
}

export function SignInPage() {
  const { config, setAccount } = useApp();
  const [mode, setMode] = useState<Mode>('sign-in');
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [name, setName] = useState('');
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [ssoError] = useState(ssoErrorMessage);
  // Under OIDC_ONLY the password form is for break-glass administrators: hidden until asked for.
  const [passwordShown, setPasswordShown] = useState(config.password_signin);
  useTitle(mode === 'sign-in' ? 'Sign in' : 'Create account');

  const switchTo = (next: Mode) => {
    setMode(next);
    setError(undefined);
    setPassword('');
  };

  const submit = async (event: TargetedSubmitEvent<HTMLFormElement>) => {
    event.preventDefault();
    if (busy) return;
    setError(undefined);
    if (!email.trim() || !password) {
      setError('Enter your email and password.');
      return;
    }
    if (mode === 'sign-up' && password.length < 8) {
      setError('Choose a password of at least 8 characters.');
      return;
    }
    setBusy(true);
    try {
      const answer =
        mode === 'sign-in'
          ? await api<{ account: Account; csrf_token: string }>('POST', '/session', { email: email.trim(), password })
          : await api<{ account: Account; csrf_token: string }>('POST', '/signup', {
              email: email.trim(),
              password,
              ...(name.trim() ? { name: name.trim() } : {}),
            });
      setCsrfToken(answer.csrf_token);
      setPassword('');
      setAccount(answer.account);
    } catch (caught) {
      setError(messageOf(caught));
    } finally {
      setBusy(false);
    }
  };

  const signUp = mode === 'sign-up';
  return (
    <div class="auth-page">
      <main class="auth-card" id="main">
        <div class="auth-logo">
          <Logo />
        </div>
        <h1 tabIndex={-1}>{signUp ? 'Create account' : 'Sign in'}</h1>
        <p class="auth-lead">
          {signUp
            ? 'Get an API key for every model this gateway serves.'
            : 'Sign in to manage your API keys and usage.'}
        </p>
        {!signUp && config.sso.on && (
          <div class="form-stack auth-sso">
            <ErrorMessage message={ssoError} />
            {/* A navigation, not a fetch: the provider's pages take over the window and send it back to the callback. */}
            <a class="button button-primary button-block" href="/console/api/oidc/login">
              {config.sso.label}
            </a>
            {passwordShown && <p class="auth-divider">or with a password</p>}
          </div>
        )}
        {!passwordShown && (
          <p class="auth-foot">
            <button type="button" class="link-button" onClick={() => setPasswordShown(true)}>
              Administrator sign-in
            </button>
          </p>
        )}
        {passwordShown && (
          <form class="form-stack" onSubmit={submit} noValidate>
            <div class="field">
              <label for="auth-email">Email</label>
              <input
                id="auth-email"
                name="email"
                type="email"
                autoComplete={signUp ? 'email' : 'username'}
                required
                value={email}
                onInput={(e) => setEmail(e.currentTarget.value)}
              />
            </div>
            <div class="field">
              <label for="auth-password">Password</label>
              <input
                id="auth-password"
                name="password"
                type="password"
                autoComplete={signUp ? 'new-password' : 'current-password'}
                required
                minLength={signUp ? 8 : undefined}
                value={password}
                onInput={(e) => setPassword(e.currentTarget.value)}
                aria-describedby={signUp ? 'auth-password-hint' : undefined}
              />
              {signUp && (
                <p class="field-hint" id="auth-password-hint">
                  At least 8 characters.
                </p>
              )}
            </div>
            {signUp && (
              <div class="field">
                <label for="auth-name">Name</label>
                <input
                  id="auth-name"
                  name="name"
                  type="text"
                  autoComplete="name"
                  value={name}
                  onInput={(e) => setName(e.currentTarget.value)}
                />
              </div>
            )}
            <ErrorMessage message={error} />
            <button
              type="submit"
              class={`button ${config.sso.on ? 'button-secondary' : 'button-primary'} button-block`}
              disabled={busy}
            >
              {busy && <Spinner />}
              {signUp ? 'Create account' : 'Sign in'}
            </button>
          </form>
        )}
        {!signUp && config.has_admin === false && <FirstAdminHint />}
        <div class="auth-foot">
          {config.signup &&
            (signUp ? (
              <p>
                Have an account already?{' '}
                <button type="button" class="link-button" onClick={() => switchTo('sign-in')}>
                  Use it instead
                </button>
              </p>
            ) : (
              <p>
                New here?{' '}
                <button type="button" class="link-button" onClick={() => switchTo('sign-up')}>
                  Sign up
                </button>
              </p>
            ))}
          {config.public_pricing && (
            <p>
              <Link href="/console/pricing">See model pricing</Link>
            </p>
          )}
        </div>
      </main>
    </div>
  );
}

/**
 * While nobody can sign in as an admin: how the operator makes the first one (the server says only that there is none).
 */
function FirstAdminHint() {
  return (
    <section class="auth-hint" aria-labelledby="first-admin-heading">
      <h2 id="first-admin-heading">No administrator yet</h2>
      <p>Whoever runs this gateway makes the first one by starting it with an email and a password for it:</p>
      <pre class="code code-wrap" tabIndex={0}>
        <code>ADMIN_EMAIL=you@example.com ADMIN_PASSWORD='at least 8 chars' npm start</code>
      </pre>
      <p>
        or with <code>npm run accounts -- create --email you@example.com --password '…' --role admin</code>; then sign
        in here with that email. Keys made with <code>npm run keys -- create</code> belong to the Default account: an
        admin sees them on the Keys page.
      </p>
    </section>
  );
}
