import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { useApp } from '../app-context';
import { balance } from '../format';
import { Link } from '../router';
import { mayUseKeys, ownTeam, roleNames, switchableTeams, teamName } from '../teams';
import type { ConsoleConfig } from '../types';

export function Logo() {
  return (
    <span class="logo">
      <svg viewBox="0 0 32 32" aria-hidden="true" class="logo-mark">
        <rect width="32" height="32" rx="8" fill="#111827" />
        <path
          d="M8 22h6l4-12h6"
          fill="none"
          stroke="#fff"
          stroke-width="2.5"
          stroke-linecap="round"
          stroke-linejoin="round"
        />
        <path
          d="M8 10h6l1.5 4.5"
          fill="none"
          stroke="#34d399"
          stroke-width="2.5"
          stroke-linecap="round"
          stroke-linejoin="round"
        />
      </svg>
      <span class="logo-text">Switchyard</span>
    </span>
  );
}

const icons: Record<string, string> = {
  keys: 'M9.2 10.8L16 4m-2.5 2.5l2 2M10 13a3 3 0 1 1-6 0 3 3 0 0 1 6 0z',
  usage: 'M4 16V9m4 7V5m4 11v-5m4 5V7',
  activity: 'M2.5 10h3l2-5.5 5 11 2-5.5h3',
  batches: 'M10 3l7 3.5-7 3.5-7-3.5L10 3zm-7 7l7 3.5 7-3.5M3 13.5L10 17l7-3.5',
  pricing: 'M10 3v14m3.5-11.5H8.25a2.25 2.25 0 0 0 0 4.5h3.5a2.25 2.25 0 0 1 0 4.5H6',
  playground: 'M6 5l-3 5 3 5m8-10l3 5-3 5M11.5 4l-3 12',
  accounts:
    'M7.5 9a3 3 0 1 0 0-6 3 3 0 0 0 0 6zm-5 8a5 5 0 0 1 10 0m1-8.5a2.5 2.5 0 1 0 0-5m1.5 13.5a4.5 4.5 0 0 0-2-3.7',
  allkeys: 'M3 5h14M3 10h14M3 15h9',
  channels: 'M3 6h9m0 0l-3-3m3 3l-3 3m8 5H8m0 0l3-3m-3 3l3 3',
  queues: 'M4 4h12v4H4zm0 8h12v4H4z',
  audit: 'M6 3h8l2 2v12H4V5l2-2zm1 5h6m-6 3h6m-6 3h4',
  budgets: 'M3 15.5h14M5 15.5V11m4 4.5V7m4 8.5V9.5m4 6V4',
  tools: 'M12.5 3.5a3.5 3.5 0 0 0-3.3 4.6L3.5 13.8a1.4 1.4 0 0 0 2 2l5.7-5.7a3.5 3.5 0 0 0 4.6-3.3l-2 2-2-.6-.6-2 2-2z',
  team:
    'M7 8.5a2.75 2.75 0 1 0 0-5.5 2.75 2.75 0 0 0 0 5.5zm-4.5 8a4.5 4.5 0 0 1 9 0M13 8.5a2.5 2.5 0 1 0 0-5M14.5 ' +
    '12a4.5 4.5 0 0 1 3 4.5',
};

function NavIcon({ name }: { name: string }) {
  return (
    <svg viewBox="0 0 20 20" class="nav-icon" aria-hidden="true">
      <path
        d={icons[name] ?? ''}
        fill="none"
        stroke="currentColor"
        stroke-width="1.6"
        stroke-linecap="round"
        stroke-linejoin="round"
      />
    </svg>
  );
}

function NavLink({
  href,
  path,
  icon,
  children,
  onNavigate,
}: {
  href: string;
  path: string;
  icon: string;
  children: ComponentChildren;
  onNavigate: () => void;
}) {
  const current = path === href;
  return (
    <li>
      <Link
        href={href}
        class={`nav-link ${current ? 'is-current' : ''}`}
        aria-current={current ? 'page' : undefined}
        onClick={onNavigate}
      >
        <NavIcon name={icon} />
        <span>{children}</span>
      </Link>
    </li>
  );
}

/** A page of the sidebar: where it is, its icon and its name; `keys`, refused a viewer (see `mayUseKeys`). */
interface NavItem {
  href: string;
  icon: string;
  label: string;
  keys?: boolean;
}

