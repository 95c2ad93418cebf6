-- A budget's counter for the current period raised to what its scope has already spent in the period, as the record
-- has settled it, when a budget is set: "spent this period" is the period's, not only what came after the budget.
-- Never lowered: a counter already running (the budget was there earlier in the period) has counted settlements
-- the record may not hold yet.
-- KEYS: the account's bill
-- ARGV: the counter's spent field, micros the record holds as spent in the period
-- Returns the counter's spent micros after; -1 when the bill is not in Redis (it is loaded whole from the record then).
if redis.call('HEXISTS', KEYS[1], 'id') == 0 then return -1 end
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local recorded = tonumber(ARGV[2])
if recorded > current then
  redis.call('HSET', KEYS[1], ARGV[1], int(recorded))
  return recorded
end
return current
