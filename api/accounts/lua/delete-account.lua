-- Marks the account deleted (the record stays: settlements in flight still find it), frees its email and revokes
-- every key of it.
-- KEYS: the account, the accounts' emails, the accounts index, the account's keys, the key hashes, the key ids.
-- ARGV: id, email read before, its lower case, the key record prefix, the access-changed channel.
-- Returns the number of keys revoked, -1 no such account, -2 changed meanwhile (retry).
local cur = redis.call('HMGET', KEYS[1], 'id', 'deleted', 'email')
if not cur[1] or cur[2] == '1' then return -1 end
if (cur[3] or '') ~= ARGV[2] then return -2 end
redis.call('HSET', KEYS[1], 'deleted', '1')
if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[1] then redis.call('HDEL', KEYS[2], ARGV[3]) end
redis.call('ZREM', KEYS[3], ARGV[1])
local ids = redis.call('SMEMBERS', KEYS[4])
for _, keyId in ipairs(ids) do
  local hash = redis.call('HGET', ARGV[4] .. keyId, 'hash')
  if hash then redis.call('HDEL', KEYS[5], hash) end
  redis.call('DEL', ARGV[4] .. keyId)
  redis.call('SREM', KEYS[6], keyId)
end
redis.call('DEL', KEYS[4])
redis.call('PUBLISH', ARGV[5], 'account:' .. ARGV[1])
return #ids
