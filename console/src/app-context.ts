import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Account, ConsoleConfig } from './types';

export interface AppState {
  config: ConsoleConfig;
  account: Account | null;
  /** Re-reads the session (e.g. for a fresh balance). */
  refreshAccount: () => void;
  setAccount: (account: Account | null) => void;
  signOut: () => Promise<void>;
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
