-- Starts a batch that was `validating`: its engine's fields written beside its dialect's, its TTL set, the intake's
-- lease taken. Nothing happens to one no longer validating (canceled meanwhile).
-- KEYS: the batch's hash, its intake lease
-- ARGV: TTL (ms), intake lease (ms, 0: none), then field, value, field, value, …
-- Returns 1 when it started it, 0 when not.
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then return 0 end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) end
return 1
