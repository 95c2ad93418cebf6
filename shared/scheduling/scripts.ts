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
