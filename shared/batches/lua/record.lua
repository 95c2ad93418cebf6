-- Records one request's result once: a request already recorded is left as it is (a retried or re-run request never
-- counts twice). Moves the request from `processing` to its outcome, adds its cost and tokens, takes it out of the
-- pending and queued keys, and ends the batch when none is left processing (its results then kept for their time).
-- Otherwise it says whether the batch's window wants refilling: `refill` of it free (all that is left, at the end)
-- while the batch is in progress and before its deadline, and no refill asked in the last second (one asked and not
-- yet done).
-- KEYS: the batch's hash, its done hash, its results (a stream), its pending entries, its queued requests
-- ARGV: index, outcome, custom_id, result JSON, now (ms), results' TTL (ms), cost (µ$), input, cached and output
--       tokens billed
-- Returns {1, 1} when recorded and a refill is to be asked ({1, 0}: not), {2} when recorded and that ended the
-- batch, {0} when the request was recorded before, {-1} for a batch that is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return {0} end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('XADD', KEYS[3], '*', 'custom_id', ARGV[3], 'result', ARGV[4])
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[1], 'cost', ARGV[7]) end
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', KEYS[1], 'input_tokens', ARGV[8]) end
if tonumber(ARGV[9]) > 0 then redis.call('HINCRBY', KEYS[1], 'cached_tokens', ARGV[9]) end
if tonumber(ARGV[10]) > 0 then redis.call('HINCRBY', KEYS[1], 'output_tokens', ARGV[10]) end
local left = redis.call('HINCRBY', KEYS[1], 'processing', -1)
local batch = redis.call('HMGET', KEYS[1], 'status', 'expires', 'next', 'stored', 'window', 'refill', 'asked')
if left <= 0 and batch[1] ~= 'ended' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'ended_at', ARGV[5])
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
  redis.call('DEL', KEYS[4], KEYS[5])
  return {2}
end
local now = tonumber(ARGV[5])
if batch[1] ~= 'in_progress' or now >= tonumber(batch[2] or '0') then return {1, 0} end
local unqueued = tonumber(batch[4] or '0') - tonumber(batch[3] or '0')
local room = tonumber(batch[5] or '0') - redis.call('ZCARD', KEYS[5])
if unqueued <= 0 or room < math.min(tonumber(batch[6] or '1'), unqueued) then return {1, 0} end
if now - tonumber(batch[7] or '0') < 1000 then return {1, 0} end
redis.call('HSET', KEYS[1], 'asked', ARGV[5])
return {1, 1}
