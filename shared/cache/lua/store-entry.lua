-- Stores an entry and keeps the account's total under its bound, in one script over the account's slot: the
-- index's expired members are dropped (their entries expired by themselves), a replaced entry's size is taken back,
-- and past the bound the entries that expire soonest go first (never the one just stored). Stored by the leading job
-- of identical requests, it also drops that job's lead mark and tells the followers it is stored.
-- KEYS: the entry, the account's index (hashes by expiry), its total size, its entries' meta (size, key, model by
--       hash), the request's lead mark
-- ARGV: the entry as stored, ms Redis keeps it, the account's bound in bytes, now ms, the name it is stored under,
--       its meta (`size keyId model`), the prefix of the account's entry keys (an evicted entry's key is it and its
--       name), the leading job's id ('' = not stored by a leader: nothing more), the outcomes channel, the outcome
--       (JSON) published there
-- Returns how many entries were evicted.
local now = tonumber(ARGV[4])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, h in ipairs(gone) do
  local size = redis.call('HGET', KEYS[4], h)
  if size then redis.call('DECRBY', KEYS[3], tonumber(string.match(size, '^(%d+)'))) end
  redis.call('HDEL', KEYS[4], h)
  redis.call('ZREM', KEYS[2], h)
end
local old = redis.call('HGET', KEYS[4], ARGV[5])
if old then redis.call('DECRBY', KEYS[3], tonumber(string.match(old, '^(%d+)'))) end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[5])
redis.call('HSET', KEYS[4], ARGV[5], ARGV[6])
local total = redis.call('INCRBY', KEYS[3], string.len(ARGV[1]))
local evicted = 0
while total > tonumber(ARGV[3]) do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not first or first == ARGV[5] then break end
  local size = redis.call('HGET', KEYS[4], first)
  if size then total = redis.call('DECRBY', KEYS[3], tonumber(string.match(size, '^(%d+)'))) end
  redis.call('DEL', ARGV[7] .. first)
  redis.call('HDEL', KEYS[4], first)
  redis.call('ZREM', KEYS[2], first)
  evicted = evicted + 1
end
local keep = tonumber(ARGV[2]) + 60000
for i = 2, 4 do if redis.call('PTTL', KEYS[i]) < keep then redis.call('PEXPIRE', KEYS[i], keep) end end
if ARGV[8] ~= '' then
  local held = redis.call('GET', KEYS[5])
  if held and string.sub(held, 1, string.len(ARGV[8]) + 1) == ARGV[8] .. ' ' then redis.call('DEL', KEYS[5]) end
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
return evicted
