-- Removes a key from the directory (its record, its hash, its account's set) and announces it.
-- KEYS: the key record, the key hashes, the key ids.
-- ARGV: the key id, the account keys prefix, the access-changed channel, the default account's id.
-- Returns 1 done, 0 no such key.
local key = redis.call('HMGET', KEYS[1], 'hash', 'account')
if not key[1] then return 0 end
redis.call('HDEL', KEYS[2], key[1])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[3], ARGV[1])
local account = key[2]
if not account or account == '' then account = ARGV[4] end
redis.call('SREM', ARGV[2] .. account, ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
