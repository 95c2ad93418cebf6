-- Releases the lock on loading the hot state, only if it is still this process's.
-- KEYS: the loading lock. ARGV: this load's token.
-- Returns 1 when released, 0 when the lock was another's (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0
