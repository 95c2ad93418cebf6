import type { Account } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import type { RecordDb, TeamRole } from '../../storage/record/database.js';
import { accountNotFound, type AccountStore } from './account-store.js';
import { appendAudit } from '../../storage/record/audit-log.js';
import type { AuditBy } from './audit-trail.js';
import { recordChange } from './audit-trail.js';

/*
 * Who is in which team, and as what (roles: team-roles.ts). A person's own account is a team of one they own, with
 * no row in `team_members`: it is listed first among their teams and first among its members, always as owner, and
 * can be neither removed nor demoted. Everybody else in a team has a row. Only the record holds memberships:
 * admission never reads them (a key spends its account's money whoever made it), and the console reads a role
 * afresh on every request, so a change takes effect at the next request of the person it concerns, with nothing
 * cached to drop and their session left as it is. Each change is in the audit log, appended in the change's own
 * transaction (`by`: who made it).
 *
 * What is taken away is gone at once: a person removed from a team, or made a viewer there, loses the keys they made
 * in it (their Playground key too), revoked in the same transaction as the membership change and then taken out of
 * Redis, so every api refuses them from that moment (`changeMemberships`, which every change of a membership goes
 * through: `add`, `setRole`, `remove` here and the OIDC sign-in's sync, oidc-people.ts). Revoked, not suspended:
 * a key is a bearer secret the person has a copy of, and a suspended one would come back to life with whatever role
 * they got later; someone put back in the team (or made a member again) makes new keys. Keys an admin made in the
 * team through the admin API or the CLI (no maker) are the team's, not the person's, and stay.
 */

export type MemberSource = 'console' | 'admin' | 'oidc';

/** A team a person is in, with their role there. */
export interface Membership {
  team: Account;
  role: TeamRole;
}

/** Someone in a team. */
export interface TeamMember {
  id: string;
  email: string;
  name: string;
  role: TeamRole;
  /** Who put them there; null for a person's own account, which has them without a row. */
  source: MemberSource | null;
  /** Unix seconds; a person's own account's creation for its owner. */
  created: number;
}

export const memberNotFound = (id: string) =>
  new GatewayError(404, `No member with id '${id.slice(0, 100)}' in this team.`, { code: 'member_not_found' });
export const teamNotFound = (id: string) =>
  new GatewayError(404, `No team with id '${id.slice(0, 100)}'.`, { code: 'team_not_found' });
const lastOwner = () =>
  new GatewayError(409, 'A team keeps at least one owner: make another member owner first.', { code: 'last_owner' });
const ownAccount = () =>
  new GatewayError(
    409,
    'A person always owns their own account: their role there cannot change and they cannot be removed from it.',
    { code: 'own_account' },
  );

const nowSeconds = () => Math.floor(Date.now() / 1000);

/**
 * 409 `team_name_mapped` for a new name of a team OIDC_TEAM_MAP names (`mappedNames`): the provider's groups find it by
 * that name.
 */
export function refuseMappedRename(team: Account, name: string, mappedNames: readonly string[]): void {
  const mapped = mappedNames.find((mappedName) => mappedName.toLowerCase() === team.name.toLowerCase());
  if (mapped === undefined || mapped.toLowerCase() === name.trim().toLowerCase()) return;
  throw new GatewayError(
    409,
    `OIDC_TEAM_MAP names this team '${mapped}': the sign-in provider's groups find it by that name. Change the ` +
      `map (and restart) to rename it.`,
    {
      code: 'team_name_mapped',
      param: 'name',
    },
  );
}

/** Why a person's keys in a team were revoked with their membership (the `reason` of each `key.revoked` row). */
export type MemberKeysReason = 'member_removed' | 'member_demoted';

/** A change of someone's role in a team, as `changeMemberships` is told it: `to` null when they were taken out. */
export interface MembershipChange {
  teamId: string;
  memberId: string;
  from: TeamRole;
  to: TeamRole | null;
}

