import type Router from '@koa/router';
import type { McpServerConsoleView, McpToolsPage } from '../../shared/console-api.js';
import { microsToUsdText } from '../../shared/alerts.js';
import { serverView, type McpServerHealth } from '../../shared/mcp/servers.js';
import { toolRefusal } from '../../shared/mcp/tool-rules.js';
import { mcpHealthKey } from '../../shared/redis-keys.js';
import { may } from '../accounts/team-roles.js';
import { requireTeam, type ConsoleDeps, type TeamNeed } from './console-session.js';
import { requireAdmin } from './admin-routes.js';
import { createMcpServerSchema, patchMcpServerSchema } from '../../shared/mcp/servers.js';
import { parseStrict } from '../accounts/account-requests.js';
import { readJsonObject } from '../http/request-body.js';
import { bodyLimit } from '../accounts/admin-api.js';
import { auditSource } from '../../storage/record/audit-log.js';

/*
 * The console's Tools page data, at /console/api/mcp: the upstream MCP servers (MCP_SERVERS_FILE) as the workers'
 * last checks found them, the tools the team may use (an admin sees every tool, and where each server is reached),
 * and for each key the person sees on the Keys page the tools it may use now: the same rule `/mcp` holds
 * (shared/mcp/tool-rules.ts), so what the page says a key may call is what the key may call.
 */

const reader: TeamNeed = { allows: may.readUsage, roles: 'any role' };

export function addMcpConsoleRoutes(router: Router, deps: ConsoleDeps): void {
  const { config, keyStore, redis } = deps;

  router.get('/api/mcp', async (ctx) => {
    const scope = await requireTeam(ctx, deps, reader);
    const admin = scope.account.role === 'admin';
    const servers = deps.mcpServers.list();
    const found = servers.length > 0 ? await redis.hgetall(mcpHealthKey) : {};
    const team = { teamMcpTools: scope.team.mcpTools };
    const views: McpServerConsoleView[] = servers.map((server) => {
      const text = found[server.name];
      const view = serverView(
        server,
        text === undefined ? undefined : (JSON.parse(text) as McpServerHealth),
        microsToUsdText,
      );
      return {
        name: view.name,
        status: view.status,
        error: view.error,
        checked_at: view.checked_at,
        price_per_call_usd: view.price_per_call_usd,
        max_concurrency: view.max_concurrency,
        timeout_ms: view.timeout_ms,
        tools: view.tools
          .filter((tool) => admin || toolRefusal(team, server.name, tool.name) === undefined)
          .map((tool) => ({
            name: tool.name,
            title: typeof tool.title === 'string' ? tool.title : null,
            description: typeof tool.description === 'string' ? tool.description : null,
          })),
        resources: view.resources,
        prompts: view.prompts,
        url: admin ? view.url : null,
        transport: admin ? view.transport : null,
        header_names: admin ? view.header_names : null,
        source: admin ? view.source : null,
        keep_arguments: admin ? view.keep_arguments : null,
      };
    });
    // The keys of the Keys page: every key of the team for its owners, a member's own for a member, none for a viewer.
    const keys = may.ownKeys(scope.role) ? await keyStore.list({ accountId: scope.team.id }) : [];
    const shown = may.manageAllKeys(scope.role) ? keys : keys.filter((key) => key.createdBy === scope.account.id);
    const base = (config.publicBaseUrl ?? `${ctx.protocol}://${ctx.host}`).replace(/\/+$/, '');
    ctx.body = {
      endpoint: `${base}/mcp`,
      team_tools: scope.team.mcpTools ?? null,
      servers: views,
      keys: shown.map((key) => ({
        id: key.id,
        name: key.name,
        hint: key.hint,
        mcp_tools: key.mcpTools ?? null,
        tools: views.flatMap((server) =>
          server.tools
            .filter((tool) => toolRefusal({ ...team, mcpTools: key.mcpTools }, server.name, tool.name) === undefined)
            .map((tool) => `${server.name}/${tool.name}`),
        ),
      })),
    } satisfies McpToolsPage;
  });

  // An admin's servers: added, changed, removed (those of the file change by deploying), checked now
  // (api/mcp/server-admin.ts).
  const name = (ctx: { params: Record<string, string> }) => String(ctx.params.name).slice(0, 200);
  router.post('/api/admin/mcp/servers', async (ctx) => {
    const { account } = await requireAdmin(ctx, deps);
    const body = parseStrict(createMcpServerSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.status = 201;
    ctx.body = await deps.mcp.create(body, auditSource(ctx, account));
  });
  router.patch('/api/admin/mcp/servers/:name', async (ctx) => {
    const { account } = await requireAdmin(ctx, deps);
    const patch = parseStrict(patchMcpServerSchema, await readJsonObject(ctx.req, bodyLimit));
    ctx.body = await deps.mcp.update(name(ctx), patch, auditSource(ctx, account));
  });
  router.delete('/api/admin/mcp/servers/:name', async (ctx) => {
    const { account } = await requireAdmin(ctx, deps);
    ctx.body = await deps.mcp.remove(name(ctx), auditSource(ctx, account));
  });
  // "Check now": a worker checks the server at once; the page reads the result again.
  router.post('/api/admin/mcp/servers/:name/check', async (ctx) => {
    await requireAdmin(ctx, deps);
    const view = await deps.mcp.check(name(ctx));
    ctx.body = { name: view.name, status: view.status, error: view.error, checked_at: view.checked_at };
  });
}
