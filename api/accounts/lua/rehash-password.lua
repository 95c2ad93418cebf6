-- Replaces an account's password hash by one made with today's parameters, only if unchanged since it was read
-- (a password set meanwhile wins).
-- KEYS: the account. ARGV: the hash read, the new one.
-- Returns 1 replaced, 0 changed meanwhile (kept).
if redis.call('HGET', KEYS[1], 'password') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'password', ARGV[2])
return 1
