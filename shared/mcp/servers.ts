import { readFileSync } from 'node:fs';
import { z } from 'zod';

/**
 * The upstream MCP servers an admin gives the gateway by file (`MCP_SERVERS_FILE`): each a name, the URL of its
 * Streamable HTTP endpoint (or of a legacy HTTP+SSE one), the headers it needs (kept on the server: never shown
 * again), how many of its calls may run at once and how long one may take, and a price per call.
 *
 *   {"servers": {"notes": {"url": "https://notes.internal/mcp", "headers": {"Authorization": "Bearer …"},
 *                          "max_concurrency": 20, "timeout_ms": 60000, "price_per_call_usd": "0.001"}}}
 */

/**
 * A server's name: what `/mcp/{server}` takes and what its tools are named with on `/mcp` (`notes__search`). No
 * `__` inside, so a tool's name there splits at its first `__`.
 */
export const mcpServerNamePattern = /^(?!.*__)[a-z0-9][a-z0-9_-]{0,62}$/;

const headerName = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Dollars as a decimal string (or number), at most six places, as micro-dollars. */
const price = z.union([z.string(), z.number()]).transform((value, ctx) => {
  const text = typeof value === 'number' ? String(value) : value;
  const match = /^(\d{1,9})(?:\.(\d{1,6}))?$/.exec(text);
  if (!match) {
    ctx.addIssue({ code: 'custom', message: 'must be dollars with at most six decimal places, e.g. "0.001"' });
    return z.NEVER;
  }
  return Number(match[1]) * 1_000_000 + Number((match[2] ?? '').padEnd(6, '0'));
});

const noLineBreak = z
  .string()
  .max(8192)
  .refine((value) => !/[\r\n\0]/.test(value), 'holds a line break');

const httpUrl = z
  .string()
  .max(8192)
  .url()
  .refine((url) => /^https?:$/.test(new URL(url).protocol), 'must be an http or https URL');
const headers = z
  .record(z.string().regex(headerName, 'is not an HTTP header name'), noLineBreak)
  .refine((all) => Object.keys(all).length <= 64, 'at most 64 headers');
const maxConcurrency = z.number().int().min(1).max(10_000);
const timeoutMs = z.number().int().min(100).max(3_600_000);

const serverSchema = z
  .object({
    /** A server reached over HTTP: its Streamable HTTP endpoint, or a legacy server's event stream. */
    url: httpUrl.optional(),
    transport: z.enum(['streamable-http', 'sse']).optional(),
    headers: headers.optional(),
    /** A server the workers run themselves, speaking MCP on its standard input and output. */
    command: z.string().min(1).max(4096).optional(),
    args: z.array(z.string().max(8192)).max(256).optional(),
    env: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'is not an environment variable name'),
        z.string().max(65_536),
      )
      .optional(),
    cwd: z.string().min(1).max(4096).optional(),
    max_concurrency: maxConcurrency.default(20),
    timeout_ms: timeoutMs.default(60_000),
    /** Dollars as a decimal string (or number), at most six places: billed per call in micro-dollars. */
    price_per_call_usd: price.default(0),
    /** Whether a call's arguments are kept in the request log (its first 16 KiB); by default they are not. */
    keep_arguments: z.boolean().default(false),
  })
  .strict()
  .superRefine((server, ctx) => {
    if ((server.url === undefined) === (server.command === undefined)) {
      ctx.addIssue({
        code: 'custom',
        message: 'needs either a url (a server reached over HTTP) or a command (one the workers run), not both',
      });
    }
    const httpOnly = (['transport', 'headers'] as const).filter((field) => server[field] !== undefined);
    const stdioOnly = (['args', 'env', 'cwd'] as const).filter((field) => server[field] !== undefined);
    if (server.command !== undefined && httpOnly.length > 0)
      ctx.addIssue({
        code: 'custom',
        path: [httpOnly[0]!],
        message: 'is for a server reached by its url, not a command',
      });
    if (server.url !== undefined && stdioOnly.length > 0)
      ctx.addIssue({ code: 'custom', path: [stdioOnly[0]!], message: 'is for a server run by its command, not a url' });
  });

/**
 * What an admin may set of a server they add (the admin API, the console): one reached by URL; a command is the file's
 * alone.
 */
const adminServerFields = {
  url: httpUrl,
  transport: z.enum(['streamable-http', 'sse']),
  /** Sent with every request to it; sealed in the record (SECRETS_KEY), never shown again. `{}` clears them. */
  headers,
  max_concurrency: maxConcurrency,
  timeout_ms: timeoutMs,
  price_per_call_usd: price,
  keep_arguments: z.boolean(),
};

