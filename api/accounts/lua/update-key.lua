-- Changes a key's fields and announces it. Checked here so a revoked key is not brought back half-made.
-- KEYS: the key record. ARGV: the access-changed channel, the key id, then field/value pairs.
-- Returns 1 done, 0 no such key.
if redis.call('HEXISTS', KEYS[1], 'hash') == 0 then return 0 end
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return 1
