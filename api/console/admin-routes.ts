import type Router from '@koa/router';
import { z } from 'zod';
import { toolPatterns } from '../../shared/mcp/tool-rules.js';
import { GatewayError } from '../../shared/errors.js';
import { defaultAccountId } from '../../shared/accounts.js';
import { channelFailureWindowMin, readChannelFailures } from '../../shared/channel-health.js';
import { channelCooldownsKey } from '../../shared/redis-keys.js';
import { parseCooldown, resolveChannels } from '../../shared/vendors.js';
import { heldAnswer } from '../../shared/endpoints.js';
import { readJsonObject } from '../http/request-body.js';
import { accountNotFound, microsToUsd, usdToMicros } from '../accounts/account-store.js';
import {
  accountChanges,
  accountName,
  cacheTtlS,
  createAccountSchema,
  creditSchema,
  keyChanges,
  keyMcpTools,
  parseStrict,
  patchKeySchema,
  role,
  serviceTiers,
  weight,
} from '../accounts/account-requests.js';
import { accountAuditFields, accountView, keyAuditFields, keyView } from '../accounts/views.js';
import { recordChange } from '../accounts/audit-trail.js';
import { auditSource, changedFields } from '../../storage/record/audit-log.js';
import type {
  AccountList,
  ChannelModelHealth,
  ChannelView,
  List,
  OwnedKeyView,
  QueueCounts,
  QueueList,
} from '../../shared/console-api.js';
import { bodyLimit } from '../accounts/admin-api.js';
import { requireSession, type ConsoleContext, type ConsoleDeps } from './console-session.js';
import { queueDashboardEntry } from './queue-dashboard.js';

/*
 * The console's admin pages' data, at /console/api/admin/*. Each handler
 * checks the session's role itself: a member gets 403 from every one, not
 * just a hidden link.
 */

const patchSchema = z.strictObject({
  disabled: z.boolean().optional(),
  name: accountName.optional(),
  role: role.optional(),
  weight: weight.optional(),
  service_tiers: serviceTiers.optional(),
  cache_max_ttl_s: cacheTtlS.nullable().optional(),
  mcp_tools: toolPatterns.nullable().optional(),
});
/** An admin's change to any key: a member's fields, and the MCP tools it may use. */
const adminPatchKeySchema = patchKeySchema.extend(keyMcpTools);

const reasons = {
  auth: 'the vendor refused its credentials or quota',
  rate: 'rate limited by the vendor',
  failures: 'repeated server or network errors',
} as const;

export async function requireAdmin(ctx: ConsoleContext, deps: ConsoleDeps) {
  const found = await requireSession(ctx, deps);
  if (found.account.role !== 'admin')
    throw new GatewayError(403, 'Only administrators may do this.', { code: 'admin_only' });
  return found;
}