/**
 * Revokes, in the record (`tx`, the membership change's own transaction), the keys `memberId` made in `teamId` and
 * that are not revoked yet, each appended to the audit log as `key.revoked` with the reason; returns their ids. Keys
 * without a maker (the admin API's, the CLI's) are not anyone's and stay. A person's own account is never theirs to
 * lose.
 */
async function revokeMemberKeys(
  tx: RecordDb,
  teamId: string,
  memberId: string,
  reason: MemberKeysReason,
  by: AuditBy,
): Promise<string[]> {
  if (teamId === memberId) return [];
  const revoked = await tx
    .updateTable('api_keys')
    .set({ revoked: nowSeconds() })
    .where('account_id', '=', teamId)
    .where('created_by', '=', memberId)
    .where('revoked', 'is', null)
    .returning('id')
    .execute();
  const ids = revoked.map((row) => row.id).sort();
  for (const id of ids) {
    await appendAudit(tx, {
      ...by,
      action: 'key.revoked',
      teamId,
      target: id,
      before: { revoked: false },
      after: { revoked: true, reason, member: memberId },
    });
  }
  return ids;
}

/**
 * Runs changes to memberships (`work`) in one transaction of the record, and makes each change's consequence for the
 * person's keys in the team: `work` calls `changed` for every row it changed or removed, once the row is written and
 * within the transaction. Taken out (`to` null) or made a viewer (from another role), their keys there are revoked in
 * that same transaction (with their audit rows); once it has committed, each is taken out of Redis as `KeyStore.revoke`
 * does after its record change (`AccountStore.unlistRevokedKey`: the bill, the directory, the announcement every api
 * drops its cache on). A transaction that fails revokes nothing. Every change of a role or removal goes through here.
 */
export async function changeMemberships<T>(
  accounts: AccountStore,
  by: AuditBy,
  work: (tx: RecordDb, changed: (change: MembershipChange) => Promise<void>) => Promise<T>,
): Promise<T> {
  const revoked: Array<{ teamId: string; ids: string[] }> = [];
  const result = await accounts.record.transaction().execute((tx) =>
    work(tx, async ({ teamId, memberId, from, to }) => {
      const reason: MemberKeysReason | undefined =
        to === null ? 'member_removed' : to === 'viewer' && from !== 'viewer' ? 'member_demoted' : undefined;
      if (reason) revoked.push({ teamId, ids: await revokeMemberKeys(tx, teamId, memberId, reason, by) });
    }),
  );
  for (const { teamId, ids } of revoked) for (const id of ids) await accounts.unlistRevokedKey(teamId, id);
  return result;
}

export class TeamStore {
  constructor(
    private readonly accounts: AccountStore,
    private readonly record: RecordDb,
  ) {}

  /** The live team (an account of either kind) an id names; 404 otherwise. */
  async team(id: string): Promise<Account> {
    const team = await this.accounts.get(id);
    if (!team) throw teamNotFound(id);
    return team;
  }

  /** The teams a person is in: their own account first (as owner), then the others by name. */
  async teamsOf(person: Account): Promise<Membership[]> {
    const rows = await this.record
      .selectFrom('team_members')
      .innerJoin('accounts', 'accounts.id', 'team_members.team_id')
      .select(['team_members.team_id', 'team_members.role'])
      .where('team_members.member_id', '=', person.id)
      .where('accounts.deleted', '=', false)
      .execute();
    const teams = await Promise.all(
      rows.map(async (row) => ({ team: await this.accounts.get(row.team_id), role: row.role })),
    );
    const others = teams
      .filter((m): m is Membership => m.team !== undefined)
      .sort((a, b) => a.team.name.localeCompare(b.team.name) || a.team.id.localeCompare(b.team.id));
    const own = (await this.accounts.get(person.id)) ?? person;
    return [{ team: own, role: 'owner' }, ...others];
  }

