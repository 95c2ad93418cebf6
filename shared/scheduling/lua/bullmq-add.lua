-- A prioritized job added as BullMQ's own add writes it (its addPrioritizedJob script, for a job with its own id, no
-- parent, no delay, no deduplication): what lets the request's whole admission be one script (admit.lua). BullMQ
-- reads the job back as it reads its own: the hash (`name`, `data`, `opts` as JSON with the priority, `timestamp`, `delay`,
-- `priority`), its id in `prioritized` at priority × 2^32 plus the queue's counter (`pc`), the marker a worker waits
-- on (unless the queue is paused or at its global concurrency), and the `added` and `waiting` events.
-- Checked against BullMQ 6.7.0 (test/integration/bullmq-place-internals.test.ts pins it to the lockfile's and compares
-- what it writes with what BullMQ's own add writes).
-- Returns 1 when added, 0 when a job of that id was there already (a retried add: BullMQ's answer too, with its
-- `duplicated` event).
local function add_prioritized(keys, jobId, name, data, opts, timestamp, priority)
  local meta = redis.call('HMGET', keys.meta, 'opts.maxLenEvents', 'paused', 'concurrency')
  local maxEvents = meta[1]
  if not maxEvents then
    maxEvents = 10000
    redis.call('HSET', keys.meta, 'opts.maxLenEvents', maxEvents)
  end
  if redis.call('EXISTS', keys.job) == 1 then
    redis.call('XADD', keys.events, 'MAXLEN', '~', maxEvents, '*', 'event', 'duplicated', 'jobId', jobId)
    return 0
  end
  -- The options hold the priority too (the object is never empty: it has the attempts).
  opts = string.sub(opts, 1, -2) .. ',"priority":' .. string.format('%d', priority) .. '}'
  redis.call('HMSET', keys.job, 'name', name, 'data', data, 'opts', opts, 'timestamp', timestamp, 'delay', 0, 'priority', priority)
  redis.call('XADD', keys.events, '*', 'event', 'added', 'jobId', jobId, 'name', name)
  local counter = redis.call('INCR', keys.pc)
  redis.call('ZADD', keys.prioritized, priority * 0x100000000 + counter % 0x100000000, jobId)
  local maxed = meta[2] ~= false
  if not maxed and meta[3] then maxed = redis.call('LLEN', keys.active) >= tonumber(meta[3]) end
  if not maxed then redis.call('ZADD', keys.marker, 0, '0') end
  redis.call('XADD', keys.events, 'MAXLEN', '~', maxEvents, '*', 'event', 'waiting', 'jobId', jobId)
  return 1
end
