-- Removes a revoked key's secret hash from the key hashes, only while the hash still names that key.
-- KEYS: the key hashes. ARGV: the revoked key's hash, its id.
-- Returns 1.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end return 1