  /** Every live team of kind 'team' with its number of members (an admin's list). */
  async listTeams(): Promise<Array<{ team: Account; members: number }>> {
    const rows = await this.record
      .selectFrom('accounts')
      .leftJoin('team_members', 'team_members.team_id', 'accounts.id')
      .select(['accounts.id', (eb) => eb.fn.count<number>('team_members.member_id').as('members')])
      .where('accounts.kind', '=', 'team')
      .where('accounts.deleted', '=', false)
      .groupBy('accounts.id')
      .execute();
    const teams = await Promise.all(
      rows.map(async (row) => ({ team: await this.accounts.get(row.id), members: Number(row.members) })),
    );
    return teams
      .filter((t): t is { team: Account; members: number } => t.team !== undefined)
      .sort((a, b) => a.team.name.localeCompare(b.team.name));
  }

  /** A team's members: for a person's own account, that person first (as owner); then the rows, owners first. */
  async members(team: Account): Promise<TeamMember[]> {
    const rows = await this.record
      .selectFrom('team_members')
      .innerJoin('accounts', 'accounts.id', 'team_members.member_id')
      .select([
        'accounts.id',
        'accounts.email',
        'accounts.name',
        'team_members.role',
        'team_members.source',
        'team_members.created',
      ])
      .where('team_members.team_id', '=', team.id)
      .where('accounts.deleted', '=', false)
      .execute();
    const rank = { owner: 0, member: 1, viewer: 2 } as const;
    const members: TeamMember[] = rows
      .map((row) => ({
        id: row.id,
        email: row.email,
        name: row.name,
        role: row.role,
        source: row.source,
        created: row.created,
      }))
      .sort((a, b) => rank[a.role] - rank[b.role] || a.email.localeCompare(b.email));
    return team.kind === 'person'
      ? [
          { id: team.id, email: team.email, name: team.name, role: 'owner', source: null, created: team.created },
          ...members,
        ]
      : members;
  }

  /**
   * Puts the person with this email (any letter case; 404 when nobody has it) in the team, or changes their role
   * when they are in it already (keeping who first put them there; made a viewer, their keys there are revoked).
   */
  async add(team: Account, email: string, role: TeamRole, source: MemberSource, by: AuditBy): Promise<TeamMember> {
    const person = await this.accounts.findByEmail(email);
    if (!person)
      throw new GatewayError(
        404,
        `Nobody has the email '${email.slice(0, 320)}': they sign up (or an admin makes their account) first.`,
        { code: 'account_not_found', param: 'email' },
      );
    if (person.id === team.id) throw ownAccount();
    const created = nowSeconds();
    await changeMemberships(this.accounts, by, async (tx, changed) => {
      // The team's row locked: two changes to its owners at once are made one after the other (`lastOwnerCheck`).
      await this.lockTeam(tx, team.id);
      const current = await tx
        .selectFrom('team_members')
        .select('role')
        .where('team_id', '=', team.id)
        .where('member_id', '=', person.id)
        .executeTakeFirst();
      if (current) {
        if (current.role === 'owner' && role !== 'owner') await this.lastOwnerCheck(tx, team);
        await tx
          .updateTable('team_members')
          .set({ role })
          .where('team_id', '=', team.id)
          .where('member_id', '=', person.id)
          .execute();
        if (current.role !== role) {
          await appendAudit(tx, {
            ...by,
            action: 'team.member_updated',
            teamId: team.id,
            target: person.id,
            before: { role: current.role },
            after: { role },
          });
          await changed({ teamId: team.id, memberId: person.id, from: current.role, to: role });
        }
      } else {
        await tx
          .insertInto('team_members')
          .values({ team_id: team.id, member_id: person.id, role, cap_micros: null, cap_period: null, source, created })
          .execute();
        await appendAudit(tx, {
          ...by,
          action: 'team.member_added',
          teamId: team.id,
          target: person.id,
          before: null,
          after: { email: person.email, role, source },
        });
      }
    });
    return (await this.members(team)).find((m) => m.id === person.id)!;
  }

