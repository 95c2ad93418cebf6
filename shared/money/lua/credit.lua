-- Applies one ledger entry to the account's bill.
-- KEYS: the account's bill. ARGV: the account's credits in the record after this entry, the entry's ledger id, its amount.
-- The record is written first; the bill keeps which ledger entry its credits include (`credits_at`), so applying an
-- entry is idempotent (a retry, or an older entry arriving after a newer one, changes nothing) and a bill that missed
-- an entry catches up with the next: the balance moves by the record's credits less those the bill counted.
-- {1, balance} done, {0} no bill in Redis (lost; loaded again from the record), {-1} the account is unlimited.
-- The balance answered is the one right after this entry (the ledger keeps it): for an entry a later one overtook,
-- the balance now less the credits of the entries after it.
local cur = redis.call('HMGET', KEYS[1], 'id', 'unlimited', 'credits', 'credits_at', 'balance')
if not cur[1] then return {0, 0} end
if cur[2] == '1' then return {-1, 0} end
if cur[4] and tonumber(ARGV[2]) <= tonumber(cur[4]) then
  local later = 0
  if cur[3] then later = tonumber(cur[3]) - tonumber(ARGV[1]) end
  return {1, tonumber(cur[5] or '0') - later}
end
local delta = tonumber(ARGV[3])
if cur[3] then delta = tonumber(ARGV[1]) - tonumber(cur[3]) end
local balance = redis.call('HINCRBY', KEYS[1], 'balance', int(delta))
redis.call('HSET', KEYS[1], 'credits', ARGV[1], 'credits_at', ARGV[2])
return {1, balance}
