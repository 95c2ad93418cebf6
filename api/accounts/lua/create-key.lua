-- Writes a new key's directory entry, only while its account exists.
-- KEYS: the account, the key record, the key hashes, the key ids, the account's keys.
-- ARGV: the secret's hash, the key id, then field/value pairs.
-- Returns 1 done, 0 no such account.
local account = redis.call('HMGET', KEYS[1], 'id', 'deleted')
if not account[1] or account[2] == '1' then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('SADD', KEYS[5], ARGV[2])
return 1
