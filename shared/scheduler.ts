import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { CatalogModel } from './catalog.js';
import type { Config } from './config.js';
import { backlogKey, fairTagsKey } from './redis-keys.js';
import { withScripts } from './redis.js';
import type { ServiceTier } from './service-tier.js';
import { vendorDefinitions } from './vendor-definitions.js';
import { extraVendors, vendorDefinition } from './vendors.js';

/**
 * The queue's order: strict bands by service tier, and within a band a fair
 * share by account, weighted, counted in what a request will cost.
 *
 * Every job is added with a BullMQ priority (lower runs first). The priority
 * range is cut in three bands: `priority`, then `default`, then `flex`; BullMQ
 * serves the lowest priority waiting, so a band waits only behind the bands
 * before it, and `flex` takes only what nothing else wants. Within a band the
 * priority is the job's virtual start tag (start-time fair queueing): each
 * account has a finish tag F; a job costing c (its reserved tokens, in units
 * of 256, divided by the account's weight) starts at S = max(V, F) and moves F
 * to S + c, where V, the band's virtual time, is the start tag of the last job
 * a worker took from the band. So an account that was idle starts at
 * the head and is served next; accounts that keep a backlog are served in
 * proportion to their weights whatever number of keys they spread it over;
 * and a lone account gets everything (BullMQ serves whatever waits).
 *
 * Only a job that may wait is tagged (the api decides: a capped vendor's lane
 * always, the shared lane once jobs were waiting at its last count); any other
 * goes untagged to its band's start, where the order within the band is moot.
 *
 * The tags live beside the queue, under its hash tag (one Cluster slot with the
 * BullMQ keys the scripts touch): one script as a job is tagged, one as a worker
 * takes it, each a few hash reads and writes, O(1) beside BullMQ's O(log n) add
 * and take. The second also keeps the queue's backlog by tier and account; when
 * nothing of a band waits or is on its way (tagged, not yet added), its tags are
 * dropped, so every account starts level again. Tags grow while a band stays
 * busy; once V is a quarter of the band's width in, the band is shifted down
 * (each waiting job's score and priority, each tag): O(n) in the backlog, once
 * per quarter width of service. A job whose tag would pass the band's end waits
 * at the end (in arrival order).
 */

/** Width of one band of BullMQ priorities (three bands fit under BullMQ's 2^21). */
export const bandWidth = 2 ** 19;
const bands: Record<ServiceTier, number> = { priority: 0, default: 1, flex: 2 };
/** The lowest priority of a tier's band (BullMQ's priority 0 means "no priority": the bands start at 1). */
export const bandStart = (tier: ServiceTier) => 1 + bands[tier] * bandWidth;
/** The tier a priority belongs to. */
export function tierOfPriority(priority: number): ServiceTier {
  const band = Math.floor((priority - 1) / bandWidth);
  return band <= 0 ? 'priority' : band === 1 ? 'default' : 'flex';
}

/** Tokens per unit of cost in the tags: a request reserving fewer costs one unit. */
export const tokensPerUnit = 256;
/** Account weights an admin may set. */
export const minWeight = 1;
export const maxWeight = 100;

/** The cost of a request in tag units, for an account of this weight. */
export function costUnits(reservedTokens: number, weight: number): number {
  const units = Math.max(1, Math.ceil(Math.max(0, reservedTokens) / tokensPerUnit));
  return units / Math.min(maxWeight, Math.max(minWeight, Math.floor(weight) || 1));
}

