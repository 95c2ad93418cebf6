import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { mcpQueueName } from './calls.js';
import type { McpRegistry } from './registry.js';

/**
 * One process's handles on the servers' queues (a tool call is a job on its server's queue, `mcpQueueName`), opened
 * when first used and closed when the server is removed: what queues a call (api/mcp/routes.ts, the workers' tool
 * loop) and what reads their depths (api/mcp/depths.ts) share.
 */
export class McpQueues {
  private readonly queues = new Map<string, Queue>();
  private readonly stopFollowing: () => void;

  constructor(
    private readonly redis: Redis,
    registry: McpRegistry,
  ) {
    this.stopFollowing = registry.onChange(({ removed }) => {
      for (const server of removed) {
        const queue = this.queues.get(server.name);
        this.queues.delete(server.name);
        void queue?.close().catch(() => undefined);
      }
    });
  }

  /** The queue of the server named. */
  of(server: string): Queue {
    let queue = this.queues.get(server);
    if (!queue) this.queues.set(server, (queue = new Queue(mcpQueueName(server), { connection: this.redis })));
    return queue;
  }

  async close(): Promise<void> {
    this.stopFollowing();
    const open = [...this.queues.values()];
    this.queues.clear();
    await Promise.allSettled(open.map((queue) => queue.close()));
  }
}