/** A body that names `command` (or its companions) is told why, not just that the field is unknown. */
const fileOnly = z
  .unknown()
  .refine(
    () => false,
    'servers the workers run as a command are set by MCP_SERVERS_FILE only (an admin session must not start ' +
      'programs on the workers)',
  )
  .optional();
const noCommand = { command: fileOnly, args: fileOnly, env: fileOnly, cwd: fileOnly };

/** `POST /admin/mcp/servers`. */
export const createMcpServerSchema = z.strictObject({
  ...noCommand,
  name: z
    .string()
    .regex(
      mcpServerNamePattern,
      'must be lower-case letters, digits, `-` and `_` (no `__`), at most 63, starting with a letter or digit',
    ),
  url: adminServerFields.url,
  transport: adminServerFields.transport.default('streamable-http'),
  headers: adminServerFields.headers.default({}),
  max_concurrency: adminServerFields.max_concurrency.default(20),
  timeout_ms: adminServerFields.timeout_ms.default(60_000),
  price_per_call_usd: adminServerFields.price_per_call_usd.default(0),
  keep_arguments: adminServerFields.keep_arguments.default(false),
});
export type CreateMcpServer = z.infer<typeof createMcpServerSchema>;

/** `PATCH /admin/mcp/servers/{name}`: the fields given change; `headers` replaces them all. */
export const patchMcpServerSchema = z
  .strictObject({
    ...noCommand,
    url: adminServerFields.url.optional(),
    transport: adminServerFields.transport.optional(),
    headers: adminServerFields.headers.optional(),
    max_concurrency: adminServerFields.max_concurrency.optional(),
    timeout_ms: adminServerFields.timeout_ms.optional(),
    price_per_call_usd: adminServerFields.price_per_call_usd.optional(),
    keep_arguments: adminServerFields.keep_arguments.optional(),
  })
  .refine((patch) => Object.keys(patch).length > 0, 'names nothing to change');
export type PatchMcpServer = z.infer<typeof patchMcpServerSchema>;

/**
 * Whether a URL carries nothing that could be secret (no user, password, query or fragment): it may be kept unsealed.
 */
export function urlHidesNothing(url: string): boolean {
  return shownUrl(url) === new URL(url).href || shownUrl(url) + '/' === new URL(url).href;
}

const fileSchema = z
  .object({
    servers: z.record(
      z.string().regex(mcpServerNamePattern, 'must be lower-case letters, digits, `-` and `_` (no `__`), at most 63'),
      serverSchema,
    ),
  })
  .strict();

export interface McpServer {
  name: string;
  /**
   * `file`: MCP_SERVERS_FILE, changed by deploying; `admin`: added by an admin (the admin API, the console), kept in
   * the record.
   */
  source: 'file' | 'admin';
  /**
   * Why the server cannot be reached now (its sealed secrets do not open with this SECRETS_KEY); its calls and checks
   * fail with it.
   */
  unusable?: string;
  /** `stdio`: run by the workers (`command`); the others reached at `url`. */
  transport: 'streamable-http' | 'sse' | 'stdio';
  url?: string;
  /** Sent to the server with every request; never shown. */
  headers: Readonly<Record<string, string>>;
  /**
   * What the workers run for a stdio server: its program, arguments, the variables it gets besides a safe few, where.
   */
  command?: { program: string; args: readonly string[]; env: Readonly<Record<string, string>>; cwd?: string };
  maxConcurrency: number;
  timeoutMs: number;
  pricePerCallMicros: number;
  /** A call's arguments are kept in the request log. */
  keepArguments: boolean;
}

