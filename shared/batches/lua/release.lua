-- Fills a batch's window: while it is in progress and before its deadline, its next requests (from `next`, up to
-- those stored so far) are let in until `window` are queued, each noted queued (at `now`) and returned with its
-- pending entry; a refill asked is done.
-- KEYS: the batch's hash, its pending entries, its queued requests
-- ARGV: now (ms)
-- Returns index, entry pairs ('' for an index with no entry stored).
local out = {}
local batch = redis.call('HMGET', KEYS[1], 'status', 'expires', 'next', 'stored', 'window')
if batch[1] ~= 'in_progress' or tonumber(ARGV[1]) >= tonumber(batch[2] or '0') then return out end
redis.call('HSET', KEYS[1], 'asked', 0)
local from = tonumber(batch[3] or '0')
local to = math.min(tonumber(batch[4] or '0'), from + tonumber(batch[5] or '0') - redis.call('ZCARD', KEYS[3]))
if to <= from then return out end
redis.call('HSET', KEYS[1], 'next', to)
for index = from, to - 1 do
  redis.call('ZADD', KEYS[3], ARGV[1], index)
  out[#out + 1] = index
  out[#out + 1] = redis.call('HGET', KEYS[2], index) or ''
end
if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1])) end
return out
