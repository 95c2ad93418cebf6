-- The built-in default account, made where it is missing: read once and put before the scripts that need it
-- (api/accounts/scripts.ts, shared/access/index.ts), so a key of the default account never finds it missing.
-- `ensureDefault(account, accounts index, id, now)` creates it if it is not complete (HSETNX: a field an admin
-- changed, or `reserved` a settlement already counted, is kept).
local function ensureDefault(accountKey, indexKey, id, now)
  if redis.call('HGET', accountKey, 'unlimited') == '1' then return end
  for field, value in pairs({id = id, email = '', name = 'Default', role = 'admin', created = now}) do
    redis.call('HSETNX', accountKey, field, value)
  end
  redis.call('HSET', accountKey, 'unlimited', '1')
  redis.call('ZADD', indexKey, 'NX', now, id)
end
