import type { Redis } from 'ioredis';
import { microsToUsdText } from '../../shared/alerts.js';
import { GatewayError } from '../../shared/errors.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import {
  serverView,
  type CreateMcpServer,
  type McpServer,
  type McpServerHealth,
  type McpServerView,
  type PatchMcpServer,
} from '../../shared/mcp/servers.js';
import type { SecretBox } from '../../shared/secret-box.js';
import { mcpHealthKey } from '../../shared/redis-keys.js';
import { changedFields } from '../../storage/record/audit-log.js';
import type { RecordDb } from '../../storage/record/database.js';
import { deleteServer, insertServer, serverAuditFields, updateServer } from '../../storage/record/mcp-servers.js';
import { recordChange, type AuditBy } from '../accounts/audit-trail.js';
import { checkServerNow } from './check-now.js';

const notFound = (name: string) =>
  new GatewayError(404, `No MCP server named '${name.slice(0, 100)}'.`, { code: 'mcp_server_not_found' });

/** A record write refused for want of SECRETS_KEY (storage/record/mcp-servers.ts throws a plain Error saying so). */
function secretsRefusal(error: unknown): never {
  if (error instanceof Error && /SECRETS_KEY/.test(error.message))
    throw new GatewayError(400, `Not kept: ${error.message}.`, { code: 'secrets_key_unset', param: 'headers' });
  throw error;
}

/**
 * The upstream MCP servers as an admin manages them, for the admin API and the console alike: listed with what the
 * workers' last checks found, added, changed and removed (those an admin added; the file's change by deploying),
 * checked now. Every change is in the record first, then told to every api and worker (`McpRegistry.changed`), then
 * in the audit log; a server added or changed is checked at once by a worker.
 */
export class McpServerAdmin {
  constructor(
    private readonly deps: { record: RecordDb; redis: Redis; registry: McpRegistry; box: SecretBox | undefined },
  ) {}

  async list(): Promise<McpServerView[]> {
    const servers = this.deps.registry.list();
    const health = servers.length > 0 ? await this.deps.redis.hgetall(mcpHealthKey) : {};
    return servers.map((server) => this.view(server, health[server.name]));
  }

  async create(body: CreateMcpServer, by: AuditBy): Promise<McpServerView> {
    const { record, registry, box } = this.deps;
    if (registry.list().some((server) => server.name === body.name && server.source === 'file')) {
      throw new GatewayError(409, `MCP_SERVERS_FILE already has a server named '${body.name}'.`, {
        code: 'mcp_server_exists',
        param: 'name',
      });
    }
    const row = await insertServer(record, body, box).catch(secretsRefusal);
    if (!row)
      throw new GatewayError(409, `An MCP server named '${body.name}' already exists.`, {
        code: 'mcp_server_exists',
        param: 'name',
      });
    await registry.changed();
    await recordChange(record, {
      ...by,
      action: 'mcp_server.created',
      teamId: null,
      target: body.name,
      after: serverAuditFields(row),
    });
    return this.view(this.served(body.name));
  }

  async update(name: string, patch: PatchMcpServer, by: AuditBy): Promise<McpServerView> {
    const { record, registry, box } = this.deps;
    this.fromFileRefused(name);
    const changed = await updateServer(record, name, patch, box).catch(secretsRefusal);
    if (!changed) throw notFound(name);
    await registry.changed();
    const fields = changedFields(serverAuditFields(changed.before), serverAuditFields(changed.after));
    // Values never enter the log: that the sealed URL and headers were given again is all it says of them.
    if (patch.url !== undefined || patch.headers !== undefined) fields.after.sealed_url_and_headers = 'replaced';
    await recordChange(record, { ...by, action: 'mcp_server.updated', teamId: null, target: name, ...fields });
    return this.view(this.served(name), await this.deps.redis.hget(mcpHealthKey, name));
  }

  async remove(name: string, by: AuditBy): Promise<{ object: 'mcp.server'; name: string; deleted: true }> {
    const { record, registry, redis } = this.deps;
    this.fromFileRefused(name);
    const row = await deleteServer(record, name);
    if (!row) throw notFound(name);
    await registry.changed();
    await redis.hdel(mcpHealthKey, name);
    await recordChange(record, {
      ...by,
      action: 'mcp_server.deleted',
      teamId: null,
      target: name,
      before: serverAuditFields(row),
    });
    return { object: 'mcp.server', name, deleted: true };
  }

  /** A worker checks the server at once; answered with the server as that check found it. */
  async check(name: string): Promise<McpServerView> {
    const server = this.deps.registry.get(name);
    if (!server) throw notFound(name);
    const health = await checkServerNow(this.deps.redis, server);
    return serverView(server, health, microsToUsdText);
  }

  private served(name: string): McpServer {
    const server = this.deps.registry.get(name);
    if (!server) throw notFound(name);
    return server;
  }

  private fromFileRefused(name: string): void {
    if (this.deps.registry.get(name)?.source === 'file') {
      throw new GatewayError(409, `The MCP server '${name}' is set by MCP_SERVERS_FILE: change the file and deploy.`, {
        code: 'mcp_server_from_file',
      });
    }
  }

  private view(server: McpServer, health?: string | null): McpServerView {
    return serverView(server, health ? (JSON.parse(health) as McpServerHealth) : undefined, microsToUsdText);
  }
}
