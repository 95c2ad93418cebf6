import { z } from 'zod';
import { GatewayError, invalidRequest } from '../../shared/errors.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import { maxLoopToolCalls, type McpApproval, type McpLoopPlan, type McpToolUse } from '../../shared/mcp/tool-loop.js';
import { mayReachServer, type ToolRules } from '../../shared/mcp/tool-rules.js';
import { parseAt, paramOf, type FieldPath } from '../dialects/field-path.js';

/*
 * The MCP servers a Responses request's `mcp` tools or a Messages request's `mcp_servers` name, as the plan of the
 * tool loop its job runs (shared/mcp/tool-loop.ts). A server is one of the gateway's (the tool's `server_label`, the
 * entry's `name`): the gateway calls no URL a client gives it, and sends its own credentials, never the client's. A
 * `server_url` is taken when it is the gateway's own address of that server (`…/mcp/<name>`) or the URL it was added
 * with; any other is refused, as are connectors and tunnels, a server the key may not reach, and a server named twice.
 */

const toolNames = z.array(z.string().min(1).max(512)).max(1000);
const toolFilter = z.strictObject({ tool_names: toolNames.optional(), read_only: z.boolean().optional() });

const responsesMcpTool = z.looseObject({
  type: z.literal('mcp'),
  server_label: z.string().min(1).max(64),
  server_url: z.string().max(2048).nullish(),
  connector_id: z.string().nullish(),
  tunnel_id: z.string().nullish(),
  allowed_tools: z.union([toolNames, toolFilter]).nullish(),
  require_approval: z
    .union([
      z.enum(['always', 'never']),
      z.strictObject({ always: toolFilter.optional(), never: toolFilter.optional() }),
    ])
    .nullish(),
});

/** The server a request names, if the key may use it; `at` is where the request named it. */
function gatewayServer(
  registry: McpRegistry | undefined,
  access: ToolRules,
  name: string,
  url: string | null | undefined,
  at: FieldPath,
  urlAt: FieldPath,
): string {
  const server = registry?.get(name);
  if (!server) {
    throw invalidRequest(
      `No MCP server named '${name.slice(0, 64)}' on this gateway: name one of the servers an administrator ` +
        `added (the console's Tools page lists them).`,
      paramOf(at),
      'invalid_value',
    );
  }
  if (!mayReachServer(access, server.name)) {
    throw new GatewayError(
      403,
      `This API key may not use any tool of the MCP server ${server.name}. Ask an administrator to change the ` +
        `key's or its team's mcp_tools.`,
      { code: 'tool_not_allowed', param: paramOf(at) },
    );
  }
  if (url != null && url !== '' && url !== server.url) {
    let own = false;
    try {
      own = new URL(url).pathname.replace(/\/+$/, '').endsWith(`/mcp/${server.name}`);
    } catch {
      own = false;
    }
    if (!own) {
      throw invalidRequest(
        `This gateway calls only its own MCP servers: give server_url as the gateway's address of the server ` +
          `(…/mcp/${server.name}), or leave it out.`,
        paramOf(urlAt),
        'invalid_value',
      );
    }
  }
  return server.name;
}

/**
 * The loop's plan for a Responses request's `mcp` tools (undefined: it has none). `approvals`: the calls its input
 * decided on.
 */
export function responsesLoopPlan(
  tools: readonly Record<string, unknown>[] | null | undefined,
  maxToolCalls: number | null | undefined,
  requireCall: boolean,
  approvals: McpApproval[],
  access: ToolRules,
  registry: McpRegistry | undefined,
): McpLoopPlan | undefined {
  const uses: McpToolUse[] = [];
  (tools ?? []).forEach((raw, i) => {
    if (raw.type !== 'mcp') return;
    const path: FieldPath = ['tools', i];
    const tool = parseAt(responsesMcpTool, raw, path);
    if (tool.connector_id != null || tool.tunnel_id != null) {
      const field = tool.connector_id != null ? 'connector_id' : 'tunnel_id';
      throw invalidRequest(
        `MCP ${field === 'connector_id' ? 'connectors' : 'tunnels'} are not served by this gateway: name one of its MCP servers by server_label.`,
        paramOf([...path, field]),
        'unsupported_parameter',
      );
    }
    const server = gatewayServer(
      registry,
      access,
      tool.server_label,
      tool.server_url,
      [...path, 'server_label'],
      [...path, 'server_url'],
    );
    if (uses.some((use) => use.server === server))
      throw invalidRequest(
        `The MCP server '${server}' is named twice.`,
        paramOf([...path, 'server_label']),
        'invalid_value',
      );
    const allowed = tool.allowed_tools;
    const approval = tool.require_approval;
    uses.push({
      server,
      ...(Array.isArray(allowed)
        ? { allowedTools: allowed }
        : allowed?.tool_names
          ? { allowedTools: allowed.tool_names }
          : {}),
      ...(allowed && !Array.isArray(allowed) && allowed.read_only === true ? { readOnly: true } : {}),
      // By name: the tools `never` names run without asking; every other asks (the API's default is to ask).
      approval:
        approval === 'never'
          ? { default: 'never' }
          : typeof approval === 'object' && approval !== null
            ? { default: 'always', never: approval.never?.tool_names ?? [] }
            : { default: 'always' },
    });
  });
  if (uses.length === 0) {
    if (approvals.length > 0)
      throw invalidRequest(
        'An mcp_approval_response needs the request to name the MCP server again in its tools.',
        'input',
        'invalid_value',
      );
    return undefined;
  }
  return {
    uses,
    ...(requireCall ? { requireCall } : {}),
    ...(approvals.length > 0 ? { approvals } : {}),
    ...(maxToolCalls != null ? { maxToolCalls: Math.max(0, Math.min(maxToolCalls, maxLoopToolCalls)) } : {}),
  };
}