const consoleNav: NavItem[] = [
  { href: '/console/keys', icon: 'keys', label: 'Keys', keys: true },
  { href: '/console/usage', icon: 'usage', label: 'Usage' },
  { href: '/console/activity', icon: 'activity', label: 'Activity' },
  { href: '/console/batches', icon: 'batches', label: 'Batches', keys: true },
  { href: '/console/pricing', icon: 'pricing', label: 'Pricing' },
  { href: '/console/playground', icon: 'playground', label: 'Playground', keys: true },
  { href: '/console/tools', icon: 'tools', label: 'Tools' },
  { href: '/console/team', icon: 'team', label: 'Team' },
  { href: '/console/budgets', icon: 'budgets', label: 'Budgets' },
  // Every person owns at least their own team (their account), so everyone reads the log of what they own.
  { href: '/console/audit', icon: 'audit', label: 'Audit log' },
];

/** The admin's pages, under the sidebar's Admin toggle. */
const adminNav: NavItem[] = [
  { href: '/console/admin/accounts', icon: 'accounts', label: 'Accounts' },
  { href: '/console/admin/keys', icon: 'allkeys', label: 'All keys' },
  { href: '/console/admin/channels', icon: 'channels', label: 'Channels' },
  { href: '/console/admin/queues', icon: 'queues', label: 'Queues' },
];

/**
 * Whether answers may come from the built-in mock vendor, and whether they are billed, said on every page (nothing when
 * the mock is off): a badge, a line in plain words, and a tooltip with the settings behind it.
 */
export function MockNotice({ mock }: { mock: ConsoleConfig['mock'] }) {
  if (!mock.on) return null;
  const price = mock.billed ? 'billed' : 'free';
  const which =
    mock.models === 'all'
      ? 'Answers come from the built-in mock, not a real model: no vendor key is set, so the mock answers for ' +
        'every model.'
      : `Answers of the mock-… models come from the built-in mock, not a real model; the other models reach their ` +
        `vendors.`;
  const money = mock.billed
    ? 'Its answers are billed at the listed prices (MOCK_BILLING=on).'
    : 'Its answers are free: nothing is charged for them (MOCK_BILLING is off).';
  const short =
    mock.models === 'all'
      ? 'Answers come from the built-in mock, not a real model'
      : 'mock-… models answer from the built-in mock, not a real model';
  return (
    <div class={`mock-notice mock-notice-${price}`} role="note" aria-label="Mock vendor" title={`${which} ${money}`}>
      <span class={`badge ${mock.billed ? 'badge-warn' : 'badge-accent'} mock-badge`}>Mock vendor · {price}</span>
      <span class="mock-notice-text">
        {short}; {mock.billed ? 'billed at list prices' : 'nothing is charged'}.
      </span>
    </div>
  );
}

/**
 * The team the console works in, and the signed-in person's role there: a select of their teams (their own account
 * first). Shown once there is another team to pick; twice in the page (the sidebar's head on a wide screen, the top
 * bar on a phone), only one of them in sight at a time.
 */
function TeamSwitcher({ place }: { place: 'sidebar' | 'topbar' }) {
  const { account, teams, team, switchTeam } = useApp();
  if (!account || !team || !teams) return null;
  const options = [ownTeam(account), ...switchableTeams(teams).filter((choice) => choice.id !== account.id)];
  if (options.length < 2) return null;
  // The person's own account first, then the teams by name.
  options.sort(
    (a, b) =>
      Number(b.id === account.id) - Number(a.id === account.id) ||
      teamName(a, account.id).localeCompare(teamName(b, account.id)),
  );
  const id = `team-switcher-${place}`;
  return (
    <div class={`team-switcher team-switcher-${place}`}>
      <label for={id} class={place === 'topbar' ? 'visually-hidden' : 'team-switcher-label'}>
        Team
      </label>
      <select
        id={id}
        value={team.id}
        title={`${teamName(team, account.id)} · ${roleNames[team.role]}`}
        onChange={(event) => switchTeam(event.currentTarget.value)}
      >
        {options.map((option) => (
          <option key={option.id} value={option.id}>
            {teamName(option, account.id)} · {roleNames[option.role]}
          </option>
        ))}
      </select>
    </div>
  );
}

