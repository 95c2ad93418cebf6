/** The names of the Redis keys and channels the gateway owns; BullMQ's own keys live under `bull:`. */

/**
 * Key prefix of every Redis key the gateway owns (BullMQ keys live under `bull:`).
 * A request's own keys (payload, result, replay log, stored response) hash by
 * their whole name, so on a Redis Cluster they spread over every shard.
 */
export const keyPrefix = 'sy:';
/**
 * Accounts, keys, limits, reservations and usage share one hash tag: a
 * reservation and its settlement each stay one script over one slot, so
 * money stays exact on a Cluster as on one server.
 */
export const accountsPrefix = `${keyPrefix}{acct}:`;
export const replyChannel = (apiInstanceId: string) => `${keyPrefix}reply:${apiInstanceId}`;
/** Set (with a TTL) by a live api for its reply channel: a worker whose answers reach nobody checks it before giving up. */
export const apiAliveKey = (replyTo: string) => `${keyPrefix}alive:${replyTo}`;
export const cancelChannel = `${keyPrefix}cancel`;
export const replayStreamKey = (jobId: string) => `${keyPrefix}replay:${jobId}`;
export const payloadKey = (jobId: string) => `${keyPrefix}payload:${jobId}`;
export const resultKey = (jobId: string) => `${keyPrefix}result:${jobId}`;
/** Job lifecycle events (queued, progress, completed, failed) of async jobs, for WebSocket watchers. */
export const jobEventsChannel = `${keyPrefix}job-events`;
/** Where an async job lives and whose it is (an AsyncJobRecord). */
export const asyncJobKey = (id: string) => `${keyPrefix}async:${id}`;
/** A key's videos, newest last (sorted set scored by creation time). */
export const videosOfKey = (keyId: string) => `${keyPrefix}videos:${keyId}`;

