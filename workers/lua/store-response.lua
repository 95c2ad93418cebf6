-- Stores a response object over its record only while the record exists: a response deleted while it ran is not
-- brought back by its end.
-- KEYS: the response's record. ARGV: the response object (JSON), the seconds it is kept.
-- Returns 0.
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'response', ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 0
