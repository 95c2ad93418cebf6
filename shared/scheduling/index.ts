/**
 * The scheduler: who gets in, in what order, in which tier, on which lane. A newcomer's map:
 *
 * - admission.ts  Each lane's waiting room (QUEUE_MAX_WAITING_<QUEUE>) is shared out among the accounts waiting in
 *                 it by weight, with a floor: a flood is refused 429 to the flooder, never to a quiet account. The
 *                 api checks it from counts it refreshes every 200 ms (shared/scheduling/backpressure.ts), no round trip.
 * - tiers.ts      The tier a request is queued in: what it asks for where an admin granted it to its account
 *                 (`priority` only when granted), else `default` or a 403, as configured.
 * - fair-queue.ts The order within a lane: two bands (interactive, then flex), and within a band start-time fair
 *                 queueing by account, weighted, counted in reserved tokens; priority as a bounded lead. Also the
 *                 backlog count admission reads: every job counted as placed and uncounted exactly once, a
 *                 periodic recount repairing drift. Its Redis scripts are in lua/.
 * - lanes.ts      A capped vendor's jobs wait in a lane of their own, so its backlog never holds a worker slot
 *                 another vendor needs; the lanes served are registered in Redis, and a lane nobody serves any
 *                 more is drained at a default by the workers and reported.
 *
 * The path of a request: the api resolves its tier (tiers.ts), checks its account's share of its lane's room
 * (admission.ts), then places the job (fair-queue.ts `placeJob`, in the same round trip as its reservation) and adds
 * it with that priority. A worker taking it reports it (`leaveBacklog` with its key: the band's virtual time moves to its
 * tag); a job removed before it ran is uncounted and its account given its cost back (`removeWaitingJob`, or
 * `leaveBacklog` without a key). A job coming back (a retry, a vendor's 429 put back, a stalled job) returns to its
 * band's head: it has had its turn. What it is billed and echoed as is the tier it was served in
 * (shared/scheduling/served-tier.ts). docs/scaling.md says what each knob does.
 */
export { accountShare, shareExceeded, type WaitingRoom } from './admission.js';
export { backToBandHead, bandStart, bandWidth, costUnits, leaveBacklog, leadRoom, maxWeight, minWeight, placeJob, readBacklog, readBacklogAndWeights, recount, removeWaitingJob, tokensPerUnit, type BacklogTier, type FairClaim, type Placed } from './fair-queue.js';
export { announceLanes, cappedVendors, knowLanes, laneEntryMs, laneHeartbeatMs, laneOf, ratePace, readLanes, vendorLimits, type LaneServer, type StrandedLane, type VendorLimits } from './lanes.js';
export { grantedTier } from './tiers.js';
