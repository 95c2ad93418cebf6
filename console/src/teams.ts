import type { Account, Team, TeamList, TeamRole } from './types';

/*
 * The console's current team: which teams the switcher offers, which one a browser remembers, and what each role
 * may do as the console shows it. The server decides who may (api/accounts/team-roles.ts) and refuses the rest; the
 * console only leaves out what a role would be refused, so nobody is offered a button that cannot work.
 */

/** Where this browser remembers the team a person works in: per person, so two people on one browser keep their own. */
const choiceKey = (person: string) => `switchyard.team.${person}`;

export function rememberedTeam(person: string): string {
  try {
    return localStorage.getItem(choiceKey(person)) ?? '';
  } catch {
    return '';
  }
}

/** Remembers the choice ('' forgets it: the person's own account, which needs no remembering). */
export function rememberTeam(person: string, team: string): void {
  try {
    if (team && team !== person) localStorage.setItem(choiceKey(person), team);
    else localStorage.removeItem(choiceKey(person));
  } catch {
    // storage refused (a private window): the choice lasts until the page is reloaded
  }
}

/** The person's own account as a team of one they own: what the console works in until the list of teams is read. */
export function ownTeam(account: Account): Team {
  return {
    id: account.id,
    object: 'team',
    kind: account.kind,
    name: account.name,
    email: account.email,
    role: 'owner',
    balance_usd: account.balance_usd,
  };
}

/**
 * The teams the switcher offers: the person's own first, the teams they are in, and for an admin every other team (as
 * its owner, which an admin is of all).
 */
export function switchableTeams(list: TeamList): Team[] {
  const others = (list.all_teams ?? [])
    .filter((team) => !list.data.some((mine) => mine.id === team.id))
    .map((team): Team => ({
      id: team.id,
      object: 'team',
      kind: 'team',
      name: team.name,
      email: '',
      role: 'owner',
      balance_usd: team.balance_usd,
    }));
  return [...list.data, ...others];
}

/** A team's name as the console says it: the person's own account is "Personal". */
export function teamName(team: Pick<Team, 'id' | 'name' | 'email'>, person: string): string {
  if (team.id === person) return 'Personal';
  return team.name || team.email || team.id;
}

export const roleNames: Record<TeamRole, string> = { owner: 'Owner', member: 'Member', viewer: 'Viewer' };

/** Keys of their own, the Playground, batches: owners and members. */
export const mayUseKeys = (role: TeamRole) => role === 'owner' || role === 'member';

/** Members and their roles: owners (an admin is the owner of every team). */
export const mayManageTeam = (role: TeamRole) => role === 'owner';

/** The pages a viewer is not given: what they hold is refused to a viewer. */
export const keyPages: ReadonlySet<string> = new Set(['/console/keys', '/console/batches', '/console/playground']);
