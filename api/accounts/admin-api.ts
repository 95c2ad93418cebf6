import type { GatewayState } from '../http/context.js';
import { createMcpServerSchema, patchMcpServerSchema } from '../../shared/mcp/servers.js';
import type { McpServerAdmin } from '../mcp/server-admin.js';
import { createHash, timingSafeEqual } from 'node:crypto';
import type Router from '@koa/router';
import { createRouter } from '../http/canonical-path.js';
import type { Account } from '../../shared/accounts.js';
import { GatewayError } from '../../shared/errors.js';
import { readJsonObject } from '../http/request-body.js';
import { accountNotFound, microsToUsd, usdToMicros } from './account-store.js';
import type { KeyStore } from './key-store.js';
import {
  accountChanges,
  budgetChange,
  budgetFields,
  addMemberSchema,
  createTeamSchema,
  patchTeamSchema,
  createAccountSchema,
  id as idSchema,
  createKeySchema,
  creditSchema,
  keyChanges,
  keyMcpTools,
  ledgerQuerySchema,
  listKeysSchema,
  alertsQuerySchema,
  newKeyLimits,
  parseStrict,
  patchAccountSchema,
  patchKeySchema,
} from './account-requests.js';
import { accountAuditFields, accountView, alertView, keyAuditFields, keyView, ledgerView } from './views.js';
import { listAlerts } from '../../storage/record/alerts.js';
import { recordChange } from './audit-trail.js';
import { auditSource, changedFields } from '../../storage/record/audit-log.js';
import { refuseMappedRename, TeamStore, teamNotFound } from './team-store.js';
import { readUsage, usageQuerySchema } from './admin-usage.js';
import { listRequests } from '../../storage/record/request-log.js';
import { requestListQuerySchema } from './admin-requests.js';
import { accountsWithEntries, purgeEntries } from '../../shared/cache/index.js';
import { storableText } from '../../shared/schemas/common.js';
import { z } from 'zod';
import { accountKey } from '../../shared/redis-keys.js';
import { parseBudgetText, periodEnd, type BudgetPeriod } from '../../shared/money/budgets.js';

/** `POST /admin/keys`: a key's fields, and who made it (their cap in its team holds it). */
const adminCreateKeySchema = createKeySchema.extend({ created_by: idSchema.optional() });
/** `PATCH /admin/keys/:id`: a member's fields, and the MCP tools the key may use (an admin's alone). */
const adminPatchKeySchema = patchKeySchema.extend(keyMcpTools);
/** `PUT /admin/accounts/:id/members/:member/cap`: a member's cap; `{"budget_usd": null}` clears it. */
const capSchema = z.strictObject(budgetFields);

/** A budget or cap as the APIs show it: amount, period, and when the current period ends. */
function capView(budget: { micros: number; period: BudgetPeriod } | null): {
  budget_usd: number | null;
  budget_period: BudgetPeriod | null;
  resets_at: string | null;
} {
  if (!budget) return { budget_usd: null, budget_period: null, resets_at: null };
  return {
    budget_usd: microsToUsd(budget.micros),
    budget_period: budget.period,
    resets_at: new Date(periodEnd(budget.period, Date.now()) * 1000).toISOString(),
  };
}

/** `DELETE /admin/cache`: whose stored answers go (no filter: every account's). */
const cachePurgeQuerySchema = z.strictObject({
  account_id: storableText().min(1).max(200).optional(),
  key_id: storableText().min(1).max(200).optional(),
  model: storableText().min(1).max(200).optional(),
});

/*
 * Accounts, credits, keys and usage behind `Authorization: Bearer $ADMIN_TOKEN`
 * (compared in constant time). JSON in and out, money as USD numbers (micros
 * in Redis), every body and query checked by a strict schema so a misspelt
 * field is refused rather than silently ignored.
 */

export const bodyLimit = 64 * 1024;

