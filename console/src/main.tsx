import { render, type JSX } from 'preact';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import './styles.css';
import { api, messageOf, onNotSignedIn, onTeamLost, setCsrfToken, setCurrentTeam } from './api';
import { AppContext, type AppState } from './app-context';
import { takeBoot } from './boot';
import { PublicShell, Shell, Logo } from './components/shell';
import { navigate, usePath, Link } from './router';
import type { Account, ConsoleConfig, SessionAnswer, SignOutAnswer, TeamList } from './types';
import { keyPages, ownTeam, rememberTeam, rememberedTeam, switchableTeams } from './teams';
import { SignInPage } from './pages/sign-in';
import { KeysPage } from './pages/keys';
import { UsagePage } from './pages/usage';
import { ActivityPage } from './pages/activity';
import { BatchesPage } from './pages/batches';
import { PricingPage } from './pages/pricing';
import { PlaygroundPage } from './pages/playground';
import { TeamPage } from './pages/team';
import { BudgetsPage } from './pages/budgets';
import { AccountsPage } from './pages/admin-accounts';
import { AllKeysPage } from './pages/admin-keys';
import { ChannelsPage } from './pages/admin-channels';
import { QueuesPage } from './pages/admin-queues';
import { AuditPage } from './pages/audit';
import { ToolsPage } from './pages/tools';
import { PageHeader, useTitle } from './components/ui';

const signInPath = '/console';
const homePath = '/console/keys';
/** Where a viewer goes instead of a page their role is not given (Keys, Batches, the Playground). */
const viewerHomePath = '/console/usage';

type Page = () => JSX.Element;

const memberPages: Record<string, Page> = {
  '/console/keys': KeysPage,
  '/console/usage': UsagePage,
  '/console/activity': ActivityPage,
  '/console/batches': BatchesPage,
  '/console/pricing': PricingPage,
  '/console/tools': ToolsPage,
  '/console/playground': PlaygroundPage,
  '/console/audit': AuditPage,
  '/console/team': TeamPage,
  '/console/budgets': BudgetsPage,
};
const adminPages: Record<string, Page> = {
  '/console/admin/accounts': AccountsPage,
  '/console/admin/keys': AllKeysPage,
  '/console/admin/channels': ChannelsPage,
  '/console/admin/queues': QueuesPage,
};

/**
 * A page the console does not show here (none at this address, or an admin's): why, and the way back to the keys.
 * `tab` is the tab's title.
 */
function Refusal({ tab, title, description }: { tab: string; title: string; description: string }) {
  useTitle(tab);
  return (
    <>
      <PageHeader title={title} description={description} />
      <p>
        <Link href={homePath} class="button button-secondary">
          Go to your keys
        </Link>
      </p>
    </>
  );
}

const NotFound = () => (
  <Refusal tab="Not found" title="Page not found" description="There is no console page at this address." />
);
const AdminOnly = () => (
  <Refusal tab="Admins only" title="Admins only" description="This page is for administrators of this gateway." />
);

function Loading() {
  return (
    <div class="boot" aria-busy="true">
      <Logo />
      <p class="visually-hidden" role="status">
        Loading the console…
      </p>
    </div>
  );
}

function BootFailed({ message, retry }: { message: string; retry: () => void }) {
  useTitle('Unavailable');
  return (
    <div class="auth-page">
      <main class="auth-card" id="main">
        <Logo />
        <h1>The console is unavailable</h1>
        <div class="alert alert-error" role="alert">
          {message}
        </div>
        <button type="button" class="button button-primary" onClick={retry}>
          Try again
        </button>
      </main>
    </div>
  );
}

/** What the page's HTML brought (the settings, the session, the teams), read before the first render. */
const boot = takeBoot();
if (boot) setCsrfToken(boot.session.csrf_token);

