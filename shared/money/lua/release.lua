-- Releases a reservation whose job will never settle it (refused before it ran, or lost past its deadline).
-- KEYS: the account's bill, its bucket's reservation deadlines, settled marker
-- ARGV: request id, the reservation's deadline member
-- Returns 1 when it released one, 0 when there was none (settled, or released before).
redis.call('ZREM', KEYS[2], ARGV[2])
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local field = reservation_field(ARGV[1])
local resv = redis.call('HGET', KEYS[1], field)
if not resv then return 0 end
redis.call('HDEL', KEYS[1], field)
local k, micros, _, _, budgets = decode_reservation(resv)
if micros then move_budgets(KEYS[1], budgets, micros, 0, {}, nil) end
if micros and micros ~= 0 then
  local bill = redis.call('HMGET', KEYS[1], 'id', k .. '.spent')
  if bill[1] then redis.call('HINCRBY', KEYS[1], 'reserved', '-' .. int(micros)) end
  if bill[2] then redis.call('HINCRBY', KEYS[1], k .. '.reserved', '-' .. int(micros)) end
end
return 1
