import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { type McpListed, type McpServer, type McpServerHealth, type McpTool } from '../../shared/mcp/servers.js';
import { mcpCheckLockKey, mcpHealthKey, mcpServerCheckLockKey } from '../../shared/redis-keys.js';
import { upstreamClient, upstreamTransport } from './upstream.js';

/**
 * Pages of a list (`tools/list`, `resources/list`, …) read at most: a server that pages without end is cut off there.
 */
const maxToolPages = 50;
/**
 * Tools (and resources, templates, prompts) kept per server at most (what the check shows; calls are not bound by it).
 */
const maxTools = 2_000;
/** The largest definition of one tool kept, as JSON: a larger one is left out (and counted). */
const maxToolBytes = 65_536;

/** Every page of a list (at most `maxToolPages` pages and `maxTools` items, each at most `maxToolBytes` as JSON). */
async function listAll(
  page: (cursor: string | undefined) => Promise<{ items: unknown[]; next?: string }>,
): Promise<{ kept: McpListed[]; skipped: number }> {
  const kept: McpListed[] = [];
  let skipped = 0;
  let cursor: string | undefined;
  for (let n = 0; n < maxToolPages && kept.length < maxTools; n++) {
    const listed = await page(cursor);
    for (const item of listed.items) {
      // Kept as the server defines it (what clients will be given), unless too large or past the count.
      if (kept.length < maxTools && Buffer.byteLength(JSON.stringify(item)) <= maxToolBytes)
        kept.push(item as McpListed);
      else skipped++;
    }
    cursor = listed.next;
    if (!cursor) break;
  }
  return { kept, skipped };
}

/**
 * The reason a check failed, in one line for the admin (never the server's headers: they are not in any error here).
 */
function reason(error: unknown, timedOut: boolean, timeoutMs: number): string {
  if (timedOut) return `no answer within its timeout (${timeoutMs} ms)`;
  const message = error instanceof Error ? error.message : String(error);
  return message.replace(/\s+/g, ' ').slice(0, 300) || 'the check failed';
}

/**
 * Connects to one server (the MCP initialization), lists its tools and closes, within the server's timeout: a server
 * that does not answer is reported as such when its timeout passes, whatever it does with the socket.
 */
export async function checkServer(server: McpServer, stop?: AbortSignal): Promise<McpServerHealth> {
  const started = Date.now();
  if (server.unusable !== undefined)
    return { ok: false, checkedAt: started, latencyMs: 0, error: server.unusable, tools: [] };
  const controller = new AbortController();
  const stopped = () => controller.abort();
  stop?.addEventListener('abort', stopped, { once: true });
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
      reject(new Error('timeout'));
    }, server.timeoutMs);
  });
  const client = upstreamClient();
  const options = { signal: controller.signal, timeout: server.timeoutMs };
  const work = (async () => {
    await client.connect(upstreamTransport(server, controller.signal), options);
    const tools = await listAll((cursor) =>
      client
        .listTools(cursor ? { cursor } : undefined, options)
        .then((page) => ({ items: page.tools, next: page.nextCursor })),
    );
    // What else it offers (its capabilities say), listed the same way; a server that fails these is still usable for
    // its tools.
    const offered = client.getServerCapabilities();
    const bypass = { ...options, cacheMode: 'bypass' as const };
    const other = async (list: (cursor: string | undefined) => Promise<{ items: unknown[]; next?: string }>) =>
      (await listAll(list).catch(() => undefined))?.kept;
    const resources = offered?.resources
      ? await other((cursor) =>
          client
            .listResources(cursor ? { cursor } : undefined, bypass)
            .then((page) => ({ items: page.resources, next: page.nextCursor })),
        )
      : undefined;
    const resourceTemplates = offered?.resources
      ? await other((cursor) =>
          client
            .listResourceTemplates(cursor ? { cursor } : undefined, bypass)
            .then((page) => ({ items: page.resourceTemplates, next: page.nextCursor })),
        )
      : undefined;
    const prompts = offered?.prompts
      ? await other((cursor) =>
          client
            .listPrompts(cursor ? { cursor } : undefined, bypass)
            .then((page) => ({ items: page.prompts, next: page.nextCursor })),
        )
      : undefined;
    return { tools: tools.kept as McpTool[], skipped: tools.skipped, resources, resourceTemplates, prompts };
  })();
  try {
    const { tools, skipped, resources, resourceTemplates, prompts } = await Promise.race([work, deadline]);
    const info = client.getServerVersion();
    const protocolVersion = client.getNegotiatedProtocolVersion();
    return {
      ok: true,
      checkedAt: started,
      latencyMs: Date.now() - started,
      ...(info ? { serverName: info.name, serverVersion: info.version } : {}),
      ...(protocolVersion ? { protocolVersion } : {}),
      tools,
      ...(skipped > 0 ? { toolsSkipped: skipped } : {}),
      ...(resources ? { resources } : {}),
      ...(resourceTemplates ? { resourceTemplates } : {}),
      ...(prompts ? { prompts } : {}),
    };
  } catch (error) {
    return {
      ok: false,
      checkedAt: started,
      latencyMs: Date.now() - started,
      error: reason(error, timedOut, server.timeoutMs),
      tools: [],
    };
  } finally {
    clearTimeout(timer);
    stop?.removeEventListener('abort', stopped);
    work.catch(() => undefined);
    controller.abort();
    void client.close().catch(() => undefined);
  }
}

