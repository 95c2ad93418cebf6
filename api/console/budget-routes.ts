import type Router from '@koa/router';
import { z } from 'zod';
import type { Account } from '../../shared/accounts.js';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { AlertList, MemberCapView, TeamBudgetView } from '../../shared/console-api.js';
import { budgetPeriodSchema, parseBudgetText, type BudgetPeriod } from '../../shared/money/budgets.js';
import { accountKey } from '../../shared/redis-keys.js';
import { storableText } from '../../shared/schemas/common.js';
import { readJsonObject } from '../http/request-body.js';
import { bodyLimit } from '../accounts/admin-api.js';
import { limitUsd, parseStrict } from '../accounts/account-requests.js';
import { usdToMicros } from '../accounts/account-store.js';
import { may, type TeamRole } from '../accounts/team-roles.js';
import { TeamStore, memberNotFound } from '../accounts/team-store.js';
import type { KeyStore } from '../accounts/key-store.js';
import { alertView, budgetView } from '../accounts/views.js';
import { listAlerts } from '../../storage/record/alerts.js';
import { recordChange } from '../accounts/audit-trail.js';
import { auditSource, changedFields } from '../../storage/record/audit-log.js';
import { requireTeam, withoutTeam, type ConsoleDeps, type TeamNeed } from './console-session.js';

/*
 * The console's budgets, at /console/api/teams/:id/{budget,members/:member/cap,alerts}: a team's budget per period
 * and its members' caps, each with what was spent in the current period and when it resets, readable by anyone in
 * the team; set by its owners (and admins, who own every team). What admission does with them is decided in the
 * money scripts (shared/money/budgets.ts); these routes only store them through the KeyStore's setters, which
 * publish the change so every api drops what it cached.
 */

const reader: TeamNeed = { allows: may.readUsage, roles: 'any role' };
const manager: TeamNeed = { allows: may.manageTeam, roles: 'the owner role' };

/** `{"budget_usd": 50, "budget_period": "month"}`; `{"budget_usd": null}` clears it. */
export const teamBudgetSchema = z.strictObject({
  budget_usd: limitUsd.nullable(),
  budget_period: budgetPeriodSchema.optional(),
});
/** `{"cap_usd": 10, "cap_period": "day"}`; `{"cap_usd": null}` clears it. */
export const memberCapSchema = z.strictObject({
  cap_usd: limitUsd.nullable(),
  cap_period: budgetPeriodSchema.optional(),
});
/** `?limit=&before=`: the alerts page's query. */
const alertQuerySchema = z.strictObject({
  limit: z.coerce.number().int().min(1).max(200).optional(),
  before: storableText().min(1).max(256).optional(),
});

/** A path's member id, bounded before it reaches the record. */
const memberId = (value: unknown) => String(value).slice(0, 256);

const ownAccountCap = () =>
  new GatewayError(409, "A person's own account has no member caps: its budget is the account's budget.", {
    code: 'own_account',
    param: 'member',
  });

/** The team's budget and every member's cap, with what each spent in its current period. */
async function teamBudget(
  keyStore: KeyStore,
  teams: TeamStore,
  team: Account,
  role: TeamRole,
): Promise<TeamBudgetView> {
  const budget = parseBudgetText(await keyStore.redis.hget(accountKey(team.id), 'budget'));
  const spent = budget ? await keyStore.periodSpent(team.id, { scope: 'team', ...budget }) : undefined;
  const [members, caps] = await Promise.all([
    teams.members(team),
    keyStore.record
      .selectFrom('team_members')
      .select(['member_id', 'cap_micros', 'cap_period'])
      .where('team_id', '=', team.id)
      .execute(),
  ]);
  const capOf = new Map(
    caps.map((row) => [
      row.member_id,
      row.cap_micros === null || row.cap_period === null
        ? undefined
        : { micros: Number(row.cap_micros), period: row.cap_period },
    ]),
  );
  const rows = await Promise.all(
    members.map(async (member): Promise<MemberCapView> => {
      const cap = capOf.get(member.id);
      const capSpent = cap
        ? await keyStore.periodSpent(team.id, { scope: 'member', ownerId: member.id, ...cap })
        : undefined;
      const view = budgetView(cap, capSpent);
      return {
        id: member.id,
        object: 'team.member_cap',
        email: member.email,
        name: member.name,
        role: member.role,
        cap_usd: view.budget_usd,
        cap_period: view.budget_period,
        cap_spent_usd: view.budget_spent_usd,
        cap_resets_at: view.budget_resets_at,
      };
    }),
  );
  return { object: 'team.budget', team_id: team.id, role, ...budgetView(budget, spent), members: rows };
}