const fairTag = {
  keys: 3,
  // KEYS: the band's tags (hash: account -> finish tag, '~v' -> the band's virtual time), the queue's prioritized set,
  // the queue's backlog (hash: 'tier|account' -> jobs, 'total:<tier>' -> jobs of the tier).
  // ARGV: account, cost (units / weight), band start, band width, the queue's key prefix (`bull:{chat}:`), backlog field, tier.
  // Returns the job's priority.
  lua: `
local two32 = 4294967296
local first = tonumber(ARGV[3])
local width = tonumber(ARGV[4])
local total = 'total:' .. ARGV[7]
if tonumber(redis.call('HGET', KEYS[3], total) or '0') <= 0 then
  -- Nothing of this band waits or is on its way to the queue: every account starts level.
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[3], total, 0)
end
local virtual = tonumber(redis.call('HGET', KEYS[1], '~v') or '0')
if virtual >= width / 4 then
  -- Shift the band down by its virtual time: every waiting job of the band (score and priority) and every tag.
  local shift = virtual
  local function shifted(priority) return math.max(first, priority - shift) end
  local lo = string.format('%.0f', first * two32)
  local hi = '(' .. string.format('%.0f', (first + width) * two32)
  local members = redis.call('ZRANGEBYSCORE', KEYS[2], lo, hi, 'WITHSCORES')
  for i = 1, #members, 2 do
    local score = tonumber(members[i + 1])
    local priority = math.floor(score / two32)
    local moved = shifted(priority)
    redis.call('ZADD', KEYS[2], string.format('%.0f', moved * two32 + (score - priority * two32)), members[i])
    redis.call('HSET', ARGV[5] .. members[i], 'priority', moved)
  end
  -- Jobs taken but not yet started by their worker are moved too: the tag a worker reports is read from the job.
  local active = redis.call('LRANGE', ARGV[5] .. 'active', 0, -1)
  for i = 1, #active do
    local priority = tonumber(redis.call('HGET', ARGV[5] .. active[i], 'priority') or '0')
    if priority >= first and priority < first + width then redis.call('HSET', ARGV[5] .. active[i], 'priority', shifted(priority)) end
  end
  local tags = redis.call('HGETALL', KEYS[1])
  for i = 1, #tags, 2 do
    local tag = tonumber(tags[i + 1]) - shift
    if tag <= 0 then redis.call('HDEL', KEYS[1], tags[i]) else redis.call('HSET', KEYS[1], tags[i], tag) end
  end
  virtual = 0
end
local finish = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local start = virtual
if finish > start then start = finish end
redis.call('HSET', KEYS[1], ARGV[1], start + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
redis.call('HINCRBY', KEYS[3], total, 1)
local slot = math.floor(start)
if slot > width - 1 then slot = width - 1 end
return first + slot
`,
};

const leftQueue = {
  keys: 2,
  // KEYS: the band's tags, the queue's backlog. ARGV: the backlog field ('tier|account'), the tier, the job's key when
  // a worker took it ('': removed before it ran), the band's start and width. A job taken moves the band's virtual
  // time to its tag, read from the job (a shift since its take moved it there too).
  lua: `
if redis.call('HINCRBY', KEYS[2], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[2], ARGV[1]) end
local total = 'total:' .. ARGV[2]
if redis.call('HINCRBY', KEYS[2], total, -1) < 0 then redis.call('HSET', KEYS[2], total, 0) end
if ARGV[3] == '' then return 1 end
local first = tonumber(ARGV[4])
local priority = tonumber(redis.call('HGET', ARGV[3], 'priority') or '0')
if priority < first or priority >= first + tonumber(ARGV[5]) then return 1 end
local tag = priority - first
if tag > tonumber(redis.call('HGET', KEYS[1], '~v') or '0') then
  redis.call('HSET', KEYS[1], '~v', tag)
  redis.call('PEXPIRE', KEYS[1], 86400000)
end
return 1`,
};

type FairRedis = Redis & {
  fairTag(tags: string, prioritized: string, backlog: string, account: string, cost: string, first: number, width: number, prefix: string, field: string, tier: string): Promise<number>;
  leftQueue(tags: string, backlog: string, field: string, tier: string, jobKey: string, first: number, width: number): Promise<number>;
};

