import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import { Queue } from 'bullmq';
import { accountShare, shareExceeded, type WaitingRoom } from './admission.js';
import { backlogField, readBacklogAndWeights } from './fair-queue.js';
import { knowLanes, laneHeartbeatMs, readLanes, type StrandedLane } from './lanes.js';
import type { QueueName } from '../queues.js';
import type { QueueShards } from '../queue-shards.js';

/**
 * The states a queue's depth is read in. A paused queue is not a state of its
 * jobs: BullMQ keeps them waiting, so `waiting` counts them too.
 */
export const depthStates = ['waiting', 'active', 'delayed', 'failed'] as const;

export type QueueDepth = {
  waiting: number;
  active: number;
  delayed: number;
  failed: number;
};

/** The depths of a capability's shards (BullMQ's `getJobCounts` of each) added up. */
export function sumDepths(shards: ReadonlyArray<Readonly<Record<string, number>>>): QueueDepth {
  const depth: QueueDepth = { waiting: 0, active: 0, delayed: 0, failed: 0 };
  for (const counts of shards) {
    // Every job waits with a priority (its band and fair tag): BullMQ counts those apart from the plain waiting list.
    depth.waiting += (counts.waiting ?? 0) + (counts.prioritized ?? 0);
    depth.active += counts.active ?? 0;
    depth.delayed += counts.delayed ?? 0;
    depth.failed += counts.failed ?? 0;
  }
  return depth;
}

/** One lane's waiting room as last read: jobs waiting by account, and the weights of the accounts waiting. */
interface LaneCounts {
  byAccount: Map<string, number>;
  weights: Map<string, number>;
  /** Jobs this process let in since the refresh, by account: a burst into one instance is caught. */
  added: Map<string, number>;
  /** The accounts with jobs waiting at the refresh, and their weights added up. */
  accounts: number;
  weightSum: number;
  /** Accounts with nothing waiting at the refresh that this process let in since (each counted at weight 1). */
  newcomers: number;
}

const emptyLane = (): LaneCounts => ({
  byAccount: new Map(),
  weights: new Map(),
  added: new Map(),
  accounts: 0,
  weightSum: 0,
  newcomers: 0,
});

/**
 * A lane in the counts: a capability's shared lane (all its shards together), or a capped vendor's (every
 * capability's).
 */
const laneKey = (queue: QueueName | undefined, lane: string | undefined) =>
  lane === undefined ? `${queue}` : `@${lane}`;
/** A vendor lane's `queue` label in the metrics: `lane@openai`. */
const laneLabel = (vendor: string) => `lane@${vendor}`;

/**
 * Admission to each lane's waiting room (`shared/scheduling/admission.ts`) without a Redis round trip per request:
 * the counts by account are refreshed in the background (every 200 ms), and the jobs this process let in since are
 * counted on top. Also keeps each capability's jobs by state and by tier and account, for the metrics.
 */
export class Backpressure {
  private readonly lanes = new Map<string, LaneCounts>();
  /**
   * Every state's count as last read, by capability and by vendor lane (`lane@openai`), for the metrics (read at scrape
   * time: no Redis command of its own).
   */
  private readonly depth = new Map<string, QueueDepth>();
  /** Waiting jobs by tier and account, likewise, for the metrics. */
  private readonly backlog = new Map<string, Array<[tier: string, account: string, waiting: number]>>();
  private timer: NodeJS.Timeout | undefined;
  private laneTimer: NodeJS.Timeout | undefined;
  /** The known lanes with jobs waiting and no server with a configured cap, as last checked. */
  private strandedLanes: StrandedLane[] = [];
  /** Queues of lanes this api does not route to, opened to count a stranded lane's jobs. */
  private readonly otherLanes = new Map<string, Queue>();

  constructor(
    private readonly redis: Redis,
    private readonly queues: QueueShards,
    private readonly limits: Record<QueueName, number>,
    private readonly log: Logger,
    private readonly refreshMs = 200,
    private readonly floor = 10,
  ) {}

