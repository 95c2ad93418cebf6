import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import { mcpServersVersionKey } from '../redis-keys.js';
import type { McpServer } from './servers.js';

/** How often each process asks whether the servers changed (one GET). */
const pollMs = 500;

/**
 * The upstream MCP servers a process serves now: those of MCP_SERVERS_FILE, then those an admin added (the record).
 * A change through the admin API or the console raises a version in Redis (`mcpServersVersionKey`); every api and
 * worker reads it twice a second and, when it moved, reads the servers again from the record, so a server added,
 * changed or removed is served so everywhere within a second, and a message lost on the way cannot leave a process
 * behind. A server of the file keeps its name: one added under it is not served (the admin API refuses that name).
 */
/** What a change of the servers brought: the servers now, and those added, changed (as they are now) and removed. */
export interface McpServersChange {
  servers: readonly McpServer[];
  added: readonly McpServer[];
  changed: readonly McpServer[];
  removed: readonly McpServer[];
}

export class McpRegistry {
  private servers: readonly McpServer[];
  private byName: ReadonlyMap<string, McpServer>;
  private version: string | null | undefined;
  private fingerprint = '';
  private timer: NodeJS.Timeout | undefined;
  private reading: Promise<void> | undefined;
  private readonly listeners = new Set<(change: McpServersChange) => void>();

  constructor(
    private readonly deps: {
      redis: Redis;
      log: Logger;
      /** The servers of MCP_SERVERS_FILE. */
      file: readonly McpServer[];
      /** The servers an admin added, from the record. */
      added: () => Promise<McpServer[]>;
    },
  ) {
    this.servers = deps.file;
    this.byName = new Map(deps.file.map((server) => [server.name, server]));
  }

  list(): readonly McpServer[] {
    return this.servers;
  }

  get(name: string): McpServer | undefined {
    return this.byName.get(name);
  }

  /**
   * Told each time the servers change (not at the first read), with what changed; answers a function that stops
   * telling.
   */
  onChange(listener: (change: McpServersChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Reads the servers, then follows every change. */
  async start(): Promise<void> {
    await this.refresh();
    // A failure is said once, not every half second while it lasts (Redis or the record away), and its end once too.
    let failing = false;
    const tick = () => {
      this.poll()
        .then(
          () => {
            if (failing) this.deps.log.info('read the MCP servers again');
            failing = false;
          },
          (error: unknown) => {
            if (!failing)
              this.deps.log.warn({ err: error }, 'could not read the MCP servers again; still serving those read last');
            failing = true;
          },
        )
        .finally(() => {
          if (this.timer !== undefined) this.timer = setTimeout(tick, pollMs).unref();
        });
    };
    this.timer = setTimeout(tick, pollMs).unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** After a change in the record: every process is told, this one at once. */
  async changed(): Promise<void> {
    await this.deps.redis.incr(mcpServersVersionKey);
    await this.refresh();
  }

  private async poll(): Promise<void> {
    const version = await this.deps.redis.get(mcpServersVersionKey);
    if (version !== this.version) await this.refresh();
  }

  /** One read at a time: a read asked for meanwhile follows the one under way. */
  private refresh(): Promise<void> {
    const next = (this.reading ?? Promise.resolve()).catch(() => undefined).then(() => this.read());
    this.reading = next;
    return next;
  }

  private async read(): Promise<void> {
    // The version first: a change made while the servers are read moves it again, and the next poll reads again.
    const version = await this.deps.redis.get(mcpServersVersionKey);
    const added = await this.deps.added();
    const taken = new Set(this.deps.file.map((server) => server.name));
    const shadowed = added.filter((server) => taken.has(server.name));
    if (shadowed.length > 0)
      this.deps.log.warn(
        { servers: shadowed.map((server) => server.name) },
        "MCP servers added by an admin share a name with the file's: the file's are served",
      );
    const servers = [...this.deps.file, ...added.filter((server) => !taken.has(server.name))];
    this.version = version;
    const fingerprint = JSON.stringify(servers);
    if (fingerprint === this.fingerprint) return;
    const first = this.fingerprint === '';
    const was = this.byName;
    this.fingerprint = fingerprint;
    this.servers = servers;
    this.byName = new Map(servers.map((server) => [server.name, server]));
    if (first) return;
    const change: McpServersChange = {
      servers,
      added: servers.filter((server) => !was.has(server.name)),
      changed: servers.filter(
        (server) => was.has(server.name) && JSON.stringify(was.get(server.name)) !== JSON.stringify(server),
      ),
      removed: [...was.values()].filter((server) => !this.byName.has(server.name)),
    };
    for (const listener of this.listeners) {
      try {
        listener(change);
      } catch (error) {
        this.deps.log.warn({ err: error }, 'a listener of the MCP servers failed');
      }
    }
  }
}
