-- Gives back a vendor slot, and moves the vendor's average call a fifth of the way to this call's time.
-- KEYS: the vendor's in-flight leases, its pace state
-- ARGV: lease id, the call's ms (-1: not measured)
-- Returns 1 when the lease was held (0: it had run out).
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local ms = tonumber(ARGV[2])
if removed == 1 and ms >= 0 then
  local avg = tonumber(redis.call('HGET', KEYS[2], 'avg') or '0')
  if avg > 0 then avg = avg + (ms - avg) / 5 else avg = math.max(ms, 1) end
  redis.call('HSET', KEYS[2], 'avg', avg)
  redis.call('PEXPIRE', KEYS[2], 3600000)
end
return removed
