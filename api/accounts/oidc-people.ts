import { appendAudit } from '../../storage/record/audit-log.js';
import type { Account } from '../../shared/accounts.js';
import type { TeamMapEntry } from '../../shared/setting-kinds.js';
import type { RecordDb, TeamRole } from '../../storage/record/database.js';
import type { AccountStore } from './account-store.js';
import { recordChange, type AuditBy } from './audit-trail.js';
import { changeMemberships } from './team-store.js';

/*
 * The people an OpenID Connect provider signs in, and the teams its groups put them in: a person is found again by
 * the provider's issuer and its subject there (`accounts.oidc_issuer`, `oidc_subject`); the memberships the groups
 * give are the `team_members` rows of source 'oidc', made to match the groups at every sign-in. Rows an owner or an
 * admin added (sources 'console' and 'admin') are never touched here.
 */

const roleRank: Record<TeamRole, number> = { viewer: 0, member: 1, owner: 2 };

/**
 * The teams (by name) and roles a person's groups give: several groups naming one team give the highest of their
 * roles. Team names are matched in any letter case, as teams are named.
 */
/**
 * The team names OIDC_TEAM_MAP gives: teams the provider's groups find by name, so they keep it (`TeamStore.rename`).
 */
export const mappedTeamNames = (oidc: { teamMap: readonly TeamMapEntry[] } | undefined): string[] => [
  ...new Set((oidc?.teamMap ?? []).map((entry) => entry.team)),
];

export function teamsForGroups(
  teamMap: readonly TeamMapEntry[],
  groups: readonly string[],
): Map<string, { team: string; role: TeamRole }> {
  const held = new Set(groups);
  const teams = new Map<string, { team: string; role: TeamRole }>();
  for (const entry of teamMap) {
    if (!held.has(entry.group)) continue;
    const key = entry.team.toLowerCase();
    const known = teams.get(key);
    if (!known || roleRank[entry.role] > roleRank[known.role]) teams.set(key, { team: entry.team, role: entry.role });
  }
  return teams;
}

/** The live person a provider's subject signed in as before, or undefined. */
export async function findOidcPerson(
  accounts: AccountStore,
  issuer: string,
  subject: string,
): Promise<Account | undefined> {
  const row = await accounts.record
    .selectFrom('accounts')
    .select('id')
    .where('oidc_issuer', '=', issuer)
    .where('oidc_subject', '=', subject)
    .where('deleted', '=', false)
    .executeTakeFirst();
  return row ? accounts.get(row.id) : undefined;
}

/** The OIDC subject an account is linked to already (any issuer), or undefined: whether it may be linked. */
export async function linkedSubject(record: RecordDb, accountId: string): Promise<string | undefined> {
  const row = await record.selectFrom('accounts').select('oidc_subject').where('id', '=', accountId).executeTakeFirst();
  return row?.oidc_subject ?? undefined;
}

/** Links an account with no subject yet to the provider's; false when another got there first. */
export async function linkOidcPerson(
  record: RecordDb,
  accountId: string,
  issuer: string,
  subject: string,
): Promise<boolean> {
  const done = await record
    .updateTable('accounts')
    .set({ oidc_issuer: issuer, oidc_subject: subject })
    .where('id', '=', accountId)
    .where('oidc_subject', 'is', null)
    .executeTakeFirst();
  return Number(done.numUpdatedRows) === 1;
}

/** The live team of that name, made when it is first named (two sign-ins naming it at once still make one). */
export async function ensureTeam(accounts: AccountStore, name: string, by: AuditBy): Promise<Account> {
  const found = await accounts.findTeamByName(name);
  if (found) return found;
  let made: Account;
  try {
    made = await accounts.createTeam({ name });
  } catch (error) {
    // Another sign-in made it meanwhile: it is the one.
    const other = await accounts.findTeamByName(name);
    if (other) return other;
    throw error;
  }
  // Outside the catch: an append that failed is the sign-in's failure, never passed over as the team made by another.
  await recordChange(accounts.record, {
    ...by,
    action: 'team.created',
    teamId: made.id,
    target: made.id,
    before: null,
    after: { name: made.name, via: 'oidc' },
  });
  return made;
}

/**
 * Makes the person's memberships of source 'oidc' exactly `teams` (team id → role): added, their role changed,
 * or removed; in one transaction, so two sign-ins at once leave one of their answers, whole. A team where an owner
 * or an admin put the person already keeps that row as it is. Taken out of a team, or made a viewer there, because
 * the provider's groups say so, the person loses the keys they made in it, as when an owner does it
 * (`changeMemberships`, team-store.ts): revoked in this transaction, then gone from Redis before the sign-in ends.
 */
export async function syncOidcMemberships(
  accounts: AccountStore,
  personId: string,
  teams: ReadonlyMap<string, TeamRole>,
  by: AuditBy,
): Promise<void> {
  const now = Math.floor(Date.now() / 1000);
  await changeMemberships(accounts, by, async (tx, changed) => {
    const rows = await tx
      .selectFrom('team_members')
      .select(['team_id', 'role', 'source'])
      .where('member_id', '=', personId)
      .forUpdate()
      .execute();
    const held = new Map(rows.map((row) => [row.team_id, row]));
    for (const row of rows) {
      if (row.source === 'oidc' && !teams.has(row.team_id)) {
        await tx
          .deleteFrom('team_members')
          .where('team_id', '=', row.team_id)
          .where('member_id', '=', personId)
          .where('source', '=', 'oidc')
          .execute();
        await appendAudit(tx, {
          ...by,
          action: 'team.member_removed',
          teamId: row.team_id,
          target: personId,
          before: { role: row.role, source: 'oidc' },
          after: null,
        });
        await changed({ teamId: row.team_id, memberId: personId, from: row.role, to: null });
      }
    }
    for (const [teamId, role] of teams) {
      const row = held.get(teamId);
      if (!row) {
        const added = await tx
          .insertInto('team_members')
          .values({
            team_id: teamId,
            member_id: personId,
            role,
            source: 'oidc',
            cap_micros: null,
            cap_period: null,
            created: now,
          })
          .onConflict((conflict) => conflict.columns(['team_id', 'member_id']).doNothing())
          .returning('member_id')
          .executeTakeFirst();
        if (added)
          await appendAudit(tx, {
            ...by,
            action: 'team.member_added',
            teamId,
            target: personId,
            before: null,
            after: { role, source: 'oidc' },
          });
      } else if (row.source === 'oidc' && row.role !== role) {
        await tx
          .updateTable('team_members')
          .set({ role })
          .where('team_id', '=', teamId)
          .where('member_id', '=', personId)
          .where('source', '=', 'oidc')
          .execute();
        await appendAudit(tx, {
          ...by,
          action: 'team.member_updated',
          teamId,
          target: personId,
          before: { role: row.role },
          after: { role },
        });
        await changed({ teamId, memberId: personId, from: row.role, to: role });
      }
    }
  });
}
