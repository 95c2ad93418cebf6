-- Takes a sign-in attempt through the identity provider once: deletes it only if it still holds the value the caller
-- read and found bound to its browser, so a callback from another browser (refused before this) never uses it up,
-- and of two callbacks of the right browser at once only one takes it.
-- KEYS: the attempt. ARGV: the value read.
-- Returns 1 when taken, 0 when it is gone (used or expired) or holds another value.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
