-- Claims a new account's email and writes its directory entry.
-- KEYS: the accounts' emails, the account, the accounts index.
-- ARGV: lower-cased email ('' for a team, which has none and claims nothing), id, created (unix s), then
--       field/value pairs.
-- Returns 1 done, 0 the email is taken.
if ARGV[1] ~= '' and redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1
