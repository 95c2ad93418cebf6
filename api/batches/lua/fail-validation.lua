-- Ends a validating OpenAI batch `failed`, with the errors that name why (api/batches/openai-record.ts), and lets go
-- of its validation's lease; nothing when it is no longer validating (canceled meanwhile). The dialect's fields are
-- named as openai-record.ts names them: `oa_final`, `oa_final_at`, `oa_errors`.
-- KEYS: the batch's hash, its validation's lease (the engine's intake lease)
-- ARGV: now (ms), the errors (JSON), the batch's TTL from now (ms)
-- Returns 1 when it failed it, 0 when not.
if redis.call('HGET', KEYS[1], 'status') ~= 'validating' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'ended', 'ended_at', ARGV[1], 'oa_final', 'failed', 'oa_final_at', ARGV[1], 'oa_errors', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('DEL', KEYS[2])
return 1
