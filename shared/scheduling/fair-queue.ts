import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { backlogKey, fairKeys, fairMembersKey, recountLockKey, waitingWeightsKey } from '../redis-keys.js';
import { inOneWrite } from '../redis.js';
import { leaveScript, placeScript, recountScript } from './scripts.js';
import type { ServiceTier } from './vocabulary.js';

/**
 * A queue's order and its backlog count: each job's BullMQ priority, from its band and its account's fair share.
 *
 * Two bands: the interactive one (`priority` and `default` requests) and, below it, `flex`, which takes only what
 * nothing else wants. Within a band the priority is the job's virtual start tag (start-time fair queueing): each
 * account has a finish tag F; a job costing c (its reserved tokens in units of 256, divided by the account's weight)
 * starts at S = max(V, F) and moves F to S + c, where V, the band's virtual time, is the tag of the last job a worker
 * took. An account that was idle starts at the head; accounts that keep a backlog are served in proportion to their
 * weights, whatever number of keys they spread it over. A `priority` request starts a bounded lead ahead of its
 * place (SERVICE_TIER_PRIORITY_LEAD_TOKENS) and still moves its account's tag by its cost: it jumps the queue, but an
 * account flooding priority soon has its jobs behind everyone else's, as a default flood would.
 *
 * Every job is counted as it is placed, by id (`members`), under its tier and account (`waiting`: what admission
 * shares out and `/metrics` shows); it leaves the count exactly once, when a worker takes it or when it is removed
 * before it ran (then its account gets its cost back: a tag moves only for work that ran). A periodic recount
 * (`recount`) uncounts any job no longer waiting whose leaving was lost. Only a job that may wait is tagged (the api
 * decides: a capped vendor's lane always, the shared lane once jobs were waiting at its last count); any other goes
 * to its band's head untagged, where the order is moot. When nothing of a band waits, its tags are dropped: every
 * account starts level again. Tags grow while a band stays busy; once V is a quarter of the band's width in, the band
 * is shifted down (O(n) in the backlog, once per quarter width of service).
 *
 * The scripts are in `lua/` (fair.lua shared by all), each a few hash reads and writes beside BullMQ's add and take,
 * on the queue's own hash tag.
 */

/** Width of one band of BullMQ priorities (both fit under BullMQ's 2^21). */
export const bandWidth = 2 ** 20;
/**
 * What a job is counted under in its lane's backlog: its tier, or `batch` for a Message Batch's request, which waits
 * in the flex band but apart from it in the count (a lane's waiting room is for requests someone holds open: a batch
 * has limits of its own, and its thousands of requests never refuse its account's, or anyone's, interactive ones).
 */
export type BacklogTier = ServiceTier | 'batch';

/** The lowest priority of a tier's band (BullMQ's priority 0 means "no priority": the bands start at 1). */
export const bandStart = (tier: BacklogTier) => (tier === 'flex' || tier === 'batch' ? 1 + bandWidth : 1);

/**
 * A tagged job's place in its band is its start tag plus this room (less a priority request's lead, at most this):
 * the first tagged place of a band is `bandStart(tier) + maxPriorityLead` (as in lua/fair.lua).
 */
export const maxPriorityLead = 2 ** 16;

/** Tokens per unit of cost in the tags: a request reserving fewer costs one unit. */
export const tokensPerUnit = 256;
/** Account weights an admin may set. */
export const minWeight = 1;
export const maxWeight = 100;

const clampWeight = (weight: number) => Math.min(maxWeight, Math.max(minWeight, Math.floor(weight) || 1));

/** The cost of a request in tag units, for an account of this weight. */
export function costUnits(reservedTokens: number, weight: number): number {
  return Math.max(1, Math.ceil(Math.max(0, reservedTokens) / tokensPerUnit)) / clampWeight(weight);
}

export interface FairClaim {
  /** The account that pays: the unit of fairness. */
  accountId: string;
  /** The account's weight (default 1). */
  weight: number;
  /** The tokens reserved for the request (prompt and most output). */
  tokens: number;
  tier: BacklogTier;
  /** Whether jobs may wait where it goes: tagged for its fair place, else put at its band's head. */
  contended: boolean;
  /** A priority request's lead over its account's place, in tokens (SERVICE_TIER_PRIORITY_LEAD_TOKENS). */
  leadTokens?: number;
}

/** Where a job was placed: the priority it is added with, and whether other work of its band waited before it. */
export interface Placed {
  priority: number;
  /** Jobs of its band were waiting (or on their way) when it was placed: a priority request's lead bought something. */
  behindOthers: boolean;
}

/**
 * The placement script's keys and arguments, named: what `placeJob` sends, and the request's whole admission
 * (admit-job.ts) too.
 */
export function placeInput(
  queue: Queue,
  jobId: string,
  claim: FairClaim,
  now = Date.now(),
): Parameters<typeof placeScript>[1] {
  const weight = clampWeight(claim.weight);
  const cost = costUnits(claim.tokens, weight);
  const lead = claim.tier === 'priority' ? (claim.leadTokens ?? 0) / tokensPerUnit / weight : 0;
  return {
    fair: fairKeys(queue.name),
    prioritized: queue.keys.prioritized!,
    jobId,
    tier: claim.tier,
    accountId: claim.accountId,
    weight,
    costUnits: String(cost),
    leadUnits: String(lead),
    tagged: claim.contended ? '1' : '0',
    bandStart: bandStart(claim.tier),
    bandWidth,
    queuePrefix: queue.toKey(''),
    nowMs: now,
  };
}

