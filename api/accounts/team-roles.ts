import type { Account } from '../../shared/accounts.js';
import type { RecordDb, TeamRole } from '../../storage/record/database.js';

/**
 * Who may do what in a team, decided here only. A team is an account (`accounts.kind`): a person's own account is
 * a team of one that person owns (no `team_members` row); anyone else in a team has a row there with a role. An
 * admin acts as the owner of every team.
 *
 * - `owner`: the team's members and their roles, its keys (anyone's), its limits and budgets;
 * - `member`: keys of their own in the team (spending the team's money), their own usage;
 * - `viewer`: the team's usage, nothing else.
 */
export type { TeamRole };

/** The role `person` holds in `teamId`; undefined when they are not in it. */
export async function teamRole(
  record: RecordDb,
  teamId: string,
  person: Pick<Account, 'id' | 'role'>,
): Promise<TeamRole | undefined> {
  if (person.role === 'admin' || teamId === person.id) return 'owner';
  const row = await record
    .selectFrom('team_members')
    .select('role')
    .where('team_id', '=', teamId)
    .where('member_id', '=', person.id)
    .executeTakeFirst();
  return row?.role;
}

/** What each role may do. */
export const may = {
  /** Add, remove and change members and their roles; set the team's budget and members' caps. */
  manageTeam: (role: TeamRole | undefined) => role === 'owner',
  /** Change or revoke any key of the team, see every member's usage and requests. */
  manageAllKeys: (role: TeamRole | undefined) => role === 'owner',
  /** Make keys of their own, use the Playground, change their own keys. */
  ownKeys: (role: TeamRole | undefined) => role === 'owner' || role === 'member',
  /** Read the team's usage. */
  readUsage: (role: TeamRole | undefined) => role !== undefined,
} as const;
