-- Takes one sign-in attempt for every counter, or none. Deciding and counting in one step is what makes the limit
-- hold for a burst: with a read before and a write after the password check, 100 concurrent tries all read "below
-- the limit" and all get checked.
-- KEYS: the counters (any number). ARGV: the window in seconds, then each counter's limit, in the order of KEYS.
-- Returns 0 when the attempt may run (every counter was below its limit and now counts it), else the seconds until
-- the first full counter's window ends.
for i = 1, #KEYS do
  if tonumber(redis.call('GET', KEYS[i]) or '0') >= tonumber(ARGV[i + 1]) then
    local ttl = redis.call('TTL', KEYS[i])
    if ttl < 1 then ttl = tonumber(ARGV[1]) end
    return ttl
  end
end
for i = 1, #KEYS do
  redis.call('INCR', KEYS[i])
  redis.call('EXPIRE', KEYS[i], ARGV[1], 'NX')
end
return 0
