-- Takes a vendor slot for one call, or says how long to wait: at most the vendor's cap in flight (leases scored by
-- their expiry), at most its rpm started per rolling minute, and, while every slot is taken, starts paced apart.
-- KEYS: the vendor's in-flight leases, its rpm window, its pace state (avg, last, busy)
-- ARGV: lease id, lease ms, cap (0: none), rpm (0: none), pace fraction (0: no pacing), '1' when this call is not paced
-- Returns {1} or {0, rpm wait ms, slot wait ms, paced (1: sleep the wait, a release will not shorten it)}.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local leaseMs = tonumber(ARGV[2])
local maxConcurrency = tonumber(ARGV[3])
local rpm = tonumber(ARGV[4])
local pace = tonumber(ARGV[5])
local inflight, avg, last, busy = 0, 0, 0, 0
if maxConcurrency > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  inflight = redis.call('ZCARD', KEYS[1])
  if pace > 0 then
    local state = redis.call('HMGET', KEYS[3], 'avg', 'last', 'busy')
    avg, last, busy = tonumber(state[1] or '0'), tonumber(state[2] or '0'), tonumber(state[3] or '0')
  end
  if inflight >= maxConcurrency then
    if avg > 0 then
      redis.call('HSET', KEYS[3], 'busy', now + math.ceil(avg))
      redis.call('PEXPIRE', KEYS[3], 3600000)
    end
    local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, 0, tonumber(soonest[2]) - now, 0}
  end
  if avg > 0 and inflight > 0 and ARGV[6] ~= '1' then
    local nextStart = last + math.floor(pace * avg / maxConcurrency)
    if busy > now and nextStart > now then return {0, 0, nextStart - now, 1} end
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[2]) >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    return {0, tonumber(oldest[2]) + 60000 - now, 0, 0}
  end
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 61000)
end
if maxConcurrency > 0 then
  redis.call('ZADD', KEYS[1], now + leaseMs, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], leaseMs * 2)
  if pace > 0 then
    redis.call('HSET', KEYS[3], 'last', now)
    -- This call takes the last slot: the vendor is busy (paced) for one average call.
    if avg > 0 and inflight + 1 >= maxConcurrency then redis.call('HSET', KEYS[3], 'busy', now + math.ceil(avg)) end
    redis.call('PEXPIRE', KEYS[3], 3600000)
  end
end
return {1, 0, 0, 0}
