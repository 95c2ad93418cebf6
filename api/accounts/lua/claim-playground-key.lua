-- Names an account's Playground key, only if the one named is still the one read: two first uses at once, one wins.
-- KEYS: the account. ARGV: the Playground key id read ('' = none), the new key's id, the field naming it
-- (`playground_key` for the account's own person, `playground_key:<person>` for another person in the team).
-- Returns 1 claimed, 0 another was named meanwhile.
if (redis.call('HGET', KEYS[1], ARGV[3]) or '') == ARGV[1] then redis.call('HSET', KEYS[1], ARGV[3], ARGV[2]) return 1 end return 0
