-- Settlement: replaces a request's reservation by its actual cost, once per request id.
-- KEYS: settled marker, the account's bill, its bucket's reservation deadlines, its bucket's usage stream, its
--       bucket's alerts stream
-- ARGV: request id, actual micros, actual tokens, now ms, key id, stream max length, seconds to keep the settled mark,
--       usage entry (JSON), the reservation's deadline member, alert thresholds (percent, comma list), account id
-- Returns {1, micros reserved, crossing…} when this call settled the request ({1, -1}: its
-- reservation was gone), {0, -1} when it was settled before. The cost counts on the budgets the reservation held (the
-- period it was admitted in); each alert threshold the settled spend of a budget or of the key's limit crossed for
-- the first time (in the period) follows, as '<budget counter or key id>|<percent>|<limit>|<spent>': marked sent in
-- the bill and appended to the alerts stream in this same step, so two settlements at once record a crossing once,
-- and a crossing decided is never lost with its caller.
-- The usage entry goes to the stream the record's writer reads (day totals are the record's to sum).
-- A key or account Redis has lost (flushed, not loaded again yet) is not
-- made up from the pieces a settlement touches: loaded from the record, it
-- counts this request's cost from the stream.
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[7]) == false then return {0, -1} end
local k = ARGV[5]
local field = reservation_field(ARGV[1])
local bill = redis.call('HMGET', KEYS[2], 'id', 'unlimited', 'balance', 'reserved', k .. '.spent', k .. '.reserved', k .. '.tpm', field)
local actual = tonumber(ARGV[2])
local account_reserved = tonumber(bill[4] or '0')
local key_reserved = tonumber(bill[6] or '0')
local fields = {}
local reserved = -1
local crossed = {}
local key_limit = nil
if bill[8] then
  redis.call('HDEL', KEYS[2], field)
  redis.call('ZREM', KEYS[3], ARGV[9])
  local _, micros, tokens, tpm, budgets, limit = decode_reservation(bill[8])
  if micros then
    reserved = micros
    key_limit = limit
    move_budgets(KEYS[2], budgets, micros, actual, parse_thresholds(ARGV[10]), crossed)
    account_reserved = account_reserved - micros
    key_reserved = key_reserved - micros
    -- Tokens per minute counted the estimate: give back what was not used.
    if tpm ~= '' and bill[7] and bill[5] then
      local unused = tokens - tonumber(ARGV[3])
      local tat = tonumber(bill[7])
      if unused ~= 0 and tat > 0 then
        fields[#fields + 1] = k .. '.tpm'; fields[#fields + 1] = tostring(gcra_give_back(tat, unused, tonumber(tpm), tonumber(ARGV[4])))
      end
    end
  end
end
if bill[1] then
  fields[#fields + 1] = 'reserved'; fields[#fields + 1] = int(account_reserved)
  if actual > 0 and bill[2] ~= '1' then fields[#fields + 1] = 'balance'; fields[#fields + 1] = int(tonumber(bill[3] or '0') - actual) end
end
if bill[5] then
  fields[#fields + 1] = k .. '.spent'; fields[#fields + 1] = int(tonumber(bill[5]) + actual)
  fields[#fields + 1] = k .. '.reserved'; fields[#fields + 1] = int(key_reserved)
end
if #fields > 0 then redis.call('HSET', KEYS[2], unpack(fields)) end
if bill[5] and actual > 0 then crossings(KEYS[2], k, key_limit, tonumber(bill[5]) + actual, parse_thresholds(ARGV[10]), crossed) end
append_alerts(KEYS[5], ARGV[11], crossed)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], '*', 'usage', ARGV[8])
local reply = {1, reserved}
for _, crossing in ipairs(crossed) do reply[#reply + 1] = crossing end
return reply