const messagesMcpServer = z.looseObject({
  type: z.literal('url'),
  url: z.string().min(1).max(2048),
  name: z.string().min(1).max(64),
  authorization_token: z.string().nullish(),
  tool_configuration: z.looseObject({ enabled: z.boolean().nullish(), allowed_tools: toolNames.nullish() }).nullish(),
});

const mcpToolset = z.looseObject({
  type: z.literal('mcp_toolset'),
  mcp_server_name: z.string().min(1).max(64),
  default_config: z.looseObject({ enabled: z.boolean().nullish() }).nullish(),
  configs: z.record(z.string(), z.looseObject({ enabled: z.boolean().nullish() })).nullish(),
});

/**
 * The loop's plan for a Messages request's `mcp_servers` (undefined: it names none), each server's tools as its
 * `tool_configuration` allows (`mcp-client-2025-04-04`) or as an `mcp_toolset` tool names them
 * (`mcp-client-2025-11-20`).
 */
export function messagesLoopPlan(
  servers: readonly unknown[] | null | undefined,
  tools: readonly unknown[] | null | undefined,
  requireCall: boolean,
  access: ToolRules,
  registry: McpRegistry | undefined,
): McpLoopPlan | undefined {
  if (!servers || servers.length === 0) return undefined;
  const toolsets = new Map<string, z.output<typeof mcpToolset>>();
  (tools ?? []).forEach((raw, i) => {
    if ((raw as { type?: unknown }).type !== 'mcp_toolset') return;
    const set = parseAt(mcpToolset, raw, ['tools', i]);
    toolsets.set(set.mcp_server_name, set);
  });
  const uses: McpToolUse[] = [];
  servers.forEach((raw, i) => {
    const path: FieldPath = ['mcp_servers', i];
    const entry = parseAt(messagesMcpServer, raw, path);
    const server = gatewayServer(registry, access, entry.name, entry.url, [...path, 'name'], [...path, 'url']);
    if (uses.some((use) => use.server === server))
      throw invalidRequest(
        `The MCP server '${server}' is named twice.`,
        paramOf([...path, 'name']),
        'invalid_request_error',
      );
    const set = toolsets.get(entry.name);
    let allowedTools: string[] | undefined;
    let excludedTools: string[] | undefined;
    if (set) {
      const configs = Object.entries(set.configs ?? {});
      if (set.default_config?.enabled === false)
        allowedTools = configs.filter(([, config]) => config.enabled === true).map(([name]) => name);
      else excludedTools = configs.filter(([, config]) => config.enabled === false).map(([name]) => name);
    } else if (entry.tool_configuration?.enabled === false) allowedTools = [];
    else if (entry.tool_configuration?.allowed_tools) allowedTools = entry.tool_configuration.allowed_tools;
    uses.push({
      server,
      approval: { default: 'never' },
      ...(allowedTools ? { allowedTools } : {}),
      ...(excludedTools?.length ? { excludedTools } : {}),
    });
  });
  for (const name of toolsets.keys()) {
    if (!uses.some((use) => use.server === name))
      throw invalidRequest(
        `The mcp_toolset names '${name.slice(0, 64)}', which mcp_servers does not.`,
        'tools',
        'invalid_request_error',
      );
  }
  return { uses, ...(requireCall ? { requireCall } : {}) };
}
