import { Backoffs, type JobsOptions, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  readOutcome,
  reserveInput,
  type KeyLimitsInForce,
  type Reservation,
  type ReserveOutcome,
} from '../money/billing.js';
import { reserveScript } from '../money/scripts.js';
import { placeInput, type FairClaim, type Placed } from './fair-queue.js';
import { admitScript, placeScript } from './scripts.js';

/**
 * A request's whole admission in one round trip (steps 4 and 5 of the scheduler, lua/admit.lua): its reservation,
 * its place, and its job added to BullMQ as BullMQ's own add writes it (lua/bullmq-add.lua), all or nothing. A
 * refused reservation places and adds nothing, so nothing is undone. Used where one script may reach both the
 * account's keys and the queue's (not a Redis Cluster) and the job is a plain one: its own id, a priority, no delay,
 * parent, repeat or deduplication (`plainJobOptions`); any other job is placed, reserved and added apart.
 */

/** The options a job admitted in one script may have: what the api's jobs are added with. */
const plainOptions = new Set(['jobId', 'attempts', 'backoff', 'removeOnComplete', 'removeOnFail']);

/**
 * A job's options as BullMQ stores them in its hash (`opts`, JSON), when the one-script add can write them: the
 * attempts defaulted to 0 and the backoff normalised as BullMQ's `Job` does, nothing undefined; the priority, which
 * the script decides, is added there. Undefined when the
 * options need any of BullMQ's other handling (then the job is added by BullMQ itself).
 */
export function plainJobOptions(id: string, options: JobsOptions): string | undefined {
  // BullMQ refuses an integer-like or a `:` custom id: such a job goes its way and is refused there.
  if (`${parseInt(id, 10)}` === id || id.includes(':') || options.jobId !== id) return undefined;
  const stored: Record<string, unknown> = { attempts: 0 };
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (!plainOptions.has(name)) return undefined;
    stored[name] = name === 'backoff' ? Backoffs.normalize(value as NonNullable<JobsOptions['backoff']>) : value;
  }
  return JSON.stringify(stored);
}

export interface AdmittedJob {
  /** The reservation's verdict (undefined: nothing was reserved); refused, nothing was placed nor added. */
  outcome?: ReserveOutcome;
  /** Its place (undefined when refused). */
  placed?: Placed;
  /** False when a job of that id stood there already (a retried add). */
  added: boolean;
}

/** A plain job (`plainJobOptions`'s stored options) admitted, placed and added in one script. */
export async function admitJob(
  redis: Redis,
  queue: Queue,
  job: { id: string; name: string; data: object; storedOptions: string },
  claim: FairClaim,
  spend?: { reservation: Reservation; limits: KeyLimitsInForce },
): Promise<AdmittedJob> {
  const now = Date.now();
  const reservation = spend ? reserveInput(spend.reservation, spend.limits, now) : undefined;
  const placement = placeInput(queue, job.id, claim, now);
  // The arguments in the order each script reads them: the individual scripts' own declarations, so neither order is
  // written twice.
  const argumentsOf = (positional: ReturnType<typeof placeScript.positional>) =>
    positional.slice(1 + Number(positional[0]));
  const reserveArgs = reservation
    ? argumentsOf(reserveScript.positional(reservation))
    : new Array<string>(reserveScript.args.length).fill('');
  const placeArgs = argumentsOf(placeScript.positional(placement));
  const keys = queue.keys;
  // Nothing reserved: the script reads none of the account's keys, and the queue's own stand in their places.
  const [verdict, priority, before, added] = await admitScript(redis, {
    fair: placement.fair,
    prioritized: placement.prioritized,
    bill: reservation ? (reservation.bill as string) : placement.prioritized,
    deadlines: reservation ? (reservation.deadlines as string) : placement.prioritized,
    settled: reservation ? (reservation.settled as string) : placement.prioritized,
    job: queue.toKey(job.id),
    bull: [keys.marker!, keys.meta!, keys.events!, keys.pc!, keys.active!],
    reserves: reservation ? '1' : '',
    reservation: reserveArgs,
    placement: placeArgs,
    // A priority request placed behind others has its place's worth marked in its data (`contended`).
    markContended: claim.tier === 'priority' ? '1' : '',
    name: job.name,
    data: JSON.stringify(job.data),
    opts: job.storedOptions,
    timestampMs: now,
  });
  const outcome = reservation ? readOutcome(verdict, spend!.limits.budgets ?? []) : undefined;
  if (outcome && !outcome.ok) return { outcome, added: false };
  return { ...(outcome ? { outcome } : {}), placed: { priority, behindOthers: before > 0 }, added: added === 1 };
}