/** The signed-in frame: a sidebar (a menu on a phone) with the pages, the account and sign out; the page in <main>. */
export function Shell({ path, children }: { path: string; children: ComponentChildren }) {
  const { account, config, signOut, team } = useApp();
  const [menuOpen, setMenuOpen] = useState(false);
  const [signingOut, setSigningOut] = useState(false);

  // The admin pages fold under "Admin", open while one of them is shown (or the user opened it).
  const onAdminPage = path.startsWith('/console/admin/');
  const [adminOpen, setAdminOpen] = useState(onAdminPage);

  useEffect(() => setMenuOpen(false), [path]);
  useEffect(() => {
    if (onAdminPage) setAdminOpen(true);
  }, [onAdminPage]);

  if (!account) return null;
  const close = () => setMenuOpen(false);
  const admin = account.role === 'admin';
  // A viewer reads the team's usage and who is in it; keys, batches and the Playground are refused them.
  const keys = !team || mayUseKeys(team.role);
  return (
    <div class={`shell ${menuOpen ? 'menu-open' : ''}`}>
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <Link href="/console/keys" class="brand-link" aria-label="Switchyard home">
          <Logo />
        </Link>
        <TeamSwitcher place="topbar" />
        <button
          type="button"
          class="menu-button"
          aria-expanded={menuOpen}
          aria-controls="sidebar"
          onClick={() => setMenuOpen((open) => !open)}
        >
          <svg viewBox="0 0 20 20" aria-hidden="true">
            {menuOpen ? (
              <path d="M5 5l10 10M15 5L5 15" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" />
            ) : (
              <path d="M3 6h14M3 10h14M3 14h14" stroke="currentColor" stroke-width="1.8" stroke-linecap="round" />
            )}
          </svg>
          <span>Menu</span>
        </button>
      </header>
      <aside class="sidebar" id="sidebar">
        <div class="sidebar-inner">
          <div class="sidebar-brand">
            <Link href="/console/keys" class="brand-link" aria-label="Switchyard home">
              <Logo />
            </Link>
            <TeamSwitcher place="sidebar" />
          </div>
          <nav aria-label="Console" class="nav">
            <ul class="nav-list">
              {consoleNav
                .filter((item) => keys || !item.keys)
                .map((item) => (
                  <NavLink key={item.href} href={item.href} path={path} icon={item.icon} onNavigate={close}>
                    {item.label}
                  </NavLink>
                ))}
            </ul>
            {admin && (
              <>
                <button
                  type="button"
                  class="nav-toggle"
                  aria-expanded={adminOpen}
                  aria-controls="nav-admin"
                  onClick={() => setAdminOpen((open) => !open)}
                >
                  <span>Admin</span>
                  <svg viewBox="0 0 20 20" aria-hidden="true" class="nav-chevron">
                    <path
                      d="M7 5l5 5-5 5"
                      fill="none"
                      stroke="currentColor"
                      stroke-width="1.8"
                      stroke-linecap="round"
                      stroke-linejoin="round"
                    />
                  </svg>
                </button>
                <ul class="nav-list" id="nav-admin" hidden={!adminOpen}>
                  {adminNav.map((item) => (
                    <NavLink key={item.href} href={item.href} path={path} icon={item.icon} onNavigate={close}>
                      {item.label}
                    </NavLink>
                  ))}
                </ul>
              </>
            )}
          </nav>
          <div class="account-box">
            <div class="account-avatar" aria-hidden="true">
              {(account.name || account.email).slice(0, 1).toUpperCase()}
            </div>
            <div class="account-text">
              <span class="account-email" title={account.email}>
                {account.email}
              </span>
              {/* The money the console works with: the current team's, when it is not the person's own account. */}
              {team && team.id !== account.id ? (
                <span class="account-balance" title={`What ${team.name} has left to spend`}>
                  Team balance: <strong>{balance(team.balance_usd)}</strong>
                </span>
              ) : (
                <span class="account-balance">
                  Balance: <strong>{balance(account.balance_usd)}</strong>
                </span>
              )}
            </div>
            <button
              type="button"
              class="button button-secondary button-small sign-out"
              disabled={signingOut}
              onClick={async () => {
                setSigningOut(true);
                try {
                  await signOut();
                } finally {
                  setSigningOut(false);
                }
              }}
            >
              Sign out
            </button>
          </div>
        </div>
      </aside>
      <main id="main" class="main" tabIndex={-1}>
        <MockNotice mock={config.mock} />
        <div class="page">{children}</div>
      </main>
    </div>
  );
}

/** The frame of a page seen signed out (public pricing): a top bar with a Sign in link. */
export function PublicShell({ children }: { children: ComponentChildren }) {
  return (
    <div class="public-shell">
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="public-bar">
        <Link href="/console" class="brand-link" aria-label="Switchyard home">
          <Logo />
        </Link>
        <Link href="/console" class="button button-primary button-small">
          Sign in
        </Link>
      </header>
      <main id="main" class="main public-main" tabIndex={-1}>
        <div class="page">{children}</div>
      </main>
    </div>
  );
}