/**
 * Checks every upstream MCP server each interval and keeps what it found in Redis (`mcpHealthKey`), where every api
 * reads it. One worker checks per interval (a lock held for the interval), whichever takes it first; the others skip.
 * A server no longer served (out of the file, removed by an admin) is dropped from the hash.
 */
export class McpServerChecks {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;
  /** Aborts the checks under way when the worker stops. */
  private readonly stop = new AbortController();

  constructor(
    private readonly deps: {
      redis: Redis;
      log: Logger;
      servers: () => readonly McpServer[];
      intervalMs: number;
      owner: string;
    },
  ) {}

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      const running = this.round().catch((error: unknown) => {
        if (!this.stopped) this.deps.log.warn({ err: error }, 'could not check the MCP servers');
      });
      this.running = running;
      void running.finally(() => {
        if (!this.stopped) this.timer = setTimeout(tick, this.deps.intervalMs).unref();
      });
    };
    tick();
  }

  /** One round: the lock, then every server at once, each bounded by its own timeout. */
  async round(): Promise<boolean> {
    const { redis, intervalMs, owner } = this.deps;
    const servers = this.deps.servers();
    const taken = await redis.set(mcpCheckLockKey, owner, 'PX', intervalMs, 'NX');
    if (taken !== 'OK') return false;
    const found = await Promise.all(
      servers.map(
        async (server) => [server.name, JSON.stringify(await checkServer(server, this.stop.signal))] as const,
      ),
    );
    if (this.stopped) return false;
    const names = new Set(servers.map((server) => server.name));
    const stale = (await redis.hkeys(mcpHealthKey)).filter((name) => !names.has(name));
    const writes = redis.multi();
    if (found.length > 0) writes.hset(mcpHealthKey, Object.fromEntries(found));
    if (stale.length > 0) writes.hdel(mcpHealthKey, ...stale);
    if (found.length > 0 || stale.length > 0) await writes.exec();
    for (const [name, health] of found) {
      const parsed = JSON.parse(health) as McpServerHealth;
      if (!parsed.ok) this.deps.log.warn({ server: name, error: parsed.error }, 'MCP server check failed');
    }
    return true;
  }

  /**
   * Checks one server at once, at an admin's asking (`mcpCheckChannel`): one worker does, whichever takes the
   * server's lock; what it found is written as a round's is.
   */
  async checkNow(name: string): Promise<void> {
    const { redis, owner, log } = this.deps;
    const server = this.deps.servers().find((candidate) => candidate.name === name);
    if (!server || this.stopped) return;
    const lock = mcpServerCheckLockKey(server.name);
    if ((await redis.set(lock, owner, 'PX', server.timeoutMs + 5000, 'NX')) !== 'OK') return;
    try {
      const health = await checkServer(server, this.stop.signal);
      if (this.stopped) return;
      await redis.hset(mcpHealthKey, server.name, JSON.stringify(health));
      if (!health.ok) log.warn({ server: server.name, error: health.error }, 'MCP server check failed');
    } finally {
      await redis.del(lock).catch(() => undefined);
    }
  }

  /** Stops checking: a round under way is aborted (what it found is not written). */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.stop.abort();
    await this.running;
  }
}
