-- Cancels a batch whose intake died: `in_progress`, stored by an intake (`intake` set), not every request stored, and
-- the intake's lease gone (its api stopped renewing it mid-way). Atomic with the intake's rounds, which store and
-- renew the lease in one transaction.
-- KEYS: the batch's hash, its intake lease
-- ARGV: now (ms)
-- Returns 1 when it canceled it, 0 when not.
local batch = redis.call('HMGET', KEYS[1], 'status', 'intake', 'stored', 'total')
if batch[1] ~= 'in_progress' or batch[2] ~= '1' then return 0 end
if tonumber(batch[3]) >= tonumber(batch[4]) or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'canceling', 'cancel_at', ARGV[1])
return 1
