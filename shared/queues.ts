import slotOf from 'cluster-key-slot';

/**
 * One BullMQ queue per capability; a capability's workers scale alone. `realtime` holds Realtime sessions (a job each,
 * for its life).
 */
export const queueNames = ['chat', 'embeddings', 'image', 'audio', 'video', 'realtime'] as const;
export type QueueName = (typeof queueNames)[number];
/**
 * What a worker process may serve (WORKER_QUEUES): the capabilities' queues, and `mcp`, the upstream MCP servers' tool
 * calls (a queue per server).
 */
export const workerCapabilities = [...queueNames, 'mcp'] as const;
export type WorkerCapability = (typeof workerCapabilities)[number];

const clusterSlots = 16_384;

/**
 * The BullMQ queue of one shard of a capability. Its name is a hash tag, so
 * every key of the queue (`bull:{chat}:wait`, `bull:{chat}:<job id>`, …) shares
 * one slot: BullMQ's scripts run on one Cluster shard, and each capability (and
 * each of its shards) can live on another. Shard 0 is `{chat}`; shard i of n
 * is the first `{chat-k}` (k ≥ i) whose slot lies in the i-th n-th of the 16384
 * slots after the n-th that holds `{chat}`'s (wrapping round), one shard per n-th: on a
 * Cluster whose primaries own even ranges (as `redis-cli --cluster create`
 * deals them) n shards land on n primaries when there are that many.
 */
export function shardQueueName(queue: QueueName, shard: number, shards = 1): string {
  if (shard === 0) return `{${queue}}`;
  const width = clusterSlots / shards;
  const window = (Math.floor(slotOf(queue) / width) + shard) % shards;
  for (let k = shard; ; k++) {
    const tag = `${queue}-${k}`;
    if (Math.floor(slotOf(tag) / width) === window) return `{${tag}}`;
  }
}

/**
 * The BullMQ queue of a capped vendor's lane (`{lane@openai}`), shared by every
 * capability that calls the vendor, so its cap is one: a hash tag of its own,
 * so lanes spread over a Cluster too. A lane is one queue (its vendor's cap
 * bounds it, not a shard's throughput).
 */
export function laneQueueName(vendor: string): string {
  return `{lane@${vendor}}`;
}

/**
 * The BullMQ queue of a vendor's Realtime sessions when its concurrent sessions are capped
 * (`REALTIME_VENDOR_SESSIONS_<VENDOR>`, shared/realtime-queue.ts): a session holds its slot for its life, so these
 * lanes are apart from the vendor's call lane (`{lane@…}`), capped in BullMQ at the session cap. Not of the
 * `{<queue>@<vendor>}` form legacy lanes had (shared/scheduling/lane-keeper.ts drains those).
 */
export function realtimeLaneQueueName(vendor: string): string {
  return `{realtime-lane@${vendor}}`;
}

/** The vendor of a Realtime lane's queue name, or undefined for any other queue. */
export function realtimeLaneVendor(queueName: string): string | undefined {
  return /^\{realtime-lane@([^}]+)\}$/.exec(queueName)?.[1];
}

/** The vendor of a lane's queue name, or undefined for any other queue. */
export function laneVendor(queueName: string): string | undefined {
  return /^\{lane@([^}]+)\}$/.exec(queueName)?.[1];
}

/**
 * Lanes were per capability (`{chat@openai}`) before they were shared: a worker drains any such queue still
 * holding jobs (shared/scheduling/lane-keeper.ts), so an upgrade strands nothing.
 */
export function legacyLaneQueueName(queue: QueueName, vendor: string): string {
  return `{${queue}@${vendor}}`;
}

/**
 * The shard of a capability a job id belongs to (FNV-1a of the id): the api and every lookup agree without asking
 * Redis.
 */
export function shardOfJob(jobId: string, shards: number): number {
  if (shards <= 1) return 0;
  let hash = 0x811c9dc5;
  for (let i = 0; i < jobId.length; i++) hash = Math.imul(hash ^ jobId.charCodeAt(i), 0x01000193);
  return (hash >>> 0) % shards;
}

/**
 * Budget alerts' deliveries (shared/alerts.ts): one job per alert, its id the alert's (a crossing queued twice is one
 * job), retried by BullMQ with exponential backoff; a hash tag of its own, apart from the capabilities' queues.
 */
export const alertsQueueName = '{alerts}';

/** An alert delivery's job: the alert's row is what the worker reads (its state, its team's name at sending). */
export interface AlertJobData {
  alertId: string;
}
