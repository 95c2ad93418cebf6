import { as, luaFiles, redisScript } from '../redis-script.js';

/**
 * The response cache's Redis scripts, kept as `.lua` files beside this module and declared here once each: their
 * keys and arguments by name, in the order the Lua reads them. Every key of one account's cache shares its hash tag,
 * so each script runs on one slot.
 */

/** Stores an entry within the account's bound; stored by a leading job, also ends its lead: `storeEntry()`. */
export const storeEntryScript = redisScript({
  name: 'cache_store_entry',
  files: luaFiles(import.meta.url, 'store-entry'),
  keys: ['entry', 'index', 'bytes', 'meta', 'lead'],
  args: [
    'stored',
    'ttlMs',
    'maxAccountBytes',
    'nowMs',
    'name',
    'entryMeta',
    'entryKeyPrefix',
    'leaderJobId',
    'channel',
    'outcome',
  ],
  reply: as<number>(),
});

/** Claims a request's lead for a job, or names the job that holds it: `claimLead()`. */
export const claimLeadScript = redisScript({
  name: 'cache_claim_lead',
  files: luaFiles(import.meta.url, 'claim-lead'),
  keys: ['lead'],
  args: ['holder', 'ttlMs'],
  reply: as<string>(),
});

/** Drops a leading job's mark if it holds it, and tells every api how the job ended: `announceOutcome()`. */
export const announceOutcomeScript = redisScript({
  name: 'cache_announce_outcome',
  files: luaFiles(import.meta.url, 'announce-outcome'),
  keys: ['lead'],
  args: ['jobId', 'channel', 'outcome'],
  reply: as<number>(),
});