/** A field of `backlogKey`: one account's waiting jobs in one tier. */
const backlogField = (tier: ServiceTier, accountId: string) => `${tier}|${accountId}`;

export interface FairClaim {
  /** The account that pays: the unit of fairness. */
  accountId: string;
  /** The account's weight (default 1). */
  weight: number;
  /** The tokens reserved for the request (prompt and most output). */
  tokens: number;
  tier: ServiceTier;
}

/** The priority a job is added with: its band's start plus its virtual start tag within the band. */
export async function fairPriority(redis: Redis, queue: Queue, claim: FairClaim): Promise<number> {
  const scripted = withScripts<FairRedis>(redis, { fairTag });
  const cost = costUnits(claim.tokens, claim.weight);
  return scripted.fairTag(fairTagsKey(queue.name, claim.tier), queue.keys.prioritized!, backlogKey(queue.name), claim.accountId, String(cost), bandStart(claim.tier), bandWidth, queue.toKey(''), backlogField(claim.tier, claim.accountId), claim.tier);
}

/**
 * A job counted in its queue's backlog left it: taken by a worker (`jobKey`: the job's hash, whose priority moves
 * its band's virtual time to its tag, as start-time fair queueing has it), or removed before it ran.
 */
export async function leftBacklog(redis: Redis, queueName: string, tier: ServiceTier, accountId: string, jobKey = ''): Promise<void> {
  await withScripts<FairRedis>(redis, { leftQueue }).leftQueue(fairTagsKey(queueName, tier), backlogKey(queueName), backlogField(tier, accountId), tier, jobKey, bandStart(tier), bandWidth);
}

/** A queue's backlog by tier and account, as `fairPriority` and `leftBacklog` count it. */
export async function readBacklog(redis: Redis, queueName: string): Promise<Array<[tier: string, account: string, waiting: number]>> {
  const fields = await redis.hgetall(backlogKey(queueName));
  return Object.entries(fields)
    .filter(([field]) => !field.startsWith('total:'))
    .map(([field, count]) => {
    const bar = field.indexOf('|');
    return [field.slice(0, bar), field.slice(bar + 1), Number(count)];
  });
}

// ---- lanes: no capped vendor's backlog blocks another ----

/** A vendor's caps, across every worker: calls in flight and calls started per minute (0: none). */
export interface VendorLimits {
  maxConcurrency: number;
  rpm: number;
}

export function vendorLimits(config: Pick<Config, 'vendors' | 'channelsFile'>, vendor: string): VendorLimits {
  const prefix = vendorDefinition(vendor, config)?.envPrefix ?? vendor.toUpperCase();
  const settings = config.vendors[prefix];
  return { maxConcurrency: settings?.maxConcurrency ?? 0, rpm: settings?.rpm ?? 0 };
}

/**
 * The vendors with a cap (`<VENDOR>_MAX_CONCURRENCY` or `<VENDOR>_RPM`): each
 * has a lane of its own in every capability, a BullMQ queue its jobs wait in,
 * so that its backlog holds no worker slot another vendor's request needs. A
 * lane with a concurrency cap is also capped in BullMQ (global concurrency):
 * the jobs past the cap wait in the queue, in the fair order, not in workers.
 */
export function cappedVendors(config: Pick<Config, 'vendors' | 'channelsFile'>): string[] {
  return [...vendorDefinitions, ...extraVendors(config)]
    .map((definition) => definition.name)
    .filter((name) => {
      const limits = vendorLimits(config, name);
      return limits.maxConcurrency > 0 || limits.rpm > 0;
    });
}

/** The lane a model's requests wait in: its first route's vendor when that vendor is capped, else the capability's shared lane. */
export function laneOf(lanes: readonly string[], model: Pick<CatalogModel, 'routes'>): string | undefined {
  const vendor = model.routes[0]?.vendor;
  return vendor !== undefined && lanes.includes(vendor) ? vendor : undefined;
}
