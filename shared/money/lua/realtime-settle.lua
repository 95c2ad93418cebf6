-- A Realtime response's settlement: its cost taken from the account once per response, and the session's reservation
-- renewed for the next response in the same step (or not, when the account cannot cover it: the session then ends).
-- KEYS: the response's settled marker, the account's bill, its bucket's reservation deadlines, its bucket's usage stream,
--       its bucket's alerts stream
-- ARGV: the session's reservation id (its request id), the response's micros, key id, stream max length, seconds to
--       keep the settled mark, usage entry (JSON), the reservation's deadline member, the next reservation's micros
--       (0: none asked), its deadline ms, the key's limit (micros, '' = none), the budgets in force now
--       ('<counter>=<micros>,…'), alert thresholds (percent, comma list), account id
-- Returns {1, renewed, refusing budget, crossing…} when this call settled the response ({0, -1, 0}: settled before);
-- renewed is 1 when the next response is reserved, 0 when the account, key or a budget cannot cover it (nothing is
-- reserved; the budget's place in the list when one refused), -1 when none was asked. The response's cost counts on
-- the budgets its reservation held; crossings as settle.lua returns (and records) them.
-- Never takes a balance below zero beyond what the reservation it replaces held for this very response.
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[5]) == false then return {0, -1, 0} end
local k = ARGV[3]
local field = reservation_field(ARGV[1])
local bill = redis.call('HMGET', KEYS[2], 'id', 'unlimited', 'balance', 'reserved', k .. '.spent', k .. '.reserved', field)
local actual = tonumber(ARGV[2])
local account_reserved = tonumber(bill[4] or '0')
local key_reserved = tonumber(bill[6] or '0')
local thresholds = parse_thresholds(ARGV[12])
local crossed = {}
if bill[7] then
  local _, micros, _, _, held = decode_reservation(bill[7])
  if micros then
    account_reserved = account_reserved - micros
    key_reserved = key_reserved - micros
    move_budgets(KEYS[2], held, micros, actual, thresholds, crossed)
  end
  redis.call('HDEL', KEYS[2], field)
  redis.call('ZREM', KEYS[3], ARGV[7])
end
local balance = tonumber(bill[3] or '0')
if bill[1] and actual > 0 and bill[2] ~= '1' then balance = balance - actual end
local spent = nil
if bill[5] then spent = tonumber(bill[5]) + actual end
local renewed = -1
local refusing = 0
local next_micros = tonumber(ARGV[8])
if next_micros > 0 then
  renewed = 0
  local covered = bill[1] ~= false and bill[1] ~= nil
  if covered and bill[2] ~= '1' and balance - account_reserved - next_micros < 0 then covered = false end
  if covered and ARGV[10] ~= '' and spent and spent + key_reserved + next_micros > tonumber(ARGV[10]) then covered = false end
  local budgets = parse_budgets(ARGV[11])
  if covered then
    refusing = over_budget(KEYS[2], budgets, next_micros)
    if refusing > 0 then covered = false end
  end
  if covered then
    account_reserved = account_reserved + next_micros
    key_reserved = key_reserved + next_micros
    hold_budgets(KEYS[2], budgets, next_micros, 0)
    redis.call('HSET', KEYS[2], field, encode_reservation(k, next_micros, 0, '', ARGV[11], ARGV[10]))
    redis.call('ZADD', KEYS[3], ARGV[9], ARGV[7])
    renewed = 1
  end
end
local fields = {}
if bill[1] then
  fields[#fields + 1] = 'reserved'; fields[#fields + 1] = int(account_reserved)
  if bill[2] ~= '1' then fields[#fields + 1] = 'balance'; fields[#fields + 1] = int(balance) end
end
if spent then
  fields[#fields + 1] = k .. '.spent'; fields[#fields + 1] = int(spent)
  fields[#fields + 1] = k .. '.reserved'; fields[#fields + 1] = int(key_reserved)
end
if #fields > 0 then redis.call('HSET', KEYS[2], unpack(fields)) end
if spent and actual > 0 and ARGV[10] ~= '' then crossings(KEYS[2], k, tonumber(ARGV[10]), spent, thresholds, crossed) end
append_alerts(KEYS[5], ARGV[13], crossed)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', 'usage', ARGV[6])
local reply = {1, renewed, refusing}
for _, crossing in ipairs(crossed) do reply[#reply + 1] = crossing end
return reply
