-- A leading job ended (or was never queued): drops its lead mark if it holds it, and tells every api how it ended.
-- KEYS: the request's lead mark
-- ARGV: the job's id, the outcomes channel, the outcome (JSON) published there
-- Returns 0.
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. ' ' then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 0