const keyNotFound = (keyId: string) =>
  new GatewayError(404, `No API key with id '${keyId}'.`, { code: 'key_not_found' });

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** `mappedTeams`: the team names OIDC_TEAM_MAP gives (those teams keep their names: `TeamStore.rename`). */
export function adminRoutes(
  store: KeyStore,
  adminToken: string | undefined,
  mappedTeams: readonly string[] = [],
  mcpServers?: McpServerAdmin,
): Router {
  const router = createRouter<GatewayState>('/admin');
  const accounts = store.accounts;
  const expected = adminToken ? digest(adminToken) : undefined;

  router.use(async (ctx, next) => {
    if (!expected) {
      throw new GatewayError(403, 'The admin API is disabled: set ADMIN_TOKEN to enable it.', {
        code: 'admin_disabled',
      });
    }
    const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      throw new GatewayError(401, 'Invalid admin token.', { code: 'invalid_admin_token' });
    }
    await next();
  });

  // Every change here is the admin token's: who holds it is not known, where it came from is.
  const audit = (ctx: { ip: string; get(field: string): string }) => ({
    record: store.record,
    source: auditSource(ctx, 'admin-token'),
  });

  const existingAccount = async (accountId: string): Promise<Account> => {
    const account = await accounts.get(accountId);
    if (!account) throw accountNotFound(accountId);
    return account;
  };

  // ---- accounts ----

  router.post('/accounts', async (ctx) => {
    const body = parseStrict(createAccountSchema, await readJsonObject(ctx.req, bodyLimit));
    const account = await accounts.create(body);
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'account.created',
      teamId: account.id,
      target: account.id,
      after: accountAuditFields(account),
    });
    ctx.status = 201;
    ctx.body = accountView(account);
  });

  router.get('/accounts', async (ctx) => {
    ctx.body = { object: 'list', data: (await accounts.list()).map(accountView) };
  });

  router.get('/accounts/:id', async (ctx) => {
    ctx.body = accountView(await existingAccount(ctx.params.id!));
  });

  router.patch('/accounts/:id', async (ctx) => {
    const body = parseStrict(patchAccountSchema, await readJsonObject(ctx.req, bodyLimit));
    const budget = budgetChange(body);
    const before = await accounts.get(ctx.params.id!);
    // A team's name follows the same rule here as through PATCH /admin/teams/{id}.
    if (body.name !== undefined && before?.kind === 'team') refuseMappedRename(before, body.name, mappedTeams);
    const budgetBefore = budget !== undefined ? await budgetView(ctx.params.id!) : undefined;
    const account = await accounts.update(ctx.params.id!, accountChanges(body));
    if (!account) throw accountNotFound(ctx.params.id!);
    if (budget !== undefined && !(await store.setTeamBudget(account.id, budget))) throw accountNotFound(account.id);
    const { record, source } = audit(ctx);
    const changed = changedFields(before ? accountAuditFields(before) : {}, accountAuditFields(account));
    // A new password is a change to record, never its value.
    if (body.password !== undefined) Object.assign(changed.after, { password_changed: true });
    // A PATCH of the budget alone changes no account field: its row is the budget's, below.
    if (Object.keys(changed.after).length > 0)
      await recordChange(record, {
        ...source,
        action: 'account.updated',
        teamId: account.id,
        target: account.id,
        ...changed,
      });
    const budgetAfter = await budgetView(account.id);
    if (budgetBefore) {
      const limit = (view: typeof budgetAfter) => ({
        budget_usd: view.budget?.budget_usd ?? null,
        budget_period: view.budget?.budget_period ?? null,
      });
      const moved = changedFields(limit(budgetBefore), limit(budgetAfter));
      if (Object.keys(moved.after).length > 0)
        await recordChange(record, {
          ...source,
          action: 'budget.updated',
          teamId: account.id,
          target: account.id,
          ...moved,
        });
    }
    ctx.body = { ...accountView(account), ...budgetAfter };
  });

  router.delete('/accounts/:id', async (ctx) => {
    const revoked = await accounts.delete(ctx.params.id!);
    if (revoked === undefined) throw accountNotFound(ctx.params.id!);
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'account.deleted',
      teamId: ctx.params.id!,
      target: ctx.params.id!,
      before: { deleted: false },
      after: { deleted: true, keys_revoked: revoked },
    });
    ctx.body = { id: ctx.params.id!, object: 'account', deleted: true, keys_revoked: revoked };
  });

  // A member's cap in a team: what the keys they made there may spend per period (null clears it).
  router.put('/accounts/:id/members/:member/cap', async (ctx) => {
    const body = parseStrict(capSchema, await readJsonObject(ctx.req, bodyLimit));
    const cap = budgetChange(body) ?? null;
    // The cap it replaces, for the audit row's before: the member's row holds it.
    const row = await store.record
      .selectFrom('team_members')
      .select(['cap_micros', 'cap_period'])
      .where('team_id', '=', ctx.params.id!)
      .where('member_id', '=', ctx.params.member!)
      .executeTakeFirst();
    if (!row || !(await store.setMemberCap(ctx.params.id!, ctx.params.member!, cap))) {
      throw new GatewayError(
        404,
        `No member '${ctx.params.member!.slice(0, 64)}' in the team '${ctx.params.id!.slice(0, 64)}'.`,
        { code: 'member_not_found', param: 'member' },
      );
    }
    const was =
      row.cap_micros === null || row.cap_period === null
        ? null
        : { micros: Number(row.cap_micros), period: row.cap_period };
    const limit = (view: ReturnType<typeof capView>) => ({ cap_usd: view.budget_usd, cap_period: view.budget_period });
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'budget.updated',
      teamId: ctx.params.id!,
      target: ctx.params.member!,
      ...changedFields(limit(capView(was)), limit(capView(cap))),
    });
    ctx.body = { object: 'team.member_cap', team_id: ctx.params.id!, member_id: ctx.params.member!, ...capView(cap) };
  });

  const budgetView = async (accountId: string) => {
    const budget = parseBudgetText(await store.redis.hget(accountKey(accountId), 'budget'));
    if (!budget) return { budget: null };
    const spent = await store.periodSpent(accountId, { scope: 'team', ...budget });
    return { budget: { ...capView(budget), spent_usd: microsToUsd(spent) } };
  };

  router.post('/accounts/:id/credits', async (ctx) => {
    const body = parseStrict(creditSchema, await readJsonObject(ctx.req, bodyLimit));
    const micros = usdToMicros(body.amount_usd);
    const balance = await accounts.credit(ctx.params.id!, micros, body.note ?? '');
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'credit.granted',
      teamId: ctx.params.id!,
      target: ctx.params.id!,
      after: { amount_micros: micros, note: body.note ?? '', balance_micros: balance },
    });
    ctx.body = { object: 'account.balance', account_id: ctx.params.id!, balance_usd: microsToUsd(balance) };
  });

  router.get('/accounts/:id/ledger', async (ctx) => {
    const { limit } = parseStrict(ledgerQuerySchema, ctx.query);
    await existingAccount(ctx.params.id!);
    ctx.body = { object: 'list', data: (await accounts.ledger(ctx.params.id!, limit ?? 100)).map(ledgerView) };
  });

  // ---- keys ----

  router.post('/keys', async (ctx) => {
    const body = parseStrict(adminCreateKeySchema, await readJsonObject(ctx.req, bodyLimit));
    // An admin's limits: in force, and ceilings the account's members may only tighten.
    const created = await store.create(
      body.name,
      { accountId: body.account_id, ...newKeyLimits(body), ...(body.created_by ? { createdBy: body.created_by } : {}) },
      'admin',
    );
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'key.created',
      teamId: created.accountId,
      target: created.id,
      after: keyAuditFields(created),
    });
    ctx.status = 201;
    ctx.body = { ...keyView(created), key: created.key };
  });

  router.get('/keys', async (ctx) => {
    const { account_id: accountId } = parseStrict(listKeysSchema, ctx.query);
    if (accountId) await existingAccount(accountId);
    ctx.body = { object: 'list', data: (await store.withAdminLimits(await store.list({ accountId }))).map(keyView) };
  });

  router.get('/keys/:id', async (ctx) => {
    const key = await store.get(ctx.params.id!);
    if (!key) throw keyNotFound(ctx.params.id!);
    ctx.body = keyView((await store.withAdminLimits([key]))[0]!);
  });

  router.patch('/keys/:id', async (ctx) => {
    const body = parseStrict(adminPatchKeySchema, await readJsonObject(ctx.req, bodyLimit));
    // An admin sets and lifts anything; what it sets becomes the key's ceilings (null lifts one).
    const before = await store.get(ctx.params.id!);
    const key = await store.update(ctx.params.id!, keyChanges(body), 'admin');
    if (!key) throw keyNotFound(ctx.params.id!);
    const { record, source } = audit(ctx);
    const [was] = before ? await store.withAdminLimits([before]) : [];
    await recordChange(record, {
      ...source,
      action: 'key.updated',
      teamId: key.accountId,
      target: key.id,
      ...changedFields(was ? keyAuditFields(was) : {}, keyAuditFields(key)),
    });
    ctx.body = keyView(key);
  });

  router.delete('/keys/:id', async (ctx) => {
    const keyId = ctx.params.id!;
    const before = await store.get(keyId);
    if (!(await store.revoke(keyId))) throw keyNotFound(keyId);
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'key.revoked',
      teamId: before?.accountId ?? null,
      target: keyId,
      before: { revoked: false },
      after: { revoked: true },
    });
    ctx.body = { id: keyId, object: 'api_key', deleted: true };
  });

  // ---- teams: made, and their members put in and taken out (the console's Team page does the same for owners) ----

  const teams = new TeamStore(accounts, store.record);
  const existingTeam = async (teamId: string): Promise<Account> => {
    const team = await accounts.get(teamId);
    if (!team) throw teamNotFound(teamId);
    return team;
  };

  router.post('/teams', async (ctx) => {
    const body = parseStrict(createTeamSchema, await readJsonObject(ctx.req, bodyLimit));
    // The first owner is looked up before the team is made: an unknown email makes no team.
    if (body.owner_email !== undefined && !(await accounts.findByEmail(body.owner_email))) {
      throw new GatewayError(404, `Nobody has the email '${body.owner_email}'.`, {
        code: 'account_not_found',
        param: 'owner_email',
      });
    }
    const team = await accounts.createTeam({ name: body.name });
    const by = auditSource(ctx, 'admin-token');
    await recordChange(store.record, {
      ...by,
      action: 'team.created',
      teamId: team.id,
      target: team.id,
      before: null,
      after: { name: team.name },
    });
    if (body.owner_email !== undefined) await teams.add(team, body.owner_email, 'owner', 'admin', by);
    ctx.status = 201;
    ctx.body = { ...accountView(team), members: await teams.members(team) };
  });

  // Every team (accounts of kind `team`; people's own accounts are under /admin/accounts), oldest first, each with its
  // members as POST answers it.
  router.get('/teams', async (ctx) => {
    const all = (await accounts.list()).filter((account) => account.kind === 'team');
    ctx.body = {
      object: 'list',
      data: await Promise.all(all.map(async (team) => ({ ...accountView(team), members: await teams.members(team) }))),
    };
  });

  router.get('/teams/:id', async (ctx) => {
    const team = await existingTeam(String(ctx.params.id));
    if (team.kind !== 'team') throw teamNotFound(team.id);
    ctx.body = { ...accountView(team), members: await teams.members(team) };
  });

  router.patch('/teams/:id', async (ctx) => {
    const team = await existingTeam(String(ctx.params.id));
    const body = parseStrict(patchTeamSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.body = accountView(await teams.rename(team, body.name, mappedTeams, auditSource(ctx, 'admin-token')));
  });

  router.get('/teams/:id/members', async (ctx) => {
    ctx.body = { object: 'list', data: await teams.members(await existingTeam(String(ctx.params.id))) };
  });

  router.post('/teams/:id/members', async (ctx) => {
    const team = await existingTeam(String(ctx.params.id));
    const body = parseStrict(addMemberSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.status = 201;
    ctx.body = await teams.add(team, body.email, body.role, 'admin', auditSource(ctx, 'admin-token'));
  });

  router.delete('/teams/:id/members/:member', async (ctx) => {
    const team = await existingTeam(String(ctx.params.id));
    const member = String(ctx.params.member).slice(0, 256);
    await teams.remove(team, member, auditSource(ctx, 'admin-token'));
    ctx.body = { id: member, object: 'team.member', deleted: true };
  });

  // ---- usage ----

  // ---- the request log: every keyed request, newest first, a page at a time ----
  router.get('/requests', async (ctx) => {
    const { filter, limit, cursor } = parseStrict(requestListQuerySchema, ctx.query);
    ctx.body = await listRequests(store.record, filter, limit, cursor);
  });

  // ---- budget alerts and their deliveries, newest first ----
  router.get('/alerts', async (ctx) => {
    const query = parseStrict(alertsQuerySchema, ctx.query);
    const limit = query.limit ?? 100;
    const alerts = await listAlerts(store.record, {
      limit,
      ...(query.team_id !== undefined ? { teamId: query.team_id } : {}),
      ...(query.before !== undefined ? { before: query.before } : {}),
    });
    ctx.body = { object: 'list', data: alerts.map(alertView), has_more: alerts.length === limit };
  });

  router.get('/usage', async (ctx) => {
    const query = parseStrict(usageQuerySchema, ctx.query);
    ctx.body = { object: 'list', data: await readUsage(store.record, query) };
  });

  // ---- the upstream MCP servers: the file's and those an admin adds here, with what a worker's last check found ----
  const mcp = (): McpServerAdmin => {
    if (!mcpServers) throw new GatewayError(404, 'MCP servers are not served here.', { code: 'not_found' });
    return mcpServers;
  };
  const serverName = (ctx: { params: Record<string, string> }) => String(ctx.params.name).slice(0, 200);
  router.get('/mcp/servers', async (ctx) => {
    ctx.body = { object: 'list', data: await mcp().list() };
  });
  router.post('/mcp/servers', async (ctx) => {
    const body = parseStrict(createMcpServerSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.status = 201;
    ctx.body = await mcp().create(body, audit(ctx).source);
  });
  router.patch('/mcp/servers/:name', async (ctx) => {
    const patch = parseStrict(patchMcpServerSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.body = await mcp().update(serverName(ctx), patch, audit(ctx).source);
  });
  router.delete('/mcp/servers/:name', async (ctx) => {
    ctx.body = await mcp().remove(serverName(ctx), audit(ctx).source);
  });
  // An admin's "check it now": a worker checks the server at once; answered with what it found.
  router.post('/mcp/servers/:name/check', async (ctx) => {
    ctx.body = await mcp().check(serverName(ctx));
  });

  // ---- the response cache: an account's stored answers, all or one key's or one model's, purged ----
  router.delete('/cache', async (ctx) => {
    const { account_id: accountId, key_id: keyId, model } = parseStrict(cachePurgeQuerySchema, ctx.query);
    const filter = { ...(keyId !== undefined ? { keyId } : {}), ...(model !== undefined ? { model } : {}) };
    const accountIds = accountId !== undefined ? [accountId] : await accountsWithEntries(store.redis);
    let purged = 0;
    for (const id of accountIds) purged += await purgeEntries(store.redis, id, filter);
    const { record, source } = audit(ctx);
    await recordChange(record, {
      ...source,
      action: 'cache.purged',
      teamId: accountId ?? null,
      target: accountId ?? 'all accounts',
      after: {
        purged,
        ...(accountId !== undefined ? { account_id: accountId } : {}),
        ...(keyId !== undefined ? { key_id: keyId } : {}),
        ...(model !== undefined ? { model } : {}),
      },
    });
    ctx.body = { object: 'cache.purge', purged };
  });

  return router;
}
