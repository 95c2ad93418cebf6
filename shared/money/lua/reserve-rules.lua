-- The admission rules of a reservation, as a function the scripts that reserve share (reserve.lua, and the
-- request's whole admission in api/requests/lua/admit.lua).
-- K: K[1] the account's bill, K[2] its bucket's reservation deadlines, K[4] the request's settled marker.
-- A: request id, micros, tokens, now ms, deadline ms, key id, the key's limit (micros, '' = none), rpm, tpm
--    ('' = none), A[10] unused here, the reservation's deadline member, the budgets in force ('<counter>=<micros>,…')
-- Returns {code, rpm limit, rpm remaining, rpm reset ms, tpm limit, tpm remaining, tpm reset ms, retry after ms, budget}
--   code 0 reserved, 1 over rpm, 2 over tpm, 3 over the key's limit, 4 over the account's balance, 5 no such key or account,
--   6 over the budget at place `budget` of the list
-- The key's limits come from the caller (the api's cached access, dropped when they change); its spend and the
-- balance are read here, with the reservations that hold against them.
local function reserve(K, A)
  local k = A[6]
  local bill = redis.call('HMGET', K[1], 'balance', 'reserved', 'unlimited', k .. '.spent', k .. '.reserved', k .. '.rpm', k .. '.tpm')
  -- A key revoked or an account deleted left the bill (or Redis lost it, until it is loaded again).
  if not bill[4] or (not bill[1] and bill[3] ~= '1') then return {5,0,0,0,0,0,0,0,0} end
  -- Reserved already under this request id (a batch's request run again after its worker died): held once, not twice.
  -- Settled already (it died after its settlement): nothing will settle a new reservation, so none is made.
  if redis.call('HEXISTS', K[1], reservation_field(A[1])) == 1 or redis.call('EXISTS', K[4]) == 1 then return {0,0,0,0,0,0,0,0,0} end
  local micros = tonumber(A[2])
  local tokens = tonumber(A[3])
  local now = tonumber(A[4])

  local rpm_limit = tonumber(A[8])
  local tpm_limit = tonumber(A[9])
  local budgets = parse_budgets(A[12])
  local verdict, rpm_tat, tpm_tat = admit(bill, micros, tokens, now, A[7], rpm_limit, tpm_limit, K[1], budgets)
  if verdict[1] ~= 0 then return verdict end
  local key_reserved = tonumber(bill[5] or '0')
  local reserved = tonumber(bill[2] or '0')

  local fields = {'reserved', int(reserved + micros), k .. '.reserved', int(key_reserved + micros), k .. '.used', int(math.floor(now / 1000)),
    reservation_field(A[1]), encode_reservation(k, micros, tokens, A[9], A[12], A[7])}
  if rpm_limit then fields[#fields + 1] = k .. '.rpm'; fields[#fields + 1] = tostring(rpm_tat) end
  if tpm_limit then fields[#fields + 1] = k .. '.tpm'; fields[#fields + 1] = tostring(tpm_tat) end
  redis.call('HSET', K[1], unpack(fields))
  hold_budgets(K[1], budgets, micros, 0)
  redis.call('ZADD', K[2], A[5], A[11])
  return verdict
end
