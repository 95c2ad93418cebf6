-- Admission: checks the key's rate limits, its limit and the account's balance, and reserves the worst case.
-- KEYS: the account's bill, its bucket's reservation deadlines, the job's queue key, the request's settled marker
-- ARGV: request id, micros, tokens, now ms, deadline ms, key id, the key's limit (micros, '' = none),
--       rpm, tpm ('' = none), '1' when the job is being added right behind this call (a refusal then blocks
--       its id with a placeholder), the reservation's deadline member, the budgets in force ('<counter>=<micros>,…')
-- Returns {code, rpm limit, rpm remaining, rpm reset ms, tpm limit, tpm remaining, tpm reset ms, retry after ms, budget}
--   code 0 reserved, 1 over rpm, 2 over tpm, 3 over the key's limit, 4 over the account's balance, 5 no such key or account,
--   6 over the budget at place `budget` of the list
-- The key's limits come from the caller (the api's cached access, dropped when they change); its spend and the
-- balance are read here, with the reservations that hold against them.
local function decide()
  local k = ARGV[6]
  local bill = redis.call('HMGET', KEYS[1], 'balance', 'reserved', 'unlimited', k .. '.spent', k .. '.reserved', k .. '.rpm', k .. '.tpm')
  -- A key revoked or an account deleted left the bill (or Redis lost it, until it is loaded again).
  if not bill[4] or (not bill[1] and bill[3] ~= '1') then return {5,0,0,0,0,0,0,0,0} end
  -- Reserved already under this request id (a batch's request run again after its worker died): held once, not twice.
  -- Settled already (it died after its settlement): nothing will settle a new reservation, so none is made.
  if redis.call('HEXISTS', KEYS[1], reservation_field(ARGV[1])) == 1 or redis.call('EXISTS', KEYS[4]) == 1 then return {0,0,0,0,0,0,0,0,0} end
  local micros = tonumber(ARGV[2])
  local tokens = tonumber(ARGV[3])
  local now = tonumber(ARGV[4])

  local rpm_limit = tonumber(ARGV[8])
  local tpm_limit = tonumber(ARGV[9])
  local budgets = parse_budgets(ARGV[12])
  local verdict, rpm_tat, tpm_tat = admit(bill, micros, tokens, now, ARGV[7], rpm_limit, tpm_limit, KEYS[1], budgets)
  if verdict[1] ~= 0 then return verdict end
  local key_reserved = tonumber(bill[5] or '0')
  local reserved = tonumber(bill[2] or '0')

  local fields = {'reserved', int(reserved + micros), k .. '.reserved', int(key_reserved + micros), k .. '.used', int(math.floor(now / 1000)),
    reservation_field(ARGV[1]), encode_reservation(k, micros, tokens, ARGV[9], ARGV[12], ARGV[7])}
  if rpm_limit then fields[#fields + 1] = k .. '.rpm'; fields[#fields + 1] = tostring(rpm_tat) end
  if tpm_limit then fields[#fields + 1] = k .. '.tpm'; fields[#fields + 1] = tostring(tpm_tat) end
  redis.call('HSET', KEYS[1], unpack(fields))
  hold_budgets(KEYS[1], budgets, micros, 0)
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[11])
  return verdict
end
local verdict = decide()
-- Refused with a job key given: a placeholder under that key keeps the job (sent right behind this call) out of the queue.
if verdict[1] ~= 0 and ARGV[10] == '1' then
  redis.call('HSET', KEYS[3], 'refused', verdict[1])
  redis.call('PEXPIRE', KEYS[3], 60000)
end
return verdict
