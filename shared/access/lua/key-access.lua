-- What a key may do now, in one round trip (default-account.lua before it): at the door, by the presented secret's
-- hash; wherever admitted work goes on (a batch's next request, a Realtime session's next response), by the key's id.
-- KEYS: the key hashes, the default account, the accounts index.
-- ARGV: the secret's hash ('' when the key's id is given), the key record prefix, the account prefix, the default
-- account's id, now (unix s), the key's id ('' when the hash is given).
-- Returns false for an unknown or revoked key or one of a deleted account, 0 for a key of a disabled one, else
-- {key id, account id, limit, rpm, tpm, models, expires, weight, tiers, cache ttl, cache max ttl, the key's budget,
-- the account's budget, the cap of the key's maker in the account, the account's name, the maker's id, the key's MCP
-- tool patterns, the account's} ('' = none;
-- a budget as '<micros> <period>', shared/money/budgets.ts).
-- Keys made before accounts existed name none: they belong to the default account, made here if missing.
local id = ARGV[6]
if id == '' then
  id = redis.call('HGET', KEYS[1], ARGV[1])
  if not id then return false end
end
local key = redis.call('HMGET', ARGV[2] .. id, 'hash', 'account', 'limit', 'rpm', 'tpm', 'models', 'expires', 'cache_ttl', 'budget', 'created_by', 'mcp_tools')
if not key[1] then return false end
if ARGV[6] == '' and key[1] ~= ARGV[1] then return false end
local account = key[2]
if not account or account == '' then account = ARGV[4] end
local maker = key[10] or ''
local state = redis.call('HMGET', ARGV[3] .. account, 'id', 'deleted', 'disabled', 'weight', 'tiers', 'cache_max_ttl', 'budget', 'name', 'cap:' .. maker, 'mcp_tools')
if state[2] == '1' then return false end
if state[3] == '1' then return 0 end
if not state[1] then
  if account ~= ARGV[4] then return false end
  ensureDefault(KEYS[2], KEYS[3], ARGV[4], ARGV[5])
end
local cap = ''
if maker ~= '' then cap = state[9] or '' end
return {id, account, key[3] or '', key[4] or '', key[5] or '', key[6] or '', key[7] or '', state[4] or '', state[5] or '', key[8] or '', state[6] or '',
  key[9] or '', state[7] or '', cap, state[8] or '', maker, key[11] or '', state[10] or ''}
