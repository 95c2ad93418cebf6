import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from '../../shared/logger.js';
import { mcpQueueName } from '../../shared/mcp/calls.js';
import type { McpRegistry } from '../../shared/mcp/registry.js';
import { depthStates, sumDepths, type QueueDepth } from '../../shared/scheduling/backpressure.js';

/** How often the api reads the MCP servers' queues (their jobs waiting and running, for /metrics). */
const readEveryMs = 1000;

/**
 * The tool calls of every upstream MCP server, waiting and running, added up as the `mcp` capability's depth
 * (`switchyard_queue_jobs{queue="mcp"}`): what the `mcp` workers' autoscaler counts. Read once a second per api,
 * not per scrape; zero when no server is set, so the scaler always has its number.
 */
export class McpQueueDepths {
  private depth: QueueDepth = sumDepths([]);
  private readonly queues = new Map<string, Queue>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: { redis: Redis; registry: McpRegistry; log: Logger }) {}

  depths(): Iterable<[string, QueueDepth]> {
    return [['mcp', this.depth]];
  }

  start(): void {
    const tick = () => {
      this.read()
        .catch((error: unknown) => this.deps.log.debug({ err: error }, 'could not read the MCP queues\' depths'))
        .finally(() => {
          if (this.timer !== undefined) this.timer = setTimeout(tick, readEveryMs).unref();
        });
    };
    this.timer = setTimeout(tick, 0).unref();
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.allSettled([...this.queues.values()].map((queue) => queue.close()));
  }

  private async read(): Promise<void> {
    const names = new Set(this.deps.registry.list().map((server) => server.name));
    for (const [name, queue] of this.queues) {
      if (names.has(name)) continue;
      this.queues.delete(name);
      void queue.close().catch(() => undefined);
    }
    for (const name of names) if (!this.queues.has(name)) this.queues.set(name, new Queue(mcpQueueName(name), { connection: this.deps.redis }));
    const counts = await Promise.all([...this.queues.values()].map((queue) => queue.getJobCounts(...depthStates, 'prioritized')));
    this.depth = sumDepths(counts);
  }
}