  /**
   * Changes a member's role (made a viewer, their keys there are revoked); 404 for someone not in the team, 409 when it
   * would leave the team without an owner.
   */
  async setRole(team: Account, memberId: string, role: TeamRole, by: AuditBy): Promise<TeamMember> {
    if (memberId === team.id) throw ownAccount();
    await changeMemberships(this.accounts, by, async (tx, changed) => {
      await this.lockTeam(tx, team.id);
      const current = await tx
        .selectFrom('team_members')
        .select('role')
        .where('team_id', '=', team.id)
        .where('member_id', '=', memberId)
        .executeTakeFirst();
      if (!current) throw memberNotFound(memberId);
      if (current.role === 'owner' && role !== 'owner') await this.lastOwnerCheck(tx, team);
      await tx
        .updateTable('team_members')
        .set({ role })
        .where('team_id', '=', team.id)
        .where('member_id', '=', memberId)
        .execute();
      if (current.role !== role) {
        await appendAudit(tx, {
          ...by,
          action: 'team.member_updated',
          teamId: team.id,
          target: memberId,
          before: { role: current.role },
          after: { role },
        });
        await changed({ teamId: team.id, memberId, from: current.role, to: role });
      }
    });
    const member = (await this.members(team)).find((m) => m.id === memberId);
    if (!member) throw memberNotFound(memberId);
    return member;
  }

  /**
   * Takes a member out of the team, revoking the keys they made in it (`changeMemberships`; what they spent stays the
   * team's usage); 404 for someone not in it, 409 for its last owner.
   */
  async remove(team: Account, memberId: string, by: AuditBy): Promise<void> {
    if (memberId === team.id) throw ownAccount();
    await changeMemberships(this.accounts, by, async (tx, changed) => {
      await this.lockTeam(tx, team.id);
      const current = await tx
        .selectFrom('team_members')
        .select('role')
        .where('team_id', '=', team.id)
        .where('member_id', '=', memberId)
        .executeTakeFirst();
      if (!current) throw memberNotFound(memberId);
      if (current.role === 'owner') await this.lastOwnerCheck(tx, team);
      await tx.deleteFrom('team_members').where('team_id', '=', team.id).where('member_id', '=', memberId).execute();
      await appendAudit(tx, {
        ...by,
        action: 'team.member_removed',
        teamId: team.id,
        target: memberId,
        before: { role: current.role },
        after: null,
      });
      await changed({ teamId: team.id, memberId, from: current.role, to: null });
    });
  }

  /**
   * Renames a team made for several people (a person's own account takes its person's name: 409). A name
   * OIDC_TEAM_MAP gives is the provider's: renaming that team would have the next sign-in make a new one of the
   * mapped name, so it is refused (409) with the map to change instead. Another live team of the name in any letter
   * case: 409 `team_exists`. Appended to the audit log as `team.updated` once the name is in force.
   */
  async rename(team: Account, name: string, mappedNames: readonly string[], by: AuditBy): Promise<Account> {
    if (team.kind !== 'team')
      throw new GatewayError(
        409,
        "A person's own account takes its person's name; only a team made for several people is renamed.",
        { code: 'own_account', param: 'name' },
      );
    refuseMappedRename(team, name, mappedNames);
    const renamed = await this.accounts.update(team.id, { name });
    if (!renamed) throw teamNotFound(team.id);
    if (renamed.name !== team.name)
      await recordChange(this.record, {
        ...by,
        action: 'team.updated',
        teamId: team.id,
        target: team.id,
        before: { name: team.name },
        after: { name: renamed.name },
      });
    return renamed;
  }

  private async lockTeam(tx: RecordDb, teamId: string): Promise<void> {
    const row = await tx
      .selectFrom('accounts')
      .select('deleted')
      .where('id', '=', teamId)
      .forUpdate()
      .executeTakeFirst();
    if (!row || row.deleted) throw accountNotFound(teamId);
  }

  /**
   * Called before an owner's row stops being one: a team of kind 'team' keeps one owner at least. A person's own
   * account always has its person as owner, so its rows may all go.
   */
  private async lastOwnerCheck(tx: RecordDb, team: Account): Promise<void> {
    if (team.kind === 'person') return;
    const { n } = await tx
      .selectFrom('team_members')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('team_id', '=', team.id)
      .where('role', '=', 'owner')
      .executeTakeFirstOrThrow();
    if (Number(n) <= 1) throw lastOwner();
  }
}
