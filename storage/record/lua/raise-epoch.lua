-- Raises Redis's high-water mark of the record, only while the hot state carries this record's stamp.
-- KEYS: the hot state's record stamp, Redis's high-water mark. ARGV: the record's stamp, its mark now.
-- Returns 1 when the stamp was this record's (the mark raised if it was below), 0 when it was not.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if seen < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return 1
