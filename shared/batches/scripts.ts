import { as, luaFiles, redisScript } from '../redis-script.js';

/**
 * The batch engine's Redis scripts, kept as `.lua` files beside this module and declared here once each: their keys
 * and arguments by name, in the order the Lua reads them. Each runs on one batch's keys, which share its hash tag.
 */
const files = (name: string) => luaFiles(import.meta.url, name);

/** Records a request's result once, moves the counts, ends the batch or asks for a refill: `recordInBatch()`. */
export const recordScript = redisScript({
  name: 'batch_record',
  files: files('record'),
  keys: ['batch', 'done', 'results', 'pending', 'queued'],
  args: [
    'index',
    'outcome',
    'customId',
    'result',
    'nowMs',
    'keepMs',
    'costMicros',
    'inputTokens',
    'cachedTokens',
    'outputTokens',
  ],
  reply: as<[state: number, refill?: number]>(),
});

/** Lets the batch's next requests into its window: `releaseBatchRequests()`. */
export const releaseScript = redisScript({
  name: 'batch_release',
  files: files('release'),
  keys: ['batch', 'pending', 'queued'],
  args: ['nowMs'],
  reply: as<Array<number | string>>(),
});

/** Marks a cancel asked (ends at once a batch still validating): `cancelBatch()`. */
export const cancelScript = redisScript({
  name: 'batch_cancel',
  files: files('cancel'),
  keys: ['batch'],
  args: ['nowMs'],
  reply: as<string | null>(),
});

/** Starts on the engine a batch that was validating, unless a cancel ended it meanwhile: `createBatch()`. */
export const startValidatedScript = redisScript({
  name: 'batch_start_validated',
  files: files('start-validated'),
  keys: ['batch', 'intake'],
  args: ['ttlMs', 'intakeMs', 'fields'],
  reply: as<number>(),
});

/** Cancels a batch whose intake died before storing every request: `cancelAbandonedIntake()`. */
export const abandonedScript = redisScript({
  name: 'batch_abandoned',
  files: files('abandoned'),
  keys: ['batch', 'intake'],
  args: ['nowMs'],
  reply: as<number>(),
});