export function addAdminConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const { keyStore, sessions } = deps;
  const accounts = keyStore.accounts;

  router.get('/api/admin/accounts', async (ctx) => {
    await requireAdmin(ctx, deps);
    // The tiers an account without its own (`service_tiers: null`) may use, for the page to say
    // (SERVICE_TIERS_GRANTED); and the gateway's own cache cap (CACHE_MAX_TTL_S), which holds beside each account's
    // (`cache_max_ttl_s`).
    ctx.body = {
      object: 'list',
      data: (await accounts.list()).map(accountView),
      default_service_tiers: deps.config.scheduling.tiersGranted,
      gateway_cache_max_ttl_s: deps.config.cache.maxTtlS,
    } satisfies AccountList;
  });

  router.post('/api/admin/accounts', async (ctx) => {
    const { account: me } = await requireAdmin(ctx, deps);
    const body = parseStrict(createAccountSchema, await readJsonObject(ctx.req, bodyLimit));
    const account = await accounts.create(body);
    await recordChange(keyStore.record, {
      ...auditSource(ctx, me),
      action: 'account.created',
      teamId: account.id,
      target: account.id,
      after: accountAuditFields(account),
    });
    ctx.status = 201;
    ctx.body = accountView(account);
  });

  router.patch('/api/admin/accounts/:id', async (ctx) => {
    const { account: me } = await requireAdmin(ctx, deps);
    const body = parseStrict(patchSchema, await readJsonObject(ctx.req, bodyLimit));
    const id = String(ctx.params.id);
    if (id === me.id && (body.disabled === true || body.role === 'member')) {
      throw new GatewayError(400, 'An administrator cannot disable or demote their own account.', {
        code: 'own_account',
        param: body.disabled ? 'disabled' : 'role',
      });
    }
    if (id === defaultAccountId && body.disabled === true) {
      throw new GatewayError(400, 'The default account cannot be disabled here: revoke its keys instead.', {
        code: 'default_account',
        param: 'disabled',
      });
    }
    const before = await accounts.get(id);
    const updated = await accounts.update(id, accountChanges(body));
    if (!updated) throw accountNotFound(id);
    await recordChange(keyStore.record, {
      ...auditSource(ctx, me),
      action: 'account.updated',
      teamId: id,
      target: id,
      ...changedFields(before ? accountAuditFields(before) : {}, accountAuditFields(updated)),
    });
    // Disabling ends its sessions at once; its keys are refused from the next request on (the update told every api).
    if (body.disabled) await sessions.destroyAll(id);
    ctx.body = accountView(updated);
  });

  router.post('/api/admin/accounts/:id/credits', async (ctx) => {
    const { account: me } = await requireAdmin(ctx, deps);
    const body = parseStrict(creditSchema, await readJsonObject(ctx.req, bodyLimit));
    const id = String(ctx.params.id);
    const micros = usdToMicros(body.amount_usd);
    const balance = await accounts.credit(id, micros, body.note ?? '');
    await recordChange(keyStore.record, {
      ...auditSource(ctx, me),
      action: 'credit.granted',
      teamId: id,
      target: id,
      after: { amount_micros: micros, note: body.note ?? '', balance_micros: balance },
    });
    ctx.body = { object: 'account.balance', account_id: id, balance_usd: microsToUsd(balance) };
  });

  router.get('/api/admin/keys', async (ctx) => {
    await requireAdmin(ctx, deps);
    // The account by its email and its name: the default account has no email, only its name ("Default").
    const owners = new Map((await accounts.list()).map((account) => [account.id, account]));
    ctx.body = {
      object: 'list',
      data: (await keyStore.withAdminLimits(await keyStore.list())).map((key): OwnedKeyView => {
        const owner = owners.get(key.accountId);
        return {
          ...keyView(key),
          account_email: owner?.email || null,
          account_name: owner?.name || null,
          account_kind: owner?.kind ?? null,
          account_cache_max_ttl_s: owner?.cacheMaxTtlS ?? null,
        };
      }),
    } satisfies List<OwnedKeyView>;
  });

  // Any key's limits, as the admin API sets them: in force, and ceilings its account's members may only tighten.
  router.patch('/api/admin/keys/:id', async (ctx) => {
    const { account: me } = await requireAdmin(ctx, deps);
    const body = parseStrict(adminPatchKeySchema, await readJsonObject(ctx.req, bodyLimit));
    const id = String(ctx.params.id);
    const before = await keyStore.get(id);
    const [was] = before ? await keyStore.withAdminLimits([before]) : [];
    const updated = await keyStore.update(id, keyChanges(body), 'admin');
    if (!updated) throw new GatewayError(404, `No API key with id '${id.slice(0, 100)}'.`, { code: 'key_not_found' });
    await recordChange(keyStore.record, {
      ...auditSource(ctx, me),
      action: 'key.updated',
      teamId: updated.accountId,
      target: id,
      ...changedFields(was ? keyAuditFields(was) : {}, keyAuditFields(updated)),
    });
    ctx.body = keyView(updated);
  });

  // Any key revoked, as `DELETE /admin/keys/{id}` does: the keys of the default account (the CLI's) have no member to
  // do it.
  router.delete('/api/admin/keys/:id', async (ctx) => {
    const { account: me } = await requireAdmin(ctx, deps);
    const id = String(ctx.params.id);
    const before = await keyStore.get(id);
    if (!(await keyStore.revoke(id)))
      throw new GatewayError(404, `No API key with id '${id.slice(0, 100)}'.`, { code: 'key_not_found' });
    await recordChange(keyStore.record, {
      ...auditSource(ctx, me),
      action: 'key.revoked',
      teamId: before?.accountId ?? null,
      target: id,
      before: { revoked: false },
      after: { revoked: true },
    });
    ctx.body = { id, object: 'api_key', deleted: true };
  });

  router.get('/api/admin/channels', async (ctx) => {
    await requireAdmin(ctx, deps);
    const [cooldowns, failures] = await Promise.all([
      deps.redis.hgetall(channelCooldownsKey),
      readChannelFailures(deps.redis),
    ]);
    const now = Date.now();
    const data = [...resolveChannels(deps.config).values()].flat().map((channel): ChannelView => {
      const rests = Object.entries(cooldowns)
        .filter(([id]) => id === channel.id || id.startsWith(`${channel.id}|`))
        .map(([id, raw]) => ({ model: id.includes('|') ? id.slice(id.indexOf('|') + 1) : null, ...parseCooldown(raw) }))
        .filter((rest) => rest.until > now)
        .sort((a, b) => b.until - a.until);
      const longest = rests[0];
      const reasonOf = (rest: (typeof rests)[number]) =>
        `${reasons[rest.reason]}${rest.status ? ` (HTTP ${rest.status})` : ''}`;
      // Each model that failed lately or rests now: its failures, its cool-down (a model's own; the channel's is the
      // channel's).
      const health = new Map<string, ChannelModelHealth>();
      for (const [id, n] of failures) {
        if (!id.startsWith(`${channel.id}|`)) continue;
        const model = id.slice(channel.id.length + 1);
        health.set(model, { model, failures: n, cooling_until: null, reason: null });
      }
      for (const rest of rests) {
        if (rest.model === null) continue;
        const entry = health.get(rest.model) ?? { model: rest.model, failures: 0, cooling_until: null, reason: null };
        if (entry.cooling_until === null || rest.until > entry.cooling_until)
          Object.assign(entry, { cooling_until: rest.until, reason: reasonOf(rest) });
        health.set(rest.model, entry);
      }
      const modelHealth = [...health.values()].sort(
        (a, b) =>
          Number(b.cooling_until !== null) - Number(a.cooling_until !== null) ||
          b.failures - a.failures ||
          a.model.localeCompare(b.model),
      );
      return {
        id: channel.id,
        vendor: channel.vendor,
        base_url: channel.baseUrl || null,
        weight: channel.weight,
        models: deps.models.list().filter((model) => model.routes.some((route) => route.vendor === channel.vendor))
          .length,
        status: longest ? 'cooling_down' : 'ok',
        cooling_until: longest?.until ?? null,
        reason: longest ? `${reasonOf(longest)}${longest.model ? ` for ${longest.model}` : ''}` : null,
        cooldowns: rests.map((rest) => ({
          model: rest.model,
          until: rest.until,
          reason: rest.reason,
          status: rest.status || null,
        })),
        failures: modelHealth.reduce((sum, entry) => sum + entry.failures, 0),
        failure_window_min: channelFailureWindowMin,
        model_health: modelHealth,
      };
    });
    ctx.body = { object: 'list', data } satisfies List<ChannelView>;
  });

  router.get('/api/admin/queues', async (ctx) => {
    await requireAdmin(ctx, deps);
    const data = await Promise.all(
      [...deps.queues.entries()].map(async ([name, shards]): Promise<QueueCounts> => {
        // A capability's shards count as one queue. Pausing (from the queue dashboard) is the queue's, not a state
        // of its jobs: they stay waiting, and the queue says it is paused when any of its shards is.
        const [counts, paused] = await Promise.all([
          Promise.all(
            shards.map((queue) =>
              queue.getJobCounts('waiting', 'prioritized', 'active', 'delayed', 'failed', 'completed'),
            ),
          ),
          Promise.all(shards.map((queue) => queue.isPaused())),
        ]);
        const total: Record<string, number> = {};
        // Jobs wait with a priority (their band and fair tag), which BullMQ counts apart: to a reader they are waiting.
        for (const count of counts)
          for (const [state, n] of Object.entries(count))
            total[state === 'prioritized' ? 'waiting' : state] =
              (total[state === 'prioritized' ? 'waiting' : state] ?? 0) + n;
        return {
          name,
          waiting: total.waiting ?? 0,
          active: total.active ?? 0,
          delayed: total.delayed ?? 0,
          failed: total.failed ?? 0,
          completed: total.completed ?? 0,
          paused: paused.some(Boolean),
        };
      }),
    );
    // The completed and failed counts are of the finished jobs BullMQ still keeps (removeOnComplete, removeOnFail): the
    // page says how long.
    const keeps = {
      completed_seconds: heldAnswer.completedSeconds,
      completed_count: heldAnswer.completedCount,
      failed_seconds: heldAnswer.failedSeconds,
      failed_count: heldAnswer.failedCount,
      async_seconds: deps.config.asyncResultTtlSeconds,
    };
    ctx.body = { object: 'list', data, dashboard: queueDashboardEntry, keeps } satisfies QueueList;
  });
}
