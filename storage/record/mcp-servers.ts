import {
  shownUrl,
  urlHidesNothing,
  type CreateMcpServer,
  type McpServer,
  type PatchMcpServer,
} from '../../shared/mcp/servers.js';
import type { Redis } from 'ioredis';
import type { Config } from '../../shared/config.js';
import type { Logger } from '../../shared/logger.js';
import { McpRegistry } from '../../shared/mcp/registry.js';
import { SecretBox } from '../../shared/secret-box.js';
import type { McpServersTable, RecordDb } from './database.js';

/*
 * The upstream MCP servers an admin added (the admin API, the console), kept in the record. What may be secret, the
 * whole URL and the headers, is sealed with SECRETS_KEY (shared/secret-box.ts) under the server's name; the record
 * shows only the URL without user, password, query or fragment and the headers' names. Without SECRETS_KEY a server
 * that has something to hide cannot be added.
 */

/** The seal's context: a server's secret opens only as its own. */
const context = (name: string) => `mcp_servers:${name}`;

interface Sealed {
  url: string;
  headers: Record<string, string>;
}

/** What a server's secret column holds for its URL and headers: null when they hide nothing. */
function seal(name: string, url: string, headers: Record<string, string>, box: SecretBox | undefined): string | null {
  if (Object.keys(headers).length === 0 && urlHidesNothing(url)) return null;
  if (!box) {
    throw new Error(
      Object.keys(headers).length > 0
        ? 'headers are kept only when the gateway has SECRETS_KEY (it seals them in the record); set it on every ' +
            'api and worker'
        : 'a URL with a user, password, query or fragment is kept only when the gateway has SECRETS_KEY; set it, ' +
            'or give the URL without them',
    );
  }
  return box.seal(JSON.stringify({ url, headers } satisfies Sealed), context(name));
}

/** A row as a server the gateway serves: its secret opened, or the server marked unusable when it will not open. */
export function serverOfRow(row: McpServersTable, box: SecretBox | undefined): McpServer {
  const base = {
    name: row.name,
    source: 'admin' as const,
    transport: row.transport,
    maxConcurrency: row.max_concurrency,
    timeoutMs: row.timeout_ms,
    pricePerCallMicros: row.price_per_call_micros,
    keepArguments: row.keep_arguments,
  };
  if (row.secret === null) return { ...base, url: row.url, headers: {} };
  const names = JSON.parse(row.header_names) as string[];
  if (!box)
    return {
      ...base,
      url: row.url,
      headers: {},
      unusable: 'its URL and headers are sealed, and this gateway has no SECRETS_KEY to open them',
    };
  try {
    const sealed = JSON.parse(box.open(row.secret, context(row.name))) as Sealed;
    return { ...base, url: sealed.url, headers: sealed.headers };
  } catch {
    // Shown by name (no value is known): the admin enters them again, or sets the key they were sealed with.
    return {
      ...base,
      url: row.url,
      headers: Object.fromEntries(names.map((name) => [name, ''])),
      unusable: 'its URL and headers were sealed with another SECRETS_KEY: enter them again',
    };
  }
}

export async function listServerRows(record: RecordDb): Promise<McpServersTable[]> {
  return record.selectFrom('mcp_servers').selectAll().orderBy('name').execute();
}

export async function serverRow(record: RecordDb, name: string): Promise<McpServersTable | undefined> {
  return record.selectFrom('mcp_servers').selectAll().where('name', '=', name).executeTakeFirst();
}

