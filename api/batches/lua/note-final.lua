-- Notes an OpenAI batch's final status and files (api/batches/openai-record.ts `noteFinal`), only while the batch is
-- there: one deleted meanwhile is not brought back as a hash of these fields alone.
-- KEYS: the batch's hash
-- ARGV: field, value, field, value, …
-- Returns 0.
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], unpack(ARGV)) end return 0
