import type { Logger } from '../../shared/logger.js';
import type { McpQueues } from '../../shared/mcp/queues.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import { depthStates, sumDepths, type QueueDepth } from '../../shared/scheduling/index.js';

/** How often the api reads the MCP servers' queues (their jobs waiting and running, for /metrics). */
const readEveryMs = 1000;

/**
 * The tool calls of every upstream MCP server, waiting and running, added up as the `mcp` capability's depth
 * (`switchyard_queue_jobs{queue="mcp"}`): what the `mcp` workers' autoscaler counts. Read once a second per api,
 * not per scrape; zero when no server is set, so the scaler always has its number.
 */
export class McpQueueDepths {
  private depth: QueueDepth = sumDepths([]);
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: { registry: McpRegistry; queues: McpQueues; log: Logger }) {}

  depths(): Iterable<[string, QueueDepth]> {
    return [['mcp', this.depth]];
  }

  start(): void {
    const tick = () => {
      this.read()
        .catch((error: unknown) => this.deps.log.debug({ err: error }, "could not read the MCP queues' depths"))
        .finally(() => {
          if (this.timer !== undefined) this.timer = setTimeout(tick, readEveryMs).unref();
        });
    };
    this.timer = setTimeout(tick, 0).unref();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async read(): Promise<void> {
    const { registry, queues } = this.deps;
    const counts = await Promise.all(
      registry.list().map((server) => queues.of(server.name).getJobCounts(...depthStates, 'prioritized')),
    );
    this.depth = sumDepths(counts);
  }
}
