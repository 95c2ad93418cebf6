import type { Redis } from 'ioredis';
import { GatewayError } from '../../shared/errors.js';
import type { McpServer, McpServerHealth } from '../../shared/mcp/servers.js';
import { mcpCheckChannel, mcpHealthKey } from '../../shared/redis-keys.js';

/** How often the api looks for the check's result while it waits. */
const pollMs = 100;

/**
 * An admin's "check it now": asks the workers (`mcpCheckChannel`; one of them checks, by the server's lock) and
 * waits for a check that began after the asking, at most the server's timeout and a few seconds. 503 when no worker
 * heard (none runs), 504 when none answered in time.
 */
export async function checkServerNow(redis: Redis, server: McpServer): Promise<McpServerHealth> {
  const asked = Date.now();
  const heard = await redis.publish(mcpCheckChannel, server.name);
  if (heard === 0)
    throw new GatewayError(503, 'No worker is running to check the server: start one (`npm run start:worker`).', {
      code: 'no_worker',
    });
  const deadline = asked + server.timeoutMs + 5000;
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, pollMs));
    const text = await redis.hget(mcpHealthKey, server.name);
    const health = text === null ? undefined : (JSON.parse(text) as McpServerHealth);
    if (health && health.checkedAt >= asked) return health;
  }
  throw new GatewayError(504, `No check of ${server.name} came back within ${deadline - asked} ms.`, {
    code: 'timeout',
  });
}