/** Adds a server; false when one of that name is there. Throws (a message for the admin) when it needs SECRETS_KEY. */
export async function insertServer(
  record: RecordDb,
  server: CreateMcpServer,
  box: SecretBox | undefined,
  now = Date.now(),
): Promise<McpServersTable | undefined> {
  const row: McpServersTable = {
    name: server.name,
    url: shownUrl(server.url),
    transport: server.transport,
    header_names: JSON.stringify(Object.keys(server.headers)),
    secret: seal(server.name, server.url, server.headers, box),
    max_concurrency: server.max_concurrency,
    timeout_ms: server.timeout_ms,
    price_per_call_micros: server.price_per_call_usd,
    keep_arguments: server.keep_arguments,
    created: now,
    updated: now,
  };
  const inserted = await record
    .insertInto('mcp_servers')
    .values(row)
    .onConflict((conflict) => conflict.column('name').doNothing())
    .returningAll()
    .executeTakeFirst();
  return inserted;
}

/**
 * Changes a server (the fields given); its secret is sealed again when its URL or headers change, from what it had
 * and what is given. Answers the row before and after; undefined when there is no such server.
 */
export async function updateServer(
  record: RecordDb,
  name: string,
  patch: PatchMcpServer,
  box: SecretBox | undefined,
  now = Date.now(),
): Promise<{ before: McpServersTable; after: McpServersTable } | undefined> {
  return record.transaction().execute(async (tx) => {
    const before = await tx
      .selectFrom('mcp_servers')
      .selectAll()
      .where('name', '=', name)
      .forUpdate()
      .executeTakeFirst();
    if (!before) return undefined;
    const changes: Partial<McpServersTable> = { updated: now };
    if (patch.url !== undefined || patch.headers !== undefined) {
      const was = serverOfRow(before, box);
      if (was.unusable !== undefined && (patch.url === undefined || patch.headers === undefined)) {
        throw new Error(`${was.unusable}: give both url and headers`);
      }
      const url = patch.url ?? was.url!;
      const headers = patch.headers ?? { ...was.headers };
      changes.url = shownUrl(url);
      changes.header_names = JSON.stringify(Object.keys(headers));
      changes.secret = seal(name, url, headers, box);
    }
    if (patch.transport !== undefined) changes.transport = patch.transport;
    if (patch.max_concurrency !== undefined) changes.max_concurrency = patch.max_concurrency;
    if (patch.timeout_ms !== undefined) changes.timeout_ms = patch.timeout_ms;
    if (patch.price_per_call_usd !== undefined) changes.price_per_call_micros = patch.price_per_call_usd;
    if (patch.keep_arguments !== undefined) changes.keep_arguments = patch.keep_arguments;
    const after = await tx
      .updateTable('mcp_servers')
      .set(changes)
      .where('name', '=', name)
      .returningAll()
      .executeTakeFirstOrThrow();
    return { before, after };
  });
}

export async function deleteServer(record: RecordDb, name: string): Promise<McpServersTable | undefined> {
  return record.deleteFrom('mcp_servers').where('name', '=', name).returningAll().executeTakeFirst();
}

/** What the audit log keeps of a server: everything shown, no secret (the headers by name, the URL as shown). */
export function serverAuditFields(row: McpServersTable): Record<string, unknown> {
  return {
    url: row.url,
    transport: row.transport,
    header_names: JSON.parse(row.header_names) as string[],
    max_concurrency: row.max_concurrency,
    timeout_ms: row.timeout_ms,
    price_per_call_micros: row.price_per_call_micros,
    keep_arguments: row.keep_arguments,
  };
}

/** The servers a process serves (the file's and those in the record), followed live; `start()` it. */
export function openMcpRegistry(deps: { config: Config; redis: Redis; record: RecordDb; log: Logger }): McpRegistry {
  const box = secretBox(deps.config);
  return new McpRegistry({
    redis: deps.redis,
    log: deps.log,
    file: deps.config.mcp.servers,
    added: async () => (await listServerRows(deps.record)).map((row) => serverOfRow(row, box)),
  });
}

/** What seals the record's secrets, when SECRETS_KEY is set. */
export function secretBox(config: Config): SecretBox | undefined {
  return config.secretsKey !== undefined ? new SecretBox(config.secretsKey) : undefined;
}
