import type Router from '@koa/router';
import type { Account } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import { balanceUsd } from '../accounts/views.js';
import type { TeamDetail, TeamList, TeamMemberView, TeamView } from '../../shared/console-api.js';
import { readJsonObject } from '../http/request-body.js';
import { bodyLimit } from '../accounts/admin-api.js';
import {
  addMemberSchema,
  createTeamSchema,
  parseStrict,
  patchMemberSchema,
  patchTeamSchema,
} from '../accounts/account-requests.js';
import { mappedTeamNames } from '../accounts/oidc-people.js';
import { may, type TeamRole } from '../accounts/team-roles.js';
import { TeamStore, type TeamMember } from '../accounts/team-store.js';
import { recordChange } from '../accounts/audit-trail.js';
import { auditSource } from '../../storage/record/audit-log.js';
import { requireSession, requireTeam, type ConsoleDeps, type TeamNeed } from './console-session.js';

/*
 * The console's teams, at /console/api/teams: the signed-in person's teams with their role in each (the team
 * switcher), a team's members, and for its owners (and admins, who own every team) adding, changing and removing
 * them, and renaming a team. Everybody in a team may read who is in it: a viewer or a member sees the list, not a way
 * to change it. Admins make teams. A team the person is not in is a 404, as an unknown one.
 */

const reader: TeamNeed = { allows: may.readUsage, roles: 'any role' };
const manager: TeamNeed = { allows: may.manageTeam, roles: 'the owner role' };

export function teamView(team: Account, role: TeamRole): TeamView {
  return {
    id: team.id,
    object: 'team',
    kind: team.kind,
    name: team.name,
    email: team.email,
    role,
    balance_usd: balanceUsd(team),
  };
}

export function memberView(member: TeamMember): TeamMemberView {
  return {
    id: member.id,
    object: 'team.member',
    email: member.email,
    name: member.name,
    role: member.role,
    source: member.source,
    created: member.created,
  };
}

/** A path's member id, bounded before it reaches the record. */
const memberId = (value: unknown) => String(value).slice(0, 256);

/**
 * The signed-in person's teams with their role in each (the switcher's list), and for an admin every team: `GET
 * /console/api/teams`'s answer.
 */
export async function teamList(deps: ConsoleDeps, account: Account): Promise<TeamList> {
  const teams = new TeamStore(deps.keyStore.accounts, deps.keyStore.record);
  const [mine, all] = await Promise.all([
    teams.teamsOf(account),
    account.role === 'admin' ? teams.listTeams() : undefined,
  ]);
  return {
    object: 'list',
    data: mine.map((m) => teamView(m.team, m.role)),
    all_teams: all
      ? all.map(({ team, members }) => ({
          id: team.id,
          name: team.name,
          members,
          created: team.created,
          balance_usd: balanceUsd(team),
        }))
      : null,
  };
}

export function addTeamConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const teams = new TeamStore(deps.keyStore.accounts, deps.keyStore.record);

  router.get('/api/teams', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    ctx.body = (await teamList(deps, account)) satisfies TeamList;
  });

  router.post('/api/teams', async (ctx) => {
    const { account } = await requireSession(ctx, deps);
    if (account.role !== 'admin')
      throw new GatewayError(403, 'Only an administrator makes teams.', { code: 'permission_denied' });
    const body = parseStrict(createTeamSchema, await readJsonObject(ctx.req, bodyLimit));
    // The first owner is looked up before the team is made: an unknown email makes no team.
    if (body.owner_email !== undefined && !(await deps.keyStore.accounts.findByEmail(body.owner_email))) {
      throw new GatewayError(
        404,
        `Nobody has the email '${body.owner_email}': they sign up (or an admin makes their account) first.`,
        { code: 'account_not_found', param: 'owner_email' },
      );
    }
    const team = await deps.keyStore.accounts.createTeam({ name: body.name });
    const by = auditSource(ctx, account);
    await recordChange(deps.keyStore.record, {
      ...by,
      action: 'team.created',
      teamId: team.id,
      target: team.id,
      before: null,
      after: { name: team.name },
    });
    if (body.owner_email !== undefined) await teams.add(team, body.owner_email, 'owner', 'admin', by);
    ctx.status = 201;
    ctx.body = {
      ...teamView(team, 'owner'),
      members: (await teams.members(team)).map(memberView),
    } satisfies TeamDetail;
  });

  router.get('/api/teams/:id', async (ctx) => {
    const { team, role } = await requireTeam(ctx, deps, reader, String(ctx.params.id));
    ctx.body = { ...teamView(team, role), members: (await teams.members(team)).map(memberView) } satisfies TeamDetail;
  });

  router.patch('/api/teams/:id', async (ctx) => {
    const { team, account, role } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const body = parseStrict(patchTeamSchema, await readJsonObject(ctx.req, bodyLimit));
    const renamed = await teams.rename(
      team,
      body.name,
      mappedTeamNames(deps.config.console.oidc),
      auditSource(ctx, account),
    );
    ctx.body = {
      ...teamView(renamed, role),
      members: (await teams.members(renamed)).map(memberView),
    } satisfies TeamDetail;
  });

  router.post('/api/teams/:id/members', async (ctx) => {
    const { team, account } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const body = parseStrict(addMemberSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.status = 201;
    ctx.body = memberView(await teams.add(team, body.email, body.role, 'console', auditSource(ctx, account)));
  });

  router.patch('/api/teams/:id/members/:member', async (ctx) => {
    const { team, account } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const body = parseStrict(patchMemberSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.body = memberView(await teams.setRole(team, memberId(ctx.params.member), body.role, auditSource(ctx, account)));
  });

  router.delete('/api/teams/:id/members/:member', async (ctx) => {
    const { team, account } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const id = memberId(ctx.params.member);
    await teams.remove(team, id, auditSource(ctx, account));
    ctx.body = { id, object: 'team.member', deleted: true };
  });
}
