-- Repairs the backlog: of the given job ids, each still counted that is neither waiting (prioritized, delayed, or
-- in the wait list, where BullMQ puts a stalled job), nor placed in the last ARGV[1] ms (on its way to the queue),
-- nor taken by a worker that has not reported it yet (its hash says processed, not finished: the report is on its
-- way, and moves the band's time) leaves the backlog, as if taken.
-- KEYS: as fair.lua; then KEYS[10] prioritized, KEYS[11] delayed, KEYS[12] wait.
-- ARGV: grace ms, now ms, job ids...
local grace, now = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The queue's key prefix (`bull:{chat}:`), from its prioritized set's key: a job's hash is the prefix and its id.
local prefix = string.sub(KEYS[10], 1, #KEYS[10] - #'prioritized')
local healed = 0
for i = 3, #ARGV do
  local jobId = ARGV[i]
  local encoded = redis.call('HGET', KEYS[8], jobId)
  if encoded then
    local _, _, _, placed = member(encoded)
    local waiting = now - placed < grace
      or redis.call('ZSCORE', KEYS[10], jobId)
      or redis.call('ZSCORE', KEYS[11], jobId)
      or redis.call('LPOS', KEYS[12], jobId)
      or (redis.call('HEXISTS', prefix .. jobId, 'processedOn') == 1 and redis.call('HEXISTS', prefix .. jobId, 'finishedOn') == 0)
    if not waiting then
      leave(jobId)
      healed = healed + 1
    end
  end
end
if #ARGV > 2 then return healed end
-- A call without job ids ends a recount: the weights of accounts with nothing waiting are dropped.
local weights = redis.call('HKEYS', KEYS[9])
for i = 1, #weights do
  local account = weights[i]
  if redis.call('HEXISTS', KEYS[7], 'priority|' .. account) == 0 and redis.call('HEXISTS', KEYS[7], 'default|' .. account) == 0
    and redis.call('HEXISTS', KEYS[7], 'flex|' .. account) == 0 and redis.call('HEXISTS', KEYS[7], 'batch|' .. account) == 0 then
    redis.call('HDEL', KEYS[9], account)
  end
end
return healed