function App() {
  const path = usePath();
  // Drawn from the boot data when the HTML brought it: the first page reads its own data in its first render's effects.
  const [config, setConfig] = useState<ConsoleConfig | undefined>(
    boot && { ...boot.config, base_url: boot.config.base_url || location.origin },
  );
  const [account, setAccount] = useState<Account | null | undefined>(boot?.session.account);
  const [bootError, setBootError] = useState<string | undefined>(undefined);
  const [attempt, setAttempt] = useState(0);
  const [teams, setTeams] = useState<TeamList | undefined>(boot?.teams ?? undefined);
  /** The team picked in the switcher (or remembered by this browser); '' for the person's own account. */
  const [teamId, setTeamId] = useState(() => (boot?.session.account ? rememberedTeam(boot.session.account.id) : ''));
  /** Where a signed-out visit wanted to go: the sign-in leads there. */
  const wanted = useRef<string | undefined>(undefined);
  /**
   * The boot data's session and teams, not asked for again by the effects that read them on start (each takes its own
   * once).
   */
  const bootSession = useRef(!!boot);
  const bootTeams = useRef(boot?.session.account && boot.teams ? boot.session.account.id : undefined);
  /** Where a redirect leads (its path), set before it: no page the person went to, so nothing is read again for it. */
  const redirecting = useRef<string | undefined>(undefined);

  useEffect(() => {
    if (bootSession.current) {
      bootSession.current = false;
      return;
    }
    let stale = false;
    setBootError(undefined);
    Promise.all([api<ConsoleConfig>('GET', '/config'), api<SessionAnswer>('GET', '/session')])
      .then(([configAnswer, session]) => {
        if (stale) return;
        setCsrfToken(session.csrf_token);
        // base_url is the gateway's own address; this page's origin stands in if the server names none.
        setConfig({ ...configAnswer, base_url: configAnswer.base_url || location.origin });
        setAccount(session.account);
      })
      .catch((error) => {
        if (!stale) setBootError(messageOf(error));
      });
    return () => {
      stale = true;
    };
  }, [attempt]);

  const refreshAccount = useCallback(() => {
    api<SessionAnswer>('GET', '/session')
      .then((session) => {
        setCsrfToken(session.csrf_token);
        setAccount(session.account);
      })
      .catch(() => {});
  }, []);

  const accountId = account?.id;
  const refreshTeams = useCallback(() => {
    if (!accountId) return;
    api<TeamList>('GET', '/teams')
      .then((list) => setTeams(list))
      // Unread, the person works in their own account, which the server takes when no team is named.
      .catch(() => setTeams((previous) => previous ?? { object: 'list', data: [], all_teams: null }));
  }, [accountId]);

  // A person signing in starts in the team this browser remembers for them, once the list says they are still in it.
  useEffect(() => {
    // The page's HTML brought this person's teams (and the remembered team was taken with them).
    if (accountId && bootTeams.current === accountId) {
      bootTeams.current = undefined;
      return;
    }
    bootTeams.current = undefined;
    setTeams(undefined);
    setTeamId(accountId ? rememberedTeam(accountId) : '');
    refreshTeams();
  }, [accountId]);

  const switchTeam = useCallback(
    (id: string) => {
      if (!accountId) return;
      rememberTeam(accountId, id);
      setTeamId(id);
    },
    [accountId],
  );

  useEffect(() => {
    // The server no longer knows the person in the current team (removed since): back to their own account.
    onTeamLost(() => {
      if (accountId) rememberTeam(accountId, '');
      setTeamId('');
      refreshTeams();
    });
  }, [accountId, refreshTeams]);

  const teamChoices = useMemo(
    () =>
      account && teams
        ? [ownTeam(account), ...switchableTeams(teams).filter((team) => team.id !== account.id)]
        : undefined,
    [account, teams],
  );
  const team = teamChoices ? (teamChoices.find((choice) => choice.id === teamId) ?? teamChoices[0]) : undefined;
  // A remembered team the person is no longer in is forgotten.
  useEffect(() => {
    if (accountId && teamChoices && teamId && !teamChoices.some((choice) => choice.id === teamId))
      rememberTeam(accountId, '');
  }, [accountId, teamChoices, teamId]);
  // Set while rendering, not in an effect: the pages below read their data in their own effects, which run first.
  setCurrentTeam(team && account && team.id !== account.id ? team.id : '');

  useEffect(() => {
    onNotSignedIn(() => {
      if (location.pathname.replace(/\/+$/, '') !== signInPath) wanted.current = location.pathname + location.search;
      setAccount(null);
    });
  }, []);

  const signOut = useCallback(async () => {
    try {
      const answer = await api<SignOutAnswer>('DELETE', '/session');
      setCsrfToken(answer.csrf_token);
      // Signed in through the identity provider: its own session ends too, on its sign-out page, which sends the
      // browser back here.
      if (answer.end_session_url) {
        window.location.assign(answer.end_session_url);
        return;
      }
    } catch {
      // the session may be gone already: signed out either way
    }
    wanted.current = undefined;
    setAccount(null);
    navigate(signInPath);
  }, []);

  // The balance shown in the sidebar follows the account as pages change: read again on each page the person goes
  // to, not on the first (just read) nor where a redirect leads (the sign-in's, which just read them too).
  const firstPath = useRef(true);
  useEffect(() => {
    if (firstPath.current) {
      firstPath.current = false;
      return;
    }
    const redirected = redirecting.current === path;
    redirecting.current = undefined;
    if (account && !redirected) {
      refreshAccount();
      refreshTeams();
    }
    window.scrollTo(0, 0);
    // Move focus to the new page's heading, as a page load would.
    window.requestAnimationFrame(() => {
      const heading = document.querySelector<HTMLElement>('main h1');
      heading?.focus({ preventScroll: true });
    });
  }, [path]);

  const state = useMemo<AppState | null>(
    () =>
      config && account !== undefined
        ? { config, account, refreshAccount, setAccount, signOut, teams, team, switchTeam, refreshTeams }
        : null,
    [config, account, refreshAccount, signOut, teams, team, switchTeam, refreshTeams],
  );

  // Redirects that depend on the session.
  const signedIn = !!account;
  const publicPricing = path === '/console/pricing' && !!config?.public_pricing;
  const known = path in memberPages || path in adminPages;
  let redirect: string | undefined;
  if (state) {
    if (path === signInPath && signedIn) redirect = wanted.current ?? homePath;
    else if (!signedIn && path !== signInPath && !publicPricing && path.startsWith('/console')) redirect = signInPath;
    else if (!path.startsWith('/console')) redirect = signedIn ? homePath : signInPath;
    else if (signedIn && team?.role === 'viewer' && keyPages.has(path)) redirect = viewerHomePath;
  }
  useEffect(() => {
    if (!redirect) return;
    if (redirect === signInPath && known) wanted.current = location.pathname + location.search;
    if (redirect !== signInPath) wanted.current = undefined;
    redirecting.current = redirect.split('?')[0]!.replace(/\/+$/, '') || '/';
    navigate(redirect, { replace: true });
  }, [redirect]);

  if (bootError) return <BootFailed message={bootError} retry={() => setAttempt((a) => a + 1)} />;
  // Signed in, the pages wait for the team they work in: read before it, they would read the wrong team's data.
  if (!state || redirect || (signedIn && !team)) return <Loading />;

  let content;
  if (!signedIn) {
    content = path === signInPath ? <SignInPage /> : <PublicShell>{<PricingPage />}</PublicShell>;
  } else {
    const Member = memberPages[path];
    const Admin = adminPages[path];
    const body = Member ? <Member /> : Admin ? account.role === 'admin' ? <Admin /> : <AdminOnly /> : <NotFound />;
    content = (
      <Shell path={path} key="shell">
        {/* Keyed by the team too: switching team draws the page afresh, reading its data again in the new team. */}
        <div key={`${path} ${team?.id ?? ''}`}>{body}</div>
      </Shell>
    );
  }
  return <AppContext.Provider value={state}>{content}</AppContext.Provider>;
}

render(<App />, document.getElementById('app')!);