/** The servers of `MCP_SERVERS_FILE` (none when unset); throws one line naming the file and what is wrong in it. */
export function loadMcpServers(file: string | undefined): McpServer[] {
  if (!file) return [];
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new Error(
      `MCP_SERVERS_FILE: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`MCP_SERVERS_FILE: ${file} is not JSON: ${(error as Error).message}`);
  }
  const parsed = fileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`MCP_SERVERS_FILE: ${file}: ${issue.path.join('.') || '(the file)'} ${issue.message}`);
  }
  return Object.entries(parsed.data.servers).map(([name, server]) => ({
    name,
    source: 'file' as const,
    transport: server.command !== undefined ? 'stdio' : (server.transport ?? 'streamable-http'),
    ...(server.url !== undefined ? { url: server.url } : {}),
    headers: server.headers ?? {},
    ...(server.command !== undefined
      ? {
          command: {
            program: server.command,
            args: server.args ?? [],
            env: server.env ?? {},
            ...(server.cwd !== undefined ? { cwd: server.cwd } : {}),
          },
        }
      : {}),
    maxConcurrency: server.max_concurrency,
    timeoutMs: server.timeout_ms,
    pricePerCallMicros: server.price_per_call_usd,
    keepArguments: server.keep_arguments,
  }));
}

/**
 * A tool as its server defines it in `tools/list` (its name, title, description, input and output schemas,
 * annotations), kept whole: what the admin is shown now, and what clients will be given.
 */
export interface McpTool {
  name: string;
  title?: string;
  description?: string;
  inputSchema?: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  annotations?: Record<string, unknown>;
  [field: string]: unknown;
}

/** A resource (`uri`), a resource template (`uriTemplate`) or a prompt (`name`) as its server lists it, kept whole. */
export interface McpListed {
  [field: string]: unknown;
}

/** What the last check of a server found (`mcpHealthKey`, one field per server, written by a worker). */
export interface McpServerHealth {
  ok: boolean;
  /** Epoch ms of the check. */
  checkedAt: number;
  /** How long connecting and listing took. */
  latencyMs: number;
  /** Why the check failed (the upstream's answer or the deadline), when it did. */
  error?: string;
  serverName?: string;
  serverVersion?: string;
  protocolVersion?: string;
  tools: McpTool[];
  /** Tools the server listed that were not kept: past 2,000, or a definition over 64 KiB. */
  toolsSkipped?: number;
  /** Its resources, resource templates and prompts, where it offers them (each list bounded as the tools are). */
  resources?: McpListed[];
  resourceTemplates?: McpListed[];
  prompts?: McpListed[];
}

/** A server's URL as it may be shown: no user, password, query or fragment (any of which may carry a secret). */
export function shownUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}

/** A server as `GET /admin/mcp/servers` shows it: what the file set (headers by name only) and its last check. */
export interface McpServerView {
  object: 'mcp.server';
  name: string;
  /**
   * `file`: set by MCP_SERVERS_FILE (changed by deploying); `admin`: added by an admin, who may change or remove it.
   */
  source: McpServer['source'];
  /** Where it is reached (without user, password, query or fragment); null for a server the workers run. */
  url: string | null;
  transport: McpServer['transport'];
  /** The names of the headers it is sent; their values are never shown. */
  header_names: string[];
  /** The program the workers run for a stdio server (its arguments are not shown: they may hold secrets); else null. */
  command: string | null;
  /** The names of the variables a stdio server is given; their values are never shown. */
  env_names: string[];
  max_concurrency: number;
  timeout_ms: number;
  price_per_call_usd: string;
  /** Whether its calls' arguments are kept in the request log. */
  keep_arguments: boolean;
  /**
   * `ok`: the last check connected and listed its tools; `failing`: it did not (see `error`); `unchecked`: no check
   * yet.
   */
  status: 'ok' | 'failing' | 'unchecked';
  /** Unix seconds of the last check. */
  checked_at: number | null;
  latency_ms: number | null;
  error: string | null;
  server_info: { name: string; version: string | null } | null;
  protocol_version: string | null;
  /** Each tool as the server defines it. */
  tools: McpTool[];
  /** Tools the server listed that are not kept (past 2,000, or a definition over 64 KiB). */
  tools_skipped: number;
  /** How many resources, resource templates and prompts it listed (null: it offers none of that kind). */
  resources: number | null;
  resource_templates: number | null;
  prompts: number | null;
}

export function serverView(
  server: McpServer,
  health: McpServerHealth | undefined,
  usd: (micros: number) => string,
): McpServerView {
  return {
    object: 'mcp.server',
    name: server.name,
    source: server.source,
    url: server.url !== undefined ? shownUrl(server.url) : null,
    transport: server.transport,
    header_names: Object.keys(server.headers),
    command: server.command?.program ?? null,
    env_names: Object.keys(server.command?.env ?? {}),
    max_concurrency: server.maxConcurrency,
    timeout_ms: server.timeoutMs,
    price_per_call_usd: usd(server.pricePerCallMicros),
    keep_arguments: server.keepArguments,
    status:
      server.unusable !== undefined ? 'failing' : health === undefined ? 'unchecked' : health.ok ? 'ok' : 'failing',
    checked_at: health ? Math.floor(health.checkedAt / 1000) : null,
    latency_ms: health?.latencyMs ?? null,
    error: server.unusable ?? health?.error ?? null,
    server_info:
      health?.serverName !== undefined ? { name: health.serverName, version: health.serverVersion ?? null } : null,
    protocol_version: health?.protocolVersion ?? null,
    tools: health?.tools ?? [],
    tools_skipped: health?.toolsSkipped ?? 0,
    resources: health?.resources?.length ?? null,
    resource_templates: health?.resourceTemplates?.length ?? null,
    prompts: health?.prompts?.length ?? null,
  };
}
