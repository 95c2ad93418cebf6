-- A prompt's cached prefix on one channel, before its call: the first request finds nothing and becomes the one that
-- writes the vendor's cache (its mark pending for at most the wait); one that finds the prefix written keeps it
-- cached a lifetime more; one that finds it pending waits for the writer.
-- KEYS: the prefix's mark on the channel. ARGV: the pending mark (`p:<job id>`), the longest wait (ms), the lifetime (ms).
-- Returns '' when the caller writes the prefix, 'w' when it is written, else the writer's pending mark.
local was = redis.call('GET', KEYS[1])
if not was then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ''
end
if was == 'w' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return was
