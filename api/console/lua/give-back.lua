-- Gives an attempt back (it succeeded); a counter never goes below zero.
-- KEYS: the counters (any number). ARGV: none.
-- Returns 0.
for i = 1, #KEYS do
  if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
end
return 0
