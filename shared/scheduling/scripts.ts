import { as, luaFiles, redisScript } from '../redis-script.js';

/**
 * The scheduler's Redis scripts, `.lua` files in lua/ declared here once each: their keys and arguments by name, in
 * the order the Lua reads them. The fair queue's are sent with `fair.lua` before them (its encodings and the band
 * arithmetic, written once).
 */

/** Takes a vendor slot for one call, or says how long to wait (vendor-slots.ts). */
export const vendorAcquireScript = redisScript({
  name: 'vendor_acquire',
  files: luaFiles(import.meta.url, 'vendor-acquire'),
  keys: ['inflight', 'rpmWindow', 'pace'],
  args: ['leaseId', 'leaseMs', 'cap', 'rpm', 'paceFraction', 'unpaced'],
  reply: as<[taken: number, rpmWaitMs: number, slotWaitMs: number, paced: number]>(),
});

/** Gives back a vendor slot and moves the vendor's average call (vendor-slots.ts). */
export const vendorReleaseScript = redisScript({
  name: 'vendor_release',
  files: luaFiles(import.meta.url, 'vendor-release'),
  keys: ['inflight', 'pace'],
  args: ['leaseId', 'callMs'],
  reply: as<number>(),
});

/** Renews a running call's lease (vendor-slots.ts). */
export const vendorRenewScript = redisScript({
  name: 'vendor_renew',
  files: luaFiles(import.meta.url, 'vendor-renew'),
  keys: ['inflight'],
  args: ['leaseId', 'leaseMs'],
  reply: as<number>(),
});

/** The fair queue's scripts share `fair.lua` (its keys' meaning, the member encoding, leaving and refunds). */
const fairFiles = (...names: string[]) => luaFiles(import.meta.url, 'fair', ...names);

/**
 * Counts a job in its queue's backlog and gives it its place (fair-queue.ts `placeJob`). `fair`: the queue's nine
 * scheduler keys (redis-keys.ts `fairKeys`), in their order.
 */
export const placeScript = redisScript({
  name: 'fair_place',
  files: fairFiles('place-rules', 'place'),
  keys: ['fair', 'prioritized'],
  args: [
    'jobId',
    'tier',
    'accountId',
    'weight',
    'costUnits',
    'leadUnits',
    'tagged',
    'bandStart',
    'bandWidth',
    'queuePrefix',
    'nowMs',
  ],
  reply: as<[priority: number, before: number]>(),
});

/** A counted job left its queue's backlog: taken (its hash's key) or removed (fair-queue.ts `uncountJob`). */
export const leaveScript = redisScript({
  name: 'fair_leave',
  files: fairFiles('leave'),
  keys: ['fair'],
  args: ['jobId', 'takenJobKey', 'interactiveBandStart', 'flexBandStart', 'bandWidth'],
  reply: as<number>(),
});

/** Uncounts the given jobs that no longer wait (fair-queue.ts `recount`). */
export const recountScript = redisScript({
  name: 'fair_recount',
  files: fairFiles('recount'),
  keys: ['fair', 'prioritized', 'delayed', 'wait'],
  args: ['graceMs', 'nowMs', 'jobIds'],
  reply: as<number>(),
});

/**
 * A request's whole admission in one round trip: its reservation, its place and its BullMQ add, all or nothing
 * (admit-job.ts `admitJob`). `fair`: the queue's nine scheduler keys; `bull`: the queue's marker, meta, events stream,
 * priority counter and active list, in that order. Not on a Redis Cluster (the account's keys and the queue's are in
 * different slots).
 */
export const admitScript = redisScript({
  name: 'admit',
  files: [
    ...luaFiles(new URL('../money/', import.meta.url).href, 'money', 'reserve-rules'),
    ...luaFiles(import.meta.url, 'fair', 'place-rules', 'bullmq-add', 'admit'),
  ],
  keys: ['fair', 'prioritized', 'bill', 'deadlines', 'settled', 'job', 'bull'],
  args: ['reserves', 'reservation', 'placement', 'markContended', 'name', 'data', 'opts', 'timestampMs'],
  reply: as<[verdict: Array<number | string>, priority: number, before: number, added: number]>(),
});
