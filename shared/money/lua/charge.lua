-- Admission and settlement in one step, for a request whose price is known before it is served (a cache hit):
-- the key's rate of requests (a hit uses no tokens, so no tokens per minute), its limit and the account's balance
-- are checked against the price as admission checks a reservation; admitted, the price is taken and the usage entry
-- appended, all or nothing. There is nothing between the two steps to hold a reservation over.
-- KEYS: the account's bill, the request's settled marker, its bucket's usage stream, its bucket's alerts stream
-- ARGV: request id, micros, now ms, key id, the key's limit (micros, '' = none), rpm ('' = none), stream max length,
--       seconds to keep the settled mark, usage entry (JSON), the budgets in force ('<counter>=<micros>,…'),
--       alert thresholds (percent, comma list), account id
-- Returns as reserve.lua does (code 5: no such key or account), followed when charged by the alert thresholds the
-- charge crossed, recorded in the alerts stream in the same step (settle.lua). A call sent twice (a connection's resend) charges once.
local k = ARGV[4]
local bill = redis.call('HMGET', KEYS[1], 'balance', 'reserved', 'unlimited', k .. '.spent', k .. '.reserved', k .. '.rpm', k .. '.tpm')
if not bill[4] or (not bill[1] and bill[3] ~= '1') then return {5,0,0,0,0,0,0,0,0} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {0,0,0,0,0,0,0,0,0} end
local micros = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local rpm_limit = tonumber(ARGV[6])
local budgets = parse_budgets(ARGV[10])
local verdict, rpm_tat = admit(bill, micros, 0, now, ARGV[5], rpm_limit, nil, KEYS[1], budgets)
if verdict[1] ~= 0 then return verdict end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[8])
local fields = {k .. '.spent', int(tonumber(bill[4]) + micros), k .. '.used', int(math.floor(now / 1000))}
if micros > 0 and bill[3] ~= '1' then fields[#fields + 1] = 'balance'; fields[#fields + 1] = int(tonumber(bill[1]) - micros) end
if rpm_limit then fields[#fields + 1] = k .. '.rpm'; fields[#fields + 1] = tostring(rpm_tat) end
redis.call('HSET', KEYS[1], unpack(fields))
hold_budgets(KEYS[1], budgets, 0, micros)
if micros > 0 then
  local thresholds = parse_thresholds(ARGV[11])
  local crossed = {}
  for _, b in ipairs(budgets) do
    local spent = tonumber(redis.call('HGET', KEYS[1], b[1] .. '.spent'))
    crossings(KEYS[1], b[1], b[2], spent, thresholds, crossed)
  end
  if ARGV[5] ~= '' then crossings(KEYS[1], k, tonumber(ARGV[5]), tonumber(bill[4]) + micros, thresholds, crossed) end
  append_alerts(KEYS[4], ARGV[12], crossed)
  for _, crossing in ipairs(crossed) do verdict[#verdict + 1] = crossing end
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'usage', ARGV[9])
return verdict
