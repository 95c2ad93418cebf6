-- A Realtime session's held reservation admitted again under the limits in force now (the key's spending limit, the
-- budgets of the key, its team and its maker, the account's balance), in one step: what the reservation holds is
-- given back and `micros` reserved again under the same id, against the key's limit and the budgets as they are now
-- (a session keeps nothing of what was in force at its upgrade). Not covered: nothing is written, the reservation
-- stays as it was (it still covers a response under way, which settles against it), and the session ends.
-- KEYS: the account's bill, its bucket's reservation deadlines
-- ARGV: the session's reservation id (its request id), key id, micros to hold, the deadline ms, the deadline member,
--       the key's limit now (micros, '' = none), the budgets in force now ('<counter>=<micros>,…')
-- Returns {verdict, reason, refusing budget}: verdict 1 held again, 0 not covered (reason 3 the key's limit, 4 the
-- balance, 5 the key or its account gone from the bill, 6 a budget: its place in the list), -1 no reservation held
-- (the session's was given back: it is ending).
local field = reservation_field(ARGV[1])
local k = ARGV[2]
local micros = tonumber(ARGV[3])
local key_limit = ARGV[6]
local bill = redis.call('HMGET', KEYS[1], 'id', 'unlimited', 'balance', 'reserved', k .. '.spent', k .. '.reserved', field)
if not bill[7] then return {-1, 0, 0} end
local _, held, tokens, tpm, held_budgets = decode_reservation(bill[7])
if not held then return {-1, 0, 0} end
if not bill[5] or (not bill[3] and bill[2] ~= '1') then return {0, 5, 0} end
-- What the reservation holds on each counter, given back before the check: the same counter again is not held twice.
local held_on = {}
for _, b in ipairs(parse_budgets(held_budgets)) do held_on[b[1]] = held end
local account_reserved = tonumber(bill[4] or '0') - held
local key_reserved = tonumber(bill[6] or '0') - held
if bill[2] ~= '1' and tonumber(bill[3] or '0') - account_reserved - micros < 0 then return {0, 4, 0} end
if key_limit ~= '' and tonumber(bill[5]) + key_reserved + micros > tonumber(key_limit) then return {0, 3, 0} end
local budgets = parse_budgets(ARGV[7])
for i, b in ipairs(budgets) do
  local c = redis.call('HMGET', KEYS[1], b[1] .. '.spent', b[1] .. '.reserved')
  if tonumber(c[1] or '0') + tonumber(c[2] or '0') - (held_on[b[1]] or 0) + micros > b[2] then return {0, 6, i} end
end
-- Covered: the old holds go (a past period's counter left with nothing held is deleted), the new ones are taken.
move_budgets(KEYS[1], held_budgets, held, 0, {}, nil)
hold_budgets(KEYS[1], budgets, micros, 0)
redis.call('HSET', KEYS[1], field, encode_reservation(k, micros, tokens, tpm, ARGV[7], key_limit), 'reserved', int(account_reserved + micros), k .. '.reserved', int(key_reserved + micros))
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
return {1, 0, 0}
