import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Account, ConsoleConfig, Team, TeamList } from './types';

export interface AppState {
  config: ConsoleConfig;
  account: Account | null;
  /** Re-reads the session (e.g. for a fresh balance). */
  refreshAccount: () => void;
  setAccount: (account: Account | null) => void;
  signOut: () => Promise<void>;
  /**
   * The person's teams (their own account first) with their role in each, as the switcher lists them; for an admin,
   * every team's too.
   */
  teams: TeamList | undefined;
  /**
   * The team the console works in (its calls send it as `x-team`); the person's own account until they pick another.
   */
  team: Team | undefined;
  /** Works in another team from now on (remembered in this browser) and reads the page again. */
  switchTeam: (id: string) => void;
  /** Reads the list of teams again (after a team was made, or someone's membership changed). */
  refreshTeams: () => void;
}

export const AppContext = createContext<AppState | null>(null);

export function useApp(): AppState {
  const state = useContext(AppContext);
  if (!state) throw new Error('useApp outside the app');
  return state;
}

/** The signed-in account (pages behind sign-in only render with one). */
export function useAccount() {
  const { account } = useApp();
  if (!account) throw new Error('not signed in');
  return account;
}

/** The current team and the signed-in person's role there (pages behind sign-in only render with one). */
export function useTeam(): Team {
  const { team } = useApp();
  if (!team) throw new Error('no team');
  return team;
}
