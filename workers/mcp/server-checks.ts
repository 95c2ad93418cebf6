import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { type McpServer, type McpServerHealth, type McpTool } from '../../shared/mcp/servers.js';
import { mcpCheckLockKey, mcpHealthKey } from '../../shared/redis-keys.js';
import { upstreamClient, upstreamTransport } from './upstream.js';

/** Pages of `tools/list` read at most: a server that pages without end is cut off there. */
const maxToolPages = 50;
/** Tools kept per server at most (what the check shows; calls are not bound by it). */
const maxTools = 2_000;
/** The largest definition of one tool kept, as JSON: a larger one is left out (and counted). */
const maxToolBytes = 65_536;

/** The reason a check failed, in one line for the admin (never the server's headers: they are not in any error here). */
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
    const tools: McpTool[] = [];
    let skipped = 0;
    let cursor: string | undefined;
    for (let page = 0; page < maxToolPages && tools.length < maxTools; page++) {
      const listed = await client.listTools(cursor ? { cursor } : undefined, options);
      for (const tool of listed.tools) {
        // Kept as the server defines it (what clients will be given), unless too large or past the count.
        if (tools.length < maxTools && Buffer.byteLength(JSON.stringify(tool)) <= maxToolBytes) tools.push(tool as McpTool);
        else skipped++;
      }
      cursor = listed.nextCursor;
      if (!cursor) break;
    }
    return { tools, skipped };
  })();
  try {
    const { tools, skipped } = await Promise.race([work, deadline]);
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
    };
  } catch (error) {
    return { ok: false, checkedAt: started, latencyMs: Date.now() - started, error: reason(error, timedOut, server.timeoutMs), tools: [] };
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
 * A server no longer in the file is dropped from the hash.
 */
export class McpServerChecks {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;
  /** Aborts the checks under way when the worker stops. */
  private readonly stop = new AbortController();

  constructor(
    private readonly deps: { redis: Redis; log: Logger; servers: readonly McpServer[]; intervalMs: number; owner: string },
  ) {}

  start(): void {
    if (this.deps.servers.length === 0) return;
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
    const { redis, servers, intervalMs, owner } = this.deps;
    const taken = await redis.set(mcpCheckLockKey, owner, 'PX', intervalMs, 'NX');
    if (taken !== 'OK') return false;
    const found = await Promise.all(servers.map(async (server) => [server.name, JSON.stringify(await checkServer(server, this.stop.signal))] as const));
    if (this.stopped) return false;
    const names = new Set(servers.map((server) => server.name));
    const stale = (await redis.hkeys(mcpHealthKey)).filter((name) => !names.has(name));
    const writes = redis.multi().hset(mcpHealthKey, Object.fromEntries(found));
    if (stale.length > 0) writes.hdel(mcpHealthKey, ...stale);
    await writes.exec();
    for (const [name, health] of found) {
      const parsed = JSON.parse(health) as McpServerHealth;
      if (!parsed.ok) this.deps.log.warn({ server: name, error: parsed.error }, 'MCP server check failed');
    }
    return true;
  }

  /** Stops checking: a round under way is aborted (what it found is not written). */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.stop.abort();
    await this.running;
  }
}
