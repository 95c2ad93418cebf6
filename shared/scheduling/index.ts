/**
 * The scheduler: who gets in, in what order, in which tier, on which lane, and when a vendor call may start. Every
 * step a request's job passes, in order, and the one file that decides it:
 *
 *  1. Its tier.          service-tier.ts reads the tier asked (`service_tier`, its aliases); tiers.ts grants it:
 *                        `priority` only where an admin granted it to the account, else `default` (or a 403, as
 *                        configured). The api's `ServedRequest.validate` applies it before anything reads the tier.
 *  2. Its lane.          lanes.ts `laneOf`: a capped vendor's requests wait in a lane of their own, so its backlog
 *                        never holds a worker slot another vendor needs; every other request in its capability's shared
 *                        lane.
 *  3. Its waiting room.  admission.ts shares each lane's room (QUEUE_MAX_WAITING_<QUEUE>) among the accounts waiting in
 *                        it by weight, with a floor: a flood is refused 429 to the flooder, never to a quiet account.
 *                        backpressure.ts keeps the counts it reads (every 200 ms, no round trip per request) and
 *                        whether a lane is contended.
 *  4. Its money.         shared/money/ (reserve-rules.lua): the key's rate limits, its limit and the balance checked
 *                        and the worst case reserved, in the same script as the next step (admit-job.ts, lua/admit.lua:
 *                        reservation, place and BullMQ add in one round trip, all or nothing). Not the scheduler's:
 *                        named here because a refused reservation queues nothing.
 *  5. Its place.         fair-queue.ts `placeJob` (lua/place-rules.lua): its band (interactive, or flex below it) and,
 *                        within it, start-time fair queueing by account, weighted, counted in reserved tokens; a
 *                        priority request a bounded lead. The job is added to BullMQ with that priority and counted in
 *                        the backlog the waiting room reads.
 *  6. Its take.          A worker takes the job in priority order (BullMQ) and reports it: fair-queue.ts
 *                        `leaveBacklog` (lua/leave.lua) uncounts it and moves its band's virtual time to its tag. A job
 *                        removed before it ran is uncounted and its account given its cost back; a job coming back (a
 *                        retry, a vendor's 429 put back, a stalled job) returns to its band's head (`backToBandHead`).
 *  7. Its lane again.    The worker's channel router may fall back to a model another vendor serves: lane-move.ts moves
 *                        the job to that vendor's lane, placed again there, and leaves a stub the api follows.
 *  8. Its vendor slot.   vendor-slots.ts (lua/vendor-acquire.lua, -release, -renew): at most <VENDOR>_MAX_CONCURRENCY
 *                        calls in flight and <VENDOR>_RPM started per minute across every worker, leases that free
 *                        themselves when a worker dies, starts paced apart while every slot is taken (a priority
 *                        request is not paced). This is where a job waits once a worker holds it.
 *  9. Its served tier.   served-tier.ts: the tier it was served in (the vendor's word where the vendor sells tiers,
 *                        else what its band gave it), which its answer says and settlement bills.
 *
 * Kept in the background: lane-keeper.ts registers the lanes each worker serves and drains, at `default`, a lane
 * nobody serves any more (reported by the api in `/readyz`); fair-queue.ts `recount` uncounts jobs whose leaving was
 * lost. The Redis scripts are in lua/, declared once in scripts.ts. docs/scaling.md says what each knob does.
 */
export { accountShare, shareExceeded, type WaitingRoom } from './admission.js';
export { admitJob, plainJobOptions, type AdmittedJob } from './admit-job.js';
export {
  backlogField,
  backToBandHead,
  bandStart,
  bandWidth,
  costUnits,
  leaveBacklog,
  maxPriorityLead,
  isContended,
  maxWeight,
  minWeight,
  placeJob,
  readBacklog,
  readBacklogAndWeights,
  recount,
  removeWaitingJob,
  tokensPerUnit,
  type BacklogTier,
  type FairClaim,
  type Placed,
} from './fair-queue.js';
export {
  announceLanes,
  cappedVendors,
  knowLanes,
  laneEntryMs,
  laneHeartbeatMs,
  laneOf,
  ratePace,
  readLanes,
  vendorLimits,
  type LaneServer,
  type StrandedLane,
  type VendorLimits,
} from './lanes.js';
export { grantedTier, grantRequestTier } from './tiers.js';
export { Backpressure, depthStates, sumDepths, type QueueDepth } from './backpressure.js';
export { LaneKeeper } from './lane-keeper.js';
export { LaneMoves, MovedToLane } from './lane-move.js';
export { sellsTiers, servedTier, tieredEndpoints, tierFacts, tierRule, type TierRule } from './served-tier.js';
export { servingTier } from './service-tier.js';
export { VendorSlots, type Lease } from './vendor-slots.js';
