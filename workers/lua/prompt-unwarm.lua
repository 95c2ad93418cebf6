-- The request that was to write a prompt's prefix failed: its pending mark goes (only its own), so the next writes it.
-- KEYS: the prefix's mark on the channel. ARGV: the writer's pending mark. Returns 1 when it was removed, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
