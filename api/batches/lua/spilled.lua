-- A part of an OpenAI batch's results has been written out to the blob store (api/batches/openai-finalize.ts):
-- the batch notes how many parts it has and the last result they hold, and those results leave its stream, in one
-- step. Nothing when the batch is gone, or when its parts are no longer the count this writer began from.
--
-- KEYS[1] the batch's hash    KEYS[2] its results (a stream)
-- ARGV[1] its parts before    ARGV[2] the last result the new part holds    ARGV[3] the id just after that one
-- Returns 1 when noted, 0 when not.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (tonumber(redis.call('HGET', KEYS[1], 'oa_parts')) or 0) ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'oa_parts', tonumber(ARGV[1]) + 1, 'oa_parts_through', ARGV[2])
redis.call('XTRIM', KEYS[2], 'MINID', ARGV[3])
return 1
