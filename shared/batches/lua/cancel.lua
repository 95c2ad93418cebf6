-- Marks a cancel asked: `in_progress` becomes `canceling`; a batch still `validating` (nothing of it released) ends
-- at once, canceled. Any other status stays.
-- KEYS: the batch's hash
-- ARGV: now (ms)
-- Returns the status after, or nil for a batch that is gone.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return false end
if status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'canceling', 'cancel_at', ARGV[1])
  return 'canceling'
end
if status == 'validating' then
  redis.call('HSET', KEYS[1], 'status', 'ended', 'cancel_at', ARGV[1], 'ended_at', ARGV[1], 'processing', 0)
  return 'ended'
end
return status