/** The amount and period a body names: null clears; an amount needs its period beside it (a 400 naming the field). */
function change(
  amount: number | null,
  period: BudgetPeriod | undefined,
  fields: { amount: string; period: string },
): { micros: number; period: BudgetPeriod } | null {
  if (amount === null) return null;
  if (period === undefined) {
    throw invalidRequest(
      `${fields.amount} needs ${fields.period} beside it: 'day', 'week' or 'month' (periods start at 00:00 UTC); ` +
        `null clears it.`,
      fields.period,
      'missing_required_parameter',
    );
  }
  return { micros: usdToMicros(amount), period };
}

export function addBudgetConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const { keyStore } = deps;
  const teams = new TeamStore(keyStore.accounts, keyStore.record);

  router.get('/api/teams/:id/budget', async (ctx) => {
    const { team, role } = await requireTeam(ctx, deps, reader, String(ctx.params.id));
    ctx.body = await teamBudget(keyStore, teams, team, role);
  });

  router.put('/api/teams/:id/budget', async (ctx) => {
    const { team, role, account } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const body = parseStrict(teamBudgetSchema, await readJsonObject(ctx.req, bodyLimit));
    const budget = change(body.budget_usd, body.budget_period, { amount: 'budget_usd', period: 'budget_period' });
    const was = await teamBudget(keyStore, teams, team, role);
    if (!(await keyStore.setTeamBudget(team.id, budget)))
      throw new GatewayError(404, `No team with id '${team.id}'.`, { code: 'team_not_found' });
    const now = await teamBudget(keyStore, teams, team, role);
    const limit = (view: TeamBudgetView) => ({ budget_usd: view.budget_usd, budget_period: view.budget_period });
    await recordChange(keyStore.record, {
      ...auditSource(ctx, account),
      action: 'budget.updated',
      teamId: team.id,
      target: team.id,
      ...changedFields(limit(was), limit(now)),
    });
    ctx.body = now;
  });

  router.put('/api/teams/:id/members/:member/cap', async (ctx) => {
    const { team, account } = await requireTeam(ctx, deps, manager, String(ctx.params.id));
    const body = parseStrict(memberCapSchema, await readJsonObject(ctx.req, bodyLimit));
    const id = memberId(ctx.params.member);
    const cap = change(body.cap_usd, body.cap_period, { amount: 'cap_usd', period: 'cap_period' });
    // A person's own account is a team of one without member rows: its budget is all there is to set.
    if (id === team.id) throw ownAccountCap();
    const was = (await teamBudget(keyStore, teams, team, 'owner')).members.find((m) => m.id === id);
    if (!(await keyStore.setMemberCap(team.id, id, cap))) throw memberNotFound(id);
    const member = (await teamBudget(keyStore, teams, team, 'owner')).members.find((m) => m.id === id);
    if (!member) throw memberNotFound(id);
    const limit = (view: MemberCapView | undefined) => ({
      cap_usd: view?.cap_usd ?? null,
      cap_period: view?.cap_period ?? null,
    });
    await recordChange(keyStore.record, {
      ...auditSource(ctx, account),
      action: 'budget.updated',
      teamId: team.id,
      target: id,
      ...changedFields(limit(was), limit(member)),
    });
    ctx.body = member;
  });

  router.get('/api/teams/:id/alerts', async (ctx) => {
    const { team } = await requireTeam(ctx, deps, reader, String(ctx.params.id));
    const query = parseStrict(alertQuerySchema, withoutTeam(ctx.query));
    const limit = query.limit ?? 50;
    const alerts = await listAlerts(keyStore.record, {
      teamId: team.id,
      limit,
      ...(query.before ? { before: query.before } : {}),
    });
    ctx.body = {
      object: 'list',
      data: alerts.map(alertView),
      next_before: alerts.length === limit ? alerts[alerts.length - 1]!.id : null,
    } satisfies AlertList;
  });
}
