-- Changes an account's fields, moving its email claim when the email changes.
-- KEYS: the account, the accounts' emails.
-- ARGV: id, email read before (the script refuses, -2, if it changed since), its lower case, the new lower case
--       ('' = unchanged), the access-changed channel, then field/value pairs.
-- Publishes `account:<id>` so every api drops the keys of the account it cached (a disable takes effect at once).
-- Returns 1 done, 0 no such account, -1 email taken, -2 changed meanwhile (retry).
local cur = redis.call('HMGET', KEYS[1], 'id', 'deleted', 'email')
if not cur[1] or cur[2] == '1' then return 0 end
if (cur[3] or '') ~= ARGV[2] then return -2 end
if ARGV[4] ~= '' and ARGV[4] ~= ARGV[3] then
  local owner = redis.call('HGET', KEYS[2], ARGV[4])
  if owner and owner ~= ARGV[1] then return -1 end
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[1])
  if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[1] then redis.call('HDEL', KEYS[2], ARGV[3]) end
end
if #ARGV > 5 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 6))
  redis.call('PUBLISH', ARGV[5], 'account:' .. ARGV[1])
end
return 1