/** Counts a job in its queue's backlog and returns its place: its band and fair share within it. */
export async function placeJob(redis: Redis, queue: Queue, jobId: string, claim: FairClaim): Promise<Placed> {
  const [priority, before] = await placeScript(redis, placeInput(queue, jobId, claim));
  return { priority, behindOthers: before > 0 };
}

/**
 * A job counted in its queue's backlog left it, once whoever reports it: taken by a worker (`jobKey`: the job's hash,
 * whose priority moves its band's virtual time to its tag), or removed before it ran (its account gets its cost back).
 */
export async function leaveBacklog(redis: Redis, queueName: string, jobId: string, jobKey = ''): Promise<void> {
  await leaveScript(redis, {
    fair: fairKeys(queueName),
    jobId,
    takenJobKey: jobKey,
    interactiveBandStart: bandStart('default'),
    flexBandStart: bandStart('flex'),
    bandWidth,
  });
}

/** Removes a job that has not run yet, and uncounts it: whether it was removed (false: running, or gone already). */
export async function removeWaitingJob(redis: Redis, queue: Queue, jobId: string): Promise<boolean> {
  const removed = (await queue.remove(jobId)) === 1;
  // Uncounted once whichever path removed it; a crash in between is repaired by the recount.
  if (removed) await leaveBacklog(redis, queue.name, jobId);
  return removed;
}

type BacklogRows = Array<[tier: BacklogTier, account: string, waiting: number]>;

/**
 * A backlog hash field, encoding version 1: `tier|account` (written by lua/fair.lua's `backlog_field`). An account id
 * may hold `|`: the tier is the part before the first one.
 */
export const backlogField = {
  encode: (tier: BacklogTier, accountId: string) => `${tier}|${accountId}`,
  decode(field: string): { tier: BacklogTier; accountId: string } {
    const bar = field.indexOf('|');
    return { tier: field.slice(0, bar) as BacklogTier, accountId: field.slice(bar + 1) };
  },
};

/** The backlog hash's fields (tier and account -> count) as rows. */
function backlogRows(fields: Record<string, string>): BacklogRows {
  return Object.entries(fields).map(([field, count]) => {
    const { tier, accountId } = backlogField.decode(field);
    return [tier, accountId, Number(count)];
  });
}

/** A queue's backlog by tier and account. */
export async function readBacklog(redis: Redis, queueName: string): Promise<BacklogRows> {
  return backlogRows(await redis.hgetall(backlogKey(queueName)));
}

/** A queue's backlog and the weights of the accounts in it, in one round trip (admission reads both). */
export async function readBacklogAndWeights(
  redis: Redis,
  queueName: string,
): Promise<{ backlog: BacklogRows; weights: Map<string, number> }> {
  const [[, waiting], [, weights]] = (await inOneWrite(redis)
    .hgetall(backlogKey(queueName))
    .hgetall(waitingWeightsKey(queueName))
    .exec()) as [[unknown, Record<string, string>], [unknown, Record<string, string>]];
  return {
    backlog: backlogRows(waiting ?? {}),
    weights: new Map(Object.entries(weights ?? {}).map(([account, weight]) => [account, Number(weight) || 1])),
  };
}

/**
 * Jobs placed this recently may still be on their way to the queue (tagged, not yet added): the recount leaves them be.
 */
const recountGraceMs = 10_000;
const recountBatch = 200;

/**
 * Repairs a queue's backlog count: every counted job that no longer waits (its leaving lost with a process, or a
 * path that removed it without saying) is uncounted. One worker per interval does it (a lock of the interval's
 * length); O(backlog) in batches of 200, each a script of a few commands per job. Returns the jobs uncounted, or
 * undefined when another worker holds the interval.
 */
export async function recount(
  redis: Redis,
  queue: Queue,
  intervalMs: number,
  graceMs = recountGraceMs,
): Promise<number | undefined> {
  const locked = await redis.set(recountLockKey(queue.name), '1', 'PX', Math.max(1000, intervalMs - 100), 'NX');
  if (locked !== 'OK') return undefined;
  const keys = {
    fair: fairKeys(queue.name),
    prioritized: queue.keys.prioritized!,
    delayed: queue.keys.delayed!,
    wait: queue.keys.wait!,
  };
  const membersKey = fairMembersKey(queue.name);
  let healed = 0;
  let cursor = '0';
  do {
    const [next, fields] = await redis.hscan(membersKey, cursor, 'COUNT', recountBatch);
    cursor = next;
    const ids = fields.filter((_, i) => i % 2 === 0);
    if (ids.length > 0) healed += await recountScript(redis, { ...keys, graceMs, nowMs: Date.now(), jobIds: ids });
  } while (cursor !== '0');
  await recountScript(redis, { ...keys, graceMs, nowMs: Date.now(), jobIds: [] });
  return healed;
}

/**
 * A job coming back to its queue (a retry, a vendor's 429 put back, a stalled job run again) has had its turn in
 * the fair order: it returns to its band's head, not to a tag a shift or a reset since has made stale. One command,
 * on these paths only.
 */
export async function backToBandHead(job: Job<{ serviceTier?: ServiceTier }>): Promise<boolean> {
  const head = bandStart(job.data.serviceTier ?? 'default');
  if (job.priority === head) return false;
  await job.changePriority({ priority: head });
  job.priority = head;
  return true;
}

/**
 * Whether a job's place must be fair now: always in a capped vendor's lane (its jobs wait there); in a shared lane
 * only once its workers are all busy (jobs were waiting at the last count, every 200 ms). An uncontended job goes at
 * the head of its band.
 */
export function isContended(lane: string | undefined, waiting: number): boolean {
  return lane !== undefined || waiting > 0;
}
