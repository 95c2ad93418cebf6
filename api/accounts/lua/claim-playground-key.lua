-- Names an account's Playground key, only if the one named is still the one read: two first uses at once, one wins.
-- KEYS: the account. ARGV: the Playground key id read ('' = none), the new key's id.
-- Returns 1 claimed, 0 another was named meanwhile.
if (redis.call('HGET', KEYS[1], 'playground_key') or '') == ARGV[1] then redis.call('HSET', KEYS[1], 'playground_key', ARGV[2]) return 1 end return 0