  async start(): Promise<void> {
    await Promise.all([this.refresh(), this.checkLanes()]);
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
    this.laneTimer = setInterval(() => void this.checkLanes(), laneHeartbeatMs / 2);
    this.laneTimer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.laneTimer);
    for (const queue of this.otherLanes.values()) void queue.close().catch(() => undefined);
  }

  /**
   * The lanes stranded at the last check: jobs waiting, no server with a configured cap (`shared/scheduling/lanes.ts`).
   */
  stranded(): readonly StrandedLane[] {
    return this.strandedLanes;
  }

  private async checkLanes(): Promise<void> {
    try {
      // Recorded again each time: a worker forgets a stranded lane it emptied, and this api may still route to it.
      await knowLanes(
        this.redis,
        this.queues.laneQueues().map(([, queue]) => queue.name),
      );
      const lanes = await readLanes(this.redis);
      const found: StrandedLane[] = [];
      for (const [name, server] of lanes) {
        if (server && !server.stranded) continue;
        let queue = this.queues.laneQueue(name) ?? this.otherLanes.get(name);
        if (!queue) this.otherLanes.set(name, (queue = new Queue(name, { connection: this.redis })));
        const counts = await queue.getJobCounts('wait', 'prioritized', 'delayed');
        const waiting = (counts.wait ?? 0) + (counts.prioritized ?? 0) + (counts.delayed ?? 0);
        if (waiting > 0) found.push({ queue: name, waiting, draining: server?.stranded === true });
      }
      this.strandedLanes = found;
    } catch (error) {
      this.log.warn({ err: error }, 'could not check the lanes');
    }
  }

  /**
   * Lets one more job of this account into the lane's waiting room, or throws the 429 that says the account holds
   * its share (never for another account's flood).
   */
  admit(queue: QueueName, lane: string | undefined, accountId: string, weight: number): void {
    const key = laneKey(queue, lane);
    let counts = this.lanes.get(key);
    if (!counts) this.lanes.set(key, (counts = emptyLane()));
    const added = counts.added.get(accountId) ?? 0;
    const own = counts.byAccount.get(accountId) ?? 0;
    const held = Math.max(0, own) + added;
    const limits: WaitingRoom = { room: this.limits[queue], floor: this.floor };
    // Under the floor: in. Else its share of the room against the others' weights, kept added up (no walk over
    // accounts).
    if (held >= Math.min(limits.floor, limits.room)) {
      const counted = own > 0 || added > 0;
      const ownWeight = own > 0 ? (counts.weights.get(accountId) ?? 1) : added > 0 ? 1 : 0;
      const othersWeight = counts.weightSum + counts.newcomers - ownWeight;
      const others = counts.accounts + counts.newcomers - (counted ? 1 : 0);
      const share = accountShare(limits, weight, othersWeight);
      if (held >= share)
        throw shareExceeded(lane === undefined ? `the ${queue} queue` : `${lane}'s lane`, held, share, others);
    }
    if (own <= 0 && added === 0) counts.newcomers++;
    counts.added.set(accountId, added + 1);
  }

  /** A capability's waiting jobs in its shared lane (all its shards) at the last refresh. */
  waiting(queue: QueueName): number {
    return this.depth.get(queue)?.waiting ?? 0;
  }

  /** Each queue's waiting jobs by tier and account, as last refreshed. */
  *backlogs(): Iterable<[queue: string, tier: string, account: string, waiting: number]> {
    for (const [queue, rows] of this.backlog)
      for (const [tier, account, waiting] of rows) yield [queue, tier, account, waiting];
  }

  /** Each capability's and each vendor lane's jobs by state, as last refreshed. */
  depths(): Iterable<[string, QueueDepth]> {
    return this.depth.entries();
  }

  private async refresh(): Promise<void> {
    try {
      // Each capability's shared lane (its shards together), and each capped vendor's lane, shared by every capability.
      const groups: Array<[label: string, key: string, queues: readonly Queue[]]> = [
        ...[...this.queues.entries()].map(([name, shards]): [string, string, Queue[]] => [
          name,
          laneKey(name, undefined),
          shards,
        ]),
        ...this.queues
          .laneQueues()
          .map(([vendor, queue]): [string, string, Queue[]] => [
            laneLabel(vendor),
            laneKey(undefined, vendor),
            [queue],
          ]),
      ];
      await Promise.all(
        groups.map(async ([label, key, queues]) => {
          // What this process let in until now was placed before the read below (the same connection, in order): the
          // read counts it. What it lets in while the read is under way is kept on top of the new counts.
          const before = new Map(this.lanes.get(key)?.added ?? []);
          // One script call per queue, as for the waiting count alone, reads the other states the metrics show.
          const [counts, read] = await Promise.all([
            Promise.all(queues.map((queue) => queue.getJobCounts(...depthStates, 'prioritized'))),
            Promise.all(queues.map((queue) => readBacklogAndWeights(this.redis, queue.name))),
          ]);
          this.depth.set(label, sumDepths(counts));
          const byTierAndAccount = new Map<string, [string, string, number]>();
          const lane = emptyLane();
          for (const { backlog, weights } of read) {
            for (const [account, weight] of weights) lane.weights.set(account, weight);
            for (const [tier, account, waiting] of backlog) {
              // A batch's requests are not in the waiting room (they have limits of their own): shown, not admitted
              // against.
              if (tier !== 'batch') lane.byAccount.set(account, (lane.byAccount.get(account) ?? 0) + waiting);
              const field = backlogField.encode(tier, account);
              const sum = byTierAndAccount.get(field);
              if (sum) sum[2] += waiting;
              else byTierAndAccount.set(field, [tier, account, waiting]);
            }
          }
          for (const [account, waiting] of lane.byAccount) {
            if (waiting <= 0) continue;
            lane.accounts++;
            lane.weightSum += lane.weights.get(account) ?? 1;
          }
          for (const [account, added] of this.lanes.get(key)?.added ?? []) {
            const since = added - (before.get(account) ?? 0);
            if (since <= 0) continue;
            lane.added.set(account, since);
            if ((lane.byAccount.get(account) ?? 0) <= 0) lane.newcomers++;
          }
          this.lanes.set(key, lane);
          this.backlog.set(label, [...byTierAndAccount.values()]);
        }),
      );
    } catch (error) {
      this.log.warn({ err: error }, 'could not refresh queue depths');
    }
  }
}
